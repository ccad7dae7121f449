"""`random.Random(seed)` made in the trace (`RandomVar`): a generator of Python's random
numbers whose whole history the trace sees, so its numbers are constants of the entry.

The trace keeps a real `random.Random` beside the value, made with the same seed and given
the same calls in the same order, so each number is the one eager draws; `choice` draws the
index eager draws. Where the instance outlives the graph it is rebuilt with the state the
trace left it in. A seed that is not a constant (`random.Random()`, seeded from the clock)
is not traced.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from compiler.tracer import builtin_fns, operations
from compiler.tracer.breaks import Break
from compiler.tracer.values.table import VALUE_OPS, ValueOps, class_method
from compiler.tracer.variables import ConstVar, Var, as_python_constant, is_python_constant

if TYPE_CHECKING:
    from compiler.tracer.context import Emitter, Tracer

# The methods whose result depends only on constant arguments and the state.
_DRAWS = {
    "random", "randint", "randrange", "getrandbits", "uniform", "triangular", "gauss",
    "normalvariate", "lognormvariate", "expovariate", "vonmisesvariate", "gammavariate",
    "betavariate", "paretovariate", "weibullvariate", "getstate",
}  # fmt: skip


@dataclass(eq=False)
class RandomVar(Var):
    """A random.Random made in the trace, with its replica (the state eager's has here)."""

    replica: random.Random


def _construct(tx: Tracer, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if kwargs or len(args) != 1 or not is_python_constant(args[0]):
        raise Break("random.Random() without a constant seed runs in Python")
    seed = as_python_constant(args[0])
    if type(seed) not in (int, str, bytes, float) or isinstance(seed, bool):
        raise Break(f"random.Random() seeded with a {type(seed).__name__} runs in Python")
    return RandomVar(random.Random(seed))


def _constants(name: str, args: list[Var], kwargs: dict[str, Var]) -> tuple[list, dict]:
    if not all(is_python_constant(a) for a in [*args, *kwargs.values()]):
        raise Break(f"Random.{name} with arguments that are not constants runs in Python")
    return [as_python_constant(a) for a in args], {
        k: as_python_constant(v) for k, v in kwargs.items()
    }


def _method(tx: Tracer, r: RandomVar, name: str, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if name in _DRAWS or name == "seed":
        values, kw = _constants(name, args, kwargs)
        try:
            out = getattr(r.replica, name)(*values, **kw)
        except Exception as e:  # eager raises it there: the call runs in Python
            raise Break(f"Random.{name} raises {type(e).__name__}") from None
        tx.changed()
        return ConstVar(out)
    if name == "choice" and len(args) == 1 and not kwargs:
        items = operations.unpack_iterable(tx, args[0])
        if not items:
            raise Break("Random.choice of an empty sequence raises IndexError, in Python")
        tx.changed()
        return items[r.replica.choice(range(len(items)))]  # the index eager's draws
    raise Break(f"Random.{name} is not traced")


def _from_state(state: Any) -> random.Random:
    made = random.Random()
    made.setstate(state)
    return made


def _rebuild(em: Emitter, r: RandomVar) -> str:
    return f"{em.ref(_from_state, 'fn')}({em.ref(r.replica.getstate(), 'state')})"


VALUE_OPS[RandomVar] = ValueOps(
    describe=lambda r: "a random.Random",
    attr=lambda tx, r, name: class_method(r, random.Random, name),
    method=_method,
    rebuild=_rebuild,
    one_object=True,
)
builtin_fns.SPECIAL[random.Random] = _construct
