"""Views as index arithmetic: reshape, permute, expand, slice, select, squeeze, unsqueeze,
plus concatenation and constant padding (masked loads, no copies).

A view never creates a node: its loader maps the output coordinates to the input's. When the
input is a strided view of a buffer, the result's strided view is found by applying the same
op to a meta tensor of that layout, so externs and outputs can take it without a copy.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from compiler.ir.index import (
    Index,
    IndexError_,
    contiguous_strides,
    flat_index,
    make_vars,
    unflatten,
)
from compiler.ir.nodes import Constant, IndexValue, Layout, Op, TensorArg, Value
from compiler.ir.transform import add_mask
from compiler.lowering.core import LoweringContext, TensorValue, cast, register_lowering
from compiler.lowering.pointwise import _scalar

aten = torch.ops.aten


def view_of(
    ctx: LoweringContext, node, x: TensorValue, remap: Callable[[tuple], tuple]
) -> TensorValue:
    """The view of `x` whose element `idx` is `x[remap(idx)]`."""
    val = ctx.meta()
    return TensorValue(
        tuple(val.shape), x.dtype, lambda idx: x.load(remap(idx)), _strided(node, x, val)
    )


def _strided(node, x: TensorValue, val: torch.Tensor) -> TensorArg | None:
    if x.view is None:
        return None
    lay = x.view.layout
    try:
        base = torch.empty(max(lay.storage_size(), 1), dtype=lay.dtype, device="meta")
        base = base.as_strided(lay.size, lay.stride, lay.offset)
        args = [
            base,
            *(a.meta["val"] if isinstance(a, torch.fx.Node) else a for a in node.args[1:]),
        ]
        out = node.target(*args, **node.kwargs)
    except RuntimeError:  # e.g. a reshape that needs a copy
        return None
    if tuple(out.shape) != tuple(val.shape):
        return None
    return TensorArg(
        x.view.buf,
        Layout(tuple(out.shape), tuple(out.stride()), lay.dtype, lay.device, out.storage_offset()),
    )


@register_lowering(aten.view, aten.reshape, aten._unsafe_view)
def reshape(ctx: LoweringContext, node, x: TensorValue, size) -> TensorValue:
    out_size = tuple(ctx.meta().shape)
    if out_size == x.size:
        return x

    def remap(idx: tuple) -> tuple:
        flat = flat_index(idx, contiguous_strides(out_size))
        return unflatten(flat, x.size)

    return view_of(ctx, node, x, remap)


@register_lowering(aten.permute)
def permute(ctx: LoweringContext, node, x: TensorValue, dims) -> TensorValue:
    dims = [d % max(len(x.size), 1) for d in dims]

    def remap(idx: tuple) -> tuple:
        out = [None] * len(dims)
        for k, d in enumerate(dims):
            out[d] = idx[k]
        return tuple(out)

    return view_of(ctx, node, x, remap)


@register_lowering(aten.transpose)
def transpose(ctx: LoweringContext, node, x: TensorValue, d0: int, d1: int) -> TensorValue:
    rank = max(len(x.size), 1)
    d0, d1 = d0 % rank, d1 % rank

    def remap(idx: tuple) -> tuple:
        out = list(idx)
        out[d0], out[d1] = idx[d1], idx[d0]
        return tuple(out)

    return view_of(ctx, node, x, remap)


@register_lowering(aten.t)
def t(ctx: LoweringContext, node, x: TensorValue) -> TensorValue:
    return view_of(ctx, node, x, lambda idx: tuple(reversed(idx)))


@register_lowering(aten.expand)
def expand(
    ctx: LoweringContext, node, x: TensorValue, size, *, implicit: bool = False
) -> TensorValue:
    out_size = tuple(ctx.meta().shape)
    lead = len(out_size) - len(x.size)

    def remap(idx: tuple) -> tuple:
        return tuple(
            Index() if s == 1 and out_size[lead + k] != 1 else idx[lead + k]
            for k, s in enumerate(x.size)
        )

    return view_of(ctx, node, x, remap)


@register_lowering(aten.slice)
def slice_(
    ctx: LoweringContext, node, x: TensorValue, dim: int = 0, start=None, end=None, step: int = 1
) -> TensorValue:
    dim = dim % max(len(x.size), 1)
    n = x.size[dim]
    start, _, _ = slice(start, end, step).indices(n)

    def remap(idx: tuple) -> tuple:
        out = list(idx)
        out[dim] = Index.of(idx[dim]) * step + start
        return tuple(out)

    return view_of(ctx, node, x, remap)


@register_lowering(aten.select)
def select(ctx: LoweringContext, node, x: TensorValue, dim: int, index: int) -> TensorValue:
    dim = dim % len(x.size)
    index = index % x.size[dim]
    return view_of(ctx, node, x, lambda idx: idx[:dim] + (Index.of(index),) + idx[dim:])


@register_lowering(aten.squeeze)
def squeeze(ctx: LoweringContext, node, x: TensorValue, dims: Any = None) -> TensorValue:
    rank = len(x.size)
    if dims is None:
        dims = range(rank)
    elif isinstance(dims, int):
        dims = [dims]
    drop = {d % rank for d in dims if x.size[d % rank] == 1} if rank else set()

    def remap(idx: tuple) -> tuple:
        it = iter(idx)
        return tuple(Index() if k in drop else next(it) for k in range(rank))

    return view_of(ctx, node, x, remap)


@register_lowering(aten.unsqueeze)
def unsqueeze(ctx: LoweringContext, node, x: TensorValue, dim: int) -> TensorValue:
    dim = dim % (len(x.size) + 1)
    return view_of(ctx, node, x, lambda idx: idx[:dim] + idx[dim + 1 :])


@register_lowering(aten.squeeze_, aten.unsqueeze_)
def reshape_in_place(ctx: LoweringContext, node, x: TensorValue, *dims: Any) -> TensorValue:
    """The matmul decomposition re-shapes its own intermediate in place (`squeeze_(mm, 0)`
    for a vector times a matrix). While nothing else reads that tensor under its old shape,
    this is the out-of-place view; an input's shape change stays unsupported."""
    if ctx._is_input(x) or len(node.args[0].users) != 1:
        return NotImplemented
    rule = squeeze if node.target.overloadpacket is aten.squeeze_ else unsqueeze
    return rule(ctx, node, x, *dims)


