"""torch functions put in the graph as one call (or that end it: autograd's engine, global
state, torch.optim), and the grad-mode and autocast contexts, whose `with` blocks switch the
graph builder's mode."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import torch

from compiler import optim
from compiler.support.autocast import AutocastRestore
from compiler.tracer import reconstruct
from compiler.tracer.breaks import Break
from compiler.tracer.values.table import VALUE_OPS, ValueOps
from compiler.tracer.values.tensors import BACKWARD_REASON
from compiler.tracer.variables import (
    AutocastExitVar,
    AutocastVar,
    ConstVar,
    GradExitVar,
    GradModeVar,
    ObjVar,
    Var,
)

if TYPE_CHECKING:
    from compiler.tracer.translator import Tracer

# torch functions that end the graph with a reason of their own
_AUTOGRAD_REASONS = {
    torch.autograd.backward: "torch.autograd." + BACKWARD_REASON.replace("loss.", "", 1),
    torch.autograd.grad: (
        "torch.autograd.grad() runs autograd's engine in Python: the graph before it is "
        "compiled with its backward, whose kernels the engine runs"
    ),
}
# torch functions with effects outside the graph: calling one ends the graph.
_STATEFUL_TORCH_NAMES = (
    "manual_seed",
    "seed",
    "save",
    "load",
    "backward",
    "synchronize",
    "compile",
)


def torch_call(tx: Tracer, fn: Callable, args: list[Var], kwargs: dict[str, Var]) -> Var:
    reason = _AUTOGRAD_REASONS.get(fn)
    if reason is not None:
        raise Break(reason, "autograd_engine")
    name = getattr(fn, "__name__", "")
    if name in _STATEFUL_TORCH_NAMES or name.startswith("set_") or name.startswith("_set_"):
        raise Break(f"torch.{name} changes global state; it runs in Python", "global_state")
    return tx.builder.call("call_function", fn, args, kwargs)


def is_optimizer(v: Var) -> bool:
    return isinstance(v, ObjVar) and isinstance(v.value, torch.optim.Optimizer)


def is_lr_scheduler(v: Var) -> bool:
    return isinstance(v, ObjVar) and isinstance(v.value, torch.optim.lr_scheduler.LRScheduler)


def optimizer_reason(method: str, opt: torch.optim.Optimizer) -> str:
    if method == "step":
        return optim.trace_reason(opt)
    if method == "zero_grad":
        return (
            "optimizer.zero_grad() runs in Python: it resets the parameters' .grad attributes, "
            "which a graph does not hold; the next graph starts after it (torch's own "
            "zero_grad with set_to_none=True runs as one loop over the parameters, "
            "compiler/optim/zero_grad.py)"
        )
    return f"optimizer.{method}() runs in Python: torch.optim is not traced"


def lr_scheduler_reason(method: str) -> str:
    if method == "step":
        return (
            "lr_scheduler.step() runs in Python: it sets the param groups' lr, which a "
            "compiled optimizer step reads as a tensor input (a new lr does not recompile)"
        )
    return f"lr_scheduler.{method}() runs in Python: torch.optim is not traced"


# ---- grad-mode and autocast contexts ------------------------------------------------------------


def _grad_exit(tx: Tracer, fn: GradExitVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    tx.builder.set_grad_enabled(fn.restore)
    return ConstVar(None)


def _autocast_exit(tx: Tracer, fn: AutocastExitVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    tx.builder.set_autocast(fn.device_type, fn.before)
    return ConstVar(None)


VALUE_OPS[GradModeVar] = ValueOps(
    truth=lambda tx, v: True,
    rebuild=lambda em, v: f"{em.ref(torch.set_grad_enabled, 'fn')}({v.enabled})",
)
VALUE_OPS[GradExitVar] = ValueOps(
    call=_grad_exit,
    rebuild=lambda em, v: em.ref(reconstruct.GradRestore(v.restore), "exit"),
)
VALUE_OPS[AutocastVar] = ValueOps(
    rebuild=lambda em, v: em.ref(
        torch.autocast(v.device_type, dtype=v.dtype, enabled=v.enabled), "autocast"
    ),
)
VALUE_OPS[AutocastExitVar] = ValueOps(
    call=_autocast_exit,
    rebuild=lambda em, v: em.ref(AutocastRestore(v.device_type, v.before), "exit"),
)
