"""Output safety: every piece of user-derived text is rendered as text in every view.

Every string field of every record (function names, file names, source lines, guard
expressions, break reasons, notes, fallback and warning messages, kernel names, sources and
configs, stage names, timing labels and errors) is poisoned with markup that would run
script or break out of an attribute, then everything the extension draws is rendered: the
inspector's static HTML and its live widgets after visiting every graph, page and kernel,
the %explain view, the timing tab, the progress note and the magic's messages. None of the
markup may come out live. The last test does the same through a real IPython shell with the
real compiler, for what a user can actually put in a cell.
"""

from __future__ import annotations

import dataclasses
import html
import re
from html.parser import HTMLParser
from types import SimpleNamespace
from typing import Any

import ipywidgets as widgets
import pytest
import torch

from compiler.records import CompiledReport, SourceLine
from jupyter_compile import magics, progress
from jupyter_compile.explain import ExplainView
from jupyter_compile.inspector import Inspector, static_report
from jupyter_compile.timing import Measurement, TimingResult
from tests.jupyter.conftest import run
from tests.jupyter.fixtures import make_report

# Markup for element content, and a quote breaking out of an attribute into an event handler.
POISON = "<script>alert(1)</script><img src=x onerror=alert(2)>\" onmouseover=\"alert(3)' x='"


class _Elements(HTMLParser):
    """The tags and attributes a browser would build from some markup."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in ("script", "img", "iframe", "object"):
            self.found.append(f"<{tag}>")
        self.found += [f"<{tag} {name}=...>" for name, _ in attrs if name.startswith("on")]


def assert_inert(markup: str, where: str) -> None:
    parser = _Elements()
    parser.feed(markup)
    parser.close()
    assert not parser.found, f"{where}: live markup {parser.found}"


def poison(value: Any, seen: set[int] | None = None) -> Any:
    """`value` with POISON appended to every string inside it (dataclass fields, lists, dict
    keys and values), in place for dataclasses; numbers, FX graphs and modules untouched."""
    seen = set() if seen is None else seen
    if isinstance(value, str):
        return value + POISON
    if isinstance(value, list):
        return [poison(v, seen) for v in value]
    if isinstance(value, tuple):
        return tuple(poison(v, seen) for v in value)
    if isinstance(value, dict):
        return {poison(k, seen): poison(v, seen) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type) and id(value) not in seen:
        seen.add(id(value))
        for f in dataclasses.fields(value):
            setattr(value, f.name, poison(getattr(value, f.name), seen))
    return value


def poisoned_report() -> CompiledReport:
    report = make_report()
    # the source's lines and the graphs' lines must still match up to be drawn together
    fn = report.functions[0]
    poison(report)
    fn.source = "\n".join(line + POISON for line in fn.source.splitlines())
    for g in report.graphs:
        gelu = [n for n in g.graph_module.graph.nodes if "gelu" in str(n.target)]
        for n in gelu:
            n.kwargs = {"approximate": POISON}
    return report


def widget_markup(widget: widgets.Widget) -> str:
    """Every HTML value in a widget tree. (Labels, dropdown options and tab titles are shown
    as plain text by ipywidgets, so markup in them is inert by construction.)"""
    if isinstance(widget, widgets.HTML):
        return widget.value
    return "\n".join(widget_markup(c) for c in getattr(widget, "children", ()))


def visit_everything(inspector: Inspector) -> str:
    """The live markup of every graph (every page), every kernel, and the timing tab."""
    seen = [widget_markup(inspector.widget)]
    graphs_view, kernels_view = inspector.views[1], inspector.views[3]
    for value in [v for _, v in graphs_view.pick.options]:
        graphs_view.pick.value = value
        seen.append(widget_markup(graphs_view.widget))
        for _ in range(graphs_view.pages):
            graphs_view.next.click()
            seen.append(graphs_view.svg.value)
    for value in [v for _, v in kernels_view.pick.options]:
        kernels_view.pick.value = value
        seen.append(kernels_view.body.value)
    return "\n".join(seen)


def poisoned_timing() -> TimingResult:
    return TimingResult(
        "cpu" + POISON,
        [
            Measurement("eager", [2.0, 2.1, 2.2]),
            Measurement("compiled" + POISON, [1.0, 1.1]),
            Measurement("vs torch.compile", [], error="RuntimeError: " + POISON),
        ],
    )


def test_the_inspector_renders_every_poisoned_field_as_text() -> None:
    report = poisoned_report()
    inspector = Inspector("f" + POISON, lambda: report, subtitle="function" + POISON)
    inspector.state.timing = poisoned_timing()
    for kernel in report.kernels:
        kernel.measured_ms = 0.01
    inspector.refresh(force=True)
    static = inspector.static_html()
    assert_inert(static, "static HTML")
    assert_inert(inspector._repr_mimebundle_()["text/html"], "mime bundle")
    assert_inert(visit_everything(inspector), "live widgets")
    # shown, as text: the fallback reason, a warning, a guard, a note, the timing error
    text = html.unescape(re.sub(r"<[^>]+>", "", static))
    for shown in (
        report.graphs[0].notes[0],
        report.functions[0].warnings[0],
        report.entries[0].guards[1].expr,
        report.controls[0].detail,
        report.controls[1].target,
        "RuntimeError: " + POISON,
    ):
        assert shown in text, shown


def test_a_fallback_reason_and_a_failed_timing_button_are_text() -> None:
    report = poisoned_report()
    report.graphs[0].fallback = "LoweringError: " + POISON
    inspector = Inspector("f", lambda: report)

    def failing_run() -> None:
        raise RuntimeError(POISON)

    inspector.views[4]._run = failing_run
    inspector.views[4]._clicked(None)
    assert POISON in inspector.views[4].status.value  # a Label: plain text by construction
    assert isinstance(inspector.views[4].status, widgets.Label)
    markup = inspector.static_html() + visit_everything(inspector)
    assert_inert(markup, "inspector with a fallback")
    assert "LoweringError: " + POISON in html.unescape(re.sub(r"<[^>]+>", "", markup))


def test_explain_view_and_static_report_render_poison_as_text() -> None:
    report = poisoned_report()
    fn = report.functions[0]
    out = SimpleNamespace(
        graph_count=2,
        graph_break_count=1,
        break_reasons=fn.breaks,
        ops_per_graph=[list(g.graph_module.graph.nodes) for g in fn.graphs],
        out_guards=fn.entries[0].guards,
        compile_times="trace: 0.01" + POISON,
        functions=report.functions,
        controls=report.controls,
    )
    assert_inert(ExplainView(out, "f" + POISON)._repr_html_(), "%explain")
    without_records = SimpleNamespace(**{**vars(out), "functions": None})
    assert_inert(ExplainView(without_records, "f")._repr_html_(), "%explain without records")
    assert_inert(static_report("f" + POISON, report), "static report")


def test_progress_note_and_magic_messages_are_text(monkeypatch: pytest.MonkeyPatch) -> None:
    assert_inert(progress._note("compiling f" + POISON, busy=True).data, "progress note")
    shown = []
    monkeypatch.setattr(magics, "display", lambda obj, raw=False: shown.append(obj))
    magics.message("left g uncompiled: " + POISON, "warning")
    assert_inert(shown[0]["text/html"], "magic message")


def test_source_lines_with_poison_in_file_and_function_names() -> None:
    report = poisoned_report()
    for g in report.graphs:
        g.source_lines.append(SourceLine("<cell" + POISON, 3, "y = 1" + POISON, "g" + POISON))
    inspector = Inspector("f", lambda: report)
    assert_inert(inspector.static_html() + visit_everything(inspector), "source lines")


CELL = """%%compile
def tagged(x, tag):
    label = "<script>alert('x\\"y')</script>"
    if tag == "<img src=x onerror=alert(2)>":
        x = x + 1
    print(label)
    if x.sum() > 0:
        raise ValueError("bad input <script>alert(3)</script>")
    return torch.cos(x) * len(label)
