"""`torch.no_grad()` / `torch.enable_grad()` applied as a decorator inside the trace
(`@torch.no_grad()` on a nested function): the decorated function (`GradDecoratedVar`) is
inlined with the grad mode switched around it and restored after, also when it raises, as
the decorator's wrapper does in eager. Decorated at module level, the real wrapper is traced
by values/functions.py instead."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from compiler.tracer import calls
from compiler.tracer.breaks import Break
from compiler.tracer.values import torch_functions
from compiler.tracer.values.table import VALUE_OPS, ValueOps, describe
from compiler.tracer.variables import GradModeVar, Var

if TYPE_CHECKING:
    from compiler.tracer.context import Emitter, Tracer


@dataclass(eq=False)
class GradDecoratedVar(Var):
    """`fn` wrapped by a grad-mode decorator made in the trace: called with grad mode
    `enabled`."""

    enabled: bool
    fn: Var


def _decorate(tx: Tracer, mode: GradModeVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    # set_grad_enabled switched the mode when it was made, and inference mode has its own
    # regions (builtin_fns.inference_mode): as decorators made in the trace they run in Python
    if kwargs or len(args) != 1 or mode.enabled is None or mode.prev is not None:
        raise Break("calling a grad-mode object other than as a decorator is not traced")
    if mode.inference_at is not None:
        raise Break("torch.inference_mode() as a decorator made in the trace is not traced")
    return GradDecoratedVar(mode.enabled, args[0])


def _call(tx: Tracer, fn: GradDecoratedVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    prev = tx.builder.grad_enabled
    tx.builder.set_grad_enabled(fn.enabled)
    try:
        return calls.call(tx, fn.fn, args, kwargs)
    finally:
        tx.builder.set_grad_enabled(prev)


def _rebuild(em: Emitter, v: GradDecoratedVar) -> str:
    mode = em.ref(torch.enable_grad if v.enabled else torch.no_grad, "fn")
    return f"{mode}()({em.expr(v.fn)})"


VALUE_OPS[GradDecoratedVar] = ValueOps(
    describe=lambda v: f"a grad-mode decorated {describe(v.fn)}",
    call=_call,
    rebuild=_rebuild,
)
# a grad-mode object is a value of torch_functions' family; calling one decorates
VALUE_OPS[torch_functions.GradModeVar].call = _decorate
