"""The Triton emitter: one `@triton.jit` kernel per KernelGroup.

Pointwise kernels cover the outer loop with blocks of XBLOCK elements (`xmask` guards the
tail). Reduction kernels take XBLOCK rows per program and walk each row with RBLOCK lanes:
*persistent* (the whole row in registers, RBLOCK >= rnumel) when rows are short, *looped*
(accumulate RBLOCK at a time, then reduce the lanes) otherwise. Indices are 32-bit unless a
buffer or the iteration space reaches 2**31 elements.

Every expression becomes one `tmpN = ...` line, shared within a scope; loop variables
(`x0`, `r0`) are unflattened from `xindex`/`rindex` with the index algebra, so a contiguous
access reads `tl.load(in_ptr0 + (x0), xmask)`.
"""

from __future__ import annotations

import re

import torch

from compiler import config as settings
from compiler.codegen import size_args, triton_sized
from compiler.codegen.combo import combo_source
from compiler.codegen.common import KernelEmitter, KernelSource, store_order
from compiler.codegen.triton_writer import TL_DTYPES, KernelWriter, Scope
from compiler.ir.index import Index
from compiler.ir.nodes import (
    WELFORD_TYPES,
    Layout,
    Load,
    Ref,
    Value,
    Welford,
    iter_values,
)
from compiler.ir.transform import rewrite
from compiler.scheduler.kernel import KernelGroup, Schedule

# Interpreted Triton (CPU tensors) stands in for a GPU: the scheduler splits reductions as
# for an H100's 132 SMs, so the CPU tests see the kernels the GPU gets.
INTERPRETED_PROCESSORS = 132
_SUFFIX = re.compile(r"_\d+$")  # a kernel name's graph-local counter


def _reduction_deps(group: KernelGroup) -> dict[str, set[str]]:
    """step -> the reductions of the same kernel its value needs (through Refs)."""
    steps = {s.name: s for s in group.steps}
    memo: dict[str, set[str]] = {}

    def deps(name: str) -> set[str]:
        if name in memo:
            return memo[name]
        step = steps[name]
        out: set[str] = set()
        for v in iter_values(step.value):
            if isinstance(v, Ref):
                out |= deps(v.name) | ({v.name} if steps[v.name].reduction_type else set())
        memo[name] = out
        return out

    return {s.name: deps(s.name) for s in group.steps}


def _write_body(w: KernelWriter) -> list[str]:
    g = w.g
    top = Scope([], "    ")
    lines = top.lines
    pid = "tl.program_id(0).to(tl.int64)" if w.int64 else "tl.program_id(0)"
    lines.append(f"    xnumel = {g.outer_numel}")
    if w.reduction:
        lines.append(f"    rnumel = {g.reduction_numel}")
    lines.append(f"    xoffset = {pid} * XBLOCK")
    lines.append(f"    xindex = xoffset + tl.arange(0, XBLOCK){'[:, None]' if w.reduction else ''}")
    lines.append("    xmask = xindex < xnumel")
    # The fastest-varying variable is the store's smallest stride, so a block's lanes write
    # neighbouring addresses (channels-last outputs too).
    w.define_vars(top, tuple(store_order(g, w.buffers)), "xindex")
    if not w.reduction:
        w.emit_pointwise_steps(top, list(g.steps))
        return lines
    if w.persistent:
        lines.append("    rindex = tl.arange(0, RBLOCK)[None, :]")
        lines.append("    rmask = rindex < rnumel")
        w.define_vars(top, g.reduction, "rindex")
        for step in g.steps:
            if step.reduction_type is not None:
                w.emit_reduction(step, top)
            else:
                w.emit_pointwise_steps(top, [step])
        return lines
    _write_loops(w, top)
    return lines


