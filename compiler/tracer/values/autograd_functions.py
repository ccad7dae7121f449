"""Custom autograd Functions called through `Fn.apply` (BLOOM's GeLUFunction, straight-through
estimators), and the `ctx` object their forward sees when it is inlined.

Two cases, told apart by whether autograd would record the call:
- no gradient is needed (grad mode off, or no tensor argument requires grad): eager's apply
  only runs `forward`, so forward is inlined with an `AutogradCtxVar` as `ctx` and its ops
  fuse with the rest of the graph.
- a gradient is needed: the graph holds one call of `Fn.apply` (an opaque node, as with
  compiler.allow_in_graph). The backend compiles the graph's parts around it and runs it on
  the real tensors, so autograd records the user's Function and runs the user's `backward`,
  even where it is not the derivative of forward (a straight-through estimator). Tracing
  forward into the joint graph would differentiate forward instead.
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from compiler.support import autocast
from compiler.tracer import builtin_fns, calls
from compiler.tracer.breaks import Break
from compiler.tracer.values.table import VALUE_OPS, ValueOps
from compiler.tracer.variables import (
    AttrCallVar,
    ConstVar,
    FunctionVar,
    ObjVar,
    TensorVar,
    TupleVar,
    Var,
)

if TYPE_CHECKING:
    from compiler.tracer.context import Tracer

_BASE_SETUP_CONTEXT = torch.autograd.Function.setup_context
_BASE_APPLY = inspect.getattr_static(torch.autograd.Function, "apply")


@dataclass(eq=False)
class AutogradCtxVar(Var):
    """The `ctx` of a custom Function's forward inlined without autograd: what forward saves
    and the attributes it sets, read back by the same forward."""

    needs_input_grad: tuple[bool, ...]
    saved: list[Var] = field(default_factory=list)
    fields: dict[str, Var] = field(default_factory=dict)


def _user_function(owner: Any) -> type | None:
    """`owner` where it is a user's Function subclass that keeps torch's `apply`: torch's own
    Functions (checkpointing, ...) are not handled here."""
    if (
        not isinstance(owner, type)
        or not issubclass(owner, torch.autograd.Function)
        or owner.__module__.split(".")[0] == "torch"
        or inspect.getattr_static(owner, "apply") is not _BASE_APPLY
    ):
        return None
    return owner


def call_apply(tx: Tracer, fn: ObjVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """`Fn.apply(...)` where torch writes apply in C (a bound builtin method, reached here
    as a real object)."""
    cls = _user_function(getattr(fn.value, "__self__", None))
    if getattr(fn.value, "__name__", None) != "apply" or cls is None:
        return NotImplemented
    return _apply(tx, cls, args, kwargs)


def _apply_classmethod(tx: Tracer, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """`Fn.apply(...)` where torch writes apply as a Python classmethod (torch 2.11): the
    trace binds its function to the class, which comes first in `args`. Traced through, it
    would hand the class to `super().apply`, a C call the graph cannot hold."""
    owner = args[0].value if args and isinstance(args[0], ObjVar) else None
    cls = _user_function(owner)
    if cls is None:
        name = getattr(owner, "__name__", "an autograd Function")
        raise Break(f"call to {name}.apply runs in Python", "autograd_function")
    return _apply(tx, cls, args[1:], kwargs)


def _apply(tx: Tracer, cls: type, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if kwargs:
        raise Break(
            f"{cls.__name__}.apply called with keyword arguments runs in Python",
            "autograd_function",
        )
    needs = tuple(isinstance(a, TensorVar) and a.fake.requires_grad for a in args)
    if tx.builder.grad_enabled and any(needs):
        return _apply_in_graph(tx, cls, args)
    return _inline_forward(tx, cls, args, needs)


def _inline_forward(tx: Tracer, cls: type, args: list[Var], needs: tuple[bool, ...]) -> Var:
    ctx = AutogradCtxVar(needs)
    if cls.setup_context is _BASE_SETUP_CONTEXT:
        return calls.call(tx, FunctionVar(fn=cls.forward), [ctx, *args], {})
    # forward(*args) without ctx, then setup_context(ctx, inputs, output), as apply does
    out = calls.call(tx, FunctionVar(fn=cls.forward), list(args), {})
    calls.call(tx, FunctionVar(fn=cls.setup_context), [ctx, TupleVar(list(args)), out], {})
    return out


_APPLY_TARGETS: dict[tuple, Any] = {}


def _apply_target(cls: type, states: dict[str, autocast.State]) -> Any:
    """A module-level function calling `cls.apply`, as a graph node's target: FX names a
    call_function target by its module and qualified name, which a bound builtin lacks. It
    runs under the autocast state the trace saw at the call (`states`): a backend that lowers
    autocast to explicit casts runs the node outside any autocast block, and eager's forward
    ran inside it (its backward, run by autograd's engine, runs outside either way)."""
    key = (cls, tuple(sorted(states.items())))
    target = _APPLY_TARGETS.get(key)
    if target is None:
        name = f"apply_{cls.__name__}_{len(_APPLY_TARGETS)}"
        states = dict(states)

        def target(*args: Any) -> Any:
            with autocast.preserved():
                autocast.restore(states)
                return cls.apply(*args)

        target.__name__ = target.__qualname__ = name
        setattr(sys.modules[__name__], name, target)
        _APPLY_TARGETS[key] = target
    return target


def _apply_in_graph(tx: Tracer, cls: type, args: list[Var]) -> Var:
    target = _apply_target(cls, tx.builder.autocast)
    try:
        out, node = tx.builder.call_opaque(target, args, {})
    except Break as b:
        why = b.reason.replace(target.__name__, "forward").replace(" (compiler.allow_in_graph)", "")
        raise Break(
            f"{cls.__name__}.apply runs in Python: its forward, run on fake tensors while "
            f"tracing to put the call in the graph, failed ({why})",
            "autograd_function",
        ) from None
    node.meta["autograd_function"] = cls.__qualname__
    return out


# ---- ctx -------------------------------------------------------------------------------


def _save(tx: Tracer, ctx: AutogradCtxVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    ctx.saved = list(args)
    return ConstVar(None)


def _ignored(tx: Tracer, ctx: AutogradCtxVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """Marks that only matter to autograd, which does not record this call."""
    return ConstVar(None)


_CTX_METHODS = {
    "save_for_backward": _save,
    "save_for_forward": _ignored,
    "mark_non_differentiable": _ignored,
    "mark_dirty": _ignored,
    "set_materialize_grads": _ignored,
}


def _ctx_attr(tx: Tracer, ctx: AutogradCtxVar, name: str) -> Var:
    if name in ctx.fields:
        return ctx.fields[name]
    if name in _CTX_METHODS:
        return AttrCallVar(ctx, name)
    if name == "needs_input_grad":
        return TupleVar([ConstVar(n) for n in ctx.needs_input_grad])
    if name in ("saved_tensors", "saved_variables"):
        return TupleVar(list(ctx.saved))
    raise Break(f"attribute {name!r} of an autograd Function's ctx", "autograd_function")


def _ctx_store(tx: Tracer, ctx: AutogradCtxVar, name: str, value: Var) -> None:
    if name in _CTX_METHODS or name in ("needs_input_grad", "saved_tensors"):
        raise Break(f"assigning {name!r} of an autograd Function's ctx", "autograd_function")
    ctx.fields[name] = value


VALUE_OPS[AutogradCtxVar] = ValueOps(
    describe=lambda ctx: "an autograd Function's ctx",
    attr=_ctx_attr,
    store_attr=_ctx_store,
    methods=_CTX_METHODS,
    truth=lambda tx, ctx: True,
)

# One of the two is how this torch writes Function.apply.
if isinstance(_BASE_APPLY, classmethod):
    builtin_fns.SPECIAL[_BASE_APPLY.__func__] = _apply_classmethod
else:
    calls.CALL_BY_TYPE.setdefault(type(torch.autograd.Function.apply), []).append(call_apply)
