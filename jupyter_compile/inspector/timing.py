"""Timing tab: eager vs compiled (vs torch.compile when asked), and compile time by stage.

The run uses the arguments of the most recent call, so the tab needs the function to have
been called once; the "Run timing" button starts it (`--compare` starts it after the cell).
"""

from __future__ import annotations

from collections.abc import Callable

import ipywidgets as widgets

from jupyter_compile.html import bar_chart, heading, note, table
from jupyter_compile.inspector.common import InspectorState, compile_seconds, kernel_refs
from jupyter_compile.timing import TORCH_COMPILE_LABEL, TimingResult, bandwidth_gbs, stage_totals

_COLORS = {"eager": "#9e9e9e", "compiled": "#2e7d32", TORCH_COMPILE_LABEL: "#1565c0"}
_TOP_KERNELS = 15


def _runs(result: TimingResult) -> str:
    rows, bars, spread = [], [], []
    for m in result.measurements:
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
    head = heading(f"per call on {result.device} (median, interquartile range; after warm-up)")
    return (
        head
        + table(["variant", "median", "spread (p25 – p75)", "runs", "speedup vs eager"], rows)
        + bar_chart(bars, "ms", spread)
    )


def _kernels(state: InspectorState) -> str:
    timed = [r for r in kernel_refs(state.report) if r.kernel.measured_ms is not None]
    if not timed:
        return ""
    timed.sort(key=lambda r: -(r.kernel.measured_ms or 0.0))
    rows = []
    for r in timed[:_TOP_KERNELS]:
        bw = bandwidth_gbs(r.kernel)
        rows.append(
            (
                r.kernel.name,
                f"{r.kernel.measured_ms * 1e3:.1f} µs",
                f"{bw:.2f} GB/s" if bw is not None else "",
            )
        )
    return heading("kernels (one profiled call)") + table(
        ["kernel", "time", "achieved bandwidth"], rows, mono_cols=(0,)
    )


def _stages(state: InspectorState) -> str:
    totals = stage_totals(state.report)
    total = compile_seconds(state.report)
    head = heading(f"compile time: {total:.3f} s in total")
    if not totals:
        return head + note("no per-stage times recorded by the backend")
    bars = [(stage, seconds * 1e3, "#8d6e63") for stage, seconds in totals.items()]
    return head + bar_chart(bars, "ms")


def render(state: InspectorState) -> str:
    parts = []
    if state.timing is not None:
        parts.append(_runs(state.timing))
        parts.append(_kernels(state))
    elif state.target is not None and state.target.timing_inputs() is None:
        parts.append(
            note(
                f"call {state.title} once; then Run timing re-runs that call eagerly and compiled."
            )
        )
    else:
        parts.append(note("no timing run yet"))
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
