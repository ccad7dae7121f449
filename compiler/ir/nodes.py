"""The loop-level IR: what a lowered aten graph is made of.

Two layers, both frozen dataclasses:

* Values — scalar expressions evaluated at one point of a loop nest: `Load` from a buffer at
  an `Index`, `Constant`, `IndexValue` (an index used as a number, e.g. arange), `Op` (a named
  pointwise operation from `OPS`), and `Ref` (a value computed by an earlier step of the same
  kernel; only the scheduler creates these).
* Nodes — what the graph computes, one buffer each: `Pointwise` (a Value per output element),
  `Reduction` (a Value per element of the reduced input, combined along the reduced loop),
  `ExternKernel` (an aten call on materialised tensors, e.g. convolution), plus the graph's
  `InputBuffer`s and `ConstantBuffer`s (parameters captured at compile time).

Loop variables: a node of output size `(s0, s1, ...)` reads its element through the variables
`i0, i1, ...` (`Var("i0", s0)`, ...); a Reduction's reduced dimensions use `r0, r1, ...`. Views
(permute, expand, slice, reshape, ...) never create nodes: they only change the `Index` of the
`Load`s that read through them.

Buffers: every node that is materialised lives in a `Layout` (size, stride, offset, dtype,
device); the scheduler decides which nodes are materialised and which are recomputed inline.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Union

import torch

from compiler.ir.index import CachedHash, Index, Var, contiguous_strides, make_vars

# ---- values -------------------------------------------------------------------------------

# Pointwise operations and their arity. Semantics are torch's for the value's dtype; operands
# already have the computation dtype (lowering inserts `to_dtype` casts), except `where`'s
# condition and the comparisons' results, which are bool.
OPS: dict[str, int] = {
    # arithmetic
    "add": 2,
    "sub": 2,
    "mul": 2,
    "truediv": 2,
    "floordiv": 2,
    "truncdiv": 2,
    "remainder": 2,
    "fmod": 2,
    "neg": 1,
    "abs": 1,
    "sign": 1,
    "reciprocal": 1,
    "pow": 2,
    "maximum": 2,
    "minimum": 2,
    # transcendental
    "exp": 1,
    "exp2": 1,
    "expm1": 1,
    "log": 1,
    "log2": 1,
    "log1p": 1,
    "sqrt": 1,
    "rsqrt": 1,
    "sin": 1,
    "cos": 1,
    "tan": 1,
    "asin": 1,
    "acos": 1,
    "atan": 1,
    "sinh": 1,
    "cosh": 1,
    "tanh": 1,
    "sigmoid": 1,
    "erf": 1,
    "atan2": 2,
    # rounding
    "floor": 1,
    "ceil": 1,
    "trunc": 1,
    "round": 1,
    # comparisons and logic (bool results)
    "eq": 2,
    "ne": 2,
    "lt": 2,
    "le": 2,
    "gt": 2,
    "ge": 2,
    "logical_and": 2,
    "logical_or": 2,
    "logical_xor": 2,
    "logical_not": 1,
    "isnan": 1,
    "isinf": 1,
    # bitwise (integers and bool)
    "bitwise_and": 2,
    "bitwise_or": 2,
    "bitwise_xor": 2,
    "bitwise_not": 1,
    # selection and casts
    "where": 3,
    "to_dtype": 1,
}

# torch's arithmetic on bool operands with a bool result, as the logical op that gives it
# (None: the operand itself). Other arithmetic on bools (sub, neg, abs, division, pow, floor,
# ...) raises in eager; lowering leaves those to the aten call. Ops of OPS not named here and
# not arithmetic (comparisons, logic, bitwise, where, to_dtype) are defined on bools as is.
BOOL_FORMS: dict[str, str | None] = {
    "add": "logical_or",
    "mul": "logical_and",
    "maximum": "logical_or",
    "minimum": "logical_and",
    "sign": None,
}
# Ops defined on bool operands with a bool result, besides those of BOOL_FORMS.
BOOL_OPS = frozenset({
    "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor",
    "logical_not", "isnan", "isinf", "bitwise_and", "bitwise_or", "bitwise_xor",
    "bitwise_not", "where", "to_dtype",
})  # fmt: skip

# welford_mean / welford_m2: the mean and the sum of squared deviations from it (m2) of the
# body's Welford states, combined in one pass (see `Welford`); var is m2 / (n - correction).
REDUCTION_TYPES = (
    "sum", "prod", "max", "min", "argmax", "argmin", "any", "all", "welford_mean", "welford_m2"
)  # fmt: skip
WELFORD_TYPES = ("welford_mean", "welford_m2")


@dataclass(frozen=True)
class Load(CachedHash):
    """Element `indices` (one per dimension of the buffer: logical coordinates, not a memory
    offset) of buffer `buf`. Emitters turn it into an address with the buffer's Layout (see
    `address`), so inlining a producer is substituting its `i*` vars.

    An entry is an `Index`, or for gathers (embedding, index, gather) an integer `Value`
    computed at run time ("indirect indexing"), already wrapped into `0 .. size - 1`.

    With a `mask` (a bool Value), the load only happens where the mask is true and yields 0
    elsewhere; lowering uses it for padding and concatenation, always under a `where` on the
    same condition, so the 0 is never observed.
    """

    buf: str
    indices: tuple["Index | Value", ...]
    dtype: torch.dtype
    mask: "Value | None" = None

    __hash__ = CachedHash.__hash__


@dataclass(frozen=True)
class Constant:
    value: Union[bool, int, float]
    dtype: torch.dtype


@dataclass(frozen=True)
class IndexValue(CachedHash):
    """An index expression used as a number (arange, iota, argmax positions)."""

    index: Index
    dtype: torch.dtype

    __hash__ = CachedHash.__hash__


@dataclass(frozen=True)
class Op(CachedHash):
    op: str  # a key of OPS
    args: tuple["Value", ...]
    dtype: torch.dtype

    __hash__ = CachedHash.__hash__

    def __post_init__(self) -> None:
        if OPS.get(self.op) != len(self.args):
            raise ValueError(f"bad pointwise op {self.op} with {len(self.args)} operands")


@dataclass(frozen=True)
class Ref:
    """The value of step `name` of the same kernel at the current loop point (scheduler only)."""

    name: str
    dtype: torch.dtype


@dataclass(frozen=True)
class Welford(CachedHash):
    """What a Welford reduction (`welford_mean`, `welford_m2`) combines at each reduced point:
    the state of `weight` elements with mean `mean` and sum of squared deviations `m2`. An
    element x is `Welford(x, 0, 1)`; a masked-off one has weight 0; a split reduction's second
    stage reads the first stage's partial states. States combine exactly, in any order
    (Chan et al.): no sum of squares that cancels catastrophically when the mean is large.
    Only ever a reduction's whole body, never an operand."""

    mean: "Value"
    m2: "Value"
    weight: "Value"
    dtype: torch.dtype  # the accumulation dtype of all three

    __hash__ = CachedHash.__hash__

    @staticmethod
    def of(x: "Value") -> "Welford":
        return Welford(x, Constant(0.0, x.dtype), Constant(1.0, x.dtype), x.dtype)

    @property
    def single_elements(self) -> bool:
        """Each point is at most one element (m2 is 0): the form lowering creates."""
        return isinstance(self.m2, Constant) and self.m2.value == 0


