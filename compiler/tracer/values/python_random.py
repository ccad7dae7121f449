"""Python's `random` module in the trace: `random.random()`, `random.randint(a, b)`, ... with
constant arguments, as torch.compile traces them.

The calls are not made while tracing: the entry makes them for real, in trace order, just
before its graph runs (an entry's before_graph calls), and each number drawn is an input of
the graph, a symbol that is never specialised. So every call of the compiled function draws
what eager draws, from the state eager has at that point, and leaves the global random
state as eager leaves it. A `random.seed(n)` among them is made in the same order. The trace
may compute with the numbers (`x * random.random()`); a guard or branch on one would be
decided before it is drawn, so that breaks the graph (shapes.Shapes.note_guards).

While tracing, each number is drawn from a copy of the global state, so the symbol's hint is
the number this call will draw.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from compiler.records import ControlRecord
from compiler.tracer import builtin_fns
from compiler.tracer.breaks import Break
from compiler.tracer.context import DeferredCall
from compiler.tracer.shapes import is_symbolic
from compiler.tracer.variables import ConstVar, Var, as_python_constant

if TYPE_CHECKING:
    from compiler.tracer.context import Tracer

# The module-level functions that draw a number (bound methods of the module's hidden
# Random instance), by name; each returns an int or a float.
_DRAWS = (
    "random",
    "randint",
    "randrange",
    "getrandbits",
    "uniform",
    "triangular",
    "gauss",
    "normalvariate",
    "lognormvariate",
    "expovariate",
    "vonmisesvariate",
    "gammavariate",
    "betavariate",
    "paretovariate",
    "weibullvariate",
)
_NAMESPACE_NAME = "___random_drawn"


@dataclass
class _Draws:
    """The Python random calls of one entry, in order, and the numbers its last run drew
    (the graph reads them as inputs, the rebuild code as values)."""

    calls: list[tuple[str, tuple, dict]] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)
    replay: random.Random = field(default_factory=random.Random)

    def draw(self) -> None:
        self.values.clear()
        for name, args, kwargs in self.calls:
            out = getattr(random, name)(*args, **kwargs)
            if name != "seed":
                self.values.append(out)


def _draws(tx: Tracer) -> _Draws:
    found = tx.guards.namespace.get(_NAMESPACE_NAME)
    if found is None:
        found = _Draws()
        found.replay.setstate(random.getstate())
        tx.guards.namespace[_NAMESPACE_NAME] = found
        tx.before_graph.append(DeferredCall(found.draw, (), {}, "each random.* call"))
    return found


def _constant_args(name: str, args: list[Var], kwargs: dict[str, Var]) -> tuple[tuple, dict]:
    try:
        values = tuple(as_python_constant(a) for a in args)
        kw = {k: as_python_constant(v) for k, v in kwargs.items()}
    except TypeError:
        raise Break(f"random.{name} with arguments that are not constants runs in Python") from None
    if is_symbolic(values) or is_symbolic(tuple(kw.values())):
        raise Break(f"random.{name} with a symbolic argument runs in Python")
    return values, kw


def _note(tx: Tracer, what: str) -> None:
    control = ControlRecord(
        "random", what, f"{what} is made just before the graph runs", tx.builder.line
    )
    if control not in tx.builder.controls:
        tx.builder.controls.append(control)


def _drawing(name: str):
    def call(tx: Tracer, args: list[Var], kwargs: dict[str, Var]) -> Var:
        values, kw = _constant_args(name, args, kwargs)
        draws = _draws(tx)
        try:
            hint = getattr(draws.replay, name)(*values, **kw)
        except Exception as e:  # eager raises it: the call runs in Python and raises there
            raise Break(f"random.{name}{values} raises {type(e).__name__}") from None
        if type(hint) not in (int, float):
            raise Break(f"random.{name} gave a {type(hint).__name__}")
        index = len(draws.values)
        draws.calls.append((name, values, kw))
        draws.values.append(hint)  # what the backend is compiled with, drawn anew per run
        tx.changed()
        _note(tx, f"random.{name}()")
        source = f"{_NAMESPACE_NAME}.values[{index}]"
        return ConstVar(tx.builder.shapes.drawn_input(hint, source, tx.builder.line))

    return call


def _seed(tx: Tracer, args: list[Var], kwargs: dict[str, Var]) -> Var:
    values, kw = _constant_args("seed", args, kwargs)
    draws = _draws(tx)
    draws.replay.seed(*values, **kw)
    draws.calls.append(("seed", values, kw))
    tx.changed()
    _note(tx, "random.seed()")
    return ConstVar(None)


for _name in _DRAWS:
    builtin_fns.SPECIAL[getattr(random, _name)] = _drawing(_name)
builtin_fns.SPECIAL[random.seed] = _seed
