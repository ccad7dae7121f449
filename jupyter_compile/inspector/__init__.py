"""The inspector: one tabbed widget per compiled function, with a static HTML twin.

`Inspector` renders a `CompiledReport` (fetched again on `refresh`) into five tabs.

Shown by `%%compile` it is two outputs: the static HTML twin (the same tabs as plain HTML),
then the live widget. A notebook saved and opened again has no widget models: JupyterLab and
Notebook then show "Error displaying widget: model not found" in the widget's place, and
never fall back to another mime type of the same output. So the twin is its own output, and
a small stylesheet in it shows exactly one of the two: the widget while it is live (it
carries a marker class), the twin otherwise (also hiding the dead widget's error). Where
stylesheets do not run (GitHub, sanitised HTML) the twin shows, and the widget's output is
a one-line text. Displayed directly (`display(inspector)`), it is one bundle with both.

Live updates: `compiler.records.subscribe` tells the extension when any function record
changes; live inspectors are marked stale then and redrawn after the cell that caused it
(`refresh_stale`, run from IPython's post_run_cell event), once per cell instead of once per
compile.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import ipywidgets as widgets
from IPython.display import display

from compiler.records import CompiledReport
from jupyter_compile.html import esc, static_tabs
from jupyter_compile.inspector import graphs, guards, kernels, overview, timing
from jupyter_compile.inspector.common import InspectorState, structure_key

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


class Inspector:
    """Tabs for one compiled function (or module class)."""

    def __init__(
        self,
        title: str,
        fetch: Callable[[], CompiledReport | None],
        target: Any = None,
        compare_torch: bool = False,
        subtitle: str = "",
    ) -> None:
        self.fetch = fetch
        self.subtitle = subtitle
        self.state = InspectorState(
            title=title, report=None, target=target, compare_torch=compare_torch
        )
        self._load()
        self._key = self._drawn_key()
        self.stale = False
        self.handle = None  # the twin's DisplayHandle when shown by the magic, to refresh it
        self.header = widgets.HTML(self._header_html())
        self.views = [
            overview.OverviewView(self.state),
            graphs.GraphsView(self.state),
            guards.GuardsView(self.state),
            kernels.KernelsView(self.state),
            timing.TimingView(self.state, self.run_timing),
        ]
        self.tabs = widgets.Tab(
            children=[v.widget for v in self.views], titles=[v.title for v in self.views]
        )
        self.widget = widgets.VBox([self.header, self.tabs])
        self.uid = self.widget.model_id or str(id(self))
        self.header.value = self._header_html()  # now with the live marker of this uid
        _LIVE.add(self)

    # -- data -----------------------------------------------------------------------------------

    def _load(self) -> None:
        try:
            self.state.report = self.fetch()
            self.state.error = None
        except Exception as exc:  # a report that cannot be read is shown, not raised
            self.state.report = None
            self.state.error = f"could not read the compiler's records: {type(exc).__name__}: {exc}"

    def _header_html(self) -> str:
        s = self.state
        # The marker the twin's stylesheet looks for: this widget is live (see the docstring).
        marker = f'<span class="jc-live-{esc(getattr(self, "uid", ""))}"></span>'
        parts = [f'{marker}<b style="font-size: 14px;">{esc(s.title)}</b>']
        if self.subtitle:
            parts.append(f' <span style="color: #666;">{esc(self.subtitle)}</span>')
        if s.report is not None and s.report.functions:
            parts.append("<div>" + overview.summary_badges(s.report) + "</div>")
        return "".join(parts)

    def _redraw(self) -> None:
        self.header.value = self._header_html()
        for view in self.views:
            view.update(self.state)

    def _drawn_key(self) -> tuple:
        """What the tabs draw: the report's structure, and the user's call count (the Timing
        tab shows their calls' times)."""
        target = self.state.target
        return (structure_key(self.state.report), target.calls if target is not None else 0)

    def calls_changed(self) -> bool:
        target = self.state.target
        return target is not None and target.calls != self._key[1]

    def refresh(self, force: bool = False) -> bool:
        """Fetch the report again; redraw if anything drawn changed. Returns whether it did."""
        self.stale = False
        self._load()
        key = self._drawn_key()
        if key == self._key and not force:
            return False
        self._key = key
        self._redraw()
        if self.handle is not None:
            self.handle.update(self.twin_bundle(), raw=True)
        return True

    def run_timing(self) -> None:
        from jupyter_compile.timing import run_timing

        target = self.state.target
        inputs = target.timing_inputs() if target is not None else None
        if inputs is None:
            raise RuntimeError(
                f"{self.state.title} has not been called yet: there are no arguments to time"
            )
        self._load()
        self.state.timing = run_timing(
            inputs, self.state.report, compare_torch=self.state.compare_torch
        )
        self.refresh(force=True)

    # -- display --------------------------------------------------------------------------------

    def static_html(self) -> str:
        tabs = [(name, module.render(self.state)) for name, module in _TABS]
        title = self.state.title + (f" — {self.subtitle}" if self.subtitle else "")
        return static_tabs(title, tabs)

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, Any]:
        bundle = dict(self.widget._repr_mimebundle_(include=include, exclude=exclude) or {})
        bundle["text/html"] = self.static_html()
        bundle["text/plain"] = f"<jupyter_compile inspector: {self.state.title}>"
        return bundle

    def twin_bundle(self) -> dict[str, Any]:
        """The static twin as an output of its own, with the stylesheet that shows it only
        where the widget next to it is not live."""
        return {
            "text/html": twin_style(self.uid) + f'<div class="jc-twin-{esc(self.uid)}">'
            f"{self.static_html()}</div>",
            "text/plain": f"<jupyter_compile inspector: {self.state.title}>",
        }

    def widget_bundle(self) -> dict[str, Any]:
        bundle = dict(self.widget._repr_mimebundle_() or {})
        bundle.pop("text/html", None)
        bundle["text/plain"] = f"(live inspector of {self.state.title}: run the cell to use it)"
        return bundle

    def show(self) -> None:
        self.handle = display(self.twin_bundle(), raw=True, display_id=True)
        display(self.widget_bundle(), raw=True)

    def detach(self) -> None:
        """Stop live updates (the function was redefined); the widgets stay as they are."""
        _LIVE.discard(self)