tagged(-torch.ones(3), "<img src=x onerror=alert(2)>")
"""


def test_user_strings_through_the_real_compiler_and_shell(ipython) -> None:
    """String constants in source, guards (a string argument) and breaks, an exception
    message, %explain, the kernels tab and a timing run, with the default backend."""
    ipython.run_cell("import torch")
    out = run(ipython, CELL)
    assert out.result.success, out.stdout + out.stderr
    markup = out.html()
    assert_inert(markup, "%%compile output")
    failed = run(ipython, 'tagged(torch.ones(3), "<img src=x onerror=alert(2)>")')
    assert isinstance(failed.result.error_in_exec, ValueError)
    assert str(failed.result.error_in_exec) == "bad input <script>alert(3)</script>"
    explained = run(ipython, '%explain tagged(-torch.ones(3), "<img src=x onerror=alert(2)>")')
    assert_inert(explained.html(), "%explain output")
    import jupyter_compile

    inspector = jupyter_compile._installed[id(ipython)]["magics"].inspectors["tagged"]
    inspector.refresh(force=True)
    inspector.run_timing()
    markup = inspector.static_html() + visit_everything(inspector)
    assert_inert(markup, "inspector after more calls and timing")
    text = html.unescape(re.sub(r"<[^>]+>", "", markup))
    assert "tag == '<img src=x onerror=alert(2)>'" in text or "<img src=x onerror=alert(2)>" in text
    label = "<script>alert('x\"y')</script>"
    expected = torch.cos(-torch.ones(3)) * len(label)
    assert torch.allclose(ipython.user_ns["tagged"](-torch.ones(3), "x"), expected)
