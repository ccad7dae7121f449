"""Graphs tab: pick a graph; see it drawn (one page of nodes at a time) and as code.

Below the drawing: the graph's readable code, its example inputs, what the backend did
(stage times, notes, a fallback to eager), the aten graphs and the generated wrapper.
"""

from __future__ import annotations

import ipywidgets as widgets

from compiler.records import BucketRecord, PartitionRecord
from jupyter_compile import graph_svg
from jupyter_compile.html import details, esc, heading, highlight, note, table
from jupyter_compile.inspector.common import (
    GraphRef,
    InspectorState,
    graph_refs,
    unique_lines,
    where,
)

STATIC_GRAPH_LIMIT = 8  # graphs drawn in the static fallback; the live view has them all


def graph_details(ref: GraphRef) -> str:
    """Everything about one graph except its drawing."""
    g = ref.graph
    parts = []
    if g.fallback:
        parts.append(
            note(f"the backend failed and this graph runs eagerly: {g.fallback}", color="#a94442")
        )
    parts.append(heading("graph code"))
    parts.append(highlight(g.code))
    facts = [
        ("backend", g.backend or "?"),
        ("ops", g.op_count),
        ("entry starts at", ref.entry.start_line),
    ]
    if g.example_inputs:
        facts.append(("example inputs", "; ".join(g.example_inputs)))
    parts.append(table(["", ""], facts))
    if g.source_lines:
        rows = [(where(s), s.function, s.text.strip()) for s in unique_lines(g.source_lines)]
        parts.append(
            details(
                f"user source lines ({len(rows)})",
                table(["where", "function", "line"], rows, mono_cols=(2,)),
            )
        )
    if g.stage_times:
        rows = [(s.stage, f"{s.seconds * 1e3:.1f} ms") for s in g.stage_times]
        parts.append(details("compile stages", table(["stage", "time"], rows)))
    if g.notes:
        parts.append(details(f"backend notes ({len(g.notes)})", "".join(note(n) for n in g.notes)))
    if g.partition is not None:
        parts.append(partition_details(g.partition))
    if g.buckets:
        parts.append(bucket_details(g.buckets))
    for name, code in g.aot_graphs.items():
        parts.append(details(f"aten graph: {name}", highlight(code)))
    if g.wrapper_source:
        parts.append(details("generated wrapper", highlight(g.wrapper_source)))
    return "".join(parts)


def partition_details(part: PartitionRecord) -> str:
    """A training graph's split: what the forward keeps for the backward, what the
    backward recomputes, which inputs are written back."""
    rows = [
        (
            s.name,
            f"{s.dtype}{list(s.shape)}",
            f"{s.nbytes:,}",
            "; ".join(f"{where(ln)}: {ln.text.strip()}" for ln in unique_lines(s.source_lines))
            or ", ".join(s.fused_nodes)
            or "graph input",
        )
        for s in part.saved
    ]
    body = [
        note(
            f"the forward saves {len(part.saved)} tensors for the backward "
            f"({part.saved_bytes:,} bytes beyond the graph's inputs); the backward recomputes "
            f"{len(part.recomputed)} cheap forward ops instead of keeping their results"
        ),
        table(["saved", "tensor", "bytes", "from"], rows, mono_cols=(0,)),
    ]
    if part.recomputed:
        body.append(heading("recomputed in the backward"))
        body.append(
            '<div style="font-family: monospace; font-size: 12px;">'
            + ", ".join(esc(n) for n in part.recomputed)
            + "</div>"
        )
    if part.mutated_inputs:
        body.append(heading("inputs written back after the forward"))
        body.append(note(", ".join(part.mutated_inputs)))
    return details(f"forward / backward split ({len(part.saved)} saved)", "".join(body))


