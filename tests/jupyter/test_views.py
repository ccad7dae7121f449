"""The inspector's widgets and static HTML, on hand-made records with real FX graphs."""

from __future__ import annotations

import html
import re
from types import SimpleNamespace

import ipywidgets as widgets
import pytest
import torch

from jupyter_compile import graph_svg
from jupyter_compile.explain import ExplainView
from jupyter_compile.html import bar_chart, highlight
from jupyter_compile.inspector import WIDGET_MIME, Inspector, static_report
from jupyter_compile.timing import Measurement, TimingResult, measure
from tests.jupyter.fixtures import EVIL, FIRSTLINE, big_graph_module, make_report

TAB_TITLES = ["Overview", "Graphs", "Guards", "Kernels", "Timing"]


def visible(markup: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", markup))


def all_html(widget: widgets.Widget) -> str:
    """Every HTML value in a widget tree."""
    if isinstance(widget, widgets.HTML):
        return widget.value
    return "".join(all_html(c) for c in getattr(widget, "children", ()))


@pytest.fixture
def inspector() -> Inspector:
    report = make_report()
    return Inspector(f"evil_fn{EVIL}", lambda: report)


def test_widget_tree_has_the_five_tabs(inspector: Inspector) -> None:
    tab = inspector.tabs
    assert isinstance(tab, widgets.Tab)
    assert list(tab.titles) == TAB_TITLES
    assert len(tab.children) == 5
    graphs_tab = tab.children[1]
    dropdown = graphs_tab.children[0]
    assert isinstance(dropdown, widgets.Dropdown) and len(dropdown.options) == 3
    kernels_tab = tab.children[3]
    assert [label for label, _ in kernels_tab.children[0].options][0].startswith(
        "triton_poi_fused_sin_add_0"
    )


def test_mime_bundle_has_widget_view_and_html_fallback(inspector: Inspector) -> None:
    bundle = inspector._repr_mimebundle_()
    assert WIDGET_MIME in bundle and bundle[WIDGET_MIME]["model_id"] == inspector.widget.model_id
    static = bundle["text/html"]
    for title in TAB_TITLES:
        assert f">{title}</summary>" in static


def test_overview_shades_graph_lines_and_marks_breaks(inspector: Inspector) -> None:
    static = inspector.static_html()
    # line 11 (`y = torch.sin(x) + 1.0`) belongs to graph 0 and is shaded; line 10 is not.
    row11 = re.search(rf'<tr class="jc-line" data-line="{FIRSTLINE + 1}"[^>]*>', static).group(0)
    row10 = re.search(rf'<tr class="jc-line" data-line="{FIRSTLINE}"[^>]*>', static).group(0)
    assert "background:" in row11 and 'title="graph 0' in row11
    assert "background:" not in row10
    # the break is marked under its line with its reason, escaped.
    assert 'class="jc-break"' in static
    assert f"graph break: call to builtin print with {EVIL}" in visible(static)
    assert "recompiles: <b>1</b>" in static
    # the kernels generated from a line are named at its right, as in Cython's annotate view
    row = static[static.index(f'data-line="{FIRSTLINE + 1}"') :]
    row = row[: row.index("</tr>")]
    assert "→ triton_poi_fused_sin_add_0" in html.unescape(row)


def test_user_text_is_escaped_everywhere(inspector: Inspector) -> None:
    static = inspector.static_html()
    live = all_html(inspector.widget)
    for markup in (static, live):
        assert "<script>" not in markup and "<b>not bold</b>" not in markup
        assert "&lt;script&gt;" in markup
    assert EVIL in visible(static)  # shown, as text
    assert "<script>" not in static_report(EVIL, make_report())


def test_graph_drawing_escapes_constants_in_labels() -> None:
    report = make_report()
    gm = report.functions[0].entries[1].graph.graph_module
    svg, page = graph_svg.page_svg(gm, 0)
    assert svg.startswith("<svg") and page.count == 1
    assert "<script>" not in svg and "&lt;script&gt;" in svg


def test_large_graph_is_paged_with_cross_page_stubs() -> None:
    gm = big_graph_module(200)
    assert graph_svg.page_count(gm) == 4  # 202 nodes in pages of 60
    page = graph_svg.graph_page(gm, 1)
    assert page.node_count == graph_svg.PAGE_SIZE
    assert "(page 1)" in page.dot and "to page 3" in page.dot
    svg, _ = graph_svg.page_svg(gm, 3)
    assert "<svg" in svg


def test_graph_tab_pages_with_buttons() -> None:
    report = make_report()
    report.functions[0].entries[0].graph.graph_module = big_graph_module(130)
    view = Inspector("big", lambda: report).views[1]
    assert view.pages == 3 and view.page_label.value == "page 1 / 3"
    view.next.click()
    assert view.page == 1 and "page 2 of 3" in view.svg.value
    view.pick.value = 1
    assert view.page == 0 and view.pager.layout.display == "none"


def test_graphviz_missing_or_slow_falls_back_to_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(graph_svg, "dot_executable", lambda: None)
    assert "graphviz is not installed" in graph_svg.render_svg("digraph { a -> b }")
    monkeypatch.undo()
    assert "more than" in graph_svg.render_svg("digraph { a -> b }", timeout_s=1e-6)


def test_kernel_view_shows_source_nodes_and_bandwidth(inspector: Inspector) -> None:
    text = visible(inspector.static_html())
    assert "triton_poi_fused_sin_add_0" in text and "cpp_fused_gelu_mul_1" in text
    assert "0.26 GB/s" in text  # 512 bytes in 2 µs
    assert "run timing (Timing tab) to measure" in text  # the cpp kernel was not timed
    live = inspector.views[3]
    live.pick.value = 1
    assert 'extern "C"' in visible(live.body.value)


def test_guards_tab_lists_entries_and_recompile_reason(inspector: Inspector) -> None:
    text = visible(inspector.static_html())
    assert "recompile history" in text
    assert "L['x'].size()[0] == 8" in text
    assert "check_tensor(L['x'], torch.float32, (8, 8))" in text
    assert "first compile" in text


def test_controls_are_shown_in_the_overview_and_the_guards_tab(inspector: Inspector) -> None:
    static = inspector.static_html()
    text = visible(static)
    assert "what your controls did (2)" in text
    assert f"ran eagerly instead {EVIL}" in text  # the stance, a function-level control
    assert f"traced as the symbol s77 (size 9 in this call): changed {EVIL}" in text
    assert "shaped by dynamic: L['x'].size(0)" in text  # under the entry in the Guards tab
    assert "<script>" not in static


def test_timing_tab_renders_runs_chart_and_stages(inspector: Inspector) -> None:
    inspector.state.timing = TimingResult(
        "cpu",
        [Measurement("eager", [2.0, 2.2, 2.1]), Measurement("compiled", [1.0, 1.1, 0.9])],
    )
    inspector.refresh(force=True)
    body = inspector.views[4].body.value
    assert "<svg" in body and "2.10×" in body  # eager median 2.1 ms over compiled 1.0 ms
    # the fixture's stages outlast two entries' compile times (as a training graph's backward,
    # compiled at its first backward call, does): they count in full, and the total is theirs
    assert "compile time: 0.118 s in total" in visible(body)
    assert "codegen" in visible(body)  # a stage bar


def test_stage_bars_add_up_to_the_total_and_none_contains_another() -> None:
    import compiler
    from jupyter_compile.inspector.common import compile_seconds, stage_totals

    def fn(x):
        return (x.sin() * 2).sum(-1)

    compiled = compiler.compile(fn)
    compiled(torch.randn(8, 16))
    report = compiler.inspect(compiled)
    totals = stage_totals(report)
    assert "backend" not in totals and "trace" in totals  # the backend's stages are its parts
    assert {"lower", "codegen"} <= set(totals)
    assert sum(totals.values()) == pytest.approx(compile_seconds(report))
    assert compile_seconds(report) == pytest.approx(report.entries[0].compile_time_s, rel=0.05)
    body = Inspector("fn", lambda: report).views[4].body.value
    shown = float(re.search(r"compile time: ([0-9.]+) s in total", visible(body))[1])
    assert shown == pytest.approx(sum(totals.values()), abs=1e-3)


def test_measure_times_a_cpu_function() -> None:
    x = torch.randn(64, 64)
    m = measure(torch.sin, (x,), {}, "cpu", "eager", warmup=1, min_runs=5, budget_s=0.01)
    assert m.error is None and len(m.samples_ms) >= 5 and m.median_ms > 0
    lo, hi = m.spread_ms
    assert lo <= m.median_ms <= hi
    failing = measure(lambda: 1 / 0, (), {}, "cpu", "broken", warmup=0, min_runs=1)
    assert failing.error.startswith("ZeroDivisionError")


def test_highlight_and_chart_escape_text() -> None:
    assert "<script>" not in highlight(f"x = '{EVIL}'")
    assert "<script>" not in bar_chart([(EVIL, 1.0, "#000")], "ms")


def test_explain_view_from_an_explain_output() -> None:
    report = make_report()
    fn = report.functions[0]
    out = SimpleNamespace(
        graph_count=2,
        graph_break_count=1,
        break_reasons=fn.breaks,
        ops_per_graph=[
            [n for n in g.graph_module.graph.nodes if n.op == "call_function"] for g in fn.graphs
        ],
        out_guards=fn.entries[0].guards,
        compile_times="trace: 0.01",
        functions=report.functions,
        controls=report.controls,
    )
    view = ExplainView(out, "evil_fn")
    markup = view._repr_html_()
    text = visible(markup)
    assert "graph breaks: 1" in text and f"call to builtin print with {EVIL}" in text
    assert "what your controls did" in text and f"ran eagerly instead {EVIL}" in text
    assert f"stance: eager_on_recompile: ran eagerly instead {EVIL}" in repr(view)
    assert f'print("{EVIL}")' in text  # the exact source line of the break
    assert "<script>" not in markup
    assert "break 0: call to builtin print" in repr(view)


def test_training_graph_shows_its_split_and_backward_kernels() -> None:
    import compiler

    def loss(x, w):
        return torch.tanh(x @ w).sum()

    compiled = compiler.compile(loss)
    compiled(torch.randn(3, 4), torch.randn(4, 5, requires_grad=True)).backward()
    view = Inspector("loss", lambda: compiler.inspect(compiled))
    static = visible(view._repr_mimebundle_()["text/html"])
    assert "forward / backward split" in static and "aten graph: backward" in static
    assert "graph 0 backward" in static  # kernel labels name the half they run in
    assert "the backward pass (loss.backward())" in static
    compiler.reset()


def test_kernel_view_says_a_kernel_is_size_generic_and_what_sizes_it_got() -> None:
    from compiler.records import KernelRecord
    from jupyter_compile.inspector.kernels import facts, kernel_view

    generic = 'extern "C" void cpp_sized_ab_0(const float* in_ptr0, int64_t ks0) {}'
    kernel = KernelRecord(
        "cpp_fused_gelu_0",
        "cpp",
        'extern "C" void cpp_fused_gelu_0(const float* in_ptr0) {}',
        size_generic="cpp_sized_ab_0",
        generic_source=generic,
        size_args={"ks0": 2304},
    )
    rows = dict(facts(kernel))
    assert "compiled once for all sizes" in rows["sizes"] and "ks0=2304" in rows["sizes"]
    ref = SimpleNamespace(kernel=kernel, graph=SimpleNamespace(index=0))
    assert "cpp_sized_ab_0(" in visible(kernel_view(ref))
    assert "sizes" not in dict(facts(KernelRecord("k", "cpp", "")))


@pytest.mark.parametrize("language", ["cpp", "triton"])
def test_kernel_view_lists_the_sizes_a_generic_kernel_has_served(language) -> None:
    # both backends' generic kernels report alike: what they run, and every size served
    from compiler.records import KernelRecord
    from jupyter_compile.inspector.kernels import facts

    kernel = KernelRecord(
        f"{language}_fused_add_0",
        language,
        "",
        size_generic=f"{language}_sized_ab_0",
        generic_source="...",
        size_args={"ks0": 9, "kf1": 9.0},
        sizes_served=[(7, 7.0), (9, 9.0), (13, 13.0)],
    )
    rows = dict(facts(kernel))
    assert rows["sizes served"] == "3: ks0=7 kf1=7.0; ks0=9 kf1=9.0; ks0=13 kf1=13.0"


def test_kernel_view_lists_a_combined_kernels_parts() -> None:
    from compiler.records import KernelPart, KernelRecord
    from jupyter_compile.inspector.common import KernelRef
    from jupyter_compile.inspector.kernels import kernel_view

    kernel = KernelRecord(
        "triton_combo_0",
        "triton",
        "def triton_combo(in_ptr0, XBLOCK): pass",
        parts=[
            KernelPart("triton_poi_fused_lerp_1", 2304, 0, 2, ["lerp_", "mul_"]),
            KernelPart("triton_poi_fused_lerp_2", 768, 3, 3, ["lerp__1"]),
        ],
    )
    ref = SimpleNamespace(kernel=kernel, graph=SimpleNamespace(index=0))
    text = visible(kernel_view(ref))
    assert "parts (2): independent kernels run by this one launch" in text
    label = KernelRef(0, SimpleNamespace(index=3), kernel).label
    assert label == "triton_combo_0 (triton, graph 3, 2 parts)"
    assert "triton_poi_fused_lerp_1" in text and "2,304" in text and "0..2" in text
    assert "lerp_, mul_" in text and "3..3" in text
    assert "parts (" not in visible(
        kernel_view(SimpleNamespace(kernel=KernelRecord("k", "cpp", ""), graph=ref.graph))
    )
