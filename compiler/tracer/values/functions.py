"""Functions and closures: Python functions (real, or made by MAKE_FUNCTION in the trace),
bound methods, methods of tensors and containers called by name, closure cells, and the
NULL pushed below a callable."""

from __future__ import annotations

import functools
import types
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from compiler import optim
from compiler.tracer import builtin_fns, calls
from compiler.tracer import operations as ops
from compiler.tracer.breaks import Break
from compiler.tracer.exceptions import raise_python
from compiler.tracer.hints import call_kind
from compiler.tracer.marked import marked_call
from compiler.tracer.values import torch_functions
from compiler.tracer.values.table import VALUE_OPS, ValueOps, describe
from compiler.tracer.variables import (
    AttrCallVar,
    CellVar,
    ConstVar,
    DictVar,
    FunctionVar,
    MethodVar,
    NullVar,
    ObjVar,
    Var,
)
from compiler.tracer.wrap import wrap, wrap_unguarded

if TYPE_CHECKING:
    from compiler.tracer.context import Emitter, Tracer

# A function's code and names: stable for the function object, whose identity is guarded.
_FUNCTION_CONSTANTS = ("__code__", "__name__", "__qualname__", "__module__", "__doc__")


def _describe(fn: FunctionVar) -> str:
    code = fn.get_code()
    return f"{code.co_name} ({code.co_filename}:{code.co_firstlineno})"


def _attr(tx: Tracer, fn: FunctionVar, name: str) -> Var:
    if name == "__class__":
        return ObjVar(types.FunctionType)
    if fn.fn is None and fn.wrapped is not None:
        if name == "__wrapped__":
            return fn.wrapped
        if name in functools.WRAPPER_ASSIGNMENTS:
            return ops.load_attr(tx, fn.wrapped, name)
    if fn.fn is None:  # made in the trace by MAKE_FUNCTION
        if name in ("__name__", "__qualname__"):
            return ConstVar(fn.name or fn.code.co_name)
        if name == "__module__":  # torchvision's _log_api_usage_once(fn) names its module
            return ConstVar(fn.get_globals().get("__name__"))
        if name == "__code__":
            return ObjVar(fn.code)
        if name == "__annotations__":  # one dict, made empty on the first read if none
            if fn.annotations is None:
                fn.annotations = DictVar({})
            return fn.annotations
        raise Break(f"attribute {name!r} of a function made while tracing")
    if name in _FUNCTION_CONSTANTS:
        value = getattr(fn.fn, name)
        return ObjVar(value) if isinstance(value, types.CodeType) else wrap_unguarded(value)
    if fn.source is None:
        raise Break(
            f"attribute {name!r} of {describe(fn)}, which has no source to guard"
        )
    try:
        value = getattr(fn.fn, name)
    except AttributeError as e:
        raise raise_python(e) from None
    return wrap(tx, value, f"{fn.source}.{name}")


