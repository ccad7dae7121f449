"""Timing tab: the user's own calls, eager vs compiled re-runs (vs torch.compile when
asked) where re-running changes nothing the user can see, and compile time by stage.

The re-runs use clones of the most recent call's arguments, so the tab needs the function to
have been called once; the "Run timing" button starts them (`--compare` starts them after
the cell). When the compiler's records show that the call changes anything else, the tab
says what, and shows only the calls the user made (jupyter_compile/timing.py).
"""

from __future__ import annotations

from collections.abc import Callable

import ipywidgets as widgets

from jupyter_compile.html import bar_chart, heading, note, table
from jupyter_compile.inspector.common import InspectorState, kernel_refs, stage_totals
from jupyter_compile.timing import (
    TORCH_COMPILE_LABEL,
    USER_CALLS_LABEL,
    Measurement,
    TimingResult,
    bandwidth_gbs,
    device_of,
    user_calls,
)

_COLORS = {
    "eager": "#9e9e9e",
    "compiled": "#2e7d32",
    USER_CALLS_LABEL: "#66bb6a",
    TORCH_COMPILE_LABEL: "#1565c0",
}
_TOP_KERNELS = 15


def _runs(result: TimingResult, own: Measurement | None) -> str:
    """The result's rows, the user's calls as they are now (they go on after a timing run)."""
    measurements = [m for m in result.measurements if m.label != USER_CALLS_LABEL]
    if own is not None:
        measurements.append(own)
    result = TimingResult(result.device, measurements)
    rows, bars, spread = [], [], []
    for m in measurements:
        if m.error:
            rows.append((m.label, "failed", "", "", m.error))
            continue
        lo, hi = m.spread_ms
        speedup = result.speedup(m.label)
        rows.append(
            (
                m.label,
                f"{m.median_ms:.4g} ms",
                f"{lo:.4g} – {hi:.4g} ms",
                len(m.samples_ms),
                f"{speedup:.2f}×" if speedup is not None and m.label != "eager" else "",
            )
        )
        bars.append((m.label, m.median_ms, _COLORS.get(m.label, "#6d4c41")))
        spread.append((lo, hi))
    if not rows:
        return ""
    head = heading(f"per call on {result.device} (median, interquartile range)")
    return (
        head
        + table(["variant", "median", "spread (p25 – p75)", "calls", "speedup vs eager"], rows)
        + bar_chart(bars, "ms", spread)
    )


def _kernels(state: InspectorState, result: TimingResult) -> str:
    """One row per kernel name: the profiler reports by name, so a kernel that several graphs
    share (a recompile generates the same kernel again) has one time."""
    by_name = {}
    for r in kernel_refs(state.report):
        if r.kernel.measured_ms is not None:
            by_name.setdefault(r.kernel.name, []).append(r)
    if not by_name:
        return note(result.kernel_note) if result.kernel_note else ""
    timed = sorted(by_name.values(), key=lambda refs: -(refs[0].kernel.measured_ms or 0.0))
    rows = []
    for refs in timed[:_TOP_KERNELS]:
        kernel = refs[0].kernel
        bw = bandwidth_gbs(kernel)
        graphs = ", ".join(str(i) for i in sorted({r.graph.index for r in refs}))
        rows.append(
            (
                kernel.name,
                graphs,
                f"{kernel.measured_ms * 1e3:.1f} µs",
                f"{bw:.2f} GB/s" if bw is not None else "",
            )
        )
    total_us = sum(refs[0].kernel.measured_ms for refs in timed) * 1e3
    if result.profiled_call_ms:
        title = (
            f"kernels, per compiled call while the profiler ran: the call took "
            f"{result.profiled_call_ms * 1e3:.1f} µs, its kernels {total_us:.1f} µs of it"
        )
    else:
        title = f"kernels, per compiled call: {total_us:.1f} µs in all"
    return heading(title) + table(
        ["kernel", "graph", "time", "achieved bandwidth"], rows, mono_cols=(0,)
    )


