"""Ops that run as extern aten calls by design: matrix multiplies, convolution, attention.

cuBLAS/cuDNN (and MKL/oneDNN on CPU) beat generated code for these; the scheduler fuses the
pointwise work around them (bias, activation, batch norm) into neighbouring kernels.
"""

from __future__ import annotations

import math

import torch

from compiler.ir.index import contiguous_strides
from compiler.ir.nodes import Layout
from compiler.lowering.core import (
    LoweringContext,
    TensorValue,
    channels_last_strides,
    register_lowering,
    same_strides,
)

aten = torch.ops.aten

EXTERN_OPS = [
    aten.mm,
    aten.bmm,
    aten.addmm,
    aten.baddbmm,
]

# CUDA's attention kernels and their backwards, which read every tensor along a unit-stride
# last dimension.
CUDA_ATTENTION_OPS = [
    aten._scaled_dot_product_flash_attention,
    aten._scaled_dot_product_efficient_attention,
    aten._scaled_dot_product_cudnn_attention,
    aten._scaled_dot_product_flash_attention_backward,
    aten._scaled_dot_product_efficient_attention_backward,
    aten._scaled_dot_product_cudnn_attention_backward,
]


# The attention kernel each op is, named as torch's SDPA backends are: the one eager's
# scaled_dot_product_attention picked for these inputs (the graph is traced through its
# dispatch), which the record names so that a slow step's attention is no guess.
ATTENTION_KERNELS = {
    aten._scaled_dot_product_flash_attention_for_cpu: "FLASH_ATTENTION (CPU)",
    aten._scaled_dot_product_flash_attention: "FLASH_ATTENTION",
    aten._scaled_dot_product_efficient_attention: "EFFICIENT_ATTENTION",
    aten._scaled_dot_product_cudnn_attention: "CUDNN_ATTENTION",
    aten._scaled_dot_product_flash_attention_backward: "FLASH_ATTENTION",
    aten._scaled_dot_product_efficient_attention_backward: "EFFICIENT_ATTENTION",
    aten._scaled_dot_product_cudnn_attention_backward: "CUDNN_ATTENTION",
}


def _note_attention(ctx: LoweringContext, op) -> None:
    packet = getattr(op, "overloadpacket", op)
    kernel = ATTENTION_KERNELS.get(packet)
    if kernel is None:
        return
    side = "backward" if "backward" in packet.__name__ else "forward"
    note = (
        f"attention {side}: torch's {kernel} kernel (aten.{packet.__name__}), the one eager's "
        "scaled_dot_product_attention picks for these inputs"
    )
    if note not in ctx.notes:
        ctx.notes.append(note)


@register_lowering(*EXTERN_OPS)
def extern(ctx: LoweringContext, node, *args, **kwargs):
    _note_attention(ctx, node.target)
    return ctx.extern(node.target, args, kwargs, note=False)


@register_lowering(*CUDA_ATTENTION_OPS)
def cuda_attention(ctx: LoweringContext, node, *args, **kwargs):
    """Each tensor in the strides eager called the op with, where ours differ: these kernels
    read along a unit-stride last dimension ("query: last dimension must be contiguous"),
    and a channels-last graph lays computed 4-d values out NHWC, which puts the heads'
    dimension last in memory (timm's coatnet, maxvit and eva02 hit it)."""
    args = tuple(_as_traced(ctx, a, fx) for a, fx in zip(args, node.args))
    _note_attention(ctx, node.target)
    return ctx.extern(node.target, args, kwargs, note=False)


@register_lowering(aten._scaled_dot_product_flash_attention_for_cpu)
def cpu_attention(ctx: LoweringContext, node, query, key, value, *args, **kwargs):
    """The query, key and value along a unit-stride last dimension: eager's dispatch picks
    this kernel only for such inputs, and it reads other strides wrongly (a query of strides
    (512, 128, 1, 16) gives results 1.5 off). A view that has one (the heads of a linear's
    output, permuted) goes in as it is; the mask may be strided any way."""
    query, key, value = (_unit_last_stride(ctx, t) for t in (query, key, value))
    _note_attention(ctx, node.target)
    return ctx.extern(node.target, (query, key, value, *args), kwargs, note=False)


def _unit_last_stride(ctx: LoweringContext, tv):
    if not isinstance(tv, TensorValue):
        return tv
    if tv.view is not None and (tv.size[-1] == 1 or tv.view.layout.stride[-1] == 1):
        return tv
    return ctx.require_strides(tv, contiguous_strides(tv.size))