def _call(tx: Tracer, fn: FunctionVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    real = fn.fn
    orig = getattr(real, "_orig_fn", None)
    if orig is not None and getattr(real, "__compiled__", None) is not None:
        # A compiled function called from compiled code: trace its original into this graph.
        return calls.call(
            tx,
            FunctionVar(fn=orig, source=f"{fn.source}._orig_fn" if fn.source else None),
            args,
            kwargs,
        )
    marked = marked_call(tx, real, args, kwargs) if real is not None else None
    if marked is not None:
        return marked
    if (
        real is not None
        and real.__code__.co_name == "decorate_context"
        and hasattr(real, "__wrapped__")
    ):
        return _call_grad_decorated(tx, fn, args, kwargs)
    if real is not None:
        by_code = calls.CALL_BY_CODE.get(real.__code__)
        if by_code is not None:
            return by_code(tx, fn, args, kwargs)
        special = builtin_fns.SPECIAL.get(real)
        if special is not None:
            return special(tx, args, kwargs)
        if args and torch_functions.is_optimizer(args[0]):
            raise Break(
                torch_functions.optimizer_reason(real.__name__, args[0].value), "optimizer"
            )
        if args and torch_functions.is_lr_scheduler(args[0]):
            raise Break(torch_functions.lr_scheduler_reason(real.__name__), "optimizer")
        scheduled = optim.scheduled_optimizer(real)
        if scheduled is not None:  # opt.step once an LR scheduler wrapped it
            raise Break(torch_functions.optimizer_reason("step", scheduled), "optimizer")
        if calls.is_torch_function(real):
            return torch_functions.torch_call(tx, real, args, kwargs)
        if calls.is_skipped(real):
            raise Break(
                f"call to {describe(fn)} runs in Python (library code is not traced)",
                call_kind(real, library=True),
            )
    return tx.inline(fn, args, kwargs)


def _call_grad_decorated(
    tx: Tracer, fn: FunctionVar, args: list[Var], kwargs: dict[str, Var]
) -> Var:
    """A function decorated with @torch.no_grad() / @torch.enable_grad() /
    @torch.inference_mode(): the wrapped function is inlined with the grad mode switched
    around it."""
    real = fn.fn
    closure = dict(
        zip(real.__code__.co_freevars, (c.cell_contents for c in real.__closure__ or ()))
    )
    factory = closure.get("ctx_factory")
    ctx = factory() if callable(factory) else None
    if type(ctx) not in (torch.no_grad, torch.enable_grad, torch.inference_mode):
        raise Break(
            f"call to {describe(fn)} runs in Python (a context-manager decorator)",
            "context_manager",
        )
    inference = type(ctx) is torch.inference_mode and ctx.mode
    enabled = False if inference else None if type(ctx) is torch.inference_mode else (
        type(ctx) is torch.enable_grad
    )
    prev = tx.builder.grad_enabled
    if enabled is not None:
        tx.builder.set_grad_enabled(enabled)
    tx.builder.inference += inference
    if inference and tx.builder.inference_at is None:
        tx.builder.inference_at = tx.root_pc
    try:
        result = calls.call(tx, FunctionVar(fn=real.__wrapped__), args, kwargs)
    finally:
        tx.builder.inference -= inference
    tx.builder.set_grad_enabled(prev)
    return result


def _with_attributes(
    fn: types.FunctionType, kwdefaults: dict | None, annotations: dict | None
) -> types.FunctionType:
    """`fn` with the keyword defaults and annotations MAKE_FUNCTION gave it."""
    fn.__kwdefaults__ = kwdefaults
    if annotations is not None:
        fn.__annotations__ = annotations
    return fn


def _rebuild(em: Emitter, fn: FunctionVar) -> str:
    if fn.fn is not None:
        return em.ref(fn.fn, "fn")
    closure = "None"
    if fn.closure:
        closure = "(" + "".join(em.cell(c) + ", " for c in fn.closure) + ")"
    defaults = em.expr(fn.defaults) if fn.defaults is not None else "None"
    made = f"{em.ref(types.FunctionType, 'cls')}({em.ref(fn.code, 'code')}, {em.ref(fn.globals, 'g')}, {fn.name!r}, {defaults}, {closure})"
    if fn.wrapped is not None:
        made = f"{em.ref(functools.update_wrapper, 'fn')}({made}, {em.expr(fn.wrapped)})"
    if fn.kwdefaults is None and fn.annotations is None:
        return made
    kwdefaults, annotations = (
        em.expr(v) if v is not None else "None" for v in (fn.kwdefaults, fn.annotations)
    )
    return f"{em.ref(_with_attributes, 'fn')}({made}, {kwdefaults}, {annotations})"


@dataclass(eq=False)
class WrapsVar(Var):
    """`functools.wraps(wrapped)`: the decorator that gives a wrapper `wrapped`'s names."""

    wrapped: Var


def _wraps(tx: Tracer, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if len(args) != 1 or kwargs:
        raise Break("functools.wraps with assigned= or updated= runs in Python")
    return WrapsVar(args[0])


def _apply_wraps(tx: Tracer, w: WrapsVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    wrapper = args[0] if len(args) == 1 and not kwargs else None
    if not isinstance(wrapper, FunctionVar) or wrapper.fn is not None:
        raise Break("functools.wraps over a function not made in the trace runs in Python")
    wrapper.wrapped = w.wrapped
    return wrapper


def _same_function(a: FunctionVar, b: Var) -> bool | None:
    """`f is g` for a function: real functions are the same object or not (`getattr(cls,
    name, default) is Base.method`, torch's own test in Module._save_to_state_dict); a
    function made in the trace is a new object, the same as no other value."""
    if isinstance(b, FunctionVar):
        return a.fn is not None and a.fn is b.fn
    if isinstance(b, (ConstVar, ObjVar)):
        return a.fn is not None and a.fn is b.value
    return None


def _always(tx: Tracer, v: Var) -> bool:
    return True


VALUE_OPS[FunctionVar] = ValueOps(
    describe=_describe,
    attr=_attr,
    call=_call,
    truth=_always,
    same=_same_function,
    rebuild=_rebuild,
    one_object=True,
)

VALUE_OPS[WrapsVar] = ValueOps(call=_apply_wraps, truth=_always)
builtin_fns.SPECIAL[functools.wraps] = _wraps

VALUE_OPS[MethodVar] = ValueOps(
    call=lambda tx, m, args, kwargs: calls.call(tx, m.func, [m.self_var, *args], kwargs),
    truth=_always,
    rebuild=lambda em, m: (
        f"{em.ref(types.MethodType, 'cls')}({em.expr(m.func)}, {em.expr(m.self_var)})"
    ),
)

VALUE_OPS[AttrCallVar] = ValueOps(
    call=lambda tx, m, args, kwargs: calls.call_method(tx, m.obj, m.name, args, kwargs),
    truth=_always,
    rebuild=lambda em, m: f"getattr({em.expr(m.obj)}, {m.name!r})",
)

VALUE_OPS[CellVar] = ValueOps(
    rebuild=lambda em, c: em.cell(c),
    replay_children=lambda c: [c.contents] if c.contents is not None else [],
)

VALUE_OPS[NullVar] = ValueOps(
    same=lambda a, b: isinstance(b, NullVar),
    rebuild=lambda em, n: em.ref(calls.REAL_NULL, "null"),
    source_first=False,
)
