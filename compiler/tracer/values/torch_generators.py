"""`torch.Generator()` made in the trace (`GeneratorVar`), seeded and drawn from by torch's
random factories (`torch.randn(3, generator=g)`), as torch.compile runs it without a break.

Such a generator is the function's own: nothing else draws from it. So the entry makes it
for real just before its graph runs, with the same calls in the same order (an entry's
before_graph calls: `torch.Generator()`, `manual_seed`, each draw), and the tensors drawn
are inputs of the graph: each call of the compiled function draws eager's numbers, and a
generator that outlives the graph is that real one, in eager's state. While tracing, a
replica takes the same calls, so the trace reads its seed as eager would. A draw whose
sizes are not constants, or a generator used by an op that also takes tensors
(`x.normal_(generator=g)`), still breaks the graph.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import torch

from compiler.tracer import builtin_fns
from compiler.tracer.breaks import Break
from compiler.tracer.context import DeferredCall
from compiler.tracer.shapes import is_symbolic
from compiler.tracer.values import torch_functions
from compiler.tracer.values.table import VALUE_OPS, ValueOps, class_method
from compiler.tracer.variables import ConstVar, Var, as_python_constant, is_python_constant

if TYPE_CHECKING:
    from compiler.tracer.context import Emitter, Tracer

_NAMESPACE_NAME = "___torch_generators"
# torch's random factories: their tensor comes only from constant arguments and the generator
_FACTORIES = (torch.randn, torch.rand, torch.randint, torch.randperm, torch.normal)


@dataclass
class _Program:
    """The generator calls of one entry, in order, replayed for real before its graph runs:
    the generators made and the tensors drawn by the last run."""

    steps: list[tuple] = field(default_factory=list)
    generators: list[torch.Generator] = field(default_factory=list)
    values: list[torch.Tensor] = field(default_factory=list)

    def run(self) -> None:
        self.generators, self.values = [], []
        for kind, *rest in self.steps:
            if kind == "make":
                self.generators.append(torch.Generator(*rest))
            elif kind == "seed":
                self.generators[rest[0]].manual_seed(rest[1])
            else:
                index, fn, args, kwargs = rest
                self.values.append(fn(*args, generator=self.generators[index], **kwargs))


@dataclass(eq=False)
class GeneratorVar(Var):
    """The `index`-th generator the entry makes, with its replica for the trace."""

    index: int
    replica: torch.Generator
    program: _Program  # whose run makes the real one


def _program(tx: Tracer) -> _Program:
    found = tx.guards.namespace.get(_NAMESPACE_NAME)
    if found is None:
        found = _Program()
        tx.guards.namespace[_NAMESPACE_NAME] = found
        what = "each call of the function's own torch.Generator"
        tx.before_graph.append(DeferredCall(found.run, (), {}, what))
    return found


def _constants(what: str, args: list[Var], kwargs: dict[str, Var]) -> tuple[list, dict]:
    if not all(is_python_constant(a) for a in [*args, *kwargs.values()]):
        raise Break(f"{what} with arguments that are not constants runs in Python")
    values = [as_python_constant(a) for a in args]
    kw = {k: as_python_constant(v) for k, v in kwargs.items()}
    if is_symbolic(values) or is_symbolic(list(kw.values())):
        raise Break(f"{what} with a symbolic size runs in Python")
    return values, kw


def _make(tx: Tracer, args: list[Var], kwargs: dict[str, Var]) -> Var:
    values, kw = _constants("torch.Generator()", args, kwargs)
    try:
        replica = torch.Generator(*values, **kw)
    except Exception as e:
        raise Break(f"torch.Generator() raises {type(e).__name__}, in Python") from None
    program = _program(tx)
    index = sum(1 for s in program.steps if s[0] == "make")
    program.steps.append(("make", *values, *kw.values()))
    program.generators.append(replica)
    tx.changed()
    return GeneratorVar(index, replica, program)


def _method(tx: Tracer, g: GeneratorVar, name: str, args: list[Var], kwargs: dict[str, Var]) -> Var:
    values, kw = _constants(f"Generator.{name}", args, kwargs)
    if name == "manual_seed" and len(values) == 1 and not kw and type(values[0]) is int:
        g.replica.manual_seed(values[0])
        _program(tx).steps.append(("seed", g.index, values[0]))
        tx.changed()
        return g
    if name == "initial_seed" and not values and not kw:
        return ConstVar(g.replica.initial_seed())
    raise Break(f"Generator.{name} is not traced")


def _draw(fn: Callable) -> Callable[[Tracer, list[Var], dict[str, Var]], Var]:
    def call(tx: Tracer, args: list[Var], kwargs: dict[str, Var]) -> Var:
        g = kwargs.get("generator")
        if not isinstance(g, GeneratorVar):
            return torch_functions.torch_call(tx, fn, args, kwargs)
        rest = {k: v for k, v in kwargs.items() if k != "generator"}
        values, kw = _constants(f"torch.{fn.__name__}", args, rest)
        try:
            example = fn(*values, generator=g.replica, **kw)
        except Exception as e:
            raise Break(f"torch.{fn.__name__} raises {type(e).__name__}, in Python") from None
        program = _program(tx)
        program.steps.append(("draw", g.index, fn, tuple(values), kw))
        program.values.append(example)  # what the backend is compiled with
        tx.changed()
        source = f"{_NAMESPACE_NAME}.values[{len(program.values) - 1}]"
        return tx.builder.add_input(example, source)

    return call


def _rebuild(em: Emitter, g: GeneratorVar) -> str:
    # the real generator the entry made before its graph, in the state its draws left
    return f"{em.ref(g.program, 'gens')}.generators[{g.index}]"


VALUE_OPS[GeneratorVar] = ValueOps(
    describe=lambda g: "a torch.Generator made in the function",
    attr=lambda tx, g, name: class_method(g, torch.Generator, name),
    method=_method,
    rebuild=_rebuild,
    one_object=True,
)
builtin_fns.SPECIAL[torch.Generator] = _make
for _fn in _FACTORIES:
    builtin_fns.SPECIAL[_fn] = _draw(_fn)