def _as_traced(ctx: LoweringContext, a, fx_arg):
    meta = getattr(fx_arg, "meta", {}).get("val")
    if not (isinstance(a, TensorValue) and isinstance(meta, torch.Tensor)):
        return a
    return ctx.require_strides(a, tuple(meta.stride()))


# A convolution runs NCHW when its weight has this many times the input's elements, and
# at least WEIGHT_HEAVY_MIN (below it the copy saved is smaller than the conversions of
# activations it costs, as in densenet's late 3x3 convolutions).
WEIGHT_HEAVY_RATIO = 4
WEIGHT_HEAVY_MIN = 1 << 18


@register_lowering(aten.convolution)
def convolution(ctx: LoweringContext, node, x, weight, *args, **kwargs):
    """In a channels-last graph (see LoweringContext.channels_last) a 2-d convolution takes
    its input and weight NHWC, copying them if they are not, and oneDNN or cuDNN then returns
    NHWC."""
    if not (ctx.channels_last and len(x.size) == 4 and len(weight.size) == 4):
        return ctx.extern(node.target, (x, weight, *args), kwargs, note=False)
    cl_weight = channels_last_strides(weight.size)
    if _weight_heavy_on_cpu(ctx, x, weight):
        # Weights much larger than the activations (late stages: 512x512x3x3 on 4x4
        # pixels): oneDNN reorders the weight into its own blocked format in either layout,
        # so NCHW saves copying the weight to NHWC first, for a copy of small activations.
        x = ctx.require_strides(x, contiguous_strides(x.size))
        size = tuple(ctx.meta().shape)
        layout = Layout(size, contiguous_strides(size), ctx.meta().dtype, ctx.device)
        return ctx.extern(node.target, (x, weight, *args), kwargs, note=False, layouts=[layout])
    x = ctx.require_strides(x, channels_last_strides(x.size))
    # cuDNN and oneDNN take the weight in the input's format. Given an NCHW weight, aten
    # would copy it itself inside every call (a clone of ~30 us of host time on CUDA); our
    # copy kernel costs one launch, and same-shaped small ones share it.
    weight = ctx.require_strides(weight, cl_weight)
    size = tuple(ctx.meta().shape)
    layout = Layout(size, channels_last_strides(size), ctx.meta().dtype, ctx.device)
    return ctx.extern(node.target, (x, weight, *args), kwargs, note=False, layouts=[layout])


def _weight_heavy_on_cpu(ctx: LoweringContext, x, weight) -> bool:
    return (
        ctx.device.type == "cpu"
        and math.prod(weight.size) >= max(WEIGHT_HEAVY_RATIO * math.prod(x.size), WEIGHT_HEAVY_MIN)
        and weight.view is not None
        and not same_strides(
            weight.size, weight.view.layout.stride, channels_last_strides(weight.size)
        )
    )


@register_lowering(aten.convolution_backward)
def convolution_backward(ctx: LoweringContext, node, grad_out, x, weight, *args, **kwargs):
    """A training backward's convolution in a channels-last graph: its gradient and saved
    input NHWC, as the forward ran (cuDNN would otherwise transpose both to NHWC and the
    input's gradient back); NCHW where the CPU forward ran a weight-heavy one NCHW."""
    if not (ctx.channels_last and len(x.size) == 4 and len(weight.size) == 4):
        return ctx.extern(node.target, (grad_out, x, weight, *args), kwargs, note=False)
    heavy = _weight_heavy_on_cpu(ctx, x, weight)
    strides = contiguous_strides if heavy else channels_last_strides
    grad_out = ctx.require_strides(grad_out, strides(grad_out.size))
    x = ctx.require_strides(x, strides(x.size))
    if not heavy:
        weight = ctx.require_strides(weight, channels_last_strides(weight.size))
    # The input's gradient comes back laid out as the input, the weight's as the weight,
    # the bias's contiguous.
    own = {0: x, 1: weight}
    layouts = []
    for k, v in enumerate(ctx.meta()):
        if isinstance(v, torch.Tensor):
            like = own.get(k)
            size = tuple(v.shape)
            if like is not None and like.view is not None and like.size == size:
                stride = like.view.layout.stride
            else:
                stride = contiguous_strides(size)
            layouts.append(Layout(size, tuple(stride), v.dtype, ctx.device))
    return ctx.extern(
        node.target, (grad_out, x, weight, *args), kwargs, note=False, layouts=layouts
    )
