"""torch functions put in the graph as one call (or that end it: autograd's engine, global
state, torch.optim), and the grad-mode and autocast contexts, whose `with` blocks switch the
graph builder's mode."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import torch

from compiler import optim
from compiler.records import ControlRecord
from compiler.support.autocast import AutocastRestore
from compiler.tracer import builtin_fns, reconstruct
from compiler.tracer.breaks import Break
from compiler.tracer.context import DeferredCall
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
    as_python_constant,
    is_python_constant,
)

if TYPE_CHECKING:
    from compiler.tracer.context import Tracer

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
    "save",
    "load",
    "backward",
    "synchronize",
    "compile",
)


# Seeding the global generator runs between graphs, as under torch.compile (which skips
# torch.manual_seed): the random ops of a graph are calls of torch's own kernels, in program
# order, which draw from the global generator; a seed set inside a graph would need the code
# generator to keep a seeding call ordered among them, which it does not do.
_SEED_REASON = (
    "torch.{name} sets the global random generator's state: it runs in Python between "
    "graphs, so the random ops after it, in the next graph, draw eager's numbers"
)
_SEEDING = {"manual_seed", "seed", "set_rng_state"}


def torch_call(tx: Tracer, fn: Callable, args: list[Var], kwargs: dict[str, Var]) -> Var:
    reason = _AUTOGRAD_REASONS.get(fn)
    if reason is not None:
        raise Break(reason, "autograd_engine")
    name = getattr(fn, "__name__", "")
    if fn is torch.manual_seed and _seeds_first(tx, args, kwargs):
        seed = args[0].value
        what = f"torch.manual_seed({seed})"
        tx.before_graph.append(DeferredCall(torch.manual_seed, (seed,), {}, what))
        control = ControlRecord(
            "seed", what, f"{what} is made just before the graph runs", tx.builder.line
        )
        if control not in tx.builder.controls:
            tx.builder.controls.append(control)
        return ObjVar(torch.default_generator)  # what manual_seed returns
    if name in _SEEDING:
        raise Break(_SEED_REASON.format(name=name), "global_state")
    if name in _STATEFUL_TORCH_NAMES or name.startswith("set_") or name.startswith("_set_"):
        raise Break(f"torch.{name} changes global state; it runs in Python", "global_state")
    return tx.builder.call("call_function", fn, args, kwargs)


def _seeds_first(tx: Tracer, args: list[Var], kwargs: dict[str, Var]) -> bool:
    """`torch.manual_seed(n)` with a constant n, before any op of the graph: made for real
    just before the graph runs, it sets the state eager's own call sets at the same point of
    the random stream, for the graph's random ops draw from the global generator as eager
    does (they run as torch's own kernels, in order). After an op it would come too early
    for that op (the op could be random): it breaks the graph then, as torch.compile does."""
    if kwargs or len(args) != 1 or not isinstance(args[0], ConstVar):
        return False
    if not isinstance(args[0].value, int) or isinstance(args[0].value, bool):
        return False
    return all(n.op in ("placeholder", "get_attr") for n in tx.builder.graph.nodes)


def is_optimizer(v: Var) -> bool:
    return isinstance(v, ObjVar) and isinstance(v.held, torch.optim.Optimizer)


def is_lr_scheduler(v: Var) -> bool:
    return isinstance(v, ObjVar) and isinstance(v.held, torch.optim.lr_scheduler.LRScheduler)


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


# ---- TorchScript queries and profiler regions: constants and no-ops while tracing -----------


def _returns(value: object) -> Callable:
    return lambda tx, args, kwargs: ConstVar(value)


def _annotate(tx: Tracer, args: list[Var], kwargs: dict[str, Var]) -> Var:
    return args[1] if len(args) > 1 else kwargs["the_value"]


def _profiler_region(tx: Tracer, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """`with record_function(name):` opens no region in the graph (a context that changes
    nothing), as under torch.compile; the entry's record says so."""
    name = args[0] if args else kwargs.get("name")
    target = (
        repr(as_python_constant(name)) if name is not None and is_python_constant(name) else "?"
    )
    control = ControlRecord(
        "record_function",
        target,
        "a profiler region, traced as a no-op as torch.compile does: a profile shows the "
        "compiled graph's kernels, not this region",
        tx.builder.line,
    )
    if control not in tx.builder.controls:
        tx.builder.controls.append(control)
    return GradModeVar(None)


builtin_fns.SPECIAL.update(
    {
        torch.jit.is_scripting: _returns(False),
        torch.jit.is_tracing: _returns(False),
        torch._C._get_tracing_state: _returns(None),
        torch.jit.annotate: _annotate,
        torch.autograd.profiler.record_function: _profiler_region,
    }
)


# ---- grad-mode and autocast contexts ------------------------------------------------------------


def _grad_exit(tx: Tracer, fn: GradExitVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if fn.inference_at is not None:
        tx.builder.inference -= 1
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
    describe=lambda v: "a torch.inference_mode() block" if v.inference_at is not None else "a grad-mode block's exit",
    call=_grad_exit,
    made_at=lambda v: v.inference_at,
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
