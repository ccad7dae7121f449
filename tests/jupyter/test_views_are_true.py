"""What the inspector and %explain show is true: no frame of jupyter_compile's own shown as
the user's, cells named as the user knows them, kernels listed once, controls only when the
user used some, and no profiler started where it cannot run."""

from __future__ import annotations

import re

import pytest
import torch

import jupyter_compile
from compiler.records import CompiledReport, EntryRecord, FunctionRecord, KernelRecord
from jupyter_compile import timing
from jupyter_compile.inspector import Inspector
from jupyter_compile.inspector import timing as timing_tab
from jupyter_compile.inspector.common import InspectorState
from jupyter_compile.targets import TimingInputs
from tests.jupyter.conftest import run
from tests.jupyter.fixtures import first_graph, graph_record

OWN = re.compile(r"jupyter_compile[/\\](targets|magics|cell|timing|calls)\.py")


@pytest.fixture
def shell(ipython):
    ipython.run_cell("import torch")
    return ipython


def inspectors(shell) -> dict[str, Inspector]:
    return jupyter_compile._installed[id(shell)]["magics"].inspectors


def test_a_compiled_module_class_calling_another_shows_no_frame_of_ours(shell) -> None:
    out = run(
        shell,
        "%%compile --backend eager\n"
        "class Block(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.lin = torch.nn.Linear(4, 4)\n"
        "    def forward(self, x):\n"
        "        return torch.relu(self.lin(x))\n"
        "class MLP(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.b1, self.b2 = Block(), Block()\n"
        "    def forward(self, x):\n"
        "        return self.b2(self.b1(x))\n"
        "m = MLP()\n"
        "y = m(torch.randn(2, 4))\n",
    )
    assert out.result.success, out.stdout + out.stderr
    report = inspectors(shell)["MLP"].state.report
    assert [f.qualname for f in report.functions] == ["MLP.forward"]
    assert not report.functions[0].breaks  # the blocks' forwards are traced into one graph
    assert report.graphs[0].op_count >= 4
    assert not OWN.search(out.html()) and "targets.py" not in out.html()
    # Block was only called inside MLP: its inspector says where its calls went
    assert "traced into that one" in inspectors(shell)["Block"].static_html()


def test_a_compiled_function_called_from_another_is_traced_not_broken_on(shell) -> None:
    run(shell, "%%compile --backend eager\ndef inner(x):\n    return x.sin()\n")
    out = run(
        shell,
        "%%compile --backend eager\ndef outer(x):\n    return inner(x) * 2\nouter(torch.ones(3))\n",
    )
    assert out.result.success, out.stdout + out.stderr
    report = inspectors(shell)["outer"].state.report
    assert not report.functions[0].breaks and report.graphs[0].op_count == 2
    assert "targets.py" not in out.html()


def test_explain_and_the_inspector_name_the_cell(shell) -> None:
    run(shell, "x = 1")
    defined = run(
        shell,
        "%%compile --backend eager\n"
        "def f(x):\n"
        "    y = x + 1\n"
        "    print('')\n"
        "    return y * 2\n"
        "f(torch.ones(2))\n",
    )
    number = defined.result.execution_count
    text = re.sub(r"<[^>]+>", " ", defined.html())
    assert f"In [{number}], line 2" in text  # the graph's user line, in the %%compile cell
    out = run(shell, "%explain f(torch.ones(2))")
    text = re.sub(r"<[^>]+>", " ", out.html())
    assert f"In [{number}], line 3" in text  # the break's "where"
    assert "ipython-input" not in text and "ipykernel" not in text


def test_a_traceback_names_the_cell_the_function_was_defined_in(shell) -> None:
    defined = run(shell, "%%compile --backend eager\ndef g(x):\n    raise ValueError('no')\n")
    out = run(shell, "g(torch.ones(1))")
    assert f"Cell In[{defined.result.execution_count}], line 2" in out.stdout


def test_controls_are_listed_only_when_the_user_used_some(shell) -> None:
    out = run(
        shell,
        "%%compile --backend eager\n"
        "def h(x):\n"
        "    return x * 2\n"
        "for n in (4, 5, 6):\n"
        "    h(torch.ones(n))\n",
    )
    assert out.result.success
    html = inspectors(shell)["h"].static_html()
    assert "automatic dynamic" in html  # the compiler's own choice, shown as such
    assert "what your controls did" not in html


def test_a_kernel_shared_by_several_graphs_is_listed_once() -> None:
    graphs = []
    for _ in range(3):
        g = graph_record(first_graph, [])
        g.kernels = [KernelRecord("cpp_fused_sin_0", "cpp", "", measured_ms=0.01)]
        graphs.append(g)
    entries = [EntryRecord("f", 1, g) for g in graphs]
    report = CompiledReport([FunctionRecord("f", "f", "<cell>", 1, "", entries=entries)])
    state = InspectorState("f", report)
    state.timing = timing.TimingResult("cpu", [], profiled_call_ms=0.02)
    html = timing_tab.render(state)
    assert html.count("cpp_fused_sin_0") == 1
    assert "the call took 20.0 µs, its kernels 10.0 µs of it" in html


def test_no_profiler_starts_on_a_gpu_build_without_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timing, "profiler_usable", lambda device: False)
    monkeypatch.setattr(timing, "kernel_times", lambda *a, **k: pytest.fail("profiled"))
    monkeypatch.setattr(timing, "BUDGET_S", 0.01)
    graph = graph_record(first_graph, [])
    graph.kernels = [KernelRecord("cpp_fused_sin_0", "cpp", "")]
    report = CompiledReport(
        [FunctionRecord("f", "f", "<cell>", 1, "", entries=[EntryRecord("f", 1, graph)])]
    )
    result = timing.run_timing(
        TimingInputs(torch.sin, torch.sin, torch.sin, (torch.randn(8),), {}), report
    )
    assert "without a GPU" in result.kernel_note