def _write_loops(w: KernelWriter, top: Scope) -> None:
    """Looped reductions: each loop accumulates the reductions whose inputs are ready;
    outer steps run between loops; stored inner values go in the loop after their inputs."""
    g = w.g
    deps = _reduction_deps(g)
    loop_of: dict[str, int] = {}
    position: dict[str, int] = {}  # outer steps: emitted before loop k
    for step in g.steps:
        after = max((loop_of[d] for d in deps[step.name]), default=-1)
        if step.loop == "inner" and (step.reduction_type is not None or step.store is not None):
            loop_of[step.name] = after + 1
        elif step.loop == "outer":
            position[step.name] = after + 1
    nloops = max(loop_of.values(), default=-1) + 1
    top.lines.append("    rbase = tl.arange(0, RBLOCK)[None, :]")
    for k in range(nloops + 1):
        w.emit_pointwise_steps(top, [s for s in g.steps if position.get(s.name) == k])
        if k == nloops:
            break
        members = [s for s in g.steps if loop_of.get(s.name) == k]
        reductions = [s for s in members if s.reduction_type not in (None, *WELFORD_TYPES)]
        # Welford steps of one body (a variance's m2 and a split's partial means) share
        # running mean, m2 and weight accumulators, one state per lane.
        welford: dict[Welford, str] = {}
        pivots: dict[str, str] = {}
        for s in members:
            if s.reduction_type in WELFORD_TYPES and s.value not in welford:
                welford[s.value] = acc = f"_{s.name}"
                for part in ("mean", "m2", "weight"):
                    top.lines.append(
                        f"    {acc}_{part} = tl.zeros([XBLOCK, RBLOCK], {TL_DTYPES[s.value.dtype]})"
                    )
                if s.value.single_elements:
                    pivots[acc] = w.tensor(_at_row_start(s.value.mean, w), top)[0]
        for s in reductions:
            dt = TL_DTYPES[s.value.dtype] if s.reduction_type not in ("any", "all") else "tl.int8"
            top.lines.append(f"    _{s.name} = tl.full([XBLOCK, RBLOCK], {w.identity(s)}, {dt})")
            if s.reduction_type in ("argmax", "argmin"):
                top.lines.append(
                    f"    _{s.name}_idx = tl.full([XBLOCK, RBLOCK], 2147483647, tl.int32)"
                )
        top.lines.append("    for roffset in range(0, rnumel, RBLOCK):")
        inner = Scope(top.lines, "        ", parent=top)
        inner.lines.append("        rindex = roffset + rbase")
        inner.lines.append("        rmask = rindex < rnumel")
        w.define_vars(inner, g.reduction, "rindex")
        updated: set[str] = set()
        for s in members:
            if s.reduction_type is None:
                w.store(s, w.value(s.value, inner), inner)
                continue
            if s.reduction_type in WELFORD_TYPES:
                acc = welford[s.value]
                if acc not in updated:
                    updated.add(acc)
                    _welford_update(w, s.value, acc, pivots.get(acc), inner)
                continue
            v, _ = w.value(s.value, inner)
            masked = f"tl.where(xmask & rmask, {v}, {w.identity(s)})"
            acc = f"_{s.name}"
            rt = s.reduction_type
            if rt == "sum":
                update = f"{acc} + {masked}"
            elif rt == "prod":
                update = f"{acc} * {masked}"
            elif rt in ("max", "min"):
                update = f"th.{'maximum' if rt == 'max' else 'minimum'}({acc}, {masked})"
            elif rt == "any":
                update = f"tl.maximum({acc}, {masked}.to(tl.int8))"
            elif rt == "all":
                update = f"tl.minimum({acc}, {masked}.to(tl.int8))"
            else:
                idx = "tl.where(xmask & rmask, rindex, 2147483647)"
                inner.lines.append(
                    f"        {acc}, {acc}_idx = th.{rt}_combine({acc}, {acc}_idx, {masked}, {idx})"
                )
                continue
            inner.lines.append(f"        {acc} = {update}")
        reduced: dict[str, tuple[str, str]] = {}
        for s in members:
            if s.reduction_type not in WELFORD_TYPES:
                continue
            acc = welford[s.value]
            if acc not in reduced:
                # the lanes hold means less the pivot: added back where a welford_mean reads it
                wants_mean = any(
                    m.reduction_type == "welford_mean" and m.value == s.value for m in members
                )
                reduced[acc] = w.combine_lanes(
                    top,
                    f"{acc}_mean",
                    f"{acc}_m2",
                    f"{acc}_weight",
                    pivots.get(acc) if wants_mean else None,
                )
            mean, m2 = reduced[acc]
            w.finish_reduction(s, (mean if s.reduction_type == "welford_mean" else m2, 1), top)
        for s in reductions:
            w.reduce_lanes(s, f"_{s.name}", f"_{s.name}_idx", top)


