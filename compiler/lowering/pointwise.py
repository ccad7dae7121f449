"""Pointwise lowerings: math, comparisons, selection, casts, and tensor factories.

Every rule makes one Pointwise node whose body reads its (broadcast) operands. The output
size and dtype come from the aten node's fake value; operands are cast to the computation
dtype first (torch's type promotion, with half precision computed in float32).
"""

from __future__ import annotations

from typing import Any

import torch

from compiler.ir.index import Index
from compiler.ir.nodes import BOOL_FORMS, BOOL_OPS, Constant, IndexValue, Op, Value
from compiler.lowering.core import (
    LoweringContext,
    LoweringError,
    TensorValue,
    broadcast_loader,
    cast,
    compute_dtype,
    register_lowering,
)

aten = torch.ops.aten
prims = torch.ops.prims

UNARY = {
    aten.abs: "abs",
    aten.neg: "neg",
    aten.exp: "exp",
    aten.exp2: "exp2",
    aten.expm1: "expm1",
    aten.log: "log",
    aten.log2: "log2",
    aten.log1p: "log1p",
    aten.sqrt: "sqrt",
    aten.rsqrt: "rsqrt",
    aten.sin: "sin",
    aten.cos: "cos",
    aten.tan: "tan",
    aten.asin: "asin",
    aten.acos: "acos",
    aten.atan: "atan",
    aten.sinh: "sinh",
    aten.cosh: "cosh",
    aten.tanh: "tanh",
    aten.sigmoid: "sigmoid",
    aten.erf: "erf",
    aten.reciprocal: "reciprocal",
    aten.floor: "floor",
    aten.ceil: "ceil",
    aten.trunc: "trunc",
    aten.round: "round",
    aten.sign: "sign",
    aten.bitwise_not: "bitwise_not",
}
BINARY = {
    aten.mul: "mul",
    aten.maximum: "maximum",
    aten.minimum: "minimum",
    aten.fmod: "fmod",
    aten.remainder: "remainder",
    aten.atan2: "atan2",
    aten.floor_divide: "floordiv",
    aten.bitwise_and: "bitwise_and",
    aten.bitwise_or: "bitwise_or",
    aten.bitwise_xor: "bitwise_xor",
}
COMPARE = {aten.eq: "eq", aten.ne: "ne", aten.lt: "lt", aten.le: "le", aten.gt: "gt", aten.ge: "ge"}
LOGICAL = {
    aten.logical_and: "logical_and",
    aten.logical_or: "logical_or",
    aten.logical_xor: "logical_xor",
}


def operand(x: Any, size: tuple[int, ...], common: torch.dtype):
    """A function idx -> Value reading `x` (TensorValue or Python scalar) for an op whose
    operands torch converts to `common` (the promoted dtype): a tensor is converted to
    `common`, then widened to its compute dtype (an int16 operand of a float16 op is rounded
    to float16 first, as eager does); a scalar is taken in the compute dtype (eager computes
    half-precision ops with the scalar in float32)."""
    dtype = compute_dtype(common)
    if isinstance(x, TensorValue):
        load = broadcast_loader(x, size)
        return lambda idx: cast(cast(load(idx), common), dtype)
    if isinstance(x, (bool, int, float)):
        const = Constant(_scalar(x, dtype), dtype)
        return lambda idx: const
    raise LoweringError(f"unsupported pointwise operand {type(x).__name__}")


def promoted(node: torch.fx.Node, *positions: int) -> torch.dtype:
    """torch's promoted dtype of the node's arguments at `positions` (tensors or scalars)."""
    vals = [
        a.meta["val"] if isinstance(a, torch.fx.Node) else a
        for a in (node.args[p] for p in positions)
    ]
    if len(vals) == 2:
        return torch.result_type(*vals)
    return vals[0].dtype if isinstance(vals[0], torch.Tensor) else torch.tensor(vals[0]).dtype


def elementwise(ctx: LoweringContext, op: str, inputs: list[Any], common: torch.dtype):
    """One op over `inputs` converted to `common` (see `operand`), computed in its compute
    dtype. NotImplemented (the aten call, which raises as eager does) for arithmetic that
    torch refuses on bools (neg, abs, floor, division, ...): fake tensors accept it."""
    val = ctx.meta()
    size, out_dtype = tuple(val.shape), val.dtype
    dtype = compute_dtype(common)
    if dtype == torch.bool and op not in BOOL_FORMS and op not in BOOL_OPS:
        return NotImplemented
    ops = [operand(x, size, common) for x in inputs]
    result_dtype = torch.bool if op in BOOL_RESULTS else dtype
    return ctx.pointwise(
        size, out_dtype, lambda idx: Op(op, tuple(o(idx) for o in ops), result_dtype)
    )