@register_lowering(aten.as_strided, aten.as_strided_)
def as_strided(
    ctx: LoweringContext, node, x: TensorValue, size, stride, storage_offset=None
) -> TensorValue:
    """Only the restride decompositions emit (same values, strides differing in size-1
    dims); a real reinterpretation of memory runs as an extern call."""
    src = node.args[0].meta["val"]
    same = (
        tuple(size) == x.size
        and not storage_offset
        and all(n == 1 or a == b for n, a, b in zip(size, stride, src.stride()))
    )
    if not same:
        return NotImplemented
    return x


@register_lowering(torch.ops.prims.broadcast_in_dim)
def broadcast_in_dim(
    ctx: LoweringContext, node, x: TensorValue, shape, broadcast_dimensions
) -> TensorValue:
    out_size = tuple(ctx.meta().shape)

    def remap(idx: tuple) -> tuple:
        return tuple(
            Index() if x.size[k] == 1 and out_size[d] != 1 else idx[d]
            for k, d in enumerate(broadcast_dimensions)
        )

    return view_of(ctx, node, x, remap)


@register_lowering(aten.split_with_sizes, aten.split)
def split(ctx: LoweringContext, node, x: TensorValue, sizes, dim: int = 0) -> list[TensorValue]:
    dim = dim % len(x.size)
    vals = ctx.meta()
    out, start = [], 0
    for val in vals:
        n = val.shape[dim]
        out.append(_sliced(x, dim, start, tuple(val.shape)))
        start += n
    return out


def _sliced(x: TensorValue, dim: int, start: int, size: tuple[int, ...]) -> TensorValue:
    def loader(idx: tuple) -> Value:
        return x.load(idx[:dim] + (Index.of(idx[dim]) + start,) + idx[dim + 1 :])

    view = None
    if x.view is not None:
        lay = x.view.layout
        view = TensorArg(
            x.view.buf,
            Layout(size, lay.stride, lay.dtype, lay.device, lay.offset + start * lay.stride[dim]),
        )
    return TensorValue(size, x.dtype, loader, view)


