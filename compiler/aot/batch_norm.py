"""Batch norm's decompositions, written for tracing speed.

A CNN has a batch norm per convolution (densenet121: 121), and torch._decomp's
native_batch_norm and native_batch_norm_backward are the most expensive entries of our
table to trace: they broadcast each per-channel vector with a chain of `unsqueeze`s (two or
three per vector for a 4-d input), copy the running statistics with `.to(copy=True)` and
make the CPU's empty save tensors with `new_zeros`, each one more op (some two, through
nested decompositions) dispatched through make_fx, fake tensors and functionalize at about
half a millisecond apiece. These versions emit the same aten arithmetic in the same order,
so the values are bit for bit the reference's, with one `view` per broadcast vector and no
casts or copies that change nothing. They cover what models use: float32 or float64
tensors all of one dtype (the reference computes in that dtype too), 1-d per-channel
vectors and static shapes; anything else goes to the reference decomposition.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

aten = torch.ops.aten

_DTYPES = (torch.float32, torch.float64)


def _applies(input: torch.Tensor, vectors: Sequence[torch.Tensor | None]) -> bool:
    """The case these decompositions cover (see the module docstring)."""
    if input.dtype not in _DTYPES or input.dim() < 2:
        return False
    if not all(type(d) is int for d in input.shape):
        return False
    return all(v is None or (v.dtype == input.dtype and v.dim() == 1) for v in vectors)


def _channels(x: torch.Tensor, input: torch.Tensor, leading: bool = False) -> torch.Tensor:
    """Per-channel vector `x` shaped to broadcast against `input` (dim 1 is the channel):
    [C, 1, 1] for a 4-d input, or [1, C, 1, 1] with `leading` as the backward reference
    shapes it."""
    shape = [x.shape[0]] + [1] * (input.dim() - 2)
    if leading:
        shape = [1] + shape
    if list(x.shape) == shape:
        return x  # a 2-d input's forward broadcasts [C] as it is
    return aten.view.default(x, shape)


def native_batch_norm(
    reference: Callable,
    input: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None,
    training: bool,
    momentum: float,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """torch._decomp's native_batch_norm (native_batch_norm_helper, not functional: the
    running statistics are updated with copy_, which functionalize turns into the graph's
    trailing write-back)."""
    args = (input, weight, bias, running_mean, running_var, training, momentum, eps)
    stats = (running_mean, running_var)
    if not _applies(input, (weight, bias, *stats)) or (
        not training and any(s is None for s in stats)
    ):
        return reference(*args)
    dims = [0, *range(2, input.dim())]
    if training:
        biased_var, mean = aten.var_mean.correction(input, dims, correction=0, keepdim=True)
        rstd = aten.rsqrt.default(aten.add.Tensor(biased_var, eps))
        output = aten.mul.Tensor(aten.sub.Tensor(input, mean), rstd)
        save_mean = aten.squeeze.dims(mean, dims)
        save_rstd = aten.squeeze.dims(rstd, dims)
        if running_mean is not None:
            new_mean = aten.add.Tensor(
                aten.mul.Tensor(save_mean, momentum),
                aten.mul.Tensor(running_mean, 1 - momentum),
            )
            aten.copy_.default(running_mean, new_mean)
        if running_var is not None:
            n = input.numel() / input.shape[1]
            unbiased = aten.mul.Tensor(aten.squeeze.dims(biased_var, dims), n / (n - 1))
            new_var = aten.add.Tensor(
                aten.mul.Tensor(unbiased, momentum),
                aten.mul.Tensor(running_var, 1 - momentum),
            )
            aten.copy_.default(running_var, new_var)
    else:
        invstd = aten.rsqrt.default(aten.add.Tensor(running_var, eps))
        if input.device.type != "cpu":
            save_mean, save_rstd = aten.clone.default(running_mean), invstd
        else:  # the CPU kernel returns empty save tensors in eval mode
            save_mean, save_rstd = (
                aten.full.default(
                    [0],
                    0,
                    dtype=input.dtype,
                    layout=torch.strided,
                    device=input.device,
                    pin_memory=False,
                )
                for _ in range(2)
            )
        centred = aten.sub.Tensor(input, _channels(running_mean, input))
        output = aten.mul.Tensor(centred, _channels(invstd, input))
    if weight is not None:
        output = aten.mul.Tensor(output, _channels(weight, input))
    if bias is not None:
        output = aten.add.Tensor(output, _channels(bias, input))
    return output, save_mean, save_rstd


def native_batch_norm_backward(
    reference: Callable,
    grad_out: torch.Tensor,
    input: torch.Tensor,
    weight: torch.Tensor | None,
    running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None,
    save_mean: torch.Tensor | None,
    save_invstd: torch.Tensor | None,
    train: bool,
    eps: float,
    output_mask: list[bool],
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """torch._decomp's native_batch_norm_backward."""
    args = (grad_out, input, weight, running_mean, running_var, save_mean, save_invstd)
    stats = (save_mean, save_invstd) if train else (running_mean, running_var)
    if (
        not _applies(input, (weight, running_mean, running_var, save_mean, save_invstd))
        or grad_out.dtype != input.dtype
        or any(s is None for s in stats)
    ):
        return reference(*args, train, eps, output_mask)
    if train:
        mean, invstd = save_mean, save_invstd
    else:
        mean = running_mean
        invstd = aten.rsqrt.default(aten.add.Tensor(running_var, eps))
    axes = [i for i in range(input.dim()) if i != 1]
    norm = 1.0 / (input.numel() / input.shape[1])
    mean_b = _channels(mean, input, leading=True)
    grad_output_sum = aten.sum.dim_IntList(grad_out, axes)
    dot_p = aten.sum.dim_IntList(aten.mul.Tensor(grad_out, aten.sub.Tensor(input, mean_b)), axes)
    grad_mean = _channels(aten.mul.Tensor(grad_output_sum, norm), input, leading=True)
    proj_scale = _channels(
        aten.mul.Tensor(aten.mul.Tensor(dot_p, norm), aten.mul.Tensor(invstd, invstd)),
        input,
        leading=True,
    )
    if weight is None:
        grad_scale = aten.mul.Tensor(_channels(invstd, input, leading=True), 1.0)
    else:
        grad_scale = _channels(aten.mul.Tensor(invstd, weight), input, leading=True)
    if train:
        proj = aten.mul.Tensor(aten.sub.Tensor(input, mean_b), proj_scale)
        centred = aten.sub.Tensor(aten.sub.Tensor(grad_out, proj), grad_mean)
        grad_input = aten.mul.Tensor(centred, grad_scale)
    else:
        grad_input = aten.mul.Tensor(grad_out, grad_scale)
    grad_weight = aten.mul.Tensor(dot_p, invstd) if output_mask[1] else None
    grad_bias = grad_output_sum if output_mask[2] else None
    return grad_input, grad_weight, grad_bias
