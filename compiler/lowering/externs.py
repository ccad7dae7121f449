"""Ops that run as extern aten calls by design: matrix multiplies, convolution, attention.

cuBLAS/cuDNN (and MKL/oneDNN on CPU) beat generated code for these; the scheduler fuses the
pointwise work around them (bias, activation, batch norm) into neighbouring kernels.
"""

from __future__ import annotations

import torch

from compiler.lowering.core import LoweringContext, register_lowering

aten = torch.ops.aten

EXTERN_OPS = [
    aten.mm,
    aten.bmm,
    aten.addmm,
    aten.baddbmm,
    aten.convolution,
    aten._scaled_dot_product_flash_attention,
    aten._scaled_dot_product_efficient_attention,
    aten._scaled_dot_product_cudnn_attention,
    aten._scaled_dot_product_flash_attention_for_cpu,
]


@register_lowering(*EXTERN_OPS)
def extern(ctx: LoweringContext, node, *args, **kwargs):
    return ctx.extern(node.target, args, kwargs, note=False)