# ---- concatenation and padding: masked loads ------------------------------------------------


def _in_range(i: Index, lo: int | None, hi: int | None) -> Value | None:
    """A bool Value: lo <= i < hi (either bound may be absent)."""
    conds = []
    if lo is not None:
        conds.append(Op("ge", (IndexValue(i, torch.int64), Constant(lo, torch.int64)), torch.bool))
    if hi is not None:
        conds.append(Op("lt", (IndexValue(i, torch.int64), Constant(hi, torch.int64)), torch.bool))
    if not conds:
        return None
    return conds[0] if len(conds) == 1 else Op("logical_and", tuple(conds), torch.bool)


def _shiftable(
    ctx: LoweringContext, x: TensorValue, dim: int, shift: int, out_size: tuple[int, ...]
) -> TensorValue:
    """`x`, realised if reading it at a shifted (possibly negative) coordinate along `dim`
    would need floor division or modulo of a negative index."""
    probe = tuple(Index.of(v) for v in make_vars("i", out_size))
    probe = probe[:dim] + (probe[dim] - shift,) + probe[dim + 1 :]
    try:
        x.load(probe)
        return x
    except IndexError_:
        return ctx.direct(x)


@register_lowering(aten.cat)
def cat(ctx: LoweringContext, node, tensors, dim: int = 0) -> TensorValue:
    val = ctx.meta()
    out_size, dtype = tuple(val.shape), val.dtype
    dim = dim % len(out_size)
    pieces, start = [], 0
    for x in tensors:
        if x.size == (0,) and len(out_size) != 1:  # legacy: empty 1-d tensors are skipped
            continue
        n = x.size[dim]
        if n:
            pieces.append((start, start + n, _shiftable(ctx, x, dim, start, out_size)))
        start += n

    def body(idx: tuple) -> Value:
        # piece k covers lo <= i < hi: a where-chain on the upper bounds picks it, and its
        # loads are masked with both bounds (its coordinates are out of range elsewhere)
        i = idx[dim]
        out: Value | None = None
        for k in reversed(range(len(pieces))):
            lo, hi, x = pieces[k]
            value = cast(x.load(idx[:dim] + (Index.of(i) - lo,) + idx[dim + 1 :]), dtype)
            cond = _in_range(i, lo if k > 0 else None, hi if k < len(pieces) - 1 else None)
            if cond is not None:
                value = add_mask(value, cond)
            out = value if out is None else Op("where", (_in_range(i, None, hi), value, out), dtype)
        return out if out is not None else Constant(_scalar(0, dtype), dtype)

    return ctx.pointwise(out_size, dtype, body)


@register_lowering(aten.constant_pad_nd)
def constant_pad_nd(
    ctx: LoweringContext, node, x: TensorValue, pad, value: float = 0.0
) -> TensorValue:
    val = ctx.meta()
    out_size, dtype = tuple(val.shape), val.dtype
    rank = len(out_size)
    pads = {rank - 1 - k // 2: (pad[k], pad[k + 1]) for k in range(0, len(pad), 2)}
    for d, (lo, _) in pads.items():
        x = _shiftable(ctx, x, d, lo, out_size)
    fill = Constant(_scalar(value, dtype), dtype)

    def body(idx: tuple) -> Value:
        src, conds = list(idx), []
        for d, (lo, _hi) in pads.items():
            src[d] = Index.of(idx[d]) - lo
            c = _in_range(
                Index.of(idx[d]),
                lo if lo > 0 else None,
                lo + x.size[d] if lo + x.size[d] < out_size[d] else None,
            )
            if c is not None:
                conds.append(c)
        inner = cast(x.load(tuple(src)), dtype)
        if not conds:
            return inner
        cond = conds[0]
        for c in conds[1:]:
            cond = Op("logical_and", (cond, c), torch.bool)
        return Op("where", (cond, add_mask(inner, cond), fill), dtype)

    return ctx.pointwise(out_size, dtype, body)