def bucket_details(buckets: list[BucketRecord]) -> str:
    """A graph split at DistributedDataParallel's gradient buckets: each part's parameters,
    where it is cut, and its own aten graphs."""
    rows = [
        (
            b.index,
            ", ".join(b.params),
            f"{b.param_bytes:,} / {b.cap_bytes:,}",
            b.split_after
            + (f" ({where(b.split_line)}: {b.split_line.text.strip()})" if b.split_line else ""),
        )
        for b in buckets
    ]
    body = [table(["part", "parameters", "bytes / cap", "cut after"], rows, mono_cols=(1, 3))]
    for b in buckets:
        for name, code in b.graph.aot_graphs.items() if b.graph is not None else ():
            body.append(details(f"part {b.index}: aten graph {name}", highlight(code)))
    return details(f"DDP gradient buckets ({len(buckets)} parts)", "".join(body))


def drawing(ref: GraphRef, page: int = 0) -> tuple[str, int]:
    """The SVG of one page and the page count."""
    gm = ref.graph.graph_module
    if gm is None or not hasattr(gm, "graph"):
        return note("no FX graph module recorded for this graph"), 1
    svg, info = graph_svg.page_svg(gm, page)
    caption = (
        f'<div style="font-size: 12px; color: #666;">{esc(graph_svg.page_caption(info))}</div>'
    )
    return caption + graph_svg.svg_block(svg), info.count


def render(state: InspectorState) -> str:
    refs = graph_refs(state.report)
    if not refs:
        return note("no graphs captured yet")
    parts = []
    for ref in refs[:STATIC_GRAPH_LIMIT]:
        svg, _ = drawing(ref, 0)
        parts.append(details(ref.label, svg + graph_details(ref), open_=(ref.index == 0)))
    if len(refs) > STATIC_GRAPH_LIMIT:
        parts.append(
            note(f"{len(refs) - STATIC_GRAPH_LIMIT} more graphs are shown in the live inspector.")
        )
    return "".join(parts)


class GraphsView:
    title = "Graphs"

    def __init__(self, state: InspectorState) -> None:
        self.refs: list[GraphRef] = []
        self.pick = widgets.Dropdown(
            description="graph", layout=widgets.Layout(width="min(100%, 640px)")
        )
        self.prev = widgets.Button(description="◀ page", layout=widgets.Layout(width="80px"))
        self.next = widgets.Button(description="page ▶", layout=widgets.Layout(width="80px"))
        self.page_label = widgets.Label()
        self.svg = widgets.HTML()
        self.info = widgets.HTML()
        self.page = 0
        self.pages = 1
        self.pager = widgets.HBox([self.prev, self.page_label, self.next])
        self.widget = widgets.VBox([self.pick, self.pager, self.svg, self.info])
        self.pick.observe(self._on_pick, names="value")
        self.prev.on_click(lambda _: self._turn(-1))
        self.next.on_click(lambda _: self._turn(+1))
        self.update(state)

    def update(self, state: InspectorState) -> None:
        self.refs = graph_refs(state.report)
        current = self.pick.value
        options = [(r.label, r.index) for r in self.refs]
        self.pick.unobserve(self._on_pick, names="value")
        self.pick.options = options
        self.pick.value = (
            current
            if current is not None and current < len(self.refs)
            else (0 if self.refs else None)
        )
        self.pick.observe(self._on_pick, names="value")
        self._show(reset_page=False)

    def _on_pick(self, _change) -> None:
        self._show(reset_page=True)

    def _turn(self, step: int) -> None:
        self.page = min(max(self.page + step, 0), self.pages - 1)
        self._show(reset_page=False)

    def _show(self, reset_page: bool) -> None:
        if not self.refs or self.pick.value is None:
            self.svg.value, self.info.value = note("no graphs captured yet"), ""
            self.pager.layout.display = "none"
            return
        if reset_page:
            self.page = 0
        ref = self.refs[self.pick.value]
        self.svg.value, self.pages = drawing(ref, self.page)
        self.page = min(self.page, self.pages - 1)
        self.pager.layout.display = "flex" if self.pages > 1 else "none"
        self.page_label.value = f"page {self.page + 1} / {self.pages}"
        self.info.value = graph_details(ref)
