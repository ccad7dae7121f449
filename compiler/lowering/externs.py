"""Ops that run as extern aten calls by design: matrix multiplies, convolution, attention.

cuBLAS/cuDNN (and MKL/oneDNN on CPU) beat generated code for these; the scheduler fuses the
pointwise work around them (bias, activation, batch norm) into neighbouring kernels.
"""

from __future__ import annotations

import torch

from compiler.ir.nodes import Layout
from compiler.lowering.core import LoweringContext, channels_last_strides, register_lowering

aten = torch.ops.aten

EXTERN_OPS = [
    aten.mm,
    aten.bmm,
    aten.addmm,
    aten.baddbmm,
    aten._scaled_dot_product_flash_attention,
    aten._scaled_dot_product_efficient_attention,
    aten._scaled_dot_product_cudnn_attention,
    aten._scaled_dot_product_flash_attention_for_cpu,
]


@register_lowering(*EXTERN_OPS)
def extern(ctx: LoweringContext, node, *args, **kwargs):
    return ctx.extern(node.target, args, kwargs, note=False)


@register_lowering(aten.convolution)
def convolution(ctx: LoweringContext, node, x, weight, *args, **kwargs):
    """In a channels-last graph (see LoweringContext.channels_last) a 2-d convolution takes
    its input and weight NHWC, copying them if they are not, and oneDNN then returns NHWC."""
    if not (ctx.channels_last and len(x.size) == 4 and len(weight.size) == 4):
        return ctx.extern(node.target, (x, weight, *args), kwargs, note=False)
    x = ctx.require_strides(x, channels_last_strides(x.size))
    weight = ctx.require_strides(weight, channels_last_strides(weight.size))
    size = tuple(ctx.meta().shape)
    layout = Layout(size, channels_last_strides(size), ctx.meta().dtype, ctx.device)
    return ctx.extern(node.target, (x, weight, *args), kwargs, note=False, layouts=[layout])
