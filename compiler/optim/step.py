"""Running a recognised optimizer step through the compiler instead of torch.optim.

The frame evaluator hands over `opt.step()` made at a graph break (support.step_call). When
the optimizer and its parameters are supported, the state torch.optim would create lazily at
this step is created here as its `_init_group` creates it (SGD's momentum buffers as zeros,
which this step's update turns into the gradient torch.optim copies in), and the groups are
handed to the functional update (functional.py) through the frame evaluator, which compiles
it (guards, recompiles, cache limit and records as for any function) and runs it under
no_grad, as torch.optim's step runs. Anything else runs torch.optim's own step, and the reason
is kept in the functional update's function record (`warnings`).

On CUDA the compiled kernels read the step counts, so Adam's `state['step']` tensors must
live on the parameters' device: as torch.compile does, they are moved there and the param
group gets `capturable=True`, which keeps eager steps, `state_dict()` and `load_state_dict()`
of that optimizer consistent with them. On the CPU they stay where torch.optim put them.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import torch
from torch.optim.optimizer import _get_scalar_dtype

from compiler import controls, records
from compiler.optim.functional import FUNCTIONS, adam_step, sgd_step
from compiler.optim.support import StepCall, why_eager
from compiler.runtime.static import is_static_address, mark_static_address

if TYPE_CHECKING:
    from compiler.tracer.evaluator import CompileContext

_REPLACES = {
    sgd_step: "torch.optim.SGD.step()",
    adam_step: "torch.optim.Adam.step() and AdamW.step()",
}


def _compiled_note(fn: Callable) -> str:
    return (
        f"compiled optimizer step (compiler/optim): replaces the eager update of "
        f"{_REPLACES[fn]}; each parameter with a gradient is updated in place as by "
        "torch.optim's single-tensor algorithm; lr is a 0-d tensor input (a scheduler "
        "changing it does not recompile), the other hyperparameters are guarded constants"
    )


# Per optimizer, per param group: the lr value last written and its 0-d tensor input.
_LR: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@dataclass
class _Prepared:
    groups: list[tuple] = field(default_factory=list)  # the functional update's argument
    state: list[torch.Tensor] = field(default_factory=list)  # optimizer state and lr tensors
    notes: list[str] = field(default_factory=list)  # state changes made on the way


class _Unsupported(Exception):
    """This step runs torch.optim's update; the message says why."""


def run_step(ctx: CompileContext, call: StepCall, run_function: Callable) -> Any:
    """Make the step `call`: compiled when supported, else torch.optim's own."""
    opt = call.optimizer
    fn = FUNCTIONS.get(type(opt))
    if controls.stance() == "force_eager":
        return call.eager()  # everything eager: torch.optim's own step, not ours run eagerly
    reason = why_eager(opt, *call.step_args)
    native = ctx.state_for(fn).native if reason is None else None
    if native:
        reason = f"its compiled step runs eagerly from now on ({native})"
    if reason is None:
        try:
            prepared = _prepare(opt, fn, ctx.config.mode)
        except _Unsupported as e:
            reason = str(e)
    if reason is not None:
        if fn is not None:
            _warn(ctx, fn, f"{type(opt).__name__}.step() ran torch.optim's eager update: {reason}")
        return call.eager()
    if call.from_scheduler:
        opt._opt_called = True  # what the scheduler's wrapper records (lr_scheduler.py)
    if prepared.groups:
        name = f"Optimizer.step#{type(opt).__name__}.step (compiled)"
        with torch.autograd.profiler.record_function(name), torch.no_grad():
            run_function(ctx, fn, (prepared.groups,), {})
        _annotate(ctx, fn, [_compiled_note(fn), *prepared.notes])
    return None  # step() returns the closure's loss, and there is no closure


def _prepare(opt: torch.optim.Optimizer, fn: Callable, mode: str | None) -> _Prepared:
    """The functional update's groups, with the state torch.optim would create at this step
    created first. Raises _Unsupported, before changing any state, for what only eager runs."""
    active = [
        (index, group, [p for p in group["params"] if p.grad is not None])
        for index, group in enumerate(opt.param_groups)
    ]
    active = [(index, group, params) for index, group, params in active if params]
    devices = {p.device for _, _, params in active for p in params}
    if len(devices) > 1:
        listed = ", ".join(sorted(map(str, devices)))
        raise _Unsupported(f"its parameters are on several devices ({listed})")
    for _, _, params in active:
        for p in params:
            _check_param(p)
    prepared = _Prepared()
    if not devices:
        return prepared  # no gradient anywhere: torch.optim's step changes nothing either
    (device,) = devices
    if device.type not in ("cpu", "cuda"):
        raise _Unsupported(f"its parameters are on {device}")
    build = _sgd_group if fn is sgd_step else _adam_group
    plans = [build(opt, group, params) for _, group, params in active]  # checks only
    for (index, group, _), plan in zip(active, plans):
        prepared.groups.append(plan(_lr_tensor(opt, index, group["lr"], device), prepared))
    if mode == "reduce-overhead" and device.type == "cuda":
        # a CUDA graph reads these where they are instead of copying them in every replay
        for t in prepared.state:
            if not is_static_address(t):
                mark_static_address(t)
    return prepared