def _at_row_start(value: Value, w: KernelWriter) -> Value:
    """`value` at the first point of the row (every reduction variable 0), with the inner
    steps it reads recomputed there: an outer-level value, computed before the loop."""
    first = {v.name: Index() for v in w.g.reduction}

    def on_ref(ref: Ref) -> Value:
        step = w.steps[ref.name]
        if step.loop == "inner" and step.reduction_type is None:
            return _at_row_start(step.value, w)
        return ref

    return rewrite(
        value,
        lambda ld, idx, mask: Load(ld.buf, idx, ld.dtype, mask),
        lambda i: i.subs(first),
        on_ref,
    )


def _welford_update(
    w: KernelWriter, body: Welford, acc: str, pivot: str | None, scope: Scope
) -> None:
    """Fold this block's states into each lane's running state `acc`; masked-off lanes (past
    the row's end, or weight 0) leave it as it was. Single elements are taken less `pivot`,
    the row's first one: the running means then stay near 0, where float32 holds their
    differences (which m2 grows by) to full precision, however large the data's mean."""
    dt = TL_DTYPES[body.dtype]
    mean_in, _ = w.value(body.mean, scope)
    weight_in, _ = w.value(body.weight, scope)
    weight, _ = w.tmp(scope, f"tl.where(xmask & rmask, {weight_in}, 0).to({dt})", 2)
    if pivot is not None:
        mean_in = f"({mean_in} - {pivot})"
    mean, _ = w.tmp(scope, f"tl.where({weight} != 0, {mean_in}, 0).to({dt})", 2)
    if body.single_elements:
        m2 = "0.0"
    else:
        m2_in, _ = w.value(body.m2, scope)
        m2, _ = w.tmp(scope, f"tl.where({weight} != 0, {m2_in}, 0).to({dt})", 2)
    state = f"{acc}_mean, {acc}_m2, {acc}_weight"
    scope.lines.append(f"{scope.indent}{state} = welford_combine({state}, {mean}, {m2}, {weight})")


# Chan et al.'s combination of two Welford states (weight elements of mean `mean` whose squared
# deviations from it sum to m2); weight 0 on both sides gives the empty state back. Emitted
# into each kernel that reduces Welford states, for the loop updates and for `tl.reduce`.
WELFORD_COMBINE = """\
@triton.jit
def welford_combine(mean_a, m2_a, weight_a, mean_b, m2_b, weight_b):
    weight = weight_a + weight_b
    share_b = th.div_rn(weight_b, tl.where(weight == 0, 1, weight).to(weight_b.dtype))
    delta = mean_b - mean_a
    return mean_a + delta * share_b, m2_a + m2_b + delta * delta * weight_a * share_b, weight
"""


def _header(group: KernelGroup, schedule: Schedule, w: KernelWriter) -> list[str]:
    out = [f"# Kernel {group.name}: {group.kind}, generated by compiler.codegen.triton"]
    if group.origins:
        out.append(f"# Fused FX nodes: {', '.join(group.origins)}")
    out += [f"# {note}" for note in group.notes]
    seen = set()
    for origin in group.origins:
        line = schedule.source_lines.get(origin)
        if line is not None and (line.filename, line.lineno) not in seen:
            seen.add((line.filename, line.lineno))
            text = " ".join(str(line.text).split())
            out.append(f"#   {line.filename}:{line.lineno}  {text}")
    return out


def _describe(buf: str, layout: Layout) -> str:
    dtype = str(layout.dtype).replace("torch.", "")
    return f"{buf}: {dtype}{list(layout.size)} stride {list(layout.stride)}"