Value = Union[Load, Constant, IndexValue, Op, Ref, Welford]


def children(value: Value) -> tuple[Value, ...]:
    if isinstance(value, Op):
        return value.args
    if isinstance(value, Welford):
        return (value.mean, value.m2, value.weight)
    if isinstance(value, Load):
        out = tuple(i for i in value.indices if not isinstance(i, Index))
        return out + ((value.mask,) if value.mask is not None else ())
    return ()


def iter_values(value: Value) -> tuple[Value, ...]:
    """All sub-values, each object once, children before parents. Those below `value` are
    kept on it (values are immutable, and the scheduler's passes walk the same bodies over
    and over; not `value` itself, which would make a reference cycle of every body)."""
    below = value.__dict__.get("_below")
    if below is None:
        below = _post_order(value)[:-1]
        object.__setattr__(value, "_below", below)
    return below + (value,)


def _post_order(value: Value) -> tuple[Value, ...]:
    out: list[Value] = []
    seen: set[int] = set()
    stack: list[tuple[Value, bool]] = [(value, False)]
    while stack:
        v, expanded = stack.pop()
        if expanded:
            out.append(v)
            continue
        if id(v) in seen:
            continue
        seen.add(id(v))
        stack.append((v, True))
        for c in reversed(children(v)):
            stack.append((c, False))
    return tuple(out)