# Ops whose result is bool whatever their operands' dtype.
BOOL_RESULTS = frozenset({*COMPARE.values(), *LOGICAL.values(), "logical_not", "isnan", "isinf"})


def _common(ctx: LoweringContext) -> torch.dtype:
    """The promoted dtype of an op whose result has it (arithmetic, not comparisons)."""
    return ctx.meta().dtype


def _compute_for(ctx: LoweringContext) -> torch.dtype:
    return compute_dtype(_common(ctx))


@register_lowering(*UNARY)
def unary(ctx: LoweringContext, node, x, *rest, **kwargs):
    if rest or kwargs:
        return NotImplemented
    return elementwise(ctx, UNARY[node.target.overloadpacket], [x], _common(ctx))


# Integer division ops: a zero divisor makes eager raise, but traps (SIGFPE, the process dies)
# in a C++ kernel and gives garbage in a Triton one.
_INTEGER_DIVISION = {"fmod", "remainder", "floordiv", "truncdiv"}


def _divisor_may_be_zero(op: str, dtype: torch.dtype, divisor: Any) -> bool:
    """Whether this integer division must run as the aten call, which raises as eager does
    (the divisor is a tensor or the constant 0)."""
    if op not in _INTEGER_DIVISION or dtype.is_floating_point:
        return False
    return isinstance(divisor, TensorValue) or divisor == 0


@register_lowering(*BINARY)
def binary(ctx: LoweringContext, node, a, b, **kwargs):
    if kwargs:
        return NotImplemented
    op = BINARY[node.target.overloadpacket]
    if _divisor_may_be_zero(op, _compute_for(ctx), b):
        return NotImplemented
    return elementwise(ctx, op, [a, b], _common(ctx))


@register_lowering(aten.add, aten.sub)
def add_sub(ctx: LoweringContext, node, a, b, *, alpha: Any = 1):
    op = "add" if node.target.overloadpacket is aten.add else "sub"
    if op == "sub" and any(isinstance(v, TensorValue) and v.dtype == torch.bool for v in (a, b)):
        # Eager refuses to subtract a bool tensor, fake tensors do not: the aten call raises
        return NotImplemented
    common, dtype = _common(ctx), _compute_for(ctx)
    if alpha != 1:
        val = ctx.meta()
        size = tuple(val.shape)
        la, lb = operand(a, size, common), operand(b, size, common)
        k = Constant(_scalar(alpha, dtype), dtype)
        return ctx.pointwise(
            size, val.dtype, lambda i: Op(op, (la(i), Op("mul", (lb(i), k), dtype)), dtype)
        )
    return elementwise(ctx, op, [a, b], common)


@register_lowering(aten.div)
def div(ctx: LoweringContext, node, a, b, *, rounding_mode: str | None = None):
    common, dtype = _common(ctx), _compute_for(ctx)
    if rounding_mode is None:
        return elementwise(ctx, "truediv", [a, b], common)
    integer_op = {"floor": "floordiv", "trunc": "truncdiv"}.get(rounding_mode)
    if integer_op is None:
        return NotImplemented
    if not dtype.is_floating_point:
        if _divisor_may_be_zero(integer_op, dtype, b):
            return NotImplemented
        return elementwise(ctx, integer_op, [a, b], common)
    if rounding_mode == "floor":  # torch's floor division, not floor(a / b): see floordiv
        return elementwise(ctx, "floordiv", [a, b], common)
    # trunc: truncate the true quotient, converted to the result's dtype first as eager's
    # kernels compute it (kept in float32 for half precisions, see keeps_float32)
    val = ctx.meta()
    size = tuple(val.shape)
    la, lb = operand(a, size, common), operand(b, size, common)
    return ctx.pointwise(
        size,
        val.dtype,
        lambda i: Op(
            "trunc", (cast(cast(Op("truediv", (la(i), lb(i)), dtype), common), dtype),), dtype
        ),
    )


