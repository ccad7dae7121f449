"""Running a recognised optimizer step through the compiler instead of torch.optim.

The frame evaluator hands over `opt.step()` made at a graph break (support.step_call). When
the optimizer and its parameters are supported, the state torch.optim would create lazily at
this step is created here as its `_init_group` creates it (SGD's momentum buffers as zeros,
which this step's update turns into the gradient torch.optim copies in), and the groups are
handed to the functional update (functional.py) through the frame evaluator, which compiles
it (guards, recompiles, cache limit and records as for any function) and runs it under
no_grad, as torch.optim's step runs. Anything else runs torch.optim's own step, and the reason
is kept in the functional update's function record (`warnings`).

The lists handed over (parameters, optimizer state) are kept per optimizer and handed over
again at the next step while every object they were built from is the same object
(`_StepPlan`: the param groups, each group's params list and items, opt.state's entries and
each state tensor) and the same parameters have gradients; the gradients, the lr and the
other hyperparameters are read anew, and each parameter and gradient is checked as afresh.
This is host work a training step pays per parameter (on the H100 such a step is host-bound).

On CUDA the compiled kernels read the step counts, so Adam's `state['step']` tensors must
live on the parameters' device: as torch.compile does, they are moved there and the param
group gets `capturable=True`, which keeps eager steps, `state_dict()` and `load_state_dict()`
of that optimizer consistent with them. On the CPU they stay where torch.optim put them.
"""

from __future__ import annotations

import contextlib
import operator
import weakref
from dataclasses import dataclass, field
from itertools import repeat
from typing import TYPE_CHECKING, Any, Callable

import torch
from torch.optim.optimizer import _get_scalar_dtype

from compiler import config, controls, records
from compiler.optim.functional import FUNCTIONS, adam_step, sgd_step
from compiler.optim.support import StepCall, why_eager
from compiler.runtime import cpp_ext
from compiler.support.static import is_static_address, mark_static_address

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
# Per optimizer: what its last compiled step was built from (_StepPlan).
_PLANS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@dataclass
class _Prepared:
    groups: list[tuple] = field(default_factory=list)  # the functional update's argument
    state: list[torch.Tensor] = field(default_factory=list)  # optimizer state and lr tensors
    notes: list[str] = field(default_factory=list)  # state changes made on the way


# The optimizer state each group tuple lists after params and grads, in its order.
_STATE_KEYS = {
    sgd_step: ("momentum_buffer",),
    adam_step: ("exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"),
}


@dataclass
class _GroupPlan:
    """One param group as the last step built its tuple."""

    group: dict
    params_list: list  # group["params"], the list object
    params: tuple  # its items then
    dtypes: tuple  # each one's dtype where it had a gradient, else None
    lists: tuple  # the tuple's params and state lists (empty without a gradient)
    state_dicts: list  # opt.state[p] of each parameter with a gradient
    state_lists: tuple  # (key, its state tensors per parameter) of each non-empty state list
    structure: tuple  # what decides which state lists exist (momentum != 0, amsgrad)
    lr: torch.Tensor | None


@dataclass
class _StepPlan:
    """What an optimizer's last compiled step was built from, for `_reuse`: every object
    its lists came from, held by identity, so that any write that could change a list
    (a new param group, a replaced parameter, a gradient set to None or appearing, state
    reset or loaded, a state tensor replaced, momentum or amsgrad switched) shows as a
    different object and the step is prepared afresh."""

    fn: Callable
    mode: str | None
    device: torch.device
    param_groups: list  # opt.param_groups, the list object
    groups: list[_GroupPlan]
    state: dict  # opt.state, the dict object, with its keys and values then
    state_keys: list
    state_values: list

    @staticmethod
    def of(
        opt: torch.optim.Optimizer,
        fn: Callable,
        mode: str | None,
        device: torch.device,
        active: list[tuple[int, dict, list]],
        tuples: list[tuple],
    ) -> _StepPlan:
        by_index = {index: t for (index, _, _), t in zip(active, tuples)}
        groups = []
        for index, group in enumerate(opt.param_groups):
            t = by_index.get(index)
            params = tuple(group["params"])
            with_grad = set(map(id, t[0])) if t is not None else set()
            lists = (t[0], *t[2 : 2 + len(_STATE_KEYS[fn])]) if t is not None else ()
            groups.append(
                _GroupPlan(
                    group=group,
                    params_list=group["params"],
                    params=params,
                    dtypes=tuple(p.dtype if id(p) in with_grad else None for p in params),
                    lists=lists,
                    # .get: a lookup of opt.state (a defaultdict) would add empty states
                    state_dicts=[opt.state.get(p) for p in t[0]] if t is not None else [],
                    state_lists=tuple(
                        (key, tensors)
                        for key, tensors in zip(_STATE_KEYS[fn], lists[1:])
                        if tensors
                    ),
                    structure=_structure(fn, group),
                    lr=t[2 + len(_STATE_KEYS[fn])] if t is not None else None,
                )
            )
        state = opt.state
        return _StepPlan(
            fn, mode, device, opt.param_groups, groups, state, list(state), list(state.values())
        )


def _structure(fn: Callable, group: dict) -> tuple:
    return (group["momentum"] != 0,) if fn is sgd_step else (group["amsgrad"],)


