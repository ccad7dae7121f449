"""Gathers in the C++ kernels (embedding, advanced indexing): their loops vectorise, and an
index out of range still raises as eager raises, from any thread or vector lane."""

from __future__ import annotations

import subprocess

import pytest
import torch

import compiler
from compiler.codegen.cpp_prelude import PRELUDE
from compiler.runtime.cpp_build import FLAGS, compiler_command


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(tmp_path))


def vectorised_loops(source: str, tmp_path) -> set[int]:
    """Lines of `source` (a kernel's text, 1-based) that the C++ compiler reports as loops
    it vectorised, compiled with the backend's own flags."""
    path = tmp_path / "kernel.cpp"
    path.write_text(PRELUDE + "\n" + source)
    flags = [f for f in FLAGS if f not in ("-shared", "-fPIC")]
    proc = subprocess.run(
        [*compiler_command(), *flags, "-c", str(path), "-o", str(tmp_path / "kernel.o"),
         "-fopt-info-vec-optimized"],
        capture_output=True,
        text=True,
        check=True,
    )  # fmt: skip
    first = PRELUDE.count("\n") + 2
    out = set()
    for line in proc.stderr.splitlines():
        if "loop vectorized" in line and "kernel.cpp:" in line:
            out.add(int(line.split("kernel.cpp:")[1].split(":")[0]) - first + 1)
    return out


def _compiled_sources(fn, *inputs):
    compiled = compiler.compile(fn)
    with torch.no_grad():
        torch.testing.assert_close(compiled(*inputs), fn(*inputs))
    (graph,) = compiler.inspect(compiled).graphs
    assert graph.fallback is None
    return compiled, [k.source for k in graph.kernels if k.language == "cpp"]


def _bias_of_a_table(index, table, mask):
    """Swin's attention bias: a relative-position table gathered per pair, plus a mask."""
    bias = table[index].view(49, 49, -1).permute(2, 0, 1).contiguous()
    return bias.unsqueeze(0) + mask.masked_fill(mask != 0, -100.0).unsqueeze(1)


@pytest.mark.parametrize(
    "fn, inputs",
    [
        (lambda ids, w: torch.nn.functional.embedding(ids, w) * 2, "embedding"),
        (_bias_of_a_table, "bias"),
    ],
)
def test_gathering_loops_vectorise(fn, inputs, tmp_path):
    """The index check stored to the library's flag inside the loop, which kept every
    gathering loop scalar (Swin's attention bias 4x slower); it is a reduction now."""
    args = {
        "embedding": (torch.randint(0, 1000, (4, 256)), torch.randn(1000, 64)),
        "bias": (torch.randint(0, 169, (2401,)), torch.randn(169, 3), torch.randn(64, 49, 49)),
    }[inputs]
    _, sources = _compiled_sources(fn, *args)
    (gather,) = [s for s in sources if "jc_index(" in s]
    lines = gather.splitlines()
    innermost = max(k for k, line in enumerate(lines, 1) if line.lstrip().startswith("for ("))
    # GCC names an OpenMP loop by its pragma's line
    assert {innermost - 1, innermost} & vectorised_loops(gather, tmp_path), gather


def test_an_index_out_of_range_in_a_threaded_gather_raises():
    """Enough tokens for the kernel to share its loop between threads: the bad index is
    found by one thread's lanes and still raised, and the next good call is right."""
    w = torch.randn(50, 64)
    ids = torch.randint(0, 50, (64, 1024))
    compiled, sources = _compiled_sources(lambda i: torch.nn.functional.embedding(i, w) + 1, ids)
    assert any("omp parallel" in s and "jc_index(" in s for s in sources)
    bad = ids.clone()
    bad[63, 1000] = 50
    with torch.no_grad():
        with pytest.raises(IndexError):
            torch.nn.functional.embedding(bad, w)
        with pytest.raises(IndexError):
            compiled(bad)
        torch.testing.assert_close(compiled(ids), torch.nn.functional.embedding(ids, w) + 1)