def _check_param(p: torch.Tensor) -> None:
    # Paid per parameter and step: only what changes the decision. A state tensor that does
    # not fit its parameter fails the compile as it fails eager's step, and a graph over
    # several devices runs eagerly (the lowering refuses it).
    grad = p.grad
    if grad.layout != torch.strided or p.layout != torch.strided:
        raise _Unsupported("a parameter has a sparse gradient or is not strided")
    if not p.is_floating_point():
        raise _Unsupported(f"a parameter is {p.dtype}, not a real floating point type")
    if grad.dtype != p.dtype or grad.device != p.device:
        raise _Unsupported("a gradient differs from its parameter in dtype or device")


# A group's builder checks it (raising _Unsupported before any state changes) and returns
# its plan: given the group's lr tensor, the plan creates the state torch.optim would create
# at this step and returns the group's share of the functional update's argument.


def _sgd_group(opt: torch.optim.Optimizer, group: dict, params: list) -> Callable:
    momentum, dampening = group["momentum"], group["dampening"]
    buffers = (
        [opt.state[p].get("momentum_buffer") if p in opt.state else None for p in params]
        if momentum != 0
        else []
    )
    if dampening != 0 and any(buf is None for buf in buffers):
        # torch.optim's first step copies the gradient into the new buffer, with no
        # dampening; the update here always dampens
        raise _Unsupported("SGD with dampening creates its momentum buffers at its first step")

    def plan(lr: torch.Tensor, prepared: _Prepared) -> tuple:
        for k, (p, buf) in enumerate(zip(params, buffers)):
            if buf is None:
                # 0 * momentum + grad is the gradient torch.optim copies in at this step
                buffers[k] = opt.state[p]["momentum_buffer"] = torch.zeros_like(
                    p.grad, memory_format=torch.preserve_format
                )
        prepared.state += [*buffers, lr]
        grads = [p.grad for p in params]
        return (
            params,
            grads,
            buffers,
            lr,
            momentum,
            dampening,
            group["weight_decay"],
            group["nesterov"],
            group["maximize"],
        )

    return plan


def _adam_group(opt: torch.optim.Optimizer, group: dict, params: list) -> Callable:
    amsgrad = group["amsgrad"]
    keys = ("step", "exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if amsgrad else ())
    needed = set(keys)
    for p in params:
        state = opt.state.get(p)
        if state and not (needed <= state.keys() and isinstance(state["step"], torch.Tensor)):
            # amsgrad turned on after some steps, say: torch.optim's step fails there too
            raise _Unsupported(f"the optimizer's state lacks one of {', '.join(keys)}")
    on_cuda = params[0].device.type == "cuda"

    def plan(lr: torch.Tensor, prepared: _Prepared) -> tuple:
        moved = 0
        for p in params:
            state = opt.state[p]
            if len(state) == 0:
                state["step"] = (
                    torch.zeros((), dtype=_get_scalar_dtype(), device=p.device)
                    if on_cuda or group["capturable"]
                    else torch.tensor(0.0, dtype=_get_scalar_dtype())
                )
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                if amsgrad:
                    state["max_exp_avg_sq"] = torch.zeros_like(
                        p, memory_format=torch.preserve_format
                    )
            elif on_cuda and state["step"].device != p.device:
                state["step"] = state["step"].to(p.device)
                moved += 1
        if on_cuda and not group["capturable"]:
            group["capturable"] = True
            moves = f" ({moved} moved there from the CPU)" if moved else ""
            prepared.notes.append(
                "on CUDA the kernels read the step counts on the GPU: capturable=True was set "
                "on the param group and its state['step'] tensors live on the parameters' "
                f"device{moves}, as torch.compile does; eager steps, state_dict() and "
                "load_state_dict() of the optimizer keep working with them"
            )
        states = [opt.state[p] for p in params]
        prepared.state += [s[k] for s in states for k in keys] + [lr]
        beta1, beta2 = group["betas"]
        # older torch versions have AdamW as a class of its own, without this key
        decoupled = group.get("decoupled_weight_decay", type(opt) is torch.optim.AdamW)
        tensors = [[s[k] for s in states] for k in ("exp_avg", "exp_avg_sq", "step")]
        return (
            params, [p.grad for p in params], tensors[0], tensors[1],
            [s["max_exp_avg_sq"] for s in states] if amsgrad else [], tensors[2], lr,
            beta1, beta2, group["weight_decay"], group["eps"], amsgrad, group["maximize"],
            decoupled,
        )  # fmt: skip

    return plan


def _lr_tensor(
    opt: torch.optim.Optimizer, index: int, lr: float, device: torch.device
) -> torch.Tensor:
    """The group's lr as a float64 0-d tensor on `device` (eager computes with the Python
    float; float64 keeps its value exactly), written only when the value changed."""
    per_group = _LR.setdefault(opt, {})
    held = per_group.get(index)
    if held is None or held[1].device != device:
        held = per_group[index] = [lr, torch.tensor(lr, dtype=torch.float64, device=device)]
    elif held[0] != lr:
        held[1].fill_(lr)
        held[0] = lr
    return held[1]


def _annotate(ctx: CompileContext, fn: Callable, notes: list[str]) -> None:
    record = ctx.state_for(fn).record
    changed = False
    for entry in record.entries:
        if entry.graph is None:
            continue
        for note in notes:
            if note not in entry.graph.notes:
                entry.graph.notes.append(note)
                changed = True
    if changed:
        records.notify(record)


def _warn(ctx: CompileContext, fn: Callable, text: str) -> None:
    record = ctx.state_for(fn).record
    if text not in record.warnings:
        record.warnings.append(text)
        records.notify(record)
