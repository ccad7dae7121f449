"""What every tab reads: the inspector's state and stable numbering of graphs and kernels.

Graphs are numbered in report order (the function's own entries first, then callees'), the
same numbers in every tab, so "graph 2" in the overview legend is "graph 2" in the dropdown.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from compiler.records import (
    CompiledReport,
    EntryRecord,
    FunctionRecord,
    GraphRecord,
    KernelRecord,
    SourceLine,
)
from jupyter_compile.sources import line_where, user_lines

if TYPE_CHECKING:
    from jupyter_compile.targets import Target
    from jupyter_compile.timing import TimingResult


@dataclass
class InspectorState:
    title: str
    report: CompiledReport | None
    target: Target | None = None
    timing: TimingResult | None = None
    compare_torch: bool = False
    error: str | None = None  # why there is no report (never called yet, inspect failed)


@dataclass(frozen=True)
class GraphRef:
    index: int
    function: FunctionRecord
    entry: EntryRecord
    graph: GraphRecord

    @property
    def label(self) -> str:
        where = (
            f"{self.function.name}:{_first_line(self.graph)}"
            if self.graph.source_lines
            else self.function.name
        )
        return f"graph {self.index} · {where} · {self.graph.op_count} ops"


@dataclass(frozen=True)
class KernelRef:
    index: int
    graph: GraphRef
    kernel: KernelRecord

    @property
    def label(self) -> str:
        part = f" {self.kernel.graph}" if self.kernel.graph else ""  # a training graph's half
        parts = f", {len(self.kernel.parts)} parts" if self.kernel.parts else ""  # combined
        return f"{self.kernel.name} ({self.kernel.language}, graph {self.graph.index}{part}{parts})"


def _first_line(graph: GraphRecord) -> int:
    return min(s.lineno for s in graph.source_lines)


def graph_refs(report: CompiledReport | None) -> list[GraphRef]:
    refs: list[GraphRef] = []
    for fn in report.functions if report is not None else []:
        for entry in fn.entries:
            if entry.graph is not None:
                refs.append(GraphRef(len(refs), fn, entry, entry.graph))
    return refs


def kernel_refs(report: CompiledReport | None) -> list[KernelRef]:
    refs: list[KernelRef] = []
    for g in graph_refs(report):
        for kernel in g.graph.kernels:
            refs.append(KernelRef(len(refs), g, kernel))
    return refs


# Stages a backend times inside the tracer's "backend" stage (compiler/backends/inductor.py,
# compiler/aot): shown on their own, with what is left of "backend" as "backend, other".
_OUTER_STAGES = ("trace", "backend")


def stage_totals(report: CompiledReport | None) -> dict[str, float]:
    """Compile seconds per stage over every graph of the report, in first-seen order, split
    so that none contains another: the backend's own stages, the rest of the backend, and
    the tracer's work outside any graph's stages (guards, breaks, entries without a graph).
    They add up to `compile_seconds`. A training graph's backward compiles at its first
    backward call, after its entry's time was taken: its stages count in full."""
    totals: dict[str, float] = {}

    def add(stage: str, seconds: float) -> None:
        totals[stage] = totals.get(stage, 0.0) + max(0.0, seconds)

    for entry in report.entries if report is not None else []:
        graph = entry.graph
        times = graph.stage_times if graph is not None else []
        inner = sum(st.seconds for st in times if st.stage not in _OUTER_STAGES)
        backend = sum(st.seconds for st in times if st.stage == "backend")
        trace = sum(st.seconds for st in times if st.stage == "trace")
        add("trace", trace)
        for st in times:
            if st.stage not in _OUTER_STAGES:
                add(st.stage, st.seconds)
        if backend > inner:
            add("backend, other", backend - inner)
        add("tracer, other", entry.compile_time_s - trace - max(backend, inner))
    return {stage: s for stage, s in totals.items() if s > 0 or stage == "trace"}


def compile_seconds(report: CompiledReport | None) -> float:
    """What compiling cost in all, the sum of `stage_totals`."""
    return sum(stage_totals(report).values())


def line_span(fn: FunctionRecord) -> range:
    return range(fn.firstlineno, fn.firstlineno + max(1, len(fn.source.splitlines())))


def in_function(fn: FunctionRecord, line: SourceLine) -> bool:
    return line.filename == fn.filename and line.lineno in line_span(fn)


def unique_lines(lines: list[SourceLine]) -> list[SourceLine]:
    """Each user line once, in order (a kernel fusing four nodes of one line lists it once);
    lines of jupyter_compile's own wrappers are not the user's and are left out."""
    seen: set[tuple[str, int]] = set()
    out = []
    for line in user_lines(lines):
        if (line.filename, line.lineno) not in seen:
            seen.add((line.filename, line.lineno))
            out.append(line)
    return out


def where(line: SourceLine) -> str:
    return line_where(line)


def structure_key(report: CompiledReport | None) -> tuple:
    """Changes when anything the tabs draw changes, except hit counts (which change on every
    call and would redraw the inspector after every cell)."""
    if report is None:
        return ()
    return tuple(
        (
            id(fn),
            len(fn.entries),
            len(fn.warnings),
            tuple(
                (
                    id(e),
                    id(e.graph),
                    len(e.guards),
                    e.graph.fallback if e.graph else None,
                    tuple(k.measured_ms for k in e.graph.kernels) if e.graph else (),
                )
                for e in fn.entries
            ),
        )
        for fn in report.functions
    )