def twin_style(uid: str) -> str:
    """Hide the twin while the widget output right after it is live (it holds the marker
    `jc-live-<uid>`), and hide that widget output when it is not (a reopened notebook's
    "model not found"). JupyterLab and Notebook 7 wrap each output in .jp-OutputArea-child,
    classic Notebook and nbconvert's classic template in .output_area."""
    u = esc(uid)
    rules = []
    for box in (".jp-OutputArea-child", ".output_area"):
        twin = f"{box}:has(.jc-twin-{u})"
        rules.append(f"{twin}:has(+ {box} .jc-live-{u}) {{ display: none; }}")
        rules.append(f"{twin} + {box}:not(:has(.jc-live-{u})) {{ display: none; }}")
    return "<style>" + "\n".join(rules) + "</style>"


_TABS = [
    ("Overview", overview),
    ("Graphs", graphs),
    ("Guards", guards),
    ("Kernels", kernels),
    ("Timing", timing),
]

# Weak, so an inspector whose output was cleared and that nothing else holds goes away.
_LIVE: weakref.WeakSet[Inspector] = weakref.WeakSet()


def mark_stale(_record: Any = None) -> None:
    """The compiler.records subscriber: something changed, redraw after this cell."""
    for inspector in list(_LIVE):
        inspector.stale = True


def refresh_stale(*_args: Any) -> None:
    for inspector in list(_LIVE):
        if inspector.stale or inspector.calls_changed():
            try:
                inspector.refresh()
            except Exception:  # one broken view must not break the user's next cell
                inspector.stale = False


def static_report(title: str, report: CompiledReport | None) -> str:
    """Overview, graphs and guards of a report as static HTML (used by `%explain`, whose
    recording backend generates no kernels and whose run is not timed)."""
    state = InspectorState(title=title, report=report)
    return static_tabs(title, [(name, module.render(state)) for name, module in _TABS[:3]])


__all__ = ["Inspector", "mark_stale", "refresh_stale", "static_report"]
