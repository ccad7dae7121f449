"""Errors eager raises while running (an index out of range in a gather) are raised by the
compiled code as eager raises them: the same type and message, on the first call and on
later ones, and never a crash of the process (a notebook's kernel) or a wrong number.

Each case runs in a child process, so a regression (a kernel reading outside its buffer)
fails its test instead of killing the test run.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from tests.codegen.helpers import compile_graph
from tests.conftest import REPO_ROOT

_GATHERS = {
    "index": "a[i] * 2",
    "embedding": "torch.nn.functional.embedding(i, a) + 1",
    "gather": "torch.gather(a, 0, i.unsqueeze(1).expand(-1, 3)) * 2",
    "index_select": "torch.index_select(a, 0, i) - 1",
    # the class around them: two indices, a gather in a reduction, under a cat's mask, and
    # the scatters (eager's own kernels, extern calls)
    "index2": "a[i, i % 3] + 1",
    "summed": "(a[i] * 2).sum(1)",
    "cat": "torch.cat([a[i], a]) + 1",
    "scatter": "torch.scatter(a, 0, i.unsqueeze(1).expand(-1, 3), a[:3] * 2) + 1",
    "index_put": "torch.index_put(a, (i,), a[:3] * 2, accumulate=True) + 1",
}

_CHILD = """
import torch
from compiler.backends.inductor import compile_fx
from compiler.records import GraphRecord, compiling_graph
a = torch.randn(5, 3)
good = torch.tensor([0, 4, 2])
for op, expr in {gathers!r}.items():
    gm = torch.fx.symbolic_trace(eval("lambda a, i: (" + expr + ",)"))
    record = GraphRecord(gm, gm.code, 0)
    with compiling_graph(record):
        compiled = compile_fx(gm, [a, good])
    torch.testing.assert_close(compiled(a, good), gm(a, good))
    for bad in ([0, 5, 2], [0, -9, 2], [0, 10**9, 2]):
        bad = torch.tensor(bad)
        try:
            gm(a, bad)
            print(op, "eager returned")
        except Exception as e:
            print(op, "eager", type(e).__name__, e)
        try:
            compiled(a, bad)
            print(op, "compiled returned")
        except Exception as e:
            print(op, "compiled", type(e).__name__, e)
    torch.testing.assert_close(compiled(a, good), gm(a, good))  # still compiled, still right
    print(op, "kernels", [k.language for k in record.kernels], record.fallback)
"""


def _run_child(gathers: dict[str, str], tmp_path, **env: str) -> dict[str, list[str]]:
    """Each gather's lines: three (eager, compiled) outcome pairs, then its kernels."""
    environ = {
        **os.environ,
        "COMPILER_CACHE_DIR": str(tmp_path),
        "PYTHONPATH": str(REPO_ROOT),
        **env,
    }
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", _CHILD.format(gathers=gathers)],
        capture_output=True,
        text=True,
        timeout=280,
        env=environ,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-3000:]}"
    out: dict[str, list[str]] = {op: [] for op in gathers}
    for line in proc.stdout.splitlines():
        op, _, rest = line.partition(" ")
        out[op].append(rest)
    return out


def _assert_raised_as_eager(lines: list[str]) -> None:
    pairs = list(zip(lines[0:6:2], lines[1:6:2]))
    assert len(pairs) == 3, lines
    for eager, compiled in pairs:
        assert eager.startswith("eager ") and eager != "eager returned", lines
        assert compiled == "compiled " + eager.removeprefix("eager "), lines


def test_out_of_range_gather_raises_as_eager_in_cpp_kernels(tmp_path):
    """Found while testing user errors: a C++ kernel gathering with an index out of range
    read outside its buffer, returning another tensor's bytes, or crashing the process."""
    for op, lines in _run_child(_GATHERS, tmp_path).items():
        _assert_raised_as_eager(lines)
        assert "'cpp'" in lines[-1] and "triton" not in lines[-1], (op, lines)
        assert lines[-1].endswith(" None"), (op, lines)


@pytest.fixture(scope="module")
def triton_outcomes(tmp_path_factory) -> dict[str, list[str]]:
    return _run_child(
        _GATHERS,
        tmp_path_factory.mktemp("triton-cache"),
        COMPILER_CPU_EMITTER="triton",
        TRITON_INTERPRET="1",
    )


def test_out_of_range_gather_raises_as_eager_in_triton_kernels(triton_outcomes):
    """A Triton kernel's gather with an index out of range loaded 0 where eager raises (the
    lanes were masked so as not to read outside the buffer): a silent wrong result. The
    kernel now asserts its indices are inside (th.check_index; on a GPU a device-side
    assert, as eager's CUDA kernels make), and the graph's first failure is eager's error."""
    for op, lines in triton_outcomes.items():
        _assert_raised_as_eager(lines)
        assert "'triton'" in lines[-1] and "cpp" not in lines[-1], (op, lines)
        assert lines[-1].endswith(" None"), (op, lines)


def test_gather_along_an_expanded_input_dimension_checks_its_index(monkeypatch):
    """An input expanded along the gathered dimension (stride 0) is read in place: that
    coordinate adds nothing to the address, so it was neither masked nor checked and an
    index out of range returned the row (eager raises)."""
    monkeypatch.setenv("COMPILER_CPU_EMITTER", "triton")
    a = torch.randn(1, 3).expand(5, 3)
    gm = torch.fx.symbolic_trace(lambda a, i: (a[i] + 1,))
    compiled, record, _ = compile_graph(gm, a, torch.tensor([0, 4, 2]))
    assert [k.language for k in record.kernels] == ["triton"]
    assert "check_index" in record.kernels[0].source and record.kernels[0].config["debug"]
    with pytest.raises(IndexError):
        compiled(a, torch.tensor([0, 7, 2]))


_CUDA_CHILD = """
import torch
from compiler.backends.inductor import compile_fx
from compiler.records import GraphRecord, compiling_graph
a = torch.randn(5, 3, device="cuda")
good = torch.tensor([0, 4, 2], device="cuda")
gm = torch.fx.symbolic_trace(eval("lambda a, i: (" + {expr!r} + ",)"))
record = GraphRecord(gm, gm.code, 0)
with compiling_graph(record):
    compiled = compile_fx(gm, [a, good])
torch.testing.assert_close(compiled(a, good), gm(a, good))
print("kernels", [k.language for k in record.kernels], record.fallback, flush=True)
try:
    compiled(a, torch.tensor([0, 5, 2], device="cuda"))
    torch.cuda.synchronize()
    print("compiled returned", flush=True)
except Exception as e:
    print("compiled", type(e).__name__, str(e).splitlines()[0], flush=True)
"""


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["index", "embedding", "gather", "index_select", "summed", "cat"])
def test_out_of_range_gather_is_a_device_side_assert_on_cuda(op, tmp_path):
    """On CUDA eager's gathers stop at a device-side assert (the CUDA context is lost with
    it, hence a process per case); our Triton kernels make the same assert, where they
    loaded 0 and returned a wrong result."""
    environ = {**os.environ, "COMPILER_CACHE_DIR": str(tmp_path), "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", _CUDA_CHILD.format(expr=_GATHERS[op])],
        capture_output=True,
        text=True,
        timeout=280,
        env=environ,
    )
    lines = proc.stdout.splitlines()
    assert any(ln.startswith("kernels ") and "'triton'" in ln for ln in lines), proc.stdout
    outcome = next((ln for ln in lines if ln.startswith("compiled ")), proc.stderr[-2000:])
    assert "device-side assert" in outcome, outcome
    assert "index out of bounds" in proc.stdout + proc.stderr