@register_lowering(prims.div)
def prims_div(ctx: LoweringContext, node, a, b):
    """prims.div truncates for integers."""
    dtype = _compute_for(ctx)
    if _divisor_may_be_zero("truncdiv", dtype, b):
        return NotImplemented
    op = "truediv" if dtype.is_floating_point else "truncdiv"
    return elementwise(ctx, op, [a, b], _common(ctx))


@register_lowering(*COMPARE)
def compare(ctx: LoweringContext, node, a, b):
    return elementwise(ctx, COMPARE[node.target.overloadpacket], [a, b], promoted(node, 0, 1))


@register_lowering(*LOGICAL)
def logical(ctx: LoweringContext, node, a, b):
    return elementwise(ctx, LOGICAL[node.target.overloadpacket], [a, b], torch.bool)


@register_lowering(aten.logical_not)
def logical_not(ctx: LoweringContext, node, a):
    return elementwise(ctx, "logical_not", [a], torch.bool)


@register_lowering(aten.isnan, aten.isinf)
def isnan_isinf(ctx: LoweringContext, node, a):
    op = "isnan" if node.target.overloadpacket is aten.isnan else "isinf"
    return elementwise(ctx, op, [a], a.dtype)


@register_lowering(aten.pow)
def pow_(ctx: LoweringContext, node, a, b):
    common, dtype = _common(ctx), _compute_for(ctx)
    if dtype == torch.bool:
        return NotImplemented  # eager refuses pow on bools
    val = ctx.meta()
    size = tuple(val.shape)
    if (
        isinstance(b, (int, float))
        and float(b).is_integer()
        and 0 <= b <= 4
        and isinstance(a, TensorValue)
    ):
        la = operand(a, size, common)

        def body(i):  # small integer powers as products: exact, and what eager's kernels do
            x = la(i)
            out: Value = Constant(_scalar(1, dtype), dtype)
            for k in range(int(b)):
                out = x if k == 0 else Op("mul", (out, x), dtype)
            return out

        return ctx.pointwise(size, val.dtype, body)
    if not dtype.is_floating_point:
        return NotImplemented
    if b == 0.5:
        return elementwise(ctx, "sqrt", [a], common)
    return elementwise(ctx, "pow", [a, b], common)


@register_lowering(aten.relu)
def relu(ctx: LoweringContext, node, a):
    return elementwise(ctx, "maximum", [a, 0], _common(ctx))


@register_lowering(aten.clamp)
def clamp(ctx: LoweringContext, node, a, min=None, max=None):
    common, dtype = _common(ctx), _compute_for(ctx)
    if dtype == torch.bool:
        return NotImplemented  # eager refuses clamp on bools
    val = ctx.meta()
    size = tuple(val.shape)
    la = operand(a, size, common)
    lo = operand(min, size, common) if min is not None else None
    hi = operand(max, size, common) if max is not None else None

    def body(i):
        x = la(i)
        if lo is not None:
            x = Op("maximum", (x, lo(i)), dtype)
        if hi is not None:
            x = Op("minimum", (x, hi(i)), dtype)
        return x

    return ctx.pointwise(size, val.dtype, body)


@register_lowering(aten.where)
def where(ctx: LoweringContext, node, cond, a, b):
    val = ctx.meta()
    size, dtype = tuple(val.shape), compute_dtype(val.dtype)
    lc, la, lb = (
        operand(x, size, d) for x, d in ((cond, torch.bool), (a, val.dtype), (b, val.dtype))
    )
    return ctx.pointwise(size, val.dtype, lambda i: Op("where", (lc(i), la(i), lb(i)), dtype))


@register_lowering(prims.convert_element_type, aten._to_copy)
def to_dtype(ctx: LoweringContext, node, x, dtype: torch.dtype | None = None, **kwargs):
    val = ctx.meta()
    if val.device != ctx.device or not isinstance(x, TensorValue):
        return NotImplemented
    return ctx.pointwise(tuple(val.shape), val.dtype, lambda i: cast(x.load(i), val.dtype))


@register_lowering(aten.alias, aten.lift_fresh_copy, aten.detach)
def identity(ctx: LoweringContext, node, x, **kwargs):
    """A copy is only needed where a buffer must exist; the scheduler materialises those."""
    return x


