"""`%explain fn`, the design's bare-name form: it explains the calls already recorded for a
compiled function (entries, graphs, breaks with their lines, guards, recompiles) without
calling it again."""

from __future__ import annotations

import torch

import compiler
from tests.jupyter.conftest import run
from tests.jupyter.test_integration import visible

# Not test_integration's BAR: a cell defining the same function earlier in the session makes
# that module's annotated-source test lose its shading (seen on main as well).
BAR = """\
def bar(a, b):
    x = torch.cos(a) * 2
    if b.sum() < 0:
        b = b * -1
    return x * b
"""


def test_explain_a_bare_name_reads_the_recorded_calls(ipython) -> None:
    shell = ipython
    run(shell, "import torch")
    out = run(shell, "%%compile --backend eager --no-inspect\n" + BAR)
    assert out.result.success, out.stdout + out.stderr
    assert "has not been called yet" in run(shell, "%explain bar").stderr
    run(shell, "bar(torch.randn(10), torch.randn(10))\nbar(torch.randn(12), torch.randn(12))")
    calls = shell.user_ns["bar"].__jupyter_compile__.calls
    out = run(shell, "e = %explain -o bar")
    assert out.result.success, out.stdout + out.stderr
    assert shell.user_ns["bar"].__jupyter_compile__.calls == calls  # nothing was called again
    e = shell.user_ns["e"]
    assert isinstance(e, compiler.ExplainOutput) and e.graph_break_count == 1
    text = visible(out.html())
    assert "%explain bar" in text and "graph breaks: 1" in text
    assert "if b.sum() < 0:" in text and "data-dependent control flow" in text
    assert "recompile" in text.lower() and "guards" in text.lower()  # the second size
    # the bare name and the call form explain the same function alike
    out = run(shell, "e2 = %explain -o bar(torch.randn(10), torch.randn(10))")
    assert shell.user_ns["e2"].graph_break_count == e.graph_break_count


def test_explain_a_bare_name_of_a_compiled_module_instance(ipython) -> None:
    shell = ipython
    cell = (
        "%%compile --backend eager --no-inspect\n"
        "import torch\n"
        "class Net(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.lin = torch.nn.Linear(3, 3)\n"
        "    def forward(self, x):\n"
        "        return torch.relu(self.lin(x))\n"
        "net = Net()\n"
        "y = net(torch.randn(2, 3))\n"
    )
    assert run(shell, cell).result.success
    out = run(shell, "e = %explain -o net")
    assert out.result.success, out.stdout + out.stderr
    assert shell.user_ns["e"].graph_count == 1 and "self.lin(x)" in visible(out.html())
    assert run(shell, "%explain Net").result.success  # the class: its last instance


def test_explain_a_function_compiled_with_the_api(ipython) -> None:
    shell = ipython
    shell.user_ns["g"] = compiler.compile(lambda x: torch.sin(x) + 1, backend="eager")
    shell.user_ns["g"](torch.ones(3))
    out = run(shell, "e = %explain -o g")
    assert out.result.success, out.stdout + out.stderr
    assert shell.user_ns["e"].graph_count == 1 and shell.user_ns["e"].graph_break_count == 0
    out = run(shell, "%explain len")
    assert "len was not compiled by %%compile or compiler.compile" in out.stderr
