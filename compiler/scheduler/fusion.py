"""The fusion scheduler: IR Graph -> Schedule (kernels and extern calls, in order).

Four passes, and between the first two one more for GPUs:

1. inline — a Pointwise node that nothing needs as a real buffer (not a graph output, not an
   extern argument, not a gather table) is substituted into its consumers' bodies, so chains
   of pointwise ops, and pointwise prologues of reductions, become one expression. Nodes
   whose body is large and read by several consumers stay materialised instead of being
   recomputed, and for CPU kernels so do small bodies that consumers would recompute many
   times over: costly values broadcast or read by many (a per-channel rsqrt read per
   pixel, rotary embeddings' cos and sin read by every layer's query and key) and values
   read by several consumers that gather or load several buffers (a residual stream).
   split — for targets that give their processor count (GPUs), a reduction with few outputs
   and long rows becomes two stages, partials per chunk then per output, so it fills the
   device (compiler/scheduler/split.py).
2. group — the remaining nodes, in order, join an earlier kernel when they iterate over the
   same space (a pointwise node of the kernel's shape, of its reduced input's shape, or of
   its output shape; a reduction over the same input and axes) and every value they read
   from that kernel is at the point being computed (so it is still in registers). A node
   never joins a kernel launched before something it depends on.
3. finish — each group becomes a `KernelGroup` in its own loop variables, with adjacent
   dimensions merged where every address allows (a contiguous 4-d add becomes a 1-d loop),
   `Ref`s for values computed in the same kernel, stores only for buffers needed outside,
   and the buffers each launch frees.
4. in place — a copy of a new value into a mutated graph input is folded into the kernel
   computing that value, which then stores into the input directly (inplace.py).
5. horizontal — for emitters that launch them (Triton), runs of independent pointwise
   kernels (an optimizer's per-parameter updates) become one combined kernel each
   (horizontal.py).

No kernel spans two devices: a node joins only a kernel of its own device, a copy into an
input of another device stays a copy, and the finished schedule is checked: every kernel's
buffers on one device, the one its emitter targets (the lowering gives whatever reads or
makes another device's tensors to extern calls, compiler/lowering/core.py).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

import torch
from torch.utils._pytree import tree_flatten

from compiler.ir.index import Index, IndexError_, Var, make_vars
from compiler.ir.nodes import (
    Constant,
    ExternKernel,
    Graph,
    IndexValue,
    Layout,
    Load,
    Node,
    Op,
    Pointwise,
    Reduction,
    Ref,
    TensorArg,
    Value,
    Welford,
    iter_values,
    loads,
    op_count,
)
from compiler.ir.transform import inline_loads, rewrite, substitute_indices, substitution
from compiler.scheduler.horizontal import combine
from compiler.scheduler.inplace import write_in_place
from compiler.scheduler.kernel import ExternCall, KernelGroup, Launch, Schedule, Step
from compiler.scheduler.split import split_reductions

INLINE_ALWAYS_OPS = 8  # bodies this small are recomputed in every consumer
INLINE_MAX_OPS = 160  # larger bodies are materialised rather than recomputed by consumers
# A node with a costly operation whose consumers together iterate over this many times more
# points (inference batch norm's rsqrt(var + eps) per channel, read per pixel; a decoder's
# rotary cos and sin, read by the query and key of every layer and head) is computed once
# into its buffer rather than per consumer point.
BROADCAST_MATERIALISE = 8
# A node read by several consumers whose body loads more buffers than this, or gathers, is
# materialised: every consumer would load them all again, and a reduction consumer once per
# pass over its row. A transformer's residual stream, each layer's output added to the
# embedding, was otherwise re-added from every layer's output by each later norm (a 4-layer
# decoder's last RMSNorm loaded 5 buffers and the embedding table, twice per row).
REREAD_MAX_BUFFERS = 3
COSTLY_OPS = frozenset(
    {
        "truediv", "floordiv", "remainder", "fmod", "pow", "sqrt", "rsqrt", "reciprocal",
        "exp", "exp2", "expm1", "log", "log2", "log1p", "sin", "cos", "tan", "asin", "acos",
        "atan", "atan2", "sinh", "cosh", "tanh", "sigmoid", "erf",
    }
)  # fmt: skip
SCAN_LAUNCHES = 16  # how far back a node looks for a kernel to join
UNRELATED_JOIN_MAX_BYTES = 1 << 20  # larger outputs join only kernels they share data with


# ---- pass 1: inline ------------------------------------------------------------------------


def required_buffers(graph: Graph) -> set[str]:
    """Buffers that must exist in memory: outputs, extern arguments, gather tables. Kept on
    the graph (immutable), which three passes ask."""
    if "_required" not in graph.__dict__:
        object.__setattr__(graph, "_required", frozenset(_required(graph)))
    return set(graph.__dict__["_required"])


def _required(graph: Graph) -> set[str]:
    need = {o.buf for o in graph.outputs if isinstance(o, TensorArg)}
    for n in graph.nodes:
        if isinstance(n, ExternKernel):
            flat, _ = tree_flatten((n.args, [v for _, v in n.kwargs]))
            need |= {a.buf for a in flat if isinstance(a, TensorArg)}
        else:
            for ld in loads(n.body):
                if any(not isinstance(i, Index) for i in ld.indices):
                    need.add(ld.buf)
    return need


def inline(
    graph: Graph, materialise_recomputed: bool = False
) -> tuple[list[Node], dict[str, dict[str, None]], dict[str, dict[str, None]]]:
    """The nodes that remain after substituting inlinable pointwise nodes into consumers
    (their bodies then read only materialised buffers), and for each node the aten node
    names (which name its kernel) and the FX nodes it now computes: its own and those of the
    nodes inlined into it, in graph order.

    A producer is inlinable when it is not required in memory, its own (already inlined)
    body is at most INLINE_MAX_OPS ops, it is cheap or read by one consumer, and (with
    `materialise_recomputed`, for CPUs, where a GPU would rather save the launch) it is not
    a costly value its consumers would compute many times over (BROADCAST_MATERIALISE), nor
    one that several consumers would reload from many buffers (REREAD_MAX_BUFFERS); a
    materialised node cuts the chain, so bodies cannot grow without bound."""
    need = required_buffers(graph)
    reduced = {n.name for n in graph.nodes if isinstance(n, Reduction)}
    readers: dict[str, int] = {}
    reader_points: dict[str, int] = {}  # points of the loop nests reading a buffer, summed
    for n in graph.nodes:
        if not isinstance(n, ExternKernel):
            points = _numel(n.input_size if isinstance(n, Reduction) else n.size)
            for buf in {ld.buf for ld in loads(n.body)}:
                readers[buf] = readers.get(buf, 0) + 1
                reader_points[buf] = reader_points.get(buf, 0) + points
    bodies: dict[str, tuple[tuple[str, ...], Value]] = {}
    names: dict[str, dict[str, None]] = {}
    origins: dict[str, dict[str, None]] = {}
    inlined_nodes: dict[str, Node] = {}
    kept: list[Node] = []
    for n in graph.nodes:
        if isinstance(n, ExternKernel):
            kept.append(n)
            continue
        for p in _not_inlinable(n, bodies):  # read at coordinates its body cannot take
            kept.append(inlined_nodes[p])
            del bodies[p]
        inlined = [ld.buf for ld in loads(n.body) if ld.buf in bodies]
        names[n.name] = {a: None for b in inlined for a in names[b]} | {n.aten: None}
        origins[n.name] = {o: None for b in inlined for o in origins[b]} | dict.fromkeys(n.origins)
        n = _with_body(n, inline_loads(n.body, bodies) if inlined else n.body)
        ops = op_count(n.body)
        cheap = ops <= INLINE_ALWAYS_OPS or readers.get(n.name, 0) <= 1
        if (
            isinstance(n, Pointwise)
            and n.name not in need
            and cheap
            and ops <= INLINE_MAX_OPS
            and not (materialise_recomputed and _recomputed(n, readers, reader_points, reduced))
        ):
            bodies[n.name] = (tuple(v.name for v in n.vars), n.body)
            inlined_nodes[n.name] = n
        else:
            kept.append(n)
    return kept, names, origins


def _recomputed(
    n: Pointwise, readers: dict[str, int], reader_points: dict[str, int], reduced: set[str]
) -> bool:
    """Whether inlining `n` would make its consumers recompute it many times over (values
    computed from a reduction aside: layer norm's rsqrt(var + eps) is computed once per row
    in the reduction's own kernel anyway)."""
    body_loads = loads(n.body)
    if readers.get(n.name, 0) > 1 and (
        len({ld.buf for ld in body_loads}) > REREAD_MAX_BUFFERS
        or any(not isinstance(i, Index) for ld in body_loads for i in ld.indices)
    ):
        return True
    return (
        reader_points.get(n.name, 0) >= BROADCAST_MATERIALISE * max(_numel(n.size), 1)
        and any(isinstance(v, Op) and v.op in COSTLY_OPS for v in iter_values(n.body))
        and not any(ld.buf in reduced for ld in body_loads)
    )


def _numel(size: tuple[int, ...]) -> int:
    out = 1
    for s in size:
        out *= s
    return out


def _not_inlinable(n: Node, bodies: dict) -> list[str]:
    """Producers whose body cannot be evaluated at the coordinates `n` reads them at (a
    reshape's floor division at a padded, possibly negative, coordinate)."""
    out = []
    shifted = (ld.buf for ld in loads(n.body) if ld.buf in bodies and _may_be_negative(ld))
    for p in dict.fromkeys(shifted):
        try:
            inline_loads(n.body, {p: bodies[p]})
        except IndexError_:
            out.append(p)
    return out


def _may_be_negative(ld: Load) -> bool:
    return any(isinstance(i, Index) and i.bounds()[0] < 0 for i in ld.indices)


def _with_body(n: Node, body: Value) -> Node:
    if body is n.body:
        return n
    return type(n)(**{**n.__dict__, "body": body})


# ---- pass 2: group -------------------------------------------------------------------------


@dataclass
class _Group:
    index: int
    full_size: tuple[int, ...]
    axes: tuple[int, ...]
    device: torch.device
    # (node, "full" | "outer" | "outer_unit" | "reduce")
    members: list[tuple[Node, str]] = field(default_factory=list)
    space: dict[str, str] = field(default_factory=dict)  # buffer -> "full" | "outer"
    # buffers of "outer_unit" members: their size-1 dims, which loads address with 0
    units: dict[str, tuple[int, ...]] = field(default_factory=dict)
    reads: set[str] = field(default_factory=set)  # buffers its members load

    @property
    def outer_size(self) -> tuple[int, ...]:
        return tuple(s for k, s in enumerate(self.full_size) if k not in self.axes)


def _full_coords(node: Node, role: str, axes: tuple[int, ...]) -> tuple[tuple, tuple]:
    """(full-space coordinates, outer coordinates) of the point `node` computes, in its vars."""
    if role == "full":
        full = tuple(Index.of(v) for v in node.vars)
        return full, tuple(c for k, c in enumerate(full) if k not in axes)
    if role == "outer":
        return (), tuple(Index.of(v) for v in node.vars)
    if role == "outer_unit":  # its size-1 dims dropped, it is the kernel's outer space
        return (), tuple(Index.of(v) for v, s in zip(node.vars, node.size) if s != 1)
    ivars, rvars = iter(node.vars), iter(node.reduction_vars)
    full = tuple(
        Index.of(next(rvars) if k in axes else next(ivars)) for k in range(len(node.input_size))
    )
    return full, tuple(Index.of(v) for v in node.vars)


def _without_units(size: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(s for s in size if s != 1)


def _role(node: Node, g: _Group) -> str | None:
    if isinstance(node, Pointwise):
        if node.size == g.full_size:
            return "full"
        if g.axes and node.size == g.outer_size:
            return "outer"
        # Batch norm's per-channel math on the statistics, shaped [1, C, 1, 1], after a
        # reduction to [C]: one more step of the reducing kernel instead of a kernel each.
        if (
            g.axes
            and 1 not in g.outer_size
            and _without_units(node.size) == g.outer_size
            and len(node.size) > len(g.outer_size)
        ):
            return "outer_unit"
        return None
    if isinstance(node, Reduction) and node.input_size == g.full_size:
        if node.axes == g.axes or (not g.axes and all(sp == "full" for sp in g.space.values())):
            return "reduce"
    return None


def _fits(node: Node, role: str, g: _Group, axes: tuple[int, ...]) -> bool:
    full, outer = _full_coords(node, role, axes)
    for ld in loads(node.body):
        space = g.space.get(ld.buf)
        if space is None:
            continue
        idx = tuple(ld.indices)
        units = g.units.get(ld.buf)
        if units is not None:
            # Read per channel by the outer steps only: a full-space node joining here would
            # run over the whole input in the kernel's grid of channels.
            if role not in ("outer", "outer_unit") or any(idx[k] != Index.of(0) for k in units):
                return False
            idx = tuple(c for k, c in enumerate(idx) if k not in units)
        if space == "full" and (role in ("outer", "outer_unit") or idx != full):
            return False
        if space == "outer" and idx != outer:
            return False
    return True


def group(nodes: list[Node]) -> list[_Group | ExternKernel]:
    launches: list[_Group | ExternKernel] = []
    producer: dict[str, int] = {}
    for node in nodes:
        deps = (
            {ld.buf for ld in loads(node.body)}
            if not isinstance(node, ExternKernel)
            else _extern_deps(node)
        )
        after = max((producer[d] for d in deps if d in producer), default=-1)
        if isinstance(node, ExternKernel):
            launches.append(node)
            for name, _ in node.outputs:
                producer[name] = len(launches) - 1
            continue
        chosen = None
        for g in reversed(launches[max(after, len(launches) - SCAN_LAUNCHES, 0) :]):
            if not isinstance(g, _Group) or g.device != node.layout.device:
                continue
            role = _role(node, g)
            axes = node.axes if role == "reduce" else g.axes
            if role is not None and _fits(node, role, g, axes) and _worth_joining(node, deps, g):
                chosen = (g, role, axes)
                break
        if chosen is None:
            if isinstance(node, Reduction):
                g = _Group(len(launches), node.input_size, node.axes, node.layout.device)
                role = "reduce"
            else:
                g = _Group(len(launches), node.size, (), node.layout.device)
                role = "full"
            launches.append(g)
        else:
            g, role, axes = chosen
            g.axes = axes
        g.members.append((node, role))
        g.space[node.name] = "full" if role == "full" else "outer"
        if role == "outer_unit":
            g.units[node.name] = tuple(k for k, size in enumerate(node.size) if size == 1)
        g.reads |= deps
        producer[node.name] = g.index
    return launches


def _worth_joining(node: Node, deps: set[str], g: _Group) -> bool:
    """A node that shares no data with a kernel saves only a launch by joining it, and runs
    that much earlier: a large output then lives longer, and buffers allocated together
    are fresh memory (page faults) where one at a time reuse the last one freed (the
    weight copies of a channels-last graph, each needed by the next convolution only)."""
    if deps & (g.reads | g.space.keys()):
        return True
    return node.layout.numel * node.layout.dtype.itemsize < UNRELATED_JOIN_MAX_BYTES


def _extern_deps(node: ExternKernel) -> set[str]:
    flat, _ = tree_flatten((node.args, [v for _, v in node.kwargs]))
    return {a.buf for a in flat if isinstance(a, TensorArg)}


# ---- pass 3: finish ------------------------------------------------------------------------


def schedule(
    graph: Graph,
    materialise_recomputed: bool = False,
    processors: int | None = None,
    device: torch.device | None = None,
    horizontal: bool = False,
) -> Schedule:
    """Fuse `graph` into launches (see `inline` for `materialise_recomputed`). `processors`:
    how many the target runs at once (a GPU's SMs), for splitting reductions with few
    outputs into two stages (compiler/scheduler/split.py); None never splits. `device`:
    the device the kernels are generated for (checked: `check_devices`). `horizontal`:
    independent pointwise kernels launch as one (compiler/scheduler/horizontal.py)."""
    nodes, names, origins = inline(graph, materialise_recomputed)
    split = split_reductions(nodes, names, origins, required_buffers(graph), processors)
    names, origins = split.names, split.origins
    launches = group(split.nodes)
    layouts = graph.buffer_layouts() | split.layouts
    needed_outside = _needed_outside(graph, launches)
    out: list[Launch] = []
    counter = 0
    for item in launches:
        if isinstance(item, ExternKernel):
            out.append(ExternCall(item))
            continue
        out.append(_finish(item, layouts, needed_outside, names, origins, split.notes, counter))
        counter += 1
    out = write_in_place(out, graph)
    if horizontal:
        out = combine(out, layouts, {b.name for b in graph.inputs})
    materialised = {b.name: b.layout for b in graph.inputs}
    materialised.update({c.name: c.layout for c in graph.constants})
    for launch in out:
        for name in launch.writes:
            materialised[name] = layouts[name]
    check_devices(out, materialised, device)
    return Schedule(
        graph.inputs,
        graph.constants,
        tuple(out),
        materialised,
        _frees(out, graph),
        graph.outputs,
        graph.source_lines,
    )


class MixedDevices(RuntimeError):
    """A kernel would be handed memory of another device than its own (the caller runs the
    graph eagerly rather than launch it: a CUDA kernel given a CPU pointer faults)."""


def check_devices(
    launches: list[Launch], layouts: dict[str, Layout], device: torch.device | None = None
) -> None:
    """Every kernel reads and writes buffers of one device, `device` where given."""
    for launch in launches:
        if not isinstance(launch, KernelGroup):
            continue
        bufs = [b for b in (*launch.reads, *launch.writes) if b in layouts]
        devices = {layouts[b].device for b in bufs}
        if device is not None:
            devices.add(device)
        if len(devices) > 1:
            where = ", ".join(f"{b} on {layouts[b].device}" for b in bufs)
            target = f" for {device}" if device is not None else ""
            raise MixedDevices(f"kernel {launch.name}{target} would get {where}")


def _needed_outside(graph: Graph, launches: list) -> set[str]:
    """buffer -> read by some other launch (or an output, or a gather)."""
    where: dict[str, int] = {}
    for k, item in enumerate(launches):
        if isinstance(item, _Group):
            for n, _ in item.members:
                where[n.name] = k
    need = set(required_buffers(graph))
    for k, item in enumerate(launches):
        if isinstance(item, _Group):
            for n, _ in item.members:
                need |= {ld.buf for ld in loads(n.body) if where.get(ld.buf, k) != k}
    return need


def _finish(
    g: _Group,
    layouts: dict[str, Layout],
    needed: set[str],
    names: dict,
    origins: dict,
    notes: dict[str, str],
    counter: int,
) -> KernelGroup:
    outer = make_vars("x", g.outer_size)
    red = make_vars("r", tuple(g.full_size[a] for a in g.axes))
    it_x, it_r = iter(outer), iter(red)
    full = tuple(
        Index.of(next(it_r) if k in g.axes else next(it_x)) for k in range(len(g.full_size))
    )
    outer_idx = tuple(Index.of(v) for v in outer)
    steps: list[Step] = []
    internal = {n.name: role for n, role in g.members}
    for node, role in g.members:
        if role == "full":
            mapping = dict(zip((v.name for v in node.vars), full))
            point = full
        elif role == "outer":
            mapping = dict(zip((v.name for v in node.vars), outer_idx))
            point = outer_idx
        elif role == "outer_unit":
            it = iter(outer_idx)
            point = tuple(Index.of(0) if s == 1 else next(it) for s in node.size)
            mapping = dict(zip((v.name for v in node.vars), point))
        else:  # a reduction: its i* are the outer vars, its r* the reduced dims in order
            mapping = dict(zip((v.name for v in node.vars), outer_idx))
            reduced = (c for k, c in enumerate(full) if k in g.axes)
            mapping.update(zip((v.name for v in node.reduction_vars), reduced))
            point = outer_idx
        value = _refs(node.body, mapping, internal)
        loop = "inner" if role == "reduce" or (role == "full" and g.axes) else "outer"
        store = point if node.name in needed else None
        steps.append(
            Step(
                node.name,
                loop,
                value,
                node.dtype,
                node.reduction_type if isinstance(node, Reduction) else None,
                store,
            )
        )
    steps, outer, red = _merge_dims(steps, outer, red, layouts)
    if not red:  # every reduced dim has size 1: each reduction reads one element
        steps = [_one_element(s) for s in steps]
    kind = "reduction" if g.axes else "pointwise"
    reads = tuple(dict.fromkeys(ld.buf for s in steps for ld in loads(s.value)))
    writes = tuple(s.name for s in steps if s.store is not None)
    fused = tuple(dict.fromkeys(o for n, _ in g.members for o in origins.get(n.name, n.origins)))
    ops = {a for n, _ in g.members for a in names.get(n.name, {n.aten: None})}
    name = _kernel_name(kind, ops, counter)
    return KernelGroup(
        name,
        kind,
        outer,
        red,
        tuple(steps),
        reads,
        writes,
        fused,
        tuple(n.name for n, _ in g.members),
        tuple(notes[n.name] for n, _ in g.members if n.name in notes),
    )


def _refs(value: Value, mapping: dict[str, Index], internal: dict[str, str]) -> Value:
    """`value` with its variables substituted by `mapping` (in one rewrite), where loads of
    buffers computed in the same kernel (at the current point, which grouping guaranteed)
    read the step's value instead."""

    def on_load(ld: Load, indices: tuple, mask: Value | None) -> Value:
        if ld.buf not in internal:
            return Load(ld.buf, indices, ld.dtype, mask)
        ref = Ref(ld.buf, ld.dtype)
        if mask is None:
            return ref
        return Op("where", (mask, ref, Constant(0, ld.dtype)), ld.dtype)

    return rewrite(value, on_load, substitution(mapping))


class _Addresses:
    """The addresses and index values of a kernel's steps, through the variable
    substitutions of `_merge_dims`: each distinct index is substituted once per merge, and the
    steps are rewritten once at the end, with the indices they would have had if rewritten
    at each merge."""

    def __init__(self, steps: list[Step]) -> None:
        self.current: dict[Index, Index] = {}  # each index of the steps -> its form now
        self.sites: dict[tuple[str, tuple], None] = {}  # (buffer, coordinates) addressed
        self.values: dict[Index, None] = {}  # indices used as numbers
        for s in steps:
            for v in iter_values(s.value):
                if isinstance(v, Load):
                    coords = tuple(i if isinstance(i, Index) else None for i in v.indices)
                    self._site(v.buf, coords)
                elif isinstance(v, IndexValue):
                    self.values[v.index] = None
                    self.current[v.index] = v.index
            if s.store is not None:
                self._site(s.name, s.store)

    def _site(self, buf: str, coords: tuple) -> None:
        self.sites[(buf, coords)] = None
        for i in coords:
            if i is not None:
                self.current[i] = i

    def exprs(self, layouts: dict[str, Layout]) -> list[Index]:
        """Every static address part and index value, deduplicated."""
        out: dict[Index, None] = {}
        for buf, coords in self.sites:
            # a run-time coordinate (None) adds nothing to the static part (`address`)
            now = tuple(self.current[i] if i is not None else 0 for i in coords)
            out[layouts[buf].index(now)] = None
        for i in self.values:
            out[self.current[i]] = None
        return list(out)

    def substitute(self, mapping: dict[str, Index]) -> None:
        self.current = {k: v.subs(mapping) for k, v in self.current.items()}

    def rewrite(self, steps: list[Step]) -> list[Step]:
        if all(k == v for k, v in self.current.items()):
            return steps
        new = self.current.__getitem__
        out = []
        for s in steps:
            store = tuple(new(i) for i in s.store) if s.store is not None else None
            value = substitute_indices(s.value, new)
            out.append(Step(s.name, s.loop, value, s.dtype, s.reduction_type, store))
        return out


def _mergeable(a: Var, b: Var, exprs: list[Index]) -> bool:
    if b.size == 0:  # an empty loop runs nothing; merging would divide by its size
        return False
    for e in exprs:
        ca, cb = e.coefficient(a), e.coefficient(b)
        if ca is None or cb is None or ca != cb * b.size:
            return False
    return True


def _merge_dims(
    steps: list[Step], outer: tuple[Var, ...], red: tuple[Var, ...], layouts
) -> tuple[list[Step], tuple[Var, ...], tuple[Var, ...]]:
    """Merge adjacent loop dims `a, b` into one var `m` (a = m // |b|, b = m % |b|) where every
    address is linear in both with coeff(a) == coeff(b) * |b|; then renumber."""
    groups = {"x": list(outer), "r": list(red)}
    addresses = _Addresses(steps)
    changed = True
    while changed:
        changed = False
        exprs = addresses.exprs(layouts)
        for vs in groups.values():
            for k in range(len(vs) - 1):
                a, b = vs[k], vs[k + 1]
                if _mergeable(a, b, exprs):
                    m = Var(a.name + "m", a.size * b.size)
                    addresses.substitute(
                        {a.name: Index.of(m) // b.size, b.name: Index.of(m) % b.size}
                    )
                    vs[k : k + 2] = [m]
                    changed = True
                    break
            if changed:
                break
    # drop size-1 dims and renumber x0.., r0..
    final: dict[str, tuple[Var, ...]] = {}
    mapping: dict[str, Index] = {}
    for prefix, vs in groups.items():
        kept = [v for v in vs if v.size != 1]
        new = make_vars(prefix, tuple(v.size for v in kept))
        for v in vs:
            mapping[v.name] = Index()
        for old, nv in zip(kept, new):
            mapping[old.name] = Index.of(nv)
        final[prefix] = new
    addresses.substitute(mapping)
    return addresses.rewrite(steps), final["x"], final["r"]


def _one_element(step: Step) -> Step:
    """A reduction over one element is that element, but argmax/argmin give its position:
    0 (emitters run such a group as pointwise code, storing the step's value). A Welford
    reduction of one state is that state's mean or m2 (a sum of one value)."""
    if step.reduction_type in ("argmax", "argmin"):
        return dataclasses.replace(step, value=Constant(0, torch.int64))
    if isinstance(step.value, Welford):
        part = step.value.mean if step.reduction_type == "welford_mean" else step.value.m2
        return dataclasses.replace(step, value=part, reduction_type="sum")
    return step


_SUFFIX = re.compile(r"_\d+$")


def _kernel_name(kind: str, aten_names: set[str], counter: int) -> str:
    ops = sorted({_SUFFIX.sub("", a) for a in aten_names if a})[:6]
    prefix = "triton_red_fused" if kind == "reduction" else "triton_poi_fused"
    return "_".join([prefix, *ops, str(counter)])


def _frees(launches: list[Launch], graph: Graph) -> tuple[tuple[str, ...], ...]:
    keep = {o.buf for o in graph.outputs if isinstance(o, TensorArg)}
    keep |= {b.name for b in graph.inputs} | {c.name for c in graph.constants}
    last: dict[str, int] = {}
    for k, launch in enumerate(launches):
        used: set[str] = set(launch.writes)
        if isinstance(launch, KernelGroup):
            used |= set(launch.reads)
        else:
            used |= _extern_deps(launch.node)
        for b in used:
            last[b] = k
    frees: list[list[str]] = [[] for _ in launches]
    for b, k in last.items():
        if b not in keep:
            frees[k].append(b)
    return tuple(tuple(sorted(f)) for f in frees)
