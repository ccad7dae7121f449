"""Readable text of IR graphs and schedules (debug dumps, golden tests)."""

from __future__ import annotations

from compiler.ir.index import Index
from compiler.ir.nodes import (
    Constant,
    ExternKernel,
    Graph,
    IndexValue,
    Layout,
    Load,
    Op,
    Pointwise,
    Reduction,
    Ref,
    TensorArg,
    Value,
    Welford,
)


def format_value(v: Value) -> str:
    if isinstance(v, Constant):
        return repr(v.value)
    if isinstance(v, IndexValue):
        return f"index({v.index})"
    if isinstance(v, Ref):
        return f"%{v.name}"
    if isinstance(v, Load):
        idx = ", ".join(str(i) if isinstance(i, Index) else format_value(i) for i in v.indices)
        text = f"{v.buf}[{idx}]"
        return text if v.mask is None else f"{text} if {format_value(v.mask)}"
    if isinstance(v, Welford):
        if v.single_elements:
            return f"welford({format_value(v.mean)})"
        parts = (format_value(v.mean), format_value(v.m2), format_value(v.weight))
        return f"welford(mean={parts[0]}, m2={parts[1]}, weight={parts[2]})"
    assert isinstance(v, Op)
    args = ", ".join(format_value(a) for a in v.args)
    if v.op == "to_dtype":
        return f"to_{str(v.dtype).replace('torch.', '')}({args})"
    return f"{v.op}({args})"


def format_layout(lay: Layout) -> str:
    dtype = str(lay.dtype).replace("torch.", "")
    off = f" offset {lay.offset}" if lay.offset else ""
    return f"{dtype}{list(lay.size)} stride {list(lay.stride)}{off}"


def format_graph(graph: Graph) -> str:
    lines = [f"input {b.name}: {format_layout(b.layout)}" for b in graph.inputs]
    lines += [f"constant {c.name}: {format_layout(c.layout)}" for c in graph.constants]
    for n in graph.nodes:
        if isinstance(n, Pointwise):
            lines.append(
                f"{n.name} = pointwise {list(n.size)} {format_layout(n.layout)}  # {n.aten}"
            )
            lines.append(f"    {format_value(n.body)}")
        elif isinstance(n, Reduction):
            lines.append(
                f"{n.name} = {n.reduction_type} over {list(n.reduction_size)} -> {list(n.size)}  # {n.aten}"
            )
            lines.append(f"    {format_value(n.body)}")
        else:
            assert isinstance(n, ExternKernel)
            outs = ", ".join(name for name, _ in n.outputs)
            lines.append(f"{outs} = extern {n.op}  # {n.aten}")
    outs = [o.buf if isinstance(o, TensorArg) else repr(o) for o in graph.outputs]
    lines.append(f"return {', '.join(outs)}")
    return "\n".join(lines) + "\n"


def format_schedule(schedule) -> str:
    from compiler.scheduler.kernel import KernelGroup

    lines = []
    for launch, frees in zip(schedule.launches, schedule.frees):
        if isinstance(launch, KernelGroup) and launch.parts:
            lines.append(f"kernel {launch.name}: combo of {len(launch.parts)} parts")
            lines += [f"    # {note}" for note in launch.notes]
            for part in launch.parts:
                lines += ["    " + line for line in _kernel_lines(part, "part")]
        elif isinstance(launch, KernelGroup):
            lines += _kernel_lines(launch, "kernel")
        else:
            lines.append(f"extern {launch.node.op} -> {', '.join(launch.writes)}")
        if frees:
            lines.append(f"    free {', '.join(frees)}")
    return "\n".join(lines) + "\n"


def _kernel_lines(group, what: str) -> list[str]:
    outer = ", ".join(f"{v.name}<{v.size}" for v in group.outer)
    red = ", ".join(f"{v.name}<{v.size}" for v in group.reduction)
    lines = [f"{what} {group.name} over [{outer}]" + (f" reducing [{red}]" if red else "")]
    lines += [f"    # {note}" for note in group.notes]
    for s in group.steps:
        kind = s.reduction_type or "pointwise"
        store = f" -> {s.name}[{', '.join(map(str, s.store))}]" if s.store is not None else ""
        lines.append(f"    %{s.name} = {kind}({s.loop}) {format_value(s.value)}{store}")
    return lines
