"""A user's exception in a `%%compile` cell is raised as itself, and its traceback is eager's:
the user's call, the user's lines, none of the compiler's frames in between."""

from __future__ import annotations

import re

from tests.jupyter.conftest import run

CELL = """\
%%compile --backend eager
def helper(x):
    raise ValueError('bad value')

def f(x):
    y = x.sin()
    if y.sum() > 100:
        return y
    return helper(y) + 1

f(torch.ones(3))
"""


def _frames(traceback: str) -> list[str]:
    """The frame headers of an IPython traceback: `Cell In[n], line k, in name`."""
    found = re.findall(
        r"^(?:Cell In\[\d+\], (line \d+)(?:, in (\w+)\(.*\))?|File .*)$", traceback, re.M
    )
    return [f"{line} {name}".strip() for line, name in found]


def test_user_exception_propagates_with_eager_frames(ipython) -> None:
    run(ipython, "import torch")
    out = run(ipython, CELL)
    assert isinstance(out.result.error_in_exec, ValueError)
    assert str(out.result.error_in_exec) == "bad value"
    tb = out.stdout
    frames = _frames(tb)
    assert len(frames) == 3, tb
    assert frames == ["line 10", "line 8 f", "line 2 helper"]
    assert "return helper(y) + 1" in tb and "raise ValueError('bad value')" in tb
    # the compiler's frames are hidden (IPython says so in one line per run of them)
    assert not re.search(r"(targets|calls|api|evaluator|concrete)\.py", tb), tb


def test_eager_traceback_for_comparison(ipython) -> None:
    """The same cell without %%compile: the frames the compiled traceback must match."""
    run(ipython, "import torch")
    out = run(ipython, CELL.replace("%%compile --backend eager\n", ""))
    assert isinstance(out.result.error_in_exec, ValueError)
    compiled = run(ipython, CELL)
    assert _frames(compiled.stdout) == _frames(out.stdout)