def _share(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole > 0 else ""


def accounting(state: InspectorState) -> str:
    """Where the time of the calls went, from the compiler's own accounting: per function, in
    compiled graphs against Python (guards, the code around graph breaks, what runs eagerly),
    and the hits of each entry. Calls that compiled something are left out."""
    report = state.report
    timed = [f for f in report.functions if f.timed_calls] if report is not None else []
    if not timed:
        return ""
    rows, bars = [], []
    for fn in timed:
        total, graphs = fn.run_time_s, min(fn.graph_time_s, fn.run_time_s)
        per_call = 1e3 / fn.timed_calls
        rows.append(
            (
                fn.qualname,
                fn.timed_calls,
                f"{total * per_call:.4g} ms",
                f"{graphs * per_call:.4g} ms ({_share(graphs, total)})",
                f"{(total - graphs) * per_call:.4g} ms ({_share(total - graphs, total)})",
            )
        )
        bars.append((f"{fn.qualname}: graphs", graphs * per_call, _COLORS["compiled"]))
        bars.append((f"{fn.qualname}: Python", (total - graphs) * per_call, _COLORS["eager"]))
    entries = [
        (
            fn.qualname,
            f"line {e.start_line}",
            "yes" if e.graph is not None else "no (Python only)",
            e.hits,
            f"{e.graph_time_s * 1e6 / e.timed_hits:.1f} µs" if e.timed_hits else "",
            e.graph_break.reason if e.graph_break is not None else "returns",
        )
        for fn in timed
        for e in fn.entries
    ]
    return (
        heading("where the time goes, per call (calls that compiled nothing)")
        + table(
            [
                "function",
                "calls",
                "per call",
                "in compiled graphs",
                "in Python (guards, code around breaks)",
            ],
            rows,
            mono_cols=(0,),
        )
        + bar_chart(bars, "ms")
        + heading("entries: hits and graph time", 5)
        + table(
            ["function", "starts at", "graph", "hits", "graph time per hit", "ends at"], entries
        )
        + note(
            "CPU time measured by the frame evaluator; on a GPU, graph time is the time to "
            "launch its kernels."
        )
    )


def _stages(state: InspectorState) -> str:
    totals = stage_totals(state.report)
    total = sum(totals.values())
    head = heading(f"compile time: {total:.3f} s in total")
    if not totals:
        return head + note("no per-stage times recorded by the backend")
    bars = [(stage, seconds * 1e3, "#8d6e63") for stage, seconds in totals.items()]
    return head + bar_chart(bars, "ms")


def render(state: InspectorState) -> str:
    parts = []
    target = state.target
    inputs = target.timing_inputs() if target is not None else None
    own = user_calls(inputs) if inputs is not None else None
    if state.timing is not None:
        parts.append(_runs(state.timing, own))
        if state.timing.blocked is not None:
            parts.append(
                note(
                    f"timing needs a side-effect-free call: {state.timing.blocked}; "
                    "re-running it would change that, so only your own calls are "
                    "timed",
                    "#8a6d3b",
                )
            )
        else:
            parts.append(_kernels(state, state.timing))
    elif target is not None and inputs is None:
        parts.append(
            note(
                f"call {state.title} once; then Run timing re-runs that call eagerly and "
                "compiled, on clones of its arguments, if it changes nothing else."
            )
        )
    else:
        if inputs is not None and own is not None:
            parts.append(_runs(TimingResult(device_of(inputs), []), own))
        parts.append(
            note(
                "no eager comparison yet: Run timing re-runs the last call on clones "
                "of its arguments, if it changes nothing else"
            )
        )
    parts.append(accounting(state))
    if state.report is not None and state.report.functions:
        parts.append(_stages(state))
    return "".join(parts)


class TimingView:
    title = "Timing"

    def __init__(self, state: InspectorState, run: Callable[[], None]) -> None:
        self.button = widgets.Button(
            description="Run timing", icon="clock-o", button_style="primary"
        )
        self.status = widgets.Label()
        self.body = widgets.HTML()
        self.widget = widgets.VBox([widgets.HBox([self.button, self.status]), self.body])
        self._run = run
        self.button.on_click(self._clicked)
        self.update(state)

    def _clicked(self, _button) -> None:
        self.button.disabled = True
        self.status.value = "timing…"
        try:
            self._run()
            self.status.value = ""
        except Exception as exc:  # shown in the tab: a button callback has no cell to raise into
            self.status.value = f"timing failed: {type(exc).__name__}: {exc}"
        finally:
            self.button.disabled = False

    def update(self, state: InspectorState) -> None:
        can_run = state.target is not None and state.target.timing_inputs() is not None
        self.button.disabled = not can_run
        self.button.tooltip = "" if can_run else "call the function first"
        self.body.value = render(state)
