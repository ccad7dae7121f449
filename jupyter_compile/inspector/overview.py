"""Overview tab: the function's source annotated with what the compiler did to it.

Each graph's lines get that graph's shade (the colour of its legend entry); each graph break
gets a red bar and its reason under the line where it happened, as in Cython's annotate view.
A break inside a callee is also noted on the caller's line that made the call.
"""

from __future__ import annotations

import ipywidgets as widgets

from compiler.records import CompiledReport, ControlRecord, FunctionRecord, GraphBreak
from jupyter_compile.breaks import controls_table, hint_html
from jupyter_compile.html import (
    SHADES,
    LineMark,
    Raw,
    annotated_source,
    badge,
    details,
    esc,
    heading,
    note,
)
from jupyter_compile.inspector.common import (
    GraphRef,
    InspectorState,
    compile_seconds,
    graph_refs,
    in_function,
    kernel_refs,
    unique_lines,
)
from jupyter_compile.sources import place, user_frames, where


def _automatic(control: ControlRecord) -> bool:
    """A dynamic size the compiler chose itself (automatic dynamic, dynamic=None), not one
    the user asked for with dynamic=True or mark_dynamic (compiler/tracer/shapes.py)."""
    return control.kind == "dynamic" and "(automatic dynamic" in control.detail


def _break_note(brk: GraphBreak, fn: FunctionRecord) -> tuple[int, str] | None:
    """The line of `fn` where this break shows, and its text; None if the break's stack never
    passes through `fn`."""
    stack = user_frames(brk.user_stack)
    frames = [f for f in stack if in_function(fn, f)]
    if not frames:
        return None
    here = frames[-1]
    inner = stack[-1]
    text = brk.reason
    if inner is not here:
        name = inner.function or place(inner.filename)
        text = f"in {name} (line {inner.lineno}): {brk.reason}"
    if brk.instruction:
        text += f"  [{brk.instruction}]"
    return here.lineno, text


def line_marks(
    fn: FunctionRecord, refs: list[GraphRef], report: CompiledReport
) -> dict[int, LineMark]:
    marks: dict[int, LineMark] = {}
    for ref in refs:
        shade = SHADES[ref.index % len(SHADES)]
        for line in ref.graph.source_lines:
            if not in_function(fn, line):
                continue
            mark = marks.setdefault(line.lineno, LineMark())
            if mark.shade is None:
                mark.shade = shade
                mark.title = f"graph {ref.index}"
            elif f"graph {ref.index}" not in mark.title.split(", "):
                mark.title += f", graph {ref.index}"
    for kref in kernel_refs(report):
        for line in unique_lines(kref.kernel.source_lines):
            if in_function(fn, line):
                mark = marks.setdefault(line.lineno, LineMark())
                tag = f"→ {kref.kernel.name}"  # recompiled graphs can reuse a kernel name
                if tag not in mark.tags:
                    mark.tags = (*mark.tags, tag)
    for brk in [b for f in report.functions for b in f.breaks]:
        found = _break_note(brk, fn)
        if found is None:
            continue
        lineno, text = found
        mark = marks.setdefault(lineno, LineMark())
        if text not in mark.notes:
            mark.notes = (*mark.notes, text)
            fix = Raw(hint_html(brk.hint)) if brk.hint is not None else None
            if fix is not None and fix not in mark.hints:
                mark.hints = (*mark.hints, fix)
    for ref in refs:
        found = ref.graph.mismatch
        if found is not None and found.user_line is not None and in_function(fn, found.user_line):
            marks.setdefault(
                found.user_line.lineno, LineMark()
            ).mismatch = f"graph {ref.index}: {found}"
    return marks


def _legend(refs: list[GraphRef]) -> str:
    items = []
    for ref in refs:
        shade = SHADES[ref.index % len(SHADES)]
        items.append(
            f'<span style="display: inline-block; margin: 2px 8px 2px 0; font-size: 12px;">'
            f'<span style="display: inline-block; width: 12px; height: 12px; background: {shade}; '
            f'border: 1px solid #bbb; vertical-align: middle;"></span> {esc(ref.label)}</span>'
        )
    return f'<div class="jc-legend">{"".join(items)}</div>' if items else ""


def summary_badges(report: CompiledReport) -> str:
    refs = graph_refs(report)
    breaks = [b for f in report.functions for b in f.breaks]
    recompiles = sum(1 for e in report.entries if e.recompile_reason)
    parts = [
        badge("graphs", len(refs)),
        badge("graph breaks", len(breaks)),
        badge("recompiles", recompiles),
        badge("ops", sum(r.graph.op_count for r in refs)),
        badge("kernels", len(kernel_refs(report))),
        badge("compile time", f"{compile_seconds(report):.2f} s"),
    ]
    verified = sum(r.graph.verified_runs for r in refs)
    if verified:
        parts.append(badge("verified graph runs", verified))
        parts.append(badge("mismatches", len(report.mismatches)))
    if report.backend:
        parts.append(badge("backend", report.backend))
    if report.mode:
        parts.append(badge("mode", report.mode))
    return f'<div class="jc-badges">{"".join(parts)}</div>'


def render(state: InspectorState, badges: bool = True) -> str:
    """The tab's HTML; the live widget leaves the badges out (the header above the tabs
    shows them)."""
    report = state.report
    if report is None or not report.functions:
        return note(
            state.error
            or f"{state.title} has not been called yet: call it to compile and fill this view. "
            "(Called from inside another compiled function, it is traced into that one's graphs "
            "and shows in its inspector.)"
        )
    refs = graph_refs(report)
    parts = [summary_badges(report) if badges else "", _legend(refs)]
    for fn in report.functions:
        parts.append(heading(f"{fn.qualname}  ({where(fn.filename, fn.firstlineno)})", 5))
        if fn.source:
            parts.append(annotated_source(fn.source, fn.firstlineno, line_marks(fn, refs, report)))
        else:
            parts.append(note("source not available"))
        for warning in fn.warnings:
            parts.append(note(f"warning: {warning}", color="#8a6d3b"))
        controls = [c for c in fn.all_controls if not _automatic(c)]
        if controls:
            parts.append(
                details(
                    f"what your controls did ({len(controls)}): compiler.disable, "
                    "allow_in_graph, assume_constant_result, dynamic sizes, stances",
                    controls_table(controls),
                    open_=True,
                )
            )
        automatic = [c for c in fn.all_controls if _automatic(c)]
        if automatic:
            parts.append(
                details(
                    f"sizes the compiler made dynamic after they changed ({len(automatic)})",
                    controls_table(automatic),
                )
            )
    return "".join(parts)


class OverviewView:
    title = "Overview"

    def __init__(self, state: InspectorState) -> None:
        self.widget = widgets.HTML(render(state, badges=False))

    def update(self, state: InspectorState) -> None:
        self.widget.value = render(state, badges=False)
