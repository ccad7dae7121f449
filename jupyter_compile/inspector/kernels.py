"""Kernels tab, the kernel inspector: pick a kernel; read its source, where it came from (the
FX nodes fused into it and the user lines behind them), and after a timing run its measured
time and achieved bandwidth."""

from __future__ import annotations

import ipywidgets as widgets

from compiler.records import KernelRecord
from jupyter_compile.html import details, esc, heading, highlight, note, table
from jupyter_compile.inspector.common import (
    InspectorState,
    KernelRef,
    kernel_refs,
    unique_lines,
    where,
)
from jupyter_compile.timing import bandwidth_gbs

STATIC_KERNEL_LIMIT = 12

NOT_PROFILED = (
    "not measured: the timing run's profiler did not see this kernel (CPU kernels are seen "
    "when the generated wrapper marks them with record_function)"
)

_LANGUAGE_LEXER = {"triton": "python", "cpp": "cpp", "extern": "python"}


def facts(kernel: KernelRecord, timed: bool = False) -> list[tuple[str, object]]:
    rows: list[tuple[str, object]] = [("language", kernel.language)]
    if kernel.graph == "backward":
        rows.append(("runs in", "the backward pass (loss.backward()): gradients of its FX nodes"))
    elif kernel.graph == "forward":
        rows.append(("runs in", "the forward pass of a training graph"))
    if kernel.grid:
        rows.append(("grid", kernel.grid))
    if kernel.size_generic:
        args = ", ".join(f"{k}={v}" for k, v in kernel.size_args.items())
        rows.append(
            ("sizes", f"dynamic: runs {kernel.size_generic}, compiled once for all sizes; {args}")
        )
        rows.append(("sizes served", served(kernel)))
    if kernel.config:
        rows.append(("config", ", ".join(f"{k}={v}" for k, v in kernel.config.items())))
    if kernel.bytes_accessed:
        rows.append(("bytes accessed", f"{kernel.bytes_accessed:,}"))
    if kernel.measured_ms is not None:
        rows.append(("measured time", f"{kernel.measured_ms * 1e3:.1f} µs"))
        bw = bandwidth_gbs(kernel)
        if bw is not None:
            rows.append(("achieved bandwidth", f"{bw:.2f} GB/s"))
    else:
        rows.append(
            ("measured time", NOT_PROFILED if timed else "run timing (Timing tab) to measure")
        )
    return rows


def served(kernel: KernelRecord) -> str:
    """The size arguments of every size a size-generic kernel has run, in order."""
    names = list(kernel.size_args)
    sizes = [" ".join(f"{n}={v}" for n, v in zip(names, values)) for values in kernel.sizes_served]
    return f"{len(sizes)}: " + "; ".join(sizes)


def kernel_view(ref: KernelRef, timed: bool = False) -> str:
    k = ref.kernel
    parts = [table(["", ""], facts(k, timed))]
    if k.fused_nodes:
        parts.append(heading(f"fused FX nodes ({len(k.fused_nodes)}) of graph {ref.graph.index}"))
        parts.append(
            '<div style="font-family: monospace; font-size: 12px;">'
            + ", ".join(esc(n) for n in k.fused_nodes)
            + "</div>"
        )
    if k.parts:
        parts.append(heading(f"parts ({len(k.parts)}): independent kernels run by this one launch"))
        rows = [
            (
                p.name,
                f"{p.elements:,}",
                f"{p.first_program}..{p.last_program}",
                ", ".join(p.fused_nodes),
            )
            for p in k.parts
        ]
        parts.append(table(["part", "elements", "programs", "FX nodes"], rows, mono_cols=(0, 3)))
    if k.source_lines:
        rows = [(where(s), s.function, s.text.strip()) for s in unique_lines(k.source_lines)]
        parts.append(heading("from these source lines"))
        parts.append(table(["where", "function", "line"], rows, mono_cols=(2,)))
    parts.append(heading("source"))
    parts.append(highlight(k.source, _LANGUAGE_LEXER.get(k.language, "text"), max_height=520))
    if k.generic_source:
        parts.append(heading(f"the size-generic code it runs ({k.size_generic})"))
        lexer = _LANGUAGE_LEXER.get(k.language, "text")
        parts.append(highlight(k.generic_source, lexer, max_height=520))
    return "".join(parts)


def render(state: InspectorState) -> str:
    refs = kernel_refs(state.report)
    if not refs:
        backend = state.report.backend if state.report else ""
        return note(
            f"no kernels: the backend ({backend or 'unknown'}) generated none for these graphs"
        )
    timed = state.timing is not None
    parts = [
        details(ref.label, kernel_view(ref, timed), open_=(ref.index == 0))
        for ref in refs[:STATIC_KERNEL_LIMIT]
    ]
    if len(refs) > STATIC_KERNEL_LIMIT:
        parts.append(
            note(f"{len(refs) - STATIC_KERNEL_LIMIT} more kernels are shown in the live inspector.")
        )
    return "".join(parts)


class KernelsView:
    title = "Kernels"

    def __init__(self, state: InspectorState) -> None:
        self.refs: list[KernelRef] = []
        self._timed = False
        self.pick = widgets.Dropdown(
            description="kernel", layout=widgets.Layout(width="min(100%, 640px)")
        )
        self.body = widgets.HTML()
        self.widget = widgets.VBox([self.pick, self.body])
        self.pick.observe(lambda _: self._show(), names="value")
        self.update(state)

    def update(self, state: InspectorState) -> None:
        self.refs = kernel_refs(state.report)
        self._timed = state.timing is not None
        self._empty = render(state) if not self.refs else ""
        current = self.pick.value
        self.pick.options = [(r.label, r.index) for r in self.refs]
        if self.refs:
            self.pick.value = current if current is not None and current < len(self.refs) else 0
        self.pick.layout.display = "flex" if self.refs else "none"
        self._show()

    def _show(self) -> None:
        if not self.refs or self.pick.value is None:
            self.body.value = self._empty
            return
        self.body.value = kernel_view(self.refs[self.pick.value], self._timed)
