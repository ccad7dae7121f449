"""functools.partial objects built in the trace (`PartialVar`): made as functools.partial
makes them (a partial of a partial is flattened into one), called with their bound arguments
first, and read through `func`, `args` and `keywords`."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from compiler.tracer import builtin_fns, calls
from compiler.tracer.breaks import Break, Raised
from compiler.tracer.values.table import VALUE_OPS, ValueOps
from compiler.tracer.variables import (
    ConstVar,
    DictVar,
    ExceptionVar,
    ObjVar,
    PartialVar,
    TupleVar,
    Var,
)
from compiler.tracer.wrap import wrap, wrap_unguarded

if TYPE_CHECKING:
    from compiler.tracer.context import Emitter, Tracer


def _unfold(tx: Tracer, fn: Var) -> PartialVar | None:
    """A partial given as an argument: the one built in the trace, or a real one read from
    the frame (a module's `self.act = partial(F.gelu, approximate="tanh")`), its parts
    read from its source."""
    if isinstance(fn, PartialVar):
        return fn
    if isinstance(fn, ObjVar) and type(fn.value) is functools.partial:
        p = fn.value
        if fn.source is None:
            return PartialVar(
                wrap_unguarded(p.func),
                [wrap_unguarded(a) for a in p.args],
                {k: wrap_unguarded(v) for k, v in p.keywords.items()},
            )
        return PartialVar(
            wrap(tx, p.func, f"{fn.source}.func"),
            [wrap(tx, a, f"{fn.source}.args[{i}]") for i, a in enumerate(p.args)],
            {k: wrap(tx, v, f"{fn.source}.keywords[{k!r}]") for k, v in p.keywords.items()},
        )
    return None


def _make(tx: Tracer, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if not args:
        message = ConstVar("type 'partial' takes at least one argument")
        raise Raised(ExceptionVar(TypeError, [message]))
    inner = _unfold(tx, args[0])
    if inner is not None:  # partial(partial(f, a), b) is partial(f, a, b), as in eager
        return PartialVar(inner.func, [*inner.args, *args[1:]], {**inner.kwargs, **kwargs})
    return PartialVar(args[0], list(args[1:]), dict(kwargs))


def _attr(tx: Tracer, p: PartialVar, name: str) -> Var:
    if name == "func":
        return p.func
    if name == "args":
        return TupleVar(list(p.args))
    if name == "keywords":
        return DictVar(p.kwargs)  # the partial's own dict: a change shows in later calls
    if name == "__class__":
        return ObjVar(functools.partial)
    raise Break(f"attribute {name!r} of a functools.partial", "unsupported")


def _rebuild(em: Emitter, p: PartialVar) -> str:
    args = "".join(f"{em.expr(a)}, " for a in p.args)
    kwargs = "".join(f"{k}={em.expr(a)}, " for k, a in p.kwargs.items())
    return f"{em.ref(functools.partial, 'cls')}({em.expr(p.func)}, {args}{kwargs})"


VALUE_OPS[PartialVar] = ValueOps(
    attr=_attr,
    call=lambda tx, p, args, kwargs: calls.call(
        tx, p.func, [*p.args, *args], {**p.kwargs, **kwargs}
    ),
    truth=lambda tx, p: True,
    rebuild=_rebuild,
)

builtin_fns.SPECIAL[functools.partial] = _make
