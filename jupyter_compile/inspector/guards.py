"""Guards tab: why each cached entry may be reused, and why new ones were compiled.

First the recompile history (every entry in the order it was compiled, with the guard of the
older entries that failed), then one table per entry and its generated guard function.
"""

from __future__ import annotations

from collections import Counter

import ipywidgets as widgets

from compiler.records import EntryRecord, FunctionRecord, SourceLine
from jupyter_compile.html import Raw, details, esc, highlight, note, table
from jupyter_compile.inspector.common import InspectorState, where
from jupyter_compile.sources import WRAPPER, is_own, named_places


def _graph_numbers(state: InspectorState) -> dict[int, int]:
    numbers: dict[int, int] = {}
    for fn in state.report.functions if state.report else []:
        for entry in fn.entries:
            if entry.graph is not None:
                numbers[id(entry)] = len(numbers)
    return numbers


def history(state: InspectorState) -> str:
    numbers = _graph_numbers(state)
    rows = []
    for fn in state.report.functions:
        for i, entry in enumerate(fn.entries):
            why = entry.recompile_reason or (
                "first compile" if i == 0 else "new entry point (after a break)"
            )
            graph = f"graph {numbers[id(entry)]}" if id(entry) in numbers else "no graph"
            rows.append(
                (
                    fn.qualname,
                    entry.start_line,
                    graph,
                    Raw(f"<code>{esc(why)}</code>") if entry.recompile_reason else why,
                    entry.hits,
                    f"{entry.compile_time_s:.3f} s",
                )
            )
    return table(
        ["function", "starts at", "graph", "compiled because", "hits", "compile time"], rows
    )


# A model's entry guards every parameter (over a thousand guards for a ResNet): the table shows
# the first ones, the counts by kind summarise the rest.
MAX_GUARD_ROWS = 100


def entry_view(fn: FunctionRecord, entry: EntryRecord, number: str) -> str:
    parts = []
    if entry.recompile_reason:
        parts.append(
            note(
                "recompiled because this guard failed on the older entries: "
                f"{entry.recompile_reason}",
                color="#8a6d3b",
            )
        )
    if entry.guards:
        kinds = Counter(g.kind for g in entry.guards)
        parts.append(note(", ".join(f"{n} {kind}" for kind, n in kinds.most_common())))
        rows = [
            (g.kind, g.source, g.expr, g.description, _user_line(g.user_line))
            for g in entry.guards[:MAX_GUARD_ROWS]
        ]
        parts.append(
            table(["kind", "source", "expr", "description", "user line"], rows, mono_cols=(1, 2))
        )
        if len(entry.guards) > MAX_GUARD_ROWS:
            more = len(entry.guards) - MAX_GUARD_ROWS
            parts.append(note(f"… {more} more guards; the guard function below checks them all"))
    else:
        parts.append(note("no guards: this entry is always reused"))
    if entry.guard_source:
        source = named_places(entry.guard_source)
        parts.append(details("guard function (runnable Python)", highlight(source)))
    if entry.graph_break is not None:
        parts.append(note(f"ends at a graph break: {entry.graph_break.reason}", color="#a94442"))
    for control in entry.controls:
        parts.append(note(f"shaped by {control.kind}: {control.target}: {control.detail}"))
    title = (
        f"{fn.qualname} · entry {number} · starts at {entry.start_line} · "
        f"{len(entry.guards)} guards · {entry.hits} hits"
    )
    return details(title, "".join(parts), open_=(number == "0"))


def _user_line(line: SourceLine | None) -> Raw | str:
    """The line that made the guard, short; the full path in its tooltip."""
    if line is None:
        return ""
    if is_own(line.filename):
        return WRAPPER
    code = esc(line.text.strip())
    return Raw(f'<span title="{esc(where(line))}">{line.lineno}: <code>{code}</code></span>')


def render(state: InspectorState) -> str:
    if state.report is None or not state.report.entries:
        return note("no entries compiled yet")
    parts = [details("recompile history", history(state), open_=True)]
    n = 0
    for fn in state.report.functions:
        for entry in fn.entries:
            parts.append(entry_view(fn, entry, str(n)))
            n += 1
    return "".join(parts)


class GuardsView:
    title = "Guards"

    def __init__(self, state: InspectorState) -> None:
        self.widget = widgets.HTML(render(state))

    def update(self, state: InspectorState) -> None:
        self.widget.value = render(state)
