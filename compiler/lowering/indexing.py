"""Gathers with run-time indices: embedding, index (advanced indexing), gather.

The loaded index becomes an "indirect" entry of a Load (an integer Value instead of an Index);
the table it reads must be a buffer addressed directly, so a view is copied first.
"""

from __future__ import annotations

import torch

from compiler.ir.nodes import Constant, Load, Op, Value
from compiler.lowering.core import (
    LoweringContext,
    TensorValue,
    broadcast_loader,
    cast,
    register_lowering,
)

aten = torch.ops.aten


def direct(ctx: LoweringContext, x: TensorValue) -> tuple[str, torch.dtype]:
    """A buffer laid out as `x`, so Loads can address it by coordinates."""
    arg = ctx.direct(x).view
    assert arg is not None
    return arg.buf, x.dtype


def _wrap(v: Value, n: int) -> Value:
    """Negative indices count from the end, as in Python."""
    neg = Op("lt", (v, Constant(0, torch.int64)), torch.bool)
    return Op("where", (neg, Op("add", (v, Constant(n, torch.int64)), torch.int64), v), torch.int64)


@register_lowering(aten.embedding)
def embedding(ctx: LoweringContext, node, weight: TensorValue, indices: TensorValue, *args):
    buf, dtype = direct(ctx, weight)
    val = ctx.meta()
    k = len(indices.size)

    def body(idx: tuple) -> Value:
        row = cast(indices.load(idx[:k]), torch.int64)
        return Load(buf, (row,) + tuple(idx[k:]), dtype)

    return ctx.pointwise(tuple(val.shape), val.dtype, body)


@register_lowering(aten.gather)
def gather(
    ctx: LoweringContext,
    node,
    x: TensorValue,
    dim: int,
    index: TensorValue,
    *,
    sparse_grad: bool = False,
):
    buf, dtype = direct(ctx, x)
    val = ctx.meta()
    dim = dim % max(len(x.size), 1)

    def body(idx: tuple) -> Value:
        v = cast(index.load(idx), torch.int64)
        return Load(buf, tuple(idx[:dim]) + (v,) + tuple(idx[dim + 1 :]), dtype)

    return ctx.pointwise(tuple(val.shape), val.dtype, body)


@register_lowering(aten.index)
def index(ctx: LoweringContext, node, x: TensorValue, indices):
    positions = [k for k, t in enumerate(indices) if t is not None]
    if not positions or positions != list(range(positions[0], positions[-1] + 1)):
        return NotImplemented  # separated advanced indices move dims to the front
    if any(t.dtype == torch.bool for t in indices if t is not None):
        return NotImplemented  # boolean masks have data-dependent shapes
    val = ctx.meta()
    out_size = tuple(val.shape)
    first = positions[0]
    bshape = torch.broadcast_shapes(*(indices[k].size for k in positions))
    nb = len(bshape)
    loaders = {k: broadcast_loader(indices[k], bshape) for k in positions}
    buf, dtype = direct(ctx, x)

    def body(idx: tuple) -> Value:
        bidx = tuple(idx[first : first + nb])
        src: list = list(idx[:first])
        for k in positions:
            src.append(_wrap(cast(loaders[k](bidx), torch.int64), x.size[k]))
        src.extend(idx[first + nb :])
        return Load(buf, tuple(src), dtype)

    return ctx.pointwise(out_size, val.dtype, body)