def kernel_source(group: KernelGroup, schedule: Schedule) -> KernelSource:
    w = KernelWriter(group, schedule)
    body = _write_body(w)
    params = (
        list(w.args.values())
        + ["XBLOCK: tl.constexpr"]
        + (["RBLOCK: tl.constexpr"] if w.reduction else [])
    )
    lines = _header(group, schedule, w)
    lines += ["import triton", "import triton.language as tl", ""]
    lines += ["from compiler.runtime import triton_helpers as th", "", ""]
    if any(step.reduction_type in WELFORD_TYPES for step in group.steps):
        lines += [*WELFORD_COMBINE.splitlines(), "", ""]
    # The function is named without the graph-local counter, so kernels that differ only in
    # where they sit in the graph have the same source and share Triton's compile cache.
    base = _SUFFIX.sub("", group.name)
    lines.append("@triton.jit")
    lines.append(f"def {base}({', '.join(params)}):")
    for buf, arg in w.args.items():
        lines.append(f"    # {arg} = {_describe(buf, schedule.buffers[buf])}")
    lines += body
    lines += ["", "", f"{group.name} = {base}"]
    source = "\n".join(lines) + "\n"
    config = dict(w.config)
    config.update(
        {"xnumel": group.outer_numel, "rnumel": group.reduction_numel, "kind": group.kind}
    )
    if settings.emulate_precision_casts:  # eager rounds between a multiply and an add
        config["fp_fusion"] = False
    if w.checks_indices:  # Triton compiles device-side asserts in its debug mode only
        config["debug"] = True
    args = ", ".join(w.args)
    nbytes = sum(
        schedule.buffers[b].storage_size() * schedule.buffers[b].dtype.itemsize for b in w.args
    )
    grid = f"(cdiv({group.outer_numel}, XBLOCK),)"
    return KernelSource(
        group.name, "triton", source, f"{group.name}.run({args})", grid, config, nbytes
    )


# How each kind of KernelGroup becomes a kernel (combo: compiler/codegen/combo.py).
_SOURCES = {"pointwise": kernel_source, "reduction": kernel_source, "combo": combo_source}


class TritonEmitter(KernelEmitter):
    """The KernelEmitter for Triton (GPUs, and CPU tensors under TRITON_INTERPRET=1)."""

    language = "triton"
    horizontal = True

    def processors(self, device: torch.device) -> int:
        """Programs the device runs at once, roughly: its SMs (the scheduler splits
        reductions whose outputs alone would leave most of them idle)."""
        if device.type == "cuda":
            return torch.cuda.get_device_properties(device).multi_processor_count
        return INTERPRETED_PROCESSORS

    def emit_kernel(self, group: KernelGroup, schedule: Schedule) -> KernelSource:
        kernel = _SOURCES[group.kind](group, schedule)
        if not size_args.generic_kernels():
            # noted for the first dynamic size of this graph: its one generic load (a
            # combined kernel's parts, which a dynamic graph runs uncombined, each)
            for part in group.parts or (group,):
                triton_sized.note_sample(kernel if part is group else kernel_source(part, schedule))
        return kernel

    def load(self, kernel: KernelSource, mode: str | None):
        from compiler.runtime.triton_launch import load_kernel

        return load_kernel(kernel, mode)

    def load_many(self, kernels, mode: str | None) -> list:
        """A dynamic graph's kernels run size-generic functions where there are some
        (compiler/codegen/triton_sized.py); a static graph's load one by one."""
        if size_args.generic_kernels():
            return triton_sized.load_sized(kernels, mode)
        return [self.load(k, mode) for k in kernels]

    def warm_up(self, kernels, device: torch.device) -> list[str]:
        """On a GPU, every kernel compiled before the first call, several at a time (the
        interpreter compiles nothing); notes say which launch through Triton's runtime."""
        if device.type != "cuda":
            return []
        from compiler.runtime.triton_launch import launch_notes, warm_all

        warm_all(list(kernels))
        notes = triton_sized.own_code_where_generic_fails(kernels)
        return launch_notes([k for k, _ in kernels]) + notes
