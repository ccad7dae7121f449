"""`opt.zero_grad()` made at a graph break, as one loop over the parameters.

`optimizer.zero_grad()` ends a graph (compiler/tracer/calls.py) and the frame evaluator then
makes the call for real. torch's own zero_grad with set_to_none=True sets each parameter's
`.grad` to None inside a `record_function` range, whose profiler ops and the loop's
per-gradient `if set_to_none` add ~20% to the loop (densenet121's 364 parameters: 59 µs
against 48 on a 2-core EPYC; benchmarks/optim_host.py). Here the loop runs alone (the same
reads and writes, in the same order) when nothing can tell it from torch's:

- the function called is torch.optim.Optimizer.zero_grad itself (a subclass's override, or
  a wrapper set on the instance, runs as it is), with set_to_none exactly True (torch
  evaluates it again for each gradient; anything but True runs torch's, set_to_none=False
  and its foreach path included);
- no profiler is running (torch's profiler and the cupti monitor record the
  `Optimizer.zero_grad#<class>.zero_grad` range torch opens, and torch's own call keeps
  it), and no torch function or dispatch mode is active (either would see the range's
  profiler ops).

torch's zero_grad also patches the class's step with its profiling wrapper on a first call
(`_patch_step_function`), which is kept; it reads `defaults` for foreach, which only the
set_to_none=False path uses. (The same loop in C++, through the same attribute protocol,
was measured ~8% faster than this one: not worth a second copy.)
"""

from __future__ import annotations

import types
from typing import Any

import torch
from torch.autograd import profiler as autograd_profiler

_ZERO_GRAD = torch.optim.Optimizer.zero_grad


def zero_grad_call(target: Any, args: list, kwargs: dict) -> torch.optim.Optimizer | None:
    """The optimizer of `target(*args, **kwargs)` when that call is torch's zero_grad with
    set_to_none=True and `clear_grads` may make it instead (see the module docstring)."""
    if isinstance(target, types.MethodType):
        if target.__func__ is not _ZERO_GRAD:
            return None
        opt, rest = target.__self__, args
    elif target is _ZERO_GRAD and args:
        opt, rest = args[0], args[1:]
    else:
        return None
    if not isinstance(opt, torch.optim.Optimizer):
        return None
    if kwargs:
        if rest or len(kwargs) != 1 or kwargs.get("set_to_none", False) is not True:
            return None
    elif rest and (len(rest) != 1 or rest[0] is not True):
        return None
    if (
        torch._C._autograd._profiler_enabled()
        or getattr(autograd_profiler, "_active_cupti_profiler_observer", None) is not None
        or torch._C._is_torch_function_mode_enabled()
        or torch._C._len_torch_dispatch_stack()
    ):
        return None
    return opt


def clear_grads(opt: torch.optim.Optimizer) -> None:
    """What torch's zero_grad(set_to_none=True) does, for an optimizer `zero_grad_call`
    returned."""
    if not hasattr(opt, "_zero_grad_profile_name"):
        opt._patch_step_function()
    for group in opt.param_groups:
        for p in group["params"]:
            if p.grad is not None:
                p.grad = None
