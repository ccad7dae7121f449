"""Tools that execute notebooks (nbclient, papermill, nbval) read the type of a failing cell's
error: a user's exception in a `%%compile` cell must reach them as itself, with one error
output whose traceback is eager's (no compiler frames)."""

from __future__ import annotations

import re

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from tests.notebooks.test_notebooks import KERNEL_NAME, kernel_env  # noqa: F401 (a fixture)

CELLS = [
    "%load_ext jupyter_compile\nimport torch",
    "%%compile --backend eager\n"
    "def helper(x):\n"
    "    raise ValueError('bad value')\n"
    "\n"
    "def f(x):\n"
    "    return helper(x.sin()) + 1\n"
    "\n"
    "f(torch.ones(3))\n",
]


@pytest.mark.timeout(600)
def test_nbclient_sees_the_users_exception(
    kernel_env: dict[str, str],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key, value in kernel_env.items():
        monkeypatch.setenv(key, value)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    client = NotebookClient(nb, kernel_name=KERNEL_NAME, timeout=300)
    with pytest.raises(CellExecutionError) as raised:
        client.execute()
    assert raised.value.ename == "ValueError" and raised.value.evalue == "bad value"
    errors = [o for o in nb.cells[1].outputs if o.output_type == "error"]
    assert len(errors) == 1 and errors[0].ename == "ValueError"
    traceback = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(errors[0].traceback))
    assert "raise ValueError('bad value')" in traceback and "helper(x.sin())" in traceback
    for internal in ("targets.py", "calls.py", "api.py", "evaluator.py", "concrete.py", "___exc"):
        assert internal not in traceback, internal
