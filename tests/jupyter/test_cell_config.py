"""`%%compile --config NAME=VALUE`: compiler.config settings for one cell's functions."""

from __future__ import annotations

import warnings

import torch

import compiler
from tests.jupyter.conftest import run

CELL = """\
%%compile --backend eager --no-inspect {options}
def f(x):
    return torch.sin(x) * 2
"""


def _sizes(shell, sizes) -> list:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in sizes:
            x = torch.randn(n)
            assert torch.allclose(shell.user_ns["f"](x), x.sin() * 2)
    return [str(w.message) for w in caught if issubclass(w.category, compiler.CompilerWarning)]


def test_config_applies_to_the_cells_functions_only(ipython) -> None:
    shell = ipython
    run(shell, "import torch")
    options = "--config cache_size_limit=1 --config automatic_dynamic_shapes=False"
    out = run(shell, CELL.format(options=options))
    assert out.result.success, out.stdout + out.stderr
    limited = _sizes(shell, [2, 3, 4])
    assert any("cache_size_limit" in w for w in limited), limited
    assert compiler.config.cache_size_limit == 8  # the patch ends with each call
    assert compiler.config.automatic_dynamic_shapes is True
    report = compiler.inspect(shell.user_ns["f"])
    assert not [c for e in report.entries for c in e.controls if c.kind == "dynamic"]

    # the same cell without --config: automatic dynamic shapes, no limit reached
    run(shell, CELL.format(options=""))
    assert not _sizes(shell, [2, 3, 4])
    report = compiler.inspect(shell.user_ns["f"])
    assert [c for e in report.entries for c in e.controls if c.kind == "dynamic"]


def test_config_errors_name_the_setting(ipython) -> None:
    out = run(ipython, CELL.format(options="--config cache_size_limt=16"))
    assert not out.result.success and "UsageError" in out.stderr
    assert "'cache_size_limt'" in out.stderr and "cache_size_limit" in out.stderr
    out = run(ipython, CELL.format(options="--config cache_size_limit"))
    assert "--config takes NAME=VALUE" in out.stderr
    assert run(ipython, "1 + 1").result.result == 2


def test_config_shows_in_the_inspector_subtitle(ipython) -> None:
    run(ipython, "import torch")
    out = run(
        ipython,
        "%%compile --backend eager --config cache_size_limit=16\n"
        "def g(x):\n    return x + 1\ng(torch.ones(2))\n",
    )
    assert out.result.success and "cache_size_limit=16" in out.html()
