"""Split reductions: a reduction with few outputs and long rows becomes two, so it fills a GPU.

One row per output (XBLOCK rows per program) leaves a GPU mostly idle when there are few
outputs: batch norm's statistics over N*H*W = 16*64*64 elements for each of 64 channels are
64 rows on a 132-SM H100, each looping over 65536 elements. Split, the reduction runs in two
stages:

    stage 1   partial[o, s] = reduce(body over chunk s of row o)   (S chunks per output)
    stage 2   out[o]        = reduce(partial[o, s] over s)

Stage 1 keeps the reduction's fused prologue (its body was inlined before this pass: relu
backward's `where(x <= 0, 0, g)` and batch norm's `(x - mean) * rstd` are computed in it, not
materialised) and reads the inputs once, as the unsplit kernel did; stage 2 reads
outputs * S partials, and the scheduler fuses the reduction's epilogue into it as it did into
the unsplit kernel. Partials are in the accumulation dtype (float32 for half types, int64
for integer sums, bool for any/all); there are no atomics, so results are the same run to run.

The chunks are cut from the reduced dimensions outermost first (in the order of the reduced
tensor's dimensions, which for NCHW and channels-last tensors is also their memory order, so
a chunk is the innermost, contiguous, part of a row): whole leading dimensions, then one
dimension cut in `parts` pieces of `piece` indices. A cut that divides that dimension needs
no mask; otherwise the last piece is masked and yields the reduction's identity past the end.

A Welford reduction (a variance's m2, compiler/ir/nodes.py) splits into partial Welford states:
stage 1 writes each chunk's mean and m2 (two partial buffers, computed in one pass), and stage
2 combines them with the chunks' element counts, which the plan gives (no third buffer). So a
training batch norm's statistics, the m2 and the sum for the mean, are two kernels.

Which reductions split (SPLIT_MIN_ELEMENTS, MIN_CHUNK, ROWS_PER_PROCESSOR; tests monkeypatch
them to split small shapes): sum, prod, max, min, any, all and the Welford reductions
(argmax/argmin stay whole)
with at least SPLIT_MIN_ELEMENTS elements per output, when the outputs are fewer than
ROWS_PER_PROCESSOR rows per processor of the target; S then brings the rows near that
number, with chunks of at least MIN_CHUNK elements. The target's processors come from the
kernel emitter (a GPU's SMs); emitters that give none (C++: its OpenMP reduction clauses
already share one row among the cores) never split.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from compiler.ir.index import Index, Var, contiguous_strides, make_vars
from compiler.ir.nodes import (
    WELFORD_TYPES,
    Constant,
    ExternKernel,
    IndexValue,
    Layout,
    Load,
    Node,
    Op,
    Pointwise,
    Reduction,
    Value,
    Welford,
    loads,
)
from compiler.ir.transform import add_mask, inline_loads, substitute

SPLIT_MIN_ELEMENTS = 4096  # shorter rows stay one reduction (persistent or a short loop)
MIN_CHUNK = 1024  # stage-1 rows at least this long (one Triton block of 1024 lanes)
# Stage 1 aims at this many rows per processor: 32 rows of ~1024 elements, 4 rows to a
# program (the Triton emitter's 4096-element blocks), are 8 programs per SM of a GPU.
ROWS_PER_PROCESSOR = 32
SPLITTABLE = ("sum", "prod", "max", "min", "any", "all", "welford_mean", "welford_m2")


@dataclass(frozen=True)
class SplitPlan:
    """Chunks of a reduction's rows: stage 1's extra output dims are the reduced dims before
    `dim` and `parts` pieces of dim `dim`; its reduced dims are a `piece` of dim `dim` and the
    reduced dims after it."""

    dim: int  # the reduced dimension (position in reduction_size) that is cut
    parts: int
    piece: int

    def chunks(self, dims: tuple[int, ...]) -> tuple[int, ...]:
        """Stage 1's extra output sizes (S = their product)."""
        return dims[: self.dim] + (self.parts,)

    def chunk_dims(self, dims: tuple[int, ...]) -> tuple[int, ...]:
        """Stage 1's reduced sizes (the chunk length is their product)."""
        return (self.piece,) + dims[self.dim + 1 :]

    def masked(self, dims: tuple[int, ...]) -> bool:
        return self.parts * self.piece != dims[self.dim]


