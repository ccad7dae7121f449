"""Which optimizer steps compiler/optim compiles, and why the others run torch.optim's eager
update.

A step is recognised where the frame evaluator makes a call for real at a graph break: the
optimizer class's `step` (torch.optim wraps it in its profiling and hook wrapper) called
on an optimizer, a bound `opt.step`, or the wrapper an LR scheduler puts on the instance
(`opt.step` once a scheduler is attached), which also marks the optimizer as stepped.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.optim import optimizer as optimizer_module

from compiler.optim.functional import FUNCTIONS

# Exactly these classes: a subclass may change its step in any way.
SUPPORTED = tuple(FUNCTIONS)


@dataclass
class StepCall:
    """A call of an optimizer's step, as the evaluator was about to make it."""

    optimizer: torch.optim.Optimizer
    target: Callable  # what the evaluator would have called
    args: list  # the call's arguments (the optimizer included where `target` needs it)
    kwargs: dict = field(default_factory=dict)
    from_scheduler: bool = False  # through an LR scheduler's wrapper (see module docstring)

    def eager(self) -> Any:
        return self.target(*self.args, **self.kwargs)

    @property
    def step_args(self) -> tuple[list, dict]:
        """The arguments step() itself gets (a closure, if any), the optimizer left out."""
        args = self.args[1:] if self.args and self.args[0] is self.optimizer else self.args
        return args, self.kwargs


def step_call(target: Any, args: list, kwargs: dict) -> StepCall | None:
    """The optimizer step `target(*args, **kwargs)` makes, if it is one."""
    if isinstance(target, types.MethodType):
        opt = target.__self__
        if isinstance(opt, torch.optim.Optimizer) and _is_class_step(opt, target.__func__):
            return StepCall(opt, target, args, kwargs)
        return None
    if args and isinstance(args[0], torch.optim.Optimizer):
        if _is_class_step(args[0], target):
            return StepCall(args[0], target, args, kwargs)
        return None
    opt = scheduled_optimizer(target)
    if opt is not None:
        return StepCall(opt, target, args, kwargs, from_scheduler=True)
    return None


def _is_class_step(opt: torch.optim.Optimizer, fn: Any) -> bool:
    return fn is getattr(type(opt), "step", None)


def scheduled_optimizer(fn: Any) -> torch.optim.Optimizer | None:
    """The optimizer whose class step `fn` wraps, when `fn` is the wrapper an LR scheduler
    set as `opt.step` (torch/optim/lr_scheduler.py: `opt_ref` and `func` in its closure)."""
    if not getattr(fn, "_wrapped_by_lr_sched", False) or not isinstance(fn, types.FunctionType):
        return None
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
    try:
        opt = cells["opt_ref"].cell_contents()
        func = cells["func"].cell_contents
    except (KeyError, ValueError, TypeError):
        return None
    if isinstance(opt, torch.optim.Optimizer) and _is_class_step(opt, func):
        return opt
    return None


def why_eager(opt: torch.optim.Optimizer, args: list, kwargs: dict) -> str | None:
    """Why this step must run torch.optim's own update; None when ours can run it. What is
    checked here holds for the optimizer as a whole; parameters are checked in step.py."""
    cls = type(opt)
    if cls not in SUPPORTED:
        if isinstance(opt, SUPPORTED):
            return f"{cls.__qualname__} subclasses torch.optim.{cls.__mro__[1].__name__}, and its step may differ"
        return f"only torch.optim.SGD, Adam and AdamW steps are compiled, not {cls.__qualname__}"
    if args or kwargs:
        return "step() was given a closure"
    if (
        opt._optimizer_step_pre_hooks
        or opt._optimizer_step_post_hooks
        or optimizer_module._global_optimizer_pre_hooks
        or optimizer_module._global_optimizer_post_hooks
    ):
        return "the optimizer has step hooks, which torch.optim's step calls"
    if getattr(opt, "grad_scale", None) is not None or getattr(opt, "found_inf", None) is not None:
        return "a GradScaler set grad_scale/found_inf on the optimizer"
    if opt.defaults.get("differentiable"):
        return "differentiable=True"
    for group in opt.param_groups:
        if group.get("differentiable"):
            return "differentiable=True"
        if group.get("fused"):
            return "fused=True (torch.optim's fused kernels)"
        tensors = [
            k
            for k in ("lr", "weight_decay", "momentum", "dampening")
            if torch.is_tensor(group.get(k))
        ]
        tensors += ["betas"] * any(torch.is_tensor(b) for b in group.get("betas", ()))
        if tensors:
            return f"{tensors[0]} is a tensor"
    return None


def trace_reason(opt: torch.optim.Optimizer) -> str:
    """The graph break reason for `opt.step()` in traced code: what happens at the break."""
    name = type(opt).__name__
    why = why_eager(opt, [], {})
    if why is None:
        return (
            f"optimizer.step() ends the graph: {name}'s update runs as a compiled optimizer "
            f"step of its own (compiler/optim, '{FUNCTIONS[type(opt)].__name__}' in this report: its "
            "graph, kernels and guards), on the gradients the compiled backward wrote"
        )
    return (
        f"optimizer.step() runs in Python: torch.optim's eager update runs between the "
        f"compiled graphs, because {why}"
    )
