"""Interrupting a compile in a notebook (the stop button raises KeyboardInterrupt in the
running cell) leaves the kernel usable: the interrupt propagates like any interrupt, nothing
half-compiled is kept or cached, and the next call compiles cleanly."""

from __future__ import annotations

import os

import pytest
import torch

import compiler
from compiler.backends import inductor as compile_fx_module
from tests.jupyter.conftest import run


@pytest.fixture
def shell(ipython, monkeypatch, tmp_path):
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(tmp_path / "cache"))
    ipython.run_cell("import torch")
    return ipython


def _interrupt(*args, **kwargs):
    raise KeyboardInterrupt


def test_an_interrupt_inside_lowering_leaves_the_kernel_usable(shell, monkeypatch, tmp_path):
    cache = tmp_path / "cache"
    out = run(shell, "%%compile\ndef f(x):\n    return torch.sin(x) * 2 + 1\n")
    assert out.result.success, out.stdout + out.stderr
    real_lower = compile_fx_module.lower
    monkeypatch.setattr(compile_fx_module, "lower", _interrupt)
    out = run(shell, "y = f(torch.ones(3))")
    assert isinstance(out.result.error_in_exec, KeyboardInterrupt)
    assert "KeyboardInterrupt" in out.stdout + out.stderr
    assert "y" not in shell.user_ns
    report = compiler.inspect(shell.user_ns["f"])
    assert not report.entries and not report.functions[0].warnings

    monkeypatch.setattr(compile_fx_module, "lower", real_lower)
    out = run(shell, "y = f(torch.ones(3))\ny")
    assert out.result.success, out.stdout + out.stderr
    torch.testing.assert_close(out.result.result, torch.sin(torch.ones(3)) * 2 + 1)
    report = compiler.inspect(shell.user_ns["f"])
    assert report.kernels and not [g.fallback for g in report.graphs if g.fallback]
    leftovers = [n for _, _, names in os.walk(cache) for n in names if n.endswith(".tmp")]
    assert not leftovers
    assert run(shell, "2 + 2").result.result == 4