def plan_split(outputs: int, dims: tuple[int, ...], processors: int) -> SplitPlan | None:
    """How to cut rows of `dims` (reduced sizes, outermost first) for `outputs` outputs on a
    target with `processors` processors; None when one stage pays as well."""
    total = math.prod(dims)
    if outputs < 1 or total < SPLIT_MIN_ELEMENTS:
        return None
    most = total // MIN_CHUNK  # more chunks would be shorter than MIN_CHUNK
    want = min(ROWS_PER_PROCESSOR * processors // outputs, most)
    if want < 2:
        return None
    # Cuts along a divisor need no mask: take the one with S nearest `want` (within 2x).
    best: tuple[float, SplitPlan] | None = None
    lead = 1
    for j, d in enumerate(dims):
        for parts in range(2, d + 1):
            if lead * parts > most:
                break
            if d % parts == 0:
                score = abs(math.log(lead * parts / want))
                if best is None or score < best[0]:
                    best = (score, SplitPlan(j, parts, d // parts))
        lead *= d
        if lead > most:
            break
    if best is not None and best[0] <= math.log(2):
        return best[1]
    # Otherwise cut the dimension where S reaches `want`, masking the last piece.
    lead = 1
    for j, d in enumerate(dims):
        if lead * d > want:
            parts = -(-want // lead)
            piece = -(-d // parts)
            return SplitPlan(j, -(-d // piece), piece)
        lead *= d
    return None


def identity(reduction_type: str, dtype: torch.dtype) -> Constant:
    """The value that leaves a reduction unchanged (what masked-off lanes contribute)."""
    if dtype == torch.bool:
        return Constant(reduction_type in ("prod", "min", "all"), dtype)
    if reduction_type in ("sum", "any"):
        return Constant(0, dtype)
    if reduction_type in ("prod", "all"):
        return Constant(1, dtype)
    largest = reduction_type == "min"
    if dtype.is_floating_point:
        return Constant(math.inf if largest else -math.inf, dtype)
    info = torch.iinfo(dtype)
    return Constant(info.max if largest else info.min, dtype)


@dataclass(frozen=True)
class SplitResult:
    """The nodes with each split reduction replaced by its two stages (stage 2 keeps the
    reduction's name, so its consumers read it unchanged); the kernel-naming aten names and
    the FX nodes each node computes (as `inline` gives them, updated); the partial buffers'
    layouts; and for each stage a line saying what it is (for the kernel's header)."""

    nodes: list[Node]
    names: dict[str, dict[str, None]]
    origins: dict[str, dict[str, None]]
    layouts: dict[str, Layout]
    notes: dict[str, str]


def split_reductions(
    nodes: list[Node],
    names: dict[str, dict[str, None]],
    origins: dict[str, dict[str, None]],
    keep: set[str],
    processors: int | None,
) -> SplitResult:
    """Split every reduction of `nodes` (inlined, see compiler/scheduler/fusion.py) that
    `plan_split` says pays on the target. `keep`: buffers that must be in memory.

    A pointwise node the inline pass kept because several consumers read it (relu
    backward's gradient, read by batch norm backward's two sums and by its input gradient)
    would have been computed inside the unsplit reduction's kernel, which iterated over its
    points. Stage 1 iterates over chunks instead, so such a node is inlined into its
    consumers here rather than written to memory and read back: when every consumer reads
    it at its own point of the same shape and one of them is a split reduction."""
    plans = {}
    for n in nodes:
        if (
            processors
            and isinstance(n, Reduction)
            and n.reduction_type in SPLITTABLE
            and n.reduction_size
        ):
            plan = plan_split(math.prod(n.size), n.reduction_size, processors)
            if plan is not None:
                plans[n.name] = plan
    result = SplitResult([], dict(names), dict(origins), {}, {})
    if not plans:
        result.nodes.extend(nodes)
        return result
    absorbed = _absorbed(nodes, plans, keep)
    bodies: dict[str, tuple[tuple[str, ...], Value]] = {}
    for n in nodes:
        if isinstance(n, ExternKernel):
            result.nodes.append(n)
            continue
        inlined = [b for b in dict.fromkeys(ld.buf for ld in loads(n.body)) if b in bodies]
        if inlined:
            n = dataclasses.replace(n, body=inline_loads(n.body, bodies))
            for attr in ("names", "origins"):
                table = getattr(result, attr)
                table[n.name] = {a: None for b in inlined for a in table[b]} | table[n.name]
        if n.name in absorbed:
            bodies[n.name] = (tuple(v.name for v in n.vars), n.body)
        elif n.name in plans:
            _split(n, plans[n.name], result)
        else:
            result.nodes.append(n)
    return result


def _split(n: Reduction, plan: SplitPlan, result: SplitResult) -> None:
    firsts, second = _stages(n, plan)
    result.nodes.extend((*firsts, second))
    for first in firsts:
        result.layouts[first.name] = first.layout
        # Stage 1 computes the fused prologue: it takes the kernel name's ops and the FX
        # nodes; stage 2 is the reduction's own.
        result.names[first.name] = result.names[n.name]
        result.origins[first.name] = result.origins[n.name]
    result.names[n.name] = {n.aten: None}
    result.origins[n.name] = dict.fromkeys(n.origins)
    fx = f" (FX nodes {', '.join(n.origins)})" if n.origins else ""
    dims = n.reduction_size
    chunk, parts = math.prod(plan.chunk_dims(dims)), math.prod(plan.chunks(dims))
    ragged = ", the last one masked" if plan.masked(dims) else ""
    partials = " and ".join(f"{f.name}{list(f.size)}" for f in firsts)
    result.notes[firsts[0].name] = (
        f"Split reduction, stage 1 of 2: {n.reduction_type} {n.name}{fx} over "
        f"{math.prod(dims)} elements per output as {parts} chunks of {chunk}{ragged}, "
        f"into partials {partials}"
    )
    result.notes[n.name] = (
        f"Split reduction, stage 2 of 2: {n.reduction_type} {n.name}{fx} of the "
        f"{parts} partials per output in {' and '.join(f.name for f in firsts)}"
    )


def _point(n: Node) -> tuple[tuple[int, ...], tuple[Index, ...]]:
    """The shape `n` iterates over and its coordinates there, in its own variables."""
    if isinstance(n, Pointwise):
        return n.size, tuple(Index.of(v) for v in n.vars)
    ivars, rvars = iter(n.vars), iter(n.reduction_vars)
    full = tuple(
        Index.of(next(rvars) if k in n.axes else next(ivars)) for k in range(len(n.input_size))
    )
    return n.input_size, full


def _absorbed(nodes: list[Node], plans: dict[str, SplitPlan], keep: set[str]) -> set[str]:
    """Pointwise nodes, not needed in memory, that every consumer reads at its own point of
    the node's shape, with a split reduction among the consumers."""
    sizes = {n.name: n.size for n in nodes if isinstance(n, Pointwise) and n.name not in keep}
    ok: dict[str, bool] = {}
    feeds_split: set[str] = set()
    for n in nodes:
        if isinstance(n, ExternKernel):
            continue
        shape, point = _point(n)
        for ld in loads(n.body):
            if ld.buf not in sizes:
                continue
            own = sizes[ld.buf] == shape and tuple(ld.indices) == point
            ok[ld.buf] = ok.get(ld.buf, True) and own
            if n.name in plans:
                feeds_split.add(ld.buf)
    return {b for b in feeds_split if ok[b]}


def _stages(n: Reduction, plan: SplitPlan) -> tuple[list[Reduction], Reduction]:
    """Stage 1's reductions (one, or for welford_m2 the partial means and m2s both, which
    stage 2 combines) and stage 2."""
    dims = n.reduction_size
    k = len(n.size)
    chunks, chunk_dims = plan.chunks(dims), plan.chunk_dims(dims)
    svars = tuple(Var(f"i{k + t}", s) for t, s in enumerate(chunks))
    cvars = make_vars("r", chunk_dims)
    old = n.reduction_vars
    # Reduced index `dim` is piece `s` of the cut dimension, offset by r0 within it.
    position = Index.of(svars[-1]) * plan.piece + Index.of(cvars[0])
    mapping = {old[t].name: Index.of(svars[t]) for t in range(plan.dim)}
    mapping[old[plan.dim].name] = position
    mapping.update(
        {old[t].name: Index.of(cvars[t - plan.dim]) for t in range(plan.dim + 1, len(dims))}
    )
    body: Value = substitute(_pivoted(n), mapping)
    if plan.masked(dims):
        inside = Op(
            "lt",
            (IndexValue(position, torch.int64), Constant(dims[plan.dim], torch.int64)),
            torch.bool,
        )
        body = _masked(body, inside, n.reduction_type)
    acc = body.dtype
    size = n.size + chunks
    layout = Layout(size, _chunks_outermost(k, size), acc, n.layout.device)
    kinds = ("welford_mean", "welford_m2") if n.reduction_type == "welford_m2" else None
    names = (f"{n.name}_partial_mean", f"{n.name}_partial") if kinds else (f"{n.name}_partial",)
    firsts = [
        Reduction(
            name,
            size,
            chunk_dims,
            kind,
            body,
            layout,
            size + chunk_dims,
            tuple(range(len(size), len(size) + len(chunk_dims))),
            n.origins,
            n.aten,
        )
        for name, kind in zip(names, kinds or (n.reduction_type,))
    ]
    outer = tuple(Index.of(v) for v in n.vars)
    reduced = tuple(Index.of(v) for v in make_vars("r", chunks))
    partials = [Load(f.name, outer + reduced, acc) for f in firsts]
    if n.reduction_type in WELFORD_TYPES:
        m2 = partials[1] if kinds else Constant(0.0, acc)
        combined: Value = Welford(partials[0], m2, _chunk_weight(plan, dims, reduced, acc), acc)
    else:
        combined = partials[0]
    second = Reduction(
        n.name,
        n.size,
        chunks,
        n.reduction_type,
        combined,
        n.layout,
        size,
        tuple(range(k, len(size))),
        n.origins,
        n.aten,
    )
    return firsts, second


def _pivoted(n: Reduction) -> Value:
    """A variance's elements less the row's first one (var(x) = var(x - k) for any k): the
    chunks' partial means are then near 0 rather than near the data's mean, so stage 2 takes
    differences of means that float32 holds to its full precision (at a mean of 1000, a mean
    is only held to 6e-5, about 1e-5 of a unit variance's m2 once combined)."""
    body = n.body
    if n.reduction_type != "welford_m2" or not body.single_elements:
        return body
    pivot = substitute(body.mean, {v.name: Index() for v in n.reduction_vars})
    shifted = Op("sub", (body.mean, pivot), body.dtype)
    return Welford(shifted, body.m2, body.weight, body.dtype)


def _masked(body: Value, inside: Value, reduction_type: str) -> Value:
    """`body` where `inside` holds, the reduction's identity past the end of the row (for a
    Welford state: weight 0)."""

    def part(v: Value, fill: Constant) -> Value:
        return Op("where", (inside, add_mask(v, inside), fill), v.dtype)

    if isinstance(body, Welford):
        zero = Constant(0.0, body.dtype)
        m2 = body.m2 if body.single_elements else part(body.m2, zero)
        return Welford(part(body.mean, zero), m2, part(body.weight, zero), body.dtype)
    return part(body, identity(reduction_type, body.dtype))


def _chunk_weight(
    plan: SplitPlan, dims: tuple[int, ...], reduced: tuple[Index, ...], dtype: torch.dtype
) -> Value:
    """How many elements chunk `reduced` (stage 2's reduced coordinates) holds: the chunk
    length, less in the masked last piece. Known from the plan, so stage 1 stores no counts."""
    rest = math.prod(dims[plan.dim + 1 :])
    full = Constant(float(plan.piece * rest), dtype)
    if not plan.masked(dims):
        return full
    last = Constant(float((dims[plan.dim] - (plan.parts - 1) * plan.piece) * rest), dtype)
    is_last = Op(
        "eq",
        (IndexValue(reduced[-1], torch.int64), Constant(plan.parts - 1, torch.int64)),
        torch.bool,
    )
    return Op("where", (is_last, last, full), dtype)


def _chunks_outermost(k: int, size: tuple[int, ...]) -> tuple[int, ...]:
    """Strides of partials `[outputs..., chunks...]` stored chunk-major: lanes of a stage-1
    block that differ in output store (and for channels-last inputs load) neighbours."""
    order = list(range(k, len(size))) + list(range(k))
    strides = contiguous_strides(tuple(size[d] for d in order))
    out = [0] * len(size)
    for d, st in zip(order, strides):
        out[d] = st
    return tuple(out)