def _reuse(opt: torch.optim.Optimizer, plan: _StepPlan) -> list[tuple] | None:
    """The group tuples of `plan` with this step's gradients, lr tensors and constants; None
    where anything the lists came from changed. Checks what `_prepare_afresh` checks of each
    parameter and gradient (those are read anew: `p.data = ...` changes a parameter in place),
    and compares the rest by identity."""
    state = opt.state
    if (
        opt.param_groups is not plan.param_groups
        or len(plan.param_groups) != len(plan.groups)
        or state is not plan.state
        or len(state) != len(plan.state_keys)
        or not all(map(operator.is_, state, plan.state_keys))
        or not all(map(operator.is_, state.values(), plan.state_values))
    ):
        return None
    device, hyper = plan.device, _HYPER[plan.fn]
    tuples = []
    for index, (group, gp) in enumerate(zip(plan.param_groups, plan.groups)):
        params = group["params"]
        if (
            group is not gp.group
            or params is not gp.params_list
            or len(params) != len(gp.params)
            or not all(map(operator.is_, params, gp.params))
            or _structure(plan.fn, group) != gp.structure
        ):
            return None
        grads = _group_grads(params, gp, device)
        if grads is None:
            return None
        if not grads:
            continue
        if device.type == "cuda" and plan.fn is adam_step and not group["capturable"]:
            return None  # set again, with its note, by _prepare_afresh
        lr = _lr_tensor(opt, index, group["lr"], device)
        if lr is not gp.lr:
            return None
        tuples.append((gp.lists[0], grads, *gp.lists[1:], lr, *hyper(opt, group)))
    return tuples


def _group_grads(params: list, gp: _GroupPlan, device: torch.device) -> list | None:
    """The gradients of a group's parameters where each parameter and gradient passes the
    checks of `_prepare_afresh` as the plan found them (the same dtype, strided, on `device`),
    the same parameters have gradients and each listed state tensor is still in its state
    dict; None otherwise. An empty list (no gradient in the group) skips the state checks.
    The extension's `group_grads` makes the same checks in one call (densenet121's 364
    parameters: ~3.5x faster), where no torch function mode is active (its hooks would see
    the reads) and for exact torch.Tensor and nn.Parameter only (it answers NotImplemented
    for anything else, and the checks run here)."""
    group_grads = cpp_ext.group_grads_function()
    if group_grads is not None and not torch._C._is_torch_function_mode_enabled():
        grads = group_grads(params, gp.dtypes, device, gp.state_dicts, gp.state_lists)
        if grads is not NotImplemented:
            return grads
    strided = torch.strided
    grads = []
    for p, dtype in zip(params, gp.dtypes):
        g = p.grad
        if g is None:
            if dtype is not None:
                return None
        elif (
            dtype is None
            or g.dtype is not dtype
            or p.dtype is not dtype
            or g.layout is not strided
            or p.layout is not strided
            or g.device != device
            or p.device != device
        ):
            return None
        else:
            grads.append(g)
    if not grads:
        return grads
    for key, tensors in gp.state_lists:
        if not all(map(operator.is_, map(dict.get, gp.state_dicts, repeat(key)), tensors)):
            return None
    return grads


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
        # the profiler range torch.optim's step opens, by the C++ context manager: the same
        # event in a trace, for ~0.4 µs a step instead of record_function's ~6
        with torch._C._profiler._RecordFunctionFast(name), torch.no_grad(), _combining():
            run_function(ctx, fn, (prepared.groups,), {})
        _annotate(ctx, fn, [_compiled_note(fn), *prepared.notes])
    return None  # step() returns the closure's loss, and there is no closure


def _combining() -> contextlib.AbstractContextManager:
    """Under config.combo_kernels="auto", the step's per-parameter updates launch as combined
    kernels (compiler/config.py says why only here)."""
    if config.combo_kernels == "auto":
        return config.patch(combo_kernels=True)
    return contextlib.nullcontext()


def _prepare(opt: torch.optim.Optimizer, fn: Callable, mode: str | None) -> _Prepared:
    """The functional update's groups, with the state torch.optim would create at this step
    created first: the last step's lists again where `_reuse` finds nothing they were built
    from changed, else built afresh. Raises _Unsupported, before changing any state, for what
    only eager runs."""
    plan = _PLANS.get(opt)
    if plan is not None and plan.fn is fn and plan.mode == mode:
        groups = _reuse(opt, plan)
        if groups is not None:
            return _Prepared(groups)
    _PLANS.pop(opt, None)
    return _prepare_afresh(opt, fn, mode)


def _prepare_afresh(opt: torch.optim.Optimizer, fn: Callable, mode: str | None) -> _Prepared:
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
    _PLANS[opt] = _StepPlan.of(opt, fn, mode, device, active, prepared.groups)
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
        return (params, [p.grad for p in params], buffers, lr, *_sgd_hyper(opt, group))

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
        tensors = [[s[k] for s in states] if k in keys else [] for k in _STATE_KEYS[adam_step]]
        grads = [p.grad for p in params]
        return (params, grads, *tensors, lr, *_adam_hyper(opt, group))

    return plan


def _sgd_hyper(opt: torch.optim.Optimizer, group: dict) -> tuple:
    """SGD's constants in its group tuple: momentum, dampening, weight_decay, nesterov,
    maximize."""
    return (
        group["momentum"], group["dampening"], group["weight_decay"], group["nesterov"],
        group["maximize"],
    )  # fmt: skip


def _adam_hyper(opt: torch.optim.Optimizer, group: dict) -> tuple:
    """Adam's constants in its group tuple: beta1, beta2, weight_decay, eps, amsgrad,
    maximize, decoupled_weight_decay."""
    beta1, beta2 = group["betas"]
    # older torch versions have AdamW as a class of its own, without this key
    decoupled = group.get("decoupled_weight_decay", type(opt) is torch.optim.AdamW)
    return (
        beta1, beta2, group["weight_decay"], group["eps"], group["amsgrad"], group["maximize"],
        decoupled,
    )  # fmt: skip


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


# Each update's constants, read from the group at every step (_reuse included).
_HYPER = {sgd_step: _sgd_hyper, adam_step: _adam_hyper}


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
