"""The Triton emitter's combined ("combo") kernels: one `@triton.jit` function that runs
several independent pointwise kernels (compiler/scheduler/horizontal.py), one launch.

The parts keep their own sizes, buffers and results. Part k owns a range of program ids, one
per block of XBLOCK of its elements, from a table fixed when the graph is compiled, and its
programs run its code on block `pid - first_k`, exactly as the part's own kernel would run
that block.

Parts whose code is the same up to the names of their buffers and their sizes (an optimizer
step's updates of parameters of one dtype: one *kind*) share one body. A kind's parts own
consecutive programs; a program of the kind chooses its part's pointers, size and first
program with scalar `tl.where`s, one per part, then runs the body once:

    pid = tl.program_id(0)
    # kind 0: 3 parts, one body (programs 0..40)
    if pid < 41:
        # part 2 (programs 38..40): triton_poi_fused_..._3, 6912 elements; FX nodes ...
        k0_first = 38
        k0_numel = 6912
        k0_ptr0 = in_ptr9
        ...
        # part 1 (programs 37..37): ...
        k0_here = pid < 38
        k0_first = tl.where(k0_here, 37, k0_first)
        k0_numel = tl.where(k0_here, 3072, k0_numel)
        k0_ptr0 = tl.where(k0_here, in_ptr5, k0_ptr0)
        ...
        xoffset = (pid - k0_first) * XBLOCK
        xindex = xoffset + tl.arange(0, XBLOCK)
        xmask = xindex < k0_numel
        ...
    # kind 1: 1 part (programs 41..41)
    elif pid < 42:
        # part 3 ...: its own pointers and size, as its own kernel has them
        xnumel = 144
        xoffset = (pid - 41) * XBLOCK
        ...

Triton's compile time grows faster than the code it compiles (its coalescing pass walks
every memory access's slice, which through `pid` reaches every part's; ptxas allocates
registers across the whole function), so a combined kernel costs about one body per kind
instead of one per part: 32 AdamW updates went from 3.6 s to a 1-part kernel's ~0.3 s for
sm_90 (benchmarks/combo_compile.py). A kind is keyed by its body's text with the buffers
named by position, their dtypes and the index width, so parts that share a body compute
exactly what each computes alone, and by the power of two its size is a multiple of (up to
16), so that a shared size, a run-time value, lets Triton vectorise as each part's constant. Programs go kind by kind, so a kind's parts may own
programs out of the order of the parts. Each kind's names are its own (`k0_first`: Triton
joins a name defined in two branches of an if/elif chain, and asserts that its types agree)
and Triton keeps a name defined in one branch without an `else` inside that branch. The block
size is one for every part (the largest part's default), and stays fixed: the table of
program ids is written for it, so `max-autotune` leaves it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from compiler import config as settings
from compiler.codegen.common import KernelSource, kernel_arguments, store_order
from compiler.codegen.triton_writer import KernelWriter, Scope, default_config
from compiler.scheduler.kernel import KernelGroup, Schedule


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass
class _Kind:
    """Parts (indices into the group's parts, in order) that share one body, and each
    part's buffers in its writer's order: the body's j-th pointer is each part's j-th."""

    parts: list[int]
    slots: list[list[str]]
    int64: bool  # the body indexes in int64 (part of the kind's key)


def _body(
    part: KernelGroup, schedule: Schedule, names: dict[str, str], count: int
) -> tuple[list[str], KernelWriter]:
    """The lines of `part`'s body (from its coordinates on), its buffers named by `names`,
    its temporaries numbered from `count`."""
    w = KernelWriter(part, schedule)
    w.args = {b: names[b] for b in w.args}
    w.count = count
    lines: list[str] = []
    scope = Scope(lines, "        ")
    w.define_vars(scope, tuple(store_order(part, schedule.buffers)), "xindex")
    w.emit_pointwise_steps(scope, list(part.steps))
    return lines, w


def _kinds(group: KernelGroup, schedule: Schedule) -> list[_Kind]:
    """The parts grouped by their code, kinds in order of their first part."""
    kinds: dict[tuple, _Kind] = {}
    for k, part in enumerate(group.parts):
        slots = list(KernelWriter(part, schedule).args)
        lines, w = _body(part, schedule, {b: f"ptr{j}" for j, b in enumerate(slots)}, 0)
        dtypes = tuple(schedule.buffers[b].dtype for b in slots)
        # the size's power-of-two divisor, as Triton's alignment analysis sees a constant
        # size: a part whose mask allows 16-byte accesses keeps them in a shared body
        align = min(part.outer_numel & -part.outer_numel, 16)
        key = (tuple(lines), dtypes, w.int64, align)
        kind = kinds.setdefault(key, _Kind([], [], w.int64))
        kind.parts.append(k)
        kind.slots.append(slots)
    return list(kinds.values())


def _ranges(group: KernelGroup, kinds: list[_Kind], xblock: int) -> list[tuple[int, int]]:
    out: dict[int, tuple[int, int]] = {}
    start = 0
    for kind in kinds:
        for k in kind.parts:
            end = start + _cdiv(group.parts[k].outer_numel, xblock)
            out[k] = (start, end)
            start = end
    return [out[k] for k in range(len(group.parts))]


def programs(group: KernelGroup, schedule: Schedule, xblock: int) -> list[tuple[int, int]]:
    """Each part's range of program ids, (first, end), in the order of `group.parts`: the
    parts of a kind one after another, kinds in order of their first part."""
    return _ranges(group, _kinds(group, schedule), xblock)


def combo_source(group: KernelGroup, schedule: Schedule) -> KernelSource:
    """The combined kernel of `group` (kind "combo") and its launch."""
    buffers = kernel_arguments(group)
    written = set(group.writes)
    args = {b: f"{'out' if b in written else 'in'}_ptr{k}" for k, b in enumerate(buffers)}
    config = default_config("pointwise", max(p.outer_numel for p in group.parts), 0)
    xblock = config["XBLOCK"]
    kinds = _kinds(group, schedule)
    ranges = _ranges(group, kinds, xblock)
    pid = "tl.program_id(0).to(tl.int64)" if any(k.int64 for k in kinds) else "tl.program_id(0)"
    body = [f"    pid = {pid}"]
    count = 0  # tmpN names run on across the kinds, each its own

    def about(k: int) -> str:
        part, (start, end) = group.parts[k], ranges[k]
        return (
            f"        # part {k} (programs {start}..{end - 1}): {part.name}, "
            f"{part.outer_numel} elements; FX nodes {', '.join(part.origins)}"
        )

    for i, kind in enumerate(kinds):
        start, end = ranges[kind.parts[0]][0], ranges[kind.parts[-1]][1]
        n = len(kind.parts)
        shared = f"{n} parts, one body" if n > 1 else "1 part"
        body.append(f"    # kind {i}: {shared} (programs {start}..{end - 1})")
        body.append(f"    {'if' if i == 0 else 'elif'} pid < {end}:")
        if n == 1:  # its own pointers and size, as its own kernel has them
            names = {b: args[b] for b in kind.slots[0]}
            body.append(about(kind.parts[0]))
            body.append(f"        xnumel = {group.parts[kind.parts[0]].outer_numel}")
            block, numel = ("pid" if start == 0 else f"(pid - {start})"), "xnumel"
        else:
            names = _select(group, kind, args, ranges, f"k{i}_", body, about)
            block, numel = f"(pid - k{i}_first)", f"k{i}_numel"
        body.append(f"        xoffset = {block} * XBLOCK")
        body.append("        xindex = xoffset + tl.arange(0, XBLOCK)")
        body.append(f"        xmask = xindex < {numel}")
        lines, w = _body(group.parts[kind.parts[0]], schedule, names, count)
        body += lines
        count = w.count
    start = max(end for _, end in ranges)  # programs in all

    header = [
        f"# Kernel {group.name}: combo of {len(group.parts)} pointwise kernels, "
        "generated by compiler.codegen.combo",
        f"# {start} programs of XBLOCK={xblock}; each runs one block of one part",
    ]
    header += _source_lines(group, schedule)
    base = "triton_combo"  # no graph-local counter: equal combos share Triton's cache
    params = [*args.values(), "XBLOCK: tl.constexpr"]
    lines = [*header, "import triton", "import triton.language as tl", ""]
    lines += ["from compiler.runtime import triton_helpers as th", "", ""]
    lines += ["@triton.jit", f"def {base}({', '.join(params)}):"]
    for buf, arg in args.items():
        lay = schedule.buffers[buf]
        dtype = str(lay.dtype).replace("torch.", "")
        lines.append(f"    # {arg} = {buf}: {dtype}{list(lay.size)} stride {list(lay.stride)}")
    lines += body
    lines += ["", "", f"{group.name} = {base}"]
    meta = {
        "XBLOCK": xblock,
        "num_warps": config["num_warps"],
        "xnumel": start * xblock,  # the launch grid: `start` programs
        "rnumel": 0,
        "kind": "combo",
        "parts": len(group.parts),
    }
    if settings.emulate_precision_casts:  # eager rounds between a multiply and an add
        meta["fp_fusion"] = False
    nbytes = sum(
        schedule.buffers[b].storage_size() * schedule.buffers[b].dtype.itemsize for b in args
    )
    return KernelSource(
        group.name,
        "triton",
        "\n".join(lines) + "\n",
        f"{group.name}.run({', '.join(args)})",
        f"({start},): {len(group.parts)} parts",
        meta,
        nbytes,
    )


def _select(
    group: KernelGroup,
    kind: _Kind,
    args: dict[str, str],
    ranges: list[tuple[int, int]],
    prefix: str,
    body: list[str],
    about: Callable[[int], str],
) -> dict[str, str]:
    """Lines choosing, for the program running, its part's first program, size and pointers
    (the last part's unless an earlier one's programs hold it); the body's buffer names. A
    pointer every part shares (a learning rate) is the kernel's parameter itself."""
    names: dict[str, str] = {}
    chosen: list[int] = []
    for j, b in enumerate(kind.slots[0]):
        if all(slots[j] == b for slots in kind.slots):
            names[b] = args[b]
        else:
            names[b] = f"{prefix}ptr{j}"
            chosen.append(j)
    last = len(kind.parts) - 1
    body.append(about(kind.parts[last]))
    body.append(f"        {prefix}first = {ranges[kind.parts[last]][0]}")
    body.append(f"        {prefix}numel = {group.parts[kind.parts[last]].outer_numel}")
    body += [f"        {prefix}ptr{j} = {args[kind.slots[last][j]]}" for j in chosen]
    for q in range(last - 1, -1, -1):
        k = kind.parts[q]
        first, end = ranges[k]
        here = f"{prefix}here"
        body.append(about(k))
        body.append(f"        {here} = pid < {end}")
        body.append(f"        {prefix}first = tl.where({here}, {first}, {prefix}first)")
        numel = group.parts[k].outer_numel
        body.append(f"        {prefix}numel = tl.where({here}, {numel}, {prefix}numel)")
        for j in chosen:
            ptr = f"{prefix}ptr{j}"
            body.append(f"        {ptr} = tl.where({here}, {args[kind.slots[q][j]]}, {ptr})")
    return names


def _source_lines(group: KernelGroup, schedule: Schedule) -> list[str]:
    """The user lines the parts came from, each once."""
    out, seen = [], set()
    for origin in group.origins:
        line = schedule.source_lines.get(origin)
        if line is not None and (line.filename, line.lineno) not in seen:
            seen.add((line.filename, line.lineno))
            out.append(f"#   {line.filename}:{line.lineno}  {' '.join(str(line.text).split())}")
    return out