def loads(value: Value) -> tuple[Load, ...]:
    """The loads in `value`, children before parents (those below it kept on it, as in
    `iter_values`)."""
    below = value.__dict__.get("_loads")
    if below is None:
        below = tuple(v for v in iter_values(value)[:-1] if isinstance(v, Load))
        object.__setattr__(value, "_loads", below)
    return below + (value,) if isinstance(value, Load) else below


def op_count(value: Value) -> int:
    return sum(1 for v in iter_values(value) if isinstance(v, Op))


# ---- buffers and nodes --------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """Where a materialised buffer's elements live: element `(i0, i1, ...)` is at
    `offset + sum(ik * stride[k])` elements from the buffer's data pointer (inputs and
    nodes: offset 0; a TensorArg view of a buffer may have an offset)."""

    size: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device
    offset: int = 0

    @staticmethod
    def contiguous(size: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> "Layout":
        return Layout(tuple(size), contiguous_strides(tuple(size)), dtype, device)

    @staticmethod
    def like(t: torch.Tensor) -> "Layout":
        return Layout(tuple(t.shape), tuple(t.stride()), t.dtype, t.device, t.storage_offset())

    @property
    def numel(self) -> int:
        n = 1
        for s in self.size:
            n *= s
        return n

    def storage_size(self) -> int:
        """Elements the storage must hold (0 for an empty tensor)."""
        if self.numel == 0:
            return 0
        return self.offset + 1 + sum((s - 1) * st for s, st in zip(self.size, self.stride))

    def index(self, indices: tuple) -> Index:
        return _layout_index(self.offset, self.stride, tuple(indices))


@functools.lru_cache(maxsize=1 << 16)
def _layout_index(offset: int, stride: tuple[int, ...], indices: tuple) -> Index:
    """`Layout.index`, memoised: emitters ask for the address of the same loads per copy of a
    loop body and per loop-merging attempt."""
    out = Index.of(offset)
    for i, st in zip(indices, stride):
        out = out + Index.of(i) * st
    return out


def address(layout: Layout, indices: tuple) -> tuple[Index, list[tuple["Value", int]]]:
    """The element offset of `indices` in a buffer of `layout`: the static part as an Index,
    and the indirect entries as (integer Value, stride) pairs to add to it."""
    static = Index.of(layout.offset)
    dynamic: list[tuple[Value, int]] = []
    for i, st in zip(indices, layout.stride):
        if isinstance(i, Index):
            static = static + i * st
        elif st != 0:
            dynamic.append((i, st))
    return static, dynamic


@dataclass(frozen=True)
class InputBuffer:
    """Positional input `position` of the graph."""

    name: str
    position: int
    layout: Layout


@dataclass(frozen=True)
class ConstantBuffer:
    """A tensor captured at compile time (a parameter or buffer the aten graph reads)."""

    name: str
    layout: Layout
    value: torch.Tensor = field(compare=False, repr=False)


@dataclass(frozen=True)
class Pointwise:
    """`buf[i0, i1, ...] = body` for every point of `size`; `body` reads through `i*`."""

    name: str
    size: tuple[int, ...]
    body: Value
    layout: Layout  # where it is stored if the scheduler materialises it
    origins: tuple[str, ...] = ()  # FX node names of the user graph this came from
    aten: str = ""  # the aten graph node it was lowered from (names kernels: "add", "sin")

    @property
    def dtype(self) -> torch.dtype:
        return self.layout.dtype

    @property
    def vars(self) -> tuple[Var, ...]:
        return make_vars("i", self.size)


@dataclass(frozen=True)
class Reduction:
    """`buf[i...] = combine(reduction_type, body over all r...)`.

    `size` is the output size (no kept dims: keepdim is a view on top), `reduction_size` the
    reduced extent. `input_size` and `axes` say how the reduced tensor was shaped: output
    variable `ik` is input dimension `k`-th of the non-reduced ones and `rj` is `axes[j]`. The
    scheduler uses them to fuse pointwise nodes of the input's shape into the same kernel.
    For argmax/argmin the body's reduction position is the flat index over `reduction_size`.
    Welford reductions (and only they) have a `Welford` body.
    """

    name: str
    size: tuple[int, ...]
    reduction_size: tuple[int, ...]
    reduction_type: str
    body: Value
    layout: Layout
    input_size: tuple[int, ...]
    axes: tuple[int, ...]
    origins: tuple[str, ...] = ()
    aten: str = ""

    def __post_init__(self) -> None:
        if self.reduction_type not in REDUCTION_TYPES:
            raise ValueError(f"unknown reduction {self.reduction_type}")
        if (self.reduction_type in WELFORD_TYPES) != isinstance(self.body, Welford):
            raise ValueError(f"a {self.reduction_type} reduction of {type(self.body).__name__}")

    @property
    def dtype(self) -> torch.dtype:
        return self.layout.dtype

    @property
    def vars(self) -> tuple[Var, ...]:
        return make_vars("i", self.size)

    @property
    def reduction_vars(self) -> tuple[Var, ...]:
        return make_vars("r", self.reduction_size)


@dataclass(frozen=True)
class TensorArg:
    """A strided view of a materialised buffer, passed to an extern kernel or returned."""

    buf: str
    layout: Layout


@dataclass(frozen=True)
class ExternKernel:
    """A call of an aten op on materialised tensors (cuBLAS/cuDNN/...), e.g.
    `aten.convolution.default`. `args`/`kwargs` hold TensorArgs, (nested) lists of them, and
    plain Python constants. Outputs: one buffer per tensor the op returns, in order."""

    name: str
    op: str  # e.g. "aten.convolution.default"
    args: tuple[Any, ...]
    kwargs: tuple[tuple[str, Any], ...]
    outputs: tuple[tuple[str, Layout], ...]  # (buffer name, layout it must have)
    origins: tuple[str, ...] = ()
    aten: str = ""
    # Where each output sits in the op's result flattened with its Nones kept
    # (compiler.support.results.flat_result): eager may return None where the meta function
    # returns an empty tensor (_native_multi_head_attention's weights without need_weights).
    positions: tuple[int, ...] = ()


Node = Union[Pointwise, Reduction, ExternKernel]
Buffer = Union[InputBuffer, ConstantBuffer, Pointwise, Reduction]


@dataclass(frozen=True)
class Graph:
    """A lowered graph: nodes in a valid execution order and the outputs.

    `outputs` mirrors the aten graph's output structure flattened: each entry is a TensorArg
    (a view of a buffer), or a Python constant (None, int, ...).
    """

    inputs: tuple[InputBuffer, ...]
    constants: tuple[ConstantBuffer, ...]
    nodes: tuple[Node, ...]
    outputs: tuple[Any, ...]
    source_lines: dict[str, Any] = field(
        default_factory=dict, compare=False
    )  # FX node -> SourceLine
    # aten nodes run as extern calls because they make or read another device's tensors
    # (compiler/lowering/core.py): host work a CUDA graph could not replay
    off_device: tuple[str, ...] = field(default=(), compare=False)

    def node_outputs(self) -> dict[str, Layout]:
        """Every buffer name the nodes define, with its layout."""
        out: dict[str, Layout] = {}
        for n in self.nodes:
            if isinstance(n, ExternKernel):
                out.update(dict(n.outputs))
            else:
                out[n.name] = n.layout
        return out

    def buffer_layouts(self) -> dict[str, Layout]:
        out = {b.name: b.layout for b in self.inputs}
        out.update({c.name: c.layout for c in self.constants})
        out.update(self.node_outputs())
        return out