@register_lowering(aten.clone, aten.contiguous)
def clone(ctx: LoweringContext, node, x, **kwargs):
    """As `identity`, unless the copy has another layout than `x`'s buffer (`.contiguous()`
    of a channels-last tensor): then a kernel writes it in the layout eager gives it."""
    val = ctx.meta()
    view = x.view if isinstance(x, TensorValue) else None
    if view is None or not isinstance(val, torch.Tensor) or _same_layout(view.layout, val):
        return x
    return ctx.pointwise(tuple(val.shape), val.dtype, x.load)


def _same_layout(layout, val: torch.Tensor) -> bool:
    """Strides agree on every dimension of more than one element."""
    return tuple(layout.size) == tuple(val.shape) and all(
        n <= 1 or a == b for n, a, b in zip(val.shape, layout.stride, val.stride())
    )


@register_lowering(aten.copy)
def copy(ctx: LoweringContext, node, dst, src, non_blocking: bool = False):
    val = ctx.meta()
    size = tuple(val.shape)
    return ctx.pointwise(size, val.dtype, operand(src, size, val.dtype))


# ---- factories ------------------------------------------------------------------------------


def _fill(ctx: LoweringContext, value: Any) -> TensorValue:
    val = ctx.meta()
    if val.device != ctx.device:
        return NotImplemented
    const = Constant(_scalar(value, val.dtype), val.dtype)
    return ctx.pointwise(tuple(val.shape), val.dtype, lambda i: const)


@register_lowering(aten.full, aten.full_like)
def full(ctx: LoweringContext, node, size_or_x, value, **kwargs):
    return _fill(ctx, value)


@register_lowering(aten.fill)
def fill(ctx: LoweringContext, node, x, value):
    if isinstance(value, TensorValue):
        return NotImplemented
    return _fill(ctx, value)


@register_lowering(
    aten.zeros,
    aten.zeros_like,
    aten.empty,
    aten.empty_like,
    aten.empty_strided,
    aten.new_zeros,
    aten.new_empty,
)
def zeros(ctx: LoweringContext, node, *args, **kwargs):
    return _fill(ctx, 0)


@register_lowering(aten.ones, aten.ones_like, aten.new_ones)
def ones(ctx: LoweringContext, node, *args, **kwargs):
    return _fill(ctx, 1)


@register_lowering(aten.scalar_tensor)
def scalar_tensor(ctx: LoweringContext, node, value, **kwargs):
    return _fill(ctx, value)


@register_lowering(aten.arange, prims.iota)
def arange(ctx: LoweringContext, node, *args, **kwargs):
    val = ctx.meta()
    if val.device != ctx.device or val.dim() != 1:
        return NotImplemented
    if node.target.overloadpacket is prims.iota:
        start, step = kwargs["start"], kwargs["step"]
    else:
        nums = [a for a in args if isinstance(a, (int, float))]
        start, step = (0, 1) if len(nums) == 1 else (nums[0], nums[2] if len(nums) > 2 else 1)
    dtype = compute_dtype(val.dtype)
    if not all(isinstance(v, int) for v in (start, step)):
        return ctx.pointwise(
            tuple(val.shape),
            val.dtype,
            lambda i: Op(
                "add",
                (
                    Constant(float(start), dtype),
                    Op("mul", (IndexValue(i[0], dtype), Constant(float(step), dtype)), dtype),
                ),
                dtype,
            ),
        )
    return ctx.pointwise(
        tuple(val.shape),
        val.dtype,
        lambda i: cast(IndexValue(Index.of(i[0]) * step + start, torch.int64), val.dtype),
    )


def _scalar(value: Any, dtype: torch.dtype) -> Any:
    """A Python scalar as a constant of `dtype`: an integer wraps into the dtype's range, as
    eager converts it (`uint8_tensor // -3` divides by 253), and so fits the literal types
    of both emitters; a half-precision one is rounded (`torch.full(..., 0.1, dtype=float16)`
    holds 0.0999755859375)."""
    if dtype == torch.bool:
        return bool(value)
    if dtype in (torch.float16, torch.bfloat16):  # a tensor's element: the rounded value
        return torch.tensor(float(value)).to(dtype).item()
    if dtype.is_floating_point:
        return float(value)
    if isinstance(value, float) and not value.is_integer():
        raise LoweringError(f"float constant {value} in an integer op")
    info = torch.iinfo(dtype)
    span = info.max - info.min + 1
    return (int(value) - info.min) % span + info.min
