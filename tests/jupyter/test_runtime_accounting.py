"""Per-function runtime accounting: hits per entry, and the time of the calls split into
compiled graphs and Python around them (guards, code at graph breaks), in the records and in
the Timing tab."""

from __future__ import annotations

import time

import torch

import compiler
import jupyter_compile
from jupyter_compile.inspector import timing as timing_tab
from tests.jupyter.conftest import run


@compiler.disable
def _slow_python(x):
    time.sleep(0.02)
    return x


def busy(x):
    y = torch.sin(x) @ x.T
    _slow_python(y)  # a graph break: 20 ms of Python between the two graphs
    return torch.cos(y).sum()


def test_records_split_graph_time_from_python_time() -> None:
    compiled = compiler.compile(busy, backend="eager")
    x = torch.randn(64, 64)
    for _ in range(4):
        torch.testing.assert_close(compiled(x), busy(x))
    (fn, *_) = compiler.inspect(compiled).functions
    assert fn.timed_calls == 3  # the first call compiled: it measures the compiler
    assert [e.hits for e in fn.entries] == [4, 4]
    assert [e.timed_hits for e in fn.entries] == [3, 3]
    assert all(e.graph_time_s > 0 for e in fn.entries)
    python = fn.run_time_s - fn.graph_time_s
    assert 3 * 0.02 <= python < fn.run_time_s  # the sleeps are Python's, not the graphs'
    assert fn.graph_time_s < fn.run_time_s - 3 * 0.02


def test_the_timing_tab_shows_where_the_time_goes(ipython) -> None:
    shell = ipython
    run(shell, "import torch")
    out = run(
        shell,
        "%%compile --backend eager\n"
        "def f(x):\n"
        "    y = x.sin()\n"
        "    print('between graphs')\n"
        "    return y.cos()\n"
        "f(torch.randn(8))\n",
    )
    assert out.result.success, out.stdout + out.stderr
    run(shell, "for _ in range(5): f(torch.randn(8))")
    inspector = jupyter_compile._installed[id(shell)]["magics"].inspectors["f"]
    inspector.refresh()
    markup = timing_tab.render(inspector.state)
    assert "where the time goes" in markup and "in compiled graphs" in markup
    assert "<td" in markup and ">5</td>" in markup  # five calls that compiled nothing
    assert ">6</td>" in markup  # each entry hit six times in all
    assert "print() writes output" in markup  # the entry that ends at the break
