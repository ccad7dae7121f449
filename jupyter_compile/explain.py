"""The `%explain` view: what `compiler.explain(fn)(*args)` found, made readable.

The ExplainOutput is read by attribute (graph_count, graph_break_count, break_reasons,
ops_per_graph, out_guards, compile_times, and `functions`, the FunctionRecords) so that the
view follows what `torch._dynamo.explain` reports; with the records, the annotated source and
the graphs are drawn as in the inspector.
"""

from __future__ import annotations

from typing import Any

from compiler.records import CompiledReport
from jupyter_compile.breaks import break_lines, break_text, controls_table, hint_html
from jupyter_compile.html import Raw, badge, details, esc, heading, highlight, note, table
from jupyter_compile.sources import line_where


def _break_rows(out: Any) -> list[tuple[object, ...]]:
    rows = []
    for i, brk in enumerate(getattr(out, "break_reasons", None) or []):
        reason = brk.reason if hasattr(brk, "reason") else str(brk)
        stack = break_lines(getattr(brk, "user_stack", None))
        at = stack[-1] if stack else None
        rows.append(
            (
                i,
                reason,
                line_where(at) if at else "",
                at.text.strip() if at else "",
                Raw(hint_html(getattr(brk, "hint", None))),
            )
        )
    return rows


def _op_name(op: Any) -> str:
    target = getattr(op, "target", op)  # an fx.Node, or an op
    return getattr(target, "__name__", None) or str(target)


def render(out: Any, title: str) -> str:
    """The static HTML of an explain result."""
    graphs = getattr(out, "graph_count", None)
    breaks = getattr(out, "graph_break_count", None)
    ops_per_graph = getattr(out, "ops_per_graph", None) or []
    parts = [
        f'<div style="font-weight: 700; font-size: 14px;">%explain {esc(title)}</div>',
        badge("graphs", graphs if graphs is not None else "?"),
        badge("graph breaks", breaks if breaks is not None else "?"),
        badge("ops", getattr(out, "op_count", sum(len(o) for o in ops_per_graph))),
    ]
    rows = _break_rows(out)
    if rows:
        parts.append(heading("graph breaks"))
        parts.append(
            table(["#", "reason", "where", "source line", "how to avoid it"], rows, mono_cols=(3,))
        )
    else:
        parts.append(note("no graph breaks: the whole function was captured"))
    controls = getattr(out, "controls", None) or []
    if controls:
        parts.append(heading("what your controls did (compiler.disable, allow_in_graph, ...)"))
        parts.append(controls_table(controls))
    if ops_per_graph:
        body = "".join(
            details(
                f"graph {i}: {len(ops)} ops",
                esc(", ".join(_op_name(op) for op in ops)) or "(empty)",
            )
            for i, ops in enumerate(ops_per_graph)
        )
        parts.append(heading("ops per graph") + body)
    functions = getattr(out, "functions", None)
    guards = getattr(out, "out_guards", None) or []
    if functions:  # the records: source, graphs and guards drawn as in the inspector
        from jupyter_compile.inspector import static_report

        parts.append(static_report(title, CompiledReport(functions=list(functions))))
    elif guards:
        rows_g = [
            (getattr(g, "kind", ""), getattr(g, "source", ""), getattr(g, "expr", str(g)))
            for g in guards
        ]
        parts.append(
            details(f"guards ({len(guards)})", table(["kind", "source", "expr"], rows_g, (1, 2)))
        )
    times = getattr(out, "compile_times", None)
    if times:
        parts.append(details("compile times", highlight(str(times), "text")))
    return '<div class="jc-explain">' + "".join(parts) + "</div>"


def render_text(out: Any, title: str) -> str:
    """The plain-text twin (terminals, logs)."""
    lines = [
        f"%explain {title}: {getattr(out, 'graph_count', '?')} graphs, "
        f"{getattr(out, 'graph_break_count', '?')} graph breaks"
    ]
    for i, brk in enumerate(getattr(out, "break_reasons", None) or []):
        lines.append(f"  break {i}: {break_text(brk)}")
    for i, ops in enumerate(getattr(out, "ops_per_graph", None) or []):
        lines.append(f"  graph {i}: {len(ops)} ops")
    for c in getattr(out, "controls", None) or []:
        lines.append(f"  {c}")
    return "\n".join(lines)


class ExplainView:
    """What `%explain` displays: HTML in a notebook, text in a terminal."""

    def __init__(self, out: Any, title: str) -> None:
        self.out = out
        self.title = title

    def _repr_html_(self) -> str:
        return render(self.out, self.title)

    def __repr__(self) -> str:
        return render_text(self.out, self.title)
