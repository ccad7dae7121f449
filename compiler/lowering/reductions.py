"""Reductions: sum, prod, max/min (amax, amin, max.dim), argmax/argmin, any/all, and pooling
(max and average pooling as reductions over a window).

mean reaches us decomposed into sum and pointwise math; var (and so var_mean, std and batch
norm's statistics) as prims.var, which becomes a one-pass Welford reduction for emitters that
implement it (Triton), else two passes, the mean then the squared deviations from it, that
the scheduler fuses into one kernel (C++).
"""

from __future__ import annotations

import math
import operator
from typing import Any

import torch

from compiler.ir.index import Index, IndexError_, make_vars
from compiler.ir.nodes import Constant, IndexValue, Op, Value, Welford
from compiler.ir.transform import add_mask
from compiler.lowering.core import (
    LoweringContext,
    TensorValue,
    cast,
    compute_dtype,
    register_lowering,
)

aten = torch.ops.aten


def accumulate_dtype(reduction_type: str, dtype: torch.dtype) -> torch.dtype:
    if reduction_type in ("any", "all"):
        return torch.bool
    if reduction_type in ("sum", "prod") and not dtype.is_floating_point:
        return torch.int64
    return compute_dtype(dtype)


def _axes(x: TensorValue, dims: Any) -> tuple[int, ...]:
    rank = len(x.size)
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return tuple(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    return tuple(sorted({d % max(rank, 1) for d in dims})) if rank else ()


def reduce(
    ctx: LoweringContext,
    x: TensorValue,
    dims: Any,
    keepdim: bool,
    reduction_type: str,
    out_dtype: torch.dtype,
) -> TensorValue:
    axes = _axes(x, dims)
    acc = accumulate_dtype(reduction_type, x.dtype)
    if reduction_type in ("argmax", "argmin"):
        acc = compute_dtype(x.dtype)
    out = ctx.reduction(x, axes, reduction_type, out_dtype, acc)
    return _keepdim(out, x.size, axes) if keepdim else out


def _keepdim(out: TensorValue, in_size: tuple[int, ...], axes: tuple[int, ...]) -> TensorValue:
    size = tuple(1 if k in axes else s for k, s in enumerate(in_size))

    def loader(idx: tuple) -> Value:
        return out.load(tuple(i for k, i in enumerate(idx) if k not in axes))

    view = None
    if out.view is not None:
        lay = out.view.layout
        strides, it = [], iter(lay.stride)
        for k in range(len(in_size)):
            strides.append(0 if k in axes else next(it))
        view = type(out.view)(
            out.view.buf, type(lay)(size, tuple(strides), lay.dtype, lay.device, lay.offset)
        )
    return TensorValue(size, out.dtype, loader, view)


@register_lowering(aten.sum)
def sum_(
    ctx: LoweringContext,
    node,
    x: TensorValue,
    dims: Any = None,
    keepdim: bool = False,
    *,
    dtype=None,
):
    if dtype is not None:
        x = TensorValue(x.size, dtype, lambda idx, x=x: cast(x.load(idx), dtype), None)
    return reduce(ctx, x, dims, keepdim, "sum", ctx.meta().dtype)


@register_lowering(torch.ops.prims.sum)
def prims_sum(ctx: LoweringContext, node, x: TensorValue, dims: Any, *, output_dtype=None):
    return reduce(ctx, x, dims, False, "sum", ctx.meta().dtype)


@register_lowering(torch.ops.prims.var)
def prims_var(
    ctx: LoweringContext,
    node,
    x: TensorValue,
    dims: Any,
    correction: float = 1,
    *,
    output_dtype=None,
):
    """var = m2 / (n - correction), m2 the sum of squared deviations from the mean: one
    Welford pass, or two passes over each row (the mean, then m2) that the scheduler puts in
    one kernel. A split Welford reduction is two kernels where the two passes are four."""
    axes = _axes(x, dims)
    acc = compute_dtype(x.dtype)
    n = 1
    for a in axes:
        n *= x.size[a]
    denom = Constant(float(max(n - correction, 0)), acc)
    if ctx.welford:
        m2 = ctx.reduction(
            x,
            axes,
            "welford_m2",
            acc,
            acc,
            body_fn=lambda full: Welford.of(cast(x.load(full), acc)),
        )
        return ctx.pointwise(
            m2.size, ctx.meta().dtype, lambda i: Op("truediv", (m2.load(i), denom), acc)
        )
    # Both passes count from the row's first element, not from 0: a float32 mean of values
    # far from 0 is rounded by an ulp of their size, and that error squared swamps a small
    # variance (1e4 plus noise of 1e-3: 20% off, where eager's CPU kernel accumulates in
    # double). Deviations from a pivot sum exactly enough; an empty row has none.
    pivoted = n > 0

    def shifted(full: tuple) -> Value:
        value = cast(x.load(full), acc)
        if not pivoted:
            return value
        first = tuple(Index() if k in axes else i for k, i in enumerate(full))
        return Op("sub", (value, cast(x.load(first), acc)), acc)

    total = ctx.reduction(x, axes, "sum", acc, acc, body_fn=shifted)
    inv_n = Constant(1.0 / n if n else math.nan, acc)

    def deviation(full: tuple) -> Value:
        outer = tuple(i for k, i in enumerate(full) if k not in axes)
        d = Op("sub", (shifted(full), Op("mul", (total.load(outer), inv_n), acc)), acc)
        return Op("mul", (d, d), acc)

    squares = ctx.reduction(x, axes, "sum", acc, acc, body_fn=deviation)
    return ctx.pointwise(
        squares.size, ctx.meta().dtype, lambda i: Op("truediv", (squares.load(i), denom), acc)
    )


@register_lowering(aten.prod)
def prod(
    ctx: LoweringContext,
    node,
    x: TensorValue,
    dim: Any = None,
    keepdim: bool = False,
    *,
    dtype=None,
):
    if dtype is not None:
        x = TensorValue(x.size, dtype, lambda idx, x=x: cast(x.load(idx), dtype), None)
    return reduce(ctx, x, dim, keepdim, "prod", ctx.meta().dtype)


@register_lowering(aten.amax, aten.amin)
def amax_amin(ctx: LoweringContext, node, x: TensorValue, dims: Any = (), keepdim: bool = False):
    kind = "max" if node.target.overloadpacket is aten.amax else "min"
    return reduce(ctx, x, dims, keepdim, kind, ctx.meta().dtype)


@register_lowering(aten.any, aten.all)
def any_all(ctx: LoweringContext, node, x: TensorValue, dims: Any = None, keepdim: bool = False):
    kind = "any" if node.target.overloadpacket is aten.any else "all"
    xb = TensorValue(x.size, torch.bool, lambda idx: cast(x.load(idx), torch.bool), None)
    return reduce(ctx, xb, dims, keepdim, kind, ctx.meta().dtype)


@register_lowering(aten.argmax, aten.argmin)
def argmax_argmin(
    ctx: LoweringContext, node, x: TensorValue, dim: Any = None, keepdim: bool = False
):
    kind = "argmax" if node.target.overloadpacket is aten.argmax else "argmin"
    if dim is None:
        keepdim = False
    return reduce(ctx, x, dim, keepdim, kind, torch.int64)


@register_lowering(aten.max, aten.min)
def max_min(ctx: LoweringContext, node, x: TensorValue, dim: Any = None, keepdim: bool = False):
    if isinstance(dim, TensorValue):  # max.other is the pointwise maximum
        return NotImplemented
    kind = "max" if node.target.overloadpacket is aten.max else "min"
    if dim is None:
        return reduce(ctx, x, None, False, kind, x.dtype)
    values = reduce(ctx, x, dim, keepdim, kind, x.dtype)
    indices = reduce(ctx, x, dim, keepdim, "arg" + kind, torch.int64)
    return (values, indices)


# ---- pooling ------------------------------------------------------------------------------


def _window_source(ctx: LoweringContext, x: TensorValue, probe_shift: int) -> TensorValue:
    """`x`, realised if reading it at window coordinates (which may be negative in the
    padding) would need floor division or modulo of a negative index."""
    probe = tuple(Index.of(v) - probe_shift for v in make_vars("i", x.size))
    try:
        x.load(probe)
        return x
    except IndexError_:
        return ctx.direct(x)


def _pool_body(
    x: TensorValue, idx: tuple, r: tuple, kernel, stride, padding, dilation, fill: float, dtype
) -> Value:
    spatial = len(kernel)
    lead = idx[: len(x.size) - spatial]
    coords, conds = [], []
    for k in range(spatial):
        c = Index.of(idx[len(lead) + k]) * stride[k] - padding[k] + Index.of(r[k]) * dilation[k]
        coords.append(c)
        lo, hi = c.bounds()
        n = x.size[len(lead) + k]
        if lo < 0:
            conds.append(
                Op("ge", (IndexValue(c, torch.int64), Constant(0, torch.int64)), torch.bool)
            )
        if hi >= n:
            conds.append(
                Op("lt", (IndexValue(c, torch.int64), Constant(n, torch.int64)), torch.bool)
            )
    value = cast(x.load(tuple(lead) + tuple(coords)), dtype)
    if not conds:
        return value
    cond = conds[0]
    for c in conds[1:]:
        cond = Op("logical_and", (cond, c), torch.bool)
    return Op("where", (cond, add_mask(value, cond), Constant(fill, dtype)), dtype)


def _pair(v: Any, n: int = 2) -> tuple[int, ...]:
    if isinstance(v, int):
        return (v,) * n
    v = tuple(v)
    return v * n if len(v) == 1 else v


@register_lowering(aten.max_pool2d_with_indices)
def max_pool2d(
    ctx: LoweringContext,
    node,
    x: TensorValue,
    kernel_size,
    stride=(),
    padding=0,
    dilation=1,
    ceil_mode=False,
):
    if any(u.args[1] == 1 and u.users for u in node.users if u.target is operator.getitem):
        return NotImplemented  # the indices are used: run the aten kernel
    kernel = _pair(kernel_size)
    stride = _pair(stride) if stride else kernel
    padding, dilation = _pair(padding), _pair(dilation)
    values_meta = ctx.meta()[0]
    dtype = compute_dtype(x.dtype)
    x = _window_source(ctx, x, max(padding))
    fill = -math.inf if dtype.is_floating_point else torch.iinfo(dtype).min
    out = ctx.window_reduction(
        tuple(values_meta.shape),
        kernel,
        "max",
        values_meta.dtype,
        lambda i, r: _pool_body(x, i, r, kernel, stride, padding, dilation, fill, dtype),
    )
    return (out, None)


def _avg_pool(
    ctx: LoweringContext, x: TensorValue, out_size, kernel, stride, padding, divisor: int
) -> TensorValue:
    dtype = compute_dtype(x.dtype)
    x = _window_source(ctx, x, max(padding))
    summed = ctx.window_reduction(
        out_size,
        kernel,
        "sum",
        dtype,
        lambda i, r: _pool_body(x, i, r, kernel, stride, padding, (1,) * len(kernel), 0.0, dtype),
    )
    div = Constant(float(divisor), dtype)
    return ctx.pointwise(
        out_size, ctx.meta().dtype, lambda i: Op("truediv", (summed.load(i), div), dtype)
    )


@register_lowering(aten.avg_pool2d)
def avg_pool2d(
    ctx: LoweringContext,
    node,
    x: TensorValue,
    kernel_size,
    stride=(),
    padding=0,
    ceil_mode=False,
    count_include_pad=True,
    divisor_override=None,
):
    kernel = _pair(kernel_size)
    stride = _pair(stride) if stride else kernel
    padding = _pair(padding)
    if ceil_mode or (any(padding) and not count_include_pad) or not x.dtype.is_floating_point:
        return NotImplemented
    divisor = divisor_override or kernel[0] * kernel[1]
    return _avg_pool(ctx, x, tuple(ctx.meta().shape), kernel, stride, padding, divisor)


@register_lowering(aten._adaptive_avg_pool2d)
def adaptive_avg_pool2d(ctx: LoweringContext, node, x: TensorValue, output_size):
    h, w = x.size[-2:]
    oh, ow = _pair(output_size)
    if h % oh or w % ow or not x.dtype.is_floating_point:
        return NotImplemented
    kernel = (h // oh, w // ow)
    return _avg_pool(ctx, x, tuple(ctx.meta().shape), kernel, kernel, (0, 0), kernel[0] * kernel[1])
