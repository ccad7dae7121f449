"""%%compile and %explain with the real compiler, through a real IPython shell."""

from __future__ import annotations

import html
import re

import pytest
import torch

import compiler
import jupyter_compile
from jupyter_compile.inspector import WIDGET_MIME
from tests.jupyter.conftest import run

BAR = """\
def bar(a, b):
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
    return x * b
"""


def visible(markup: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", markup))


def line_row(markup: str, lineno: int) -> str:
    return re.search(rf'<tr class="jc-line" data-line="{lineno}"[^>]*>', markup).group(0)


@pytest.fixture
def shell(ipython):
    ipython.run_cell("import torch")
    return ipython


def inspector(shell, name: str):
    return jupyter_compile._installed[id(shell)]["magics"].inspectors[name]


def test_compile_cell_breaks_and_annotated_source(shell) -> None:
    out = run(
        shell, "%%compile --backend eager\n" + BAR + "y = bar(torch.randn(10), torch.randn(10))\n"
    )
    assert out.result.success, out.stdout + out.stderr
    a, b = torch.randn(10), torch.randn(10)
    assert torch.allclose(
        shell.user_ns["bar"](a, b), (a / (a.abs() + 1)) * (b if b.sum() >= 0 else -b)
    )

    views = [d for d in out.bundles() if WIDGET_MIME in d]
    assert len(views) == 1 and len(out.twins()) == 1
    static = out.twins()[0]
    text = visible(static)
    assert "graph breaks: 1" in text and "graphs: 2" in text
    assert "graph break: data-dependent control flow" in text
    # the function starts on line 1 of the cell; graph 0 covers lines 2-3, the break is on line 3
    assert "background:" in line_row(static, 2) and 'title="graph 0' in line_row(static, 2)
    assert "background:" not in line_row(static, 1)
    assert 'title="graph 1' in line_row(static, 5)
    assert text.count("if b.sum() < 0:") >= 1
    assert "<svg" in static  # the graphs tab drew with graphviz
    # the name as bound in the notebook is accepted by the compiler's own API
    assert compiler.inspect(shell.user_ns["bar"]).functions[0].name == "bar"


def test_inspector_follows_a_recompile_from_a_later_cell(shell) -> None:
    run(
        shell,
        "%%compile --backend eager\ndef f(x):\n    return torch.sin(x) * 2\nf(torch.randn(4))\n",
    )
    view = inspector(shell, "f")
    assert len(view.state.report.entries) == 1
    run(shell, "f(torch.randn(4, 3))")  # a new rank: the guards fail and f recompiles
    assert len(view.state.report.entries) == 2
    history = visible(view.views[2].widget.value)
    assert "recompile history" in history and "first compile" in history
    reason = view.state.report.entries[1].recompile_reason
    assert reason and reason in history
    assert "recompiles: 1" in visible(view.header.value)


def test_module_class_instances_compile_and_stay_modules(shell) -> None:
    out = run(
        shell,
        "%%compile --backend eager\n"
        "class Net(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.lin = torch.nn.Linear(8, 4)\n"
        "    def forward(self, x):\n"
        "        return torch.relu(self.lin(x)) + 1\n"
        "net = Net()\n"
        "x = torch.randn(2, 8)\n"
        "y = net(x)\n",
    )
    assert out.result.success, out.stdout + out.stderr
    net, x, y = shell.user_ns["net"], shell.user_ns["x"], shell.user_ns["y"]
    assert type(net).__name__ == "Net" and isinstance(net, shell.user_ns["Net"])
    assert set(net.state_dict()) == {"lin.weight", "lin.bias"}
    assert torch.allclose(y, torch.relu(net.lin(x)) + 1)
    report = inspector(shell, "Net").state.report
    assert report.functions[0].name == "forward" and report.graphs
    assert "Net" in visible(out.html()) and "nn.Module class" in out.html()
    explained = run(shell, "e = %explain -o net(x)")
    assert explained.result.success, explained.stdout + explained.stderr
    assert shell.user_ns["e"].graph_count == 1 and "self.lin(x)" in visible(explained.html())


def test_explain_magic_shows_the_break_line(shell) -> None:
    run(shell, BAR)
    out = run(shell, "%explain bar(torch.randn(10), torch.randn(10))")
    assert out.result.success, out.stdout + out.stderr
    text = visible(out.html())
    assert "%explain bar" in text and "graph breaks: 1" in text
    assert "if b.sum() < 0:" in text and "data-dependent control flow" in text
    run(shell, "e = %explain -o bar(torch.randn(10), torch.randn(10))")
    assert isinstance(shell.user_ns["e"], compiler.ExplainOutput)
    assert shell.user_ns["e"].graph_break_count == 1


STEP = """\
@compiler.disable
def log_stats(t):
    return float(t.mean())

def step(x):
    y = x.sin()
    log_stats(y)
    return y.cos() * x.shape[0]
"""


def test_a_disabled_function_in_a_compile_cell_and_explain_shows_the_controls(shell) -> None:
    shell.run_cell("import compiler")
    out = run(shell, "%%compile --backend eager\n" + STEP + "step(torch.randn(4))\n")
    assert out.result.success, out.stdout + out.stderr
    text = visible(out.html())
    assert "left log_stats uncompiled: disabled with compiler.disable" in text
    assert "log_stats() is disabled with compiler.disable" in text  # the break, in the inspector
    run(shell, "step(torch.randn(6))")  # a new size: the recompile makes dim 0 dynamic
    report = inspector(shell, "step").state.report
    kinds = [c.kind for c in report.controls]
    assert kinds[0] == "disable" and set(kinds) == {"disable", "dynamic"}
    explained = run(shell, "e = %explain -o step(torch.randn(5))")
    assert explained.result.success, explained.stdout + explained.stderr
    assert shell.user_ns["e"].graph_break_count == 1
    assert "what your controls did" in visible(explained.html())


def test_explain_accepts_a_function_compiled_by_the_cell_magic(shell) -> None:
    run(shell, "%%compile --backend eager --no-inspect\n" + BAR)
    out = run(shell, "e = %explain -o bar(torch.randn(10), torch.randn(10))")
    assert out.result.success, out.stdout + out.stderr
    assert shell.user_ns["e"].graph_count == 2


def test_fullgraph_error_is_shown_and_the_shell_lives(shell) -> None:
    out = run(
        shell,
        "%%compile --backend eager --fullgraph\n" + BAR + "bar(torch.randn(3), torch.randn(3))\n",
    )
    assert not out.result.success
    assert "Unsupported" in out.stdout and isinstance(
        out.result.error_in_exec, compiler.Unsupported
    )
    assert run(shell, "4 + 4").result.result == 8


def test_default_backend_kernels_tab(shell) -> None:
    out = run(
        shell,
        "%%compile --compare eager\n"
        "def fused(x, y):\n"
        "    return torch.sin(x) + torch.cos(y)\n"
        "z = fused(torch.randn(32), torch.randn(32))\n",
    )
    assert out.result.success, out.stdout + out.stderr
    view = inspector(shell, "fused")
    report = view.state.report
    graph = report.graphs[0]
    if graph.fallback:
        pytest.skip(f"the inductor backend fell back to eager on this machine: {graph.fallback}")
    kernel = report.kernels[0]
    assert {"sin", "cos", "add"} <= set(kernel.fused_nodes)
    static = out.twins()[0]
    text = visible(static)
    assert kernel.name in text and "fused FX nodes" in text
    assert "return torch.sin(x) + torch.cos(y)" in text  # the user line behind the kernel
    assert "generated wrapper" in text and "per call on cpu" in text
    live = view.views[3]
    assert kernel.name in live.pick.options[0][0]
    assert "color:" in live.body.value  # pygments-highlighted source
    labels = [m.label for m in view.state.timing.measurements]
    assert labels == ["eager", "compiled"] and not any(
        m.error for m in view.state.timing.measurements
    )


def test_user_strings_in_source_and_breaks_are_escaped(shell) -> None:
    out = run(
        shell,
        "%%compile --backend eager\n"
        "def shout(x):\n"
        "    tag = \"<script>alert('hi')</script>\"\n"
        "    print(tag)\n"
        "    return x + len(tag)\n"
        "shout(torch.ones(2))\n",
    )
    assert out.result.success, out.stdout + out.stderr
    markup = "\n".join(d.get("text/html", "") for d in out.bundles())
    assert "<script>" not in markup
    assert "tag = \"<script>alert('hi')</script>\"" in visible(markup)
    assert "graph break" in visible(markup)


def test_compare_torch_adds_the_labelled_column(shell, monkeypatch: pytest.MonkeyPatch) -> None:
    from jupyter_compile import timing

    # torch.compile itself takes tens of seconds on a CPU; the column, not its speed, is tested
    monkeypatch.setattr(timing, "torch_compiled", lambda fn: fn)
    monkeypatch.setattr(timing, "BUDGET_S", 0.01)
    out = run(
        shell,
        "%%compile --backend eager --compare eager,torch\n"
        "def f(x):\n    return torch.tanh(x) * 3\n"
        "f(torch.randn(8))\n",
    )
    assert out.result.success, out.stdout + out.stderr
    labels = [m.label for m in inspector(shell, "f").state.timing.measurements]
    assert labels == ["eager", "compiled", "vs torch.compile"]
    assert "vs torch.compile" in visible(out.html())


def test_an_unknown_mode_is_refused_before_the_cell_runs(shell) -> None:
    out = run(shell, "%%compile --mode fastest\nran = True\n")
    assert "UsageError: bad compile options: unknown mode 'fastest'" in out.stderr
    assert "ran" not in shell.user_ns


def test_a_cell_function_calling_another_gets_the_right_answer(shell) -> None:
    out = run(
        shell,
        "%%compile --backend eager --no-inspect\n"
        "def f(x):\n    return torch.sin(x) * 2\n"
        "def g(x):\n    return f(x) + 1\n"
        "x = torch.randn(4)\n"
        "y = g(x)\n",
    )
    assert out.result.success, out.stdout + out.stderr
    x, y = shell.user_ns["x"], shell.user_ns["y"]
    assert torch.allclose(y, torch.sin(x) * 2 + 1)
    # g's call to the compiled f is traced into g's own graph: one graph, no break
    report = compiler.inspect(shell.user_ns["g"])
    assert len(report.graphs) == 1 and not [e for e in report.entries if e.graph_break]
    assert "sin" in report.graphs[0].code
