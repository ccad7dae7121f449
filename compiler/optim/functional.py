"""The optimizer updates our tracer compiles: torch.optim's single-tensor SGD and Adam/AdamW
algorithms, written over lists of tensors with per-tensor torch ops.

These functions are user code to the compiler: compiler/optim/step.py calls them through the
frame evaluator, so each gets a function record of its own in `compiler.inspect`, with its
graph, kernels and guards, and recompiles like any compiled function. Every tensor is
updated in place, as torch.optim updates it; the aot stage turns each update into a new value
written back to the input, and the scheduler stores it into the input from the kernel that
computes it (compiler/scheduler/inplace.py), so a parameter's whole update is one kernel.

The learning rate is a 0-d tensor on the parameters' device (filled from the param group
before every step), so a scheduler changing it does not recompile; the other
hyperparameters are constants the graph is guarded on. Adam's step count is the state's
`step` tensor, as in torch.optim's capturable path, so no count is baked into the graph.
Its bias corrections `1 - beta ** step` are computed as `-expm1(step * log(beta))`: the
same value without the cancellation that float32 `1 - beta ** step` suffers at small steps
(eager's default path computes them in Python floats, which this matches to float32
rounding).
"""

from __future__ import annotations

import math

import torch

# One param group's share of an SGD step: params, grads, momentum buffers (empty without
# momentum), the lr tensor, then momentum, dampening, weight_decay, nesterov, maximize.
SgdGroup = tuple
# One param group's share of an Adam step: params, grads, exp_avgs, exp_avg_sqs,
# max_exp_avg_sqs (empty without amsgrad), steps, the lr tensor, then beta1, beta2,
# weight_decay, eps, amsgrad, maximize, decoupled_weight_decay (True for AdamW).
AdamGroup = tuple


def sgd_step(groups: list[SgdGroup]) -> None:
    """The compiled optimizer step of torch.optim.SGD (compiler/optim): torch.optim's
    single-tensor algorithm, for the parameters that have a gradient."""
    for group in groups:
        params, grads, momentum_buffers, lr = group[:4]
        momentum, dampening, weight_decay, nesterov, maximize = group[4:]
        for i, param in enumerate(params):
            grad = grads[i] if not maximize else -grads[i]
            if weight_decay != 0:
                grad = grad.add(param, alpha=weight_decay)
            if momentum != 0:
                buf = momentum_buffers[i]
                buf.mul_(momentum).add_(grad, alpha=1 - dampening)
                grad = grad.add(buf, alpha=momentum) if nesterov else buf
            param.sub_(grad * lr)


def adam_step(groups: list[AdamGroup]) -> None:
    """The compiled optimizer step of torch.optim.Adam and AdamW (compiler/optim):
    torch.optim's single-tensor algorithm with tensor step counts, for the parameters that
    have a gradient."""
    for group in groups:
        params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, lr = group[:7]
        beta1, beta2, weight_decay, eps, amsgrad, maximize, decoupled = group[7:]
        for i, param in enumerate(params):
            grad = grads[i] if not maximize else -grads[i]
            exp_avg, exp_avg_sq, step = exp_avgs[i], exp_avg_sqs[i], steps[i]
            step.add_(1)
            if weight_decay != 0:
                if decoupled:
                    param.mul_(1 - lr * weight_decay)
                else:
                    grad = grad.add(param, alpha=weight_decay)
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            bias_correction1 = -torch.expm1(step * math.log(beta1)) if beta1 > 0 else 1.0
            bias_correction2 = -torch.expm1(step * math.log(beta2)) if beta2 > 0 else 1.0
            step_size = lr / bias_correction1
            second = exp_avg_sq
            if amsgrad:
                max_exp_avg_sqs[i].copy_(torch.maximum(max_exp_avg_sqs[i], exp_avg_sq))
                second = max_exp_avg_sqs[i]
            denom = second.sqrt() / bias_correction2**0.5 + eps
            param.sub_(step_size * exp_avg / denom)


# The compiled step of each supported optimizer class (exactly these classes).
FUNCTIONS = {torch.optim.SGD: sgd_step, torch.optim.Adam: adam_step, torch.optim.AdamW: adam_step}
