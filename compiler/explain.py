"""`compiler.explain`: graphs, breaks, ops and guards of one call, readable."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from compiler.records import ControlRecord, FunctionRecord, GraphBreak, Guard


@dataclass
class ExplainOutput:
    graphs: list[torch.fx.GraphModule]
    graph_count: int
    graph_break_count: int
    break_reasons: list[GraphBreak]
    op_count: int
    ops_per_graph: list[list[str]]
    out_guards: list[Guard]
    compile_times: str
    functions: list[FunctionRecord] = field(default_factory=list)
    # what the user's controls did: disabled calls, opaque nodes, constants, dynamic sizes
    controls: list[ControlRecord] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [
            f"Graph Count: {self.graph_count}",
            f"Graph Break Count: {self.graph_break_count}",
            f"Op Count: {self.op_count}",
        ]
        if self.break_reasons:
            lines.append("Break Reasons:")
            for i, b in enumerate(self.break_reasons, 1):
                lines.append(f"  Break Reason {i}:")
                lines.append(f"    Reason: {b.reason}")
                lines.append("    User Stack:")
                for s in b.user_stack:
                    lines.append(f'      File "{s.filename}", line {s.lineno}, in {s.function}')
                    if s.text.strip():
                        lines.append(f"        {s.text.strip()}")
                if b.hint is not None:
                    lines.append(f"    Fix ({b.hint.category}): {b.hint.suggestion}")
                    lines.extend(f"        {code}" for code in b.hint.snippet.splitlines())
        if self.controls:
            lines.append("Controls:")
            for c in self.controls:
                where = f" (line {c.user_line.lineno})" if c.user_line is not None else ""
                lines.append(f"  {c.kind}: {c.target}{where}: {c.detail}")
        lines.append("Ops per Graph:")
        for i, ops in enumerate(self.ops_per_graph, 1):
            lines.append(f"  Graph {i}: {', '.join(ops)}")
        lines.append("Out Guards:")
        for g in self.out_guards:
            lines.append(f"  {g.kind}: {g.expr}")
        lines.append(f"Compile Times: {self.compile_times}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"ExplainOutput(graph_count={self.graph_count}, graph_break_count={self.graph_break_count})"


def explain_records(functions: list[FunctionRecord]) -> ExplainOutput:
    entries = [e for f in functions for e in f.entries]
    graphs = [e.graph for e in entries if e.graph is not None]
    breaks = _distinct_breaks(entries)
    ops = [
        [
            _op_name(n)
            for n in g.graph_module.graph.nodes
            if n.op in ("call_function", "call_method", "call_module")
        ]
        for g in graphs
    ]
    guards = [g for e in entries for g in e.guards]
    times = ", ".join(
        f"{e.function}:{e.start_line} {e.compile_time_s * 1000:.1f} ms" for e in entries
    )
    return ExplainOutput(
        graphs=[g.graph_module for g in graphs],
        graph_count=len(graphs),
        graph_break_count=len(breaks),
        break_reasons=breaks,
        op_count=sum(len(o) for o in ops),
        ops_per_graph=ops,
        out_guards=guards,
        compile_times=times,
        functions=functions,
        controls=[c for f in functions for c in f.all_controls],
    )


def _distinct_breaks(entries: list) -> list[GraphBreak]:
    """A break inside a called function also ends the caller's graph at the call, and the
    callee's own entry records it again. Count each break once: among the records of one
    break (same reason, same innermost line), those whose entry captured a graph; a
    recompiled entry (same function, same start) repeats its break and counts once."""
    groups: dict[tuple, list] = {}
    for e in entries:
        b = e.graph_break
        if b is None:
            continue
        inner = b.user_stack[-1] if b.user_stack else None
        key = (b.reason, inner.filename, inner.lineno) if inner else (b.reason, id(b))
        groups.setdefault(key, []).append(e)
    out = []
    for group in groups.values():
        with_graph = [e for e in group if e.graph is not None]
        once = {(e.function, e.start_line): e.graph_break for e in (with_graph or group[:1])}
        out.extend(once.values())
    return out


def _op_name(node: torch.fx.Node) -> str:
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    target = node.target
    module = getattr(target, "__module__", None) or ""
    name = getattr(target, "__name__", str(target))
    if module in ("_operator", "operator"):
        return f"operator.{name}"
    if module.startswith("torch"):
        return f"{module.replace('torch._C._nn', 'torch.nn.functional').replace('torch._C._VariableFunctions', 'torch')}.{name}".replace(
            "torch._C", "torch"
        )
    return name
