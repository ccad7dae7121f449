"""Kernels with the same code (names and comments aside) are compiled once and share it
(compiler/codegen/common.py `shared_kernels`, compile_fx's load): results stay eager's, on
the C++ backend and in interpreted Triton, and kernels whose code differs stay apart."""

from __future__ import annotations

import pytest
import torch

from compiler.codegen import cpp
from compiler.codegen.common import KernelSource, shared_kernels
from tests.codegen.helpers import check


def _kernel(name: str, body: str, language: str = "cpp", grid: str = "16") -> KernelSource:
    comment = "//" if language == "cpp" else "#"
    source = f"{comment} {name}: fused FX nodes of its own\nvoid {name}() {{ {body} }}\n"
    return KernelSource(name, language, source, f"{name}()", grid)


def test_names_and_comments_aside_the_same_code_is_shared():
    kernels = [
        _kernel("cpp_poi_fused_add_0", "x + 1;"),
        _kernel("cpp_poi_fused_add_1", "x + 1;"),  # same code, other name and comment
        _kernel("cpp_poi_fused_add_2", "x + 2;"),  # other code
        _kernel("cpp_poi_fused_add_3", "x + 1;", grid="32"),  # other launch grid
        _kernel("cpp_poi_fused_add_4", "x + 1;", language="triton"),  # other language
        _kernel("cpp_poi_fused_add_5", "x + 1; // a trailing comment is code here"),
    ]
    same = {k.name: (torch.float32,) for k in kernels}
    assert shared_kernels(kernels, same) == {
        "cpp_poi_fused_add_0": "cpp_poi_fused_add_0",
        "cpp_poi_fused_add_1": "cpp_poi_fused_add_0",
        "cpp_poi_fused_add_2": "cpp_poi_fused_add_2",
        "cpp_poi_fused_add_3": "cpp_poi_fused_add_3",
        "cpp_poi_fused_add_4": "cpp_poi_fused_add_4",
        "cpp_poi_fused_add_5": "cpp_poi_fused_add_5",
    }


def test_a_name_inside_another_identifier_is_not_the_kernel_name():
    a = _kernel("k_1", "k_12 + 1;")
    b = _kernel("k_3", "k_32 + 1;")  # "k_12" / "k_32" are not the kernels' names
    same = {"k_1": (torch.float32,), "k_3": (torch.float32,)}
    assert shared_kernels([a, b], same) == {"k_1": "k_1", "k_3": "k_3"}


def test_the_same_code_for_other_pointer_dtypes_stays_apart():
    """A Triton kernel's text names no dtype: compiled for int32 pointers it must not serve
    float64 ones (on CUDA the shared binary read float64 memory as int32/float32)."""
    a = _kernel("k_1", "x + 1;", language="triton")
    b = _kernel("k_2", "x + 1;", language="triton")
    c = _kernel("k_3", "x + 1;", language="triton")
    signatures = {"k_1": (torch.int32,), "k_2": (torch.float64,), "k_3": (torch.int32,)}
    assert shared_kernels([a, b, c], signatures) == {"k_1": "k_1", "k_2": "k_2", "k_3": "k_1"}


def _diagonals(a, b, c):
    return a.diagonal().clone(), b.diagonal().clone(), c.diagonal().clone()


@pytest.mark.parametrize("emitter", ["cpp", "triton"])
def test_one_graph_over_several_dtypes_shares_no_kernel_across_them(emitter, monkeypatch):
    """The same op on tensors of several dtypes in one graph (the OpInfo suite's grouped
    samples): kernels of one text but other dtypes are compiled apart."""
    if emitter == "cpp":
        monkeypatch.delenv("COMPILER_CPU_EMITTER", raising=False)
    else:
        monkeypatch.setenv("COMPILER_CPU_EMITTER", "triton")
    xs = [
        torch.randint(-100, 100, (5, 5), dtype=torch.int32),
        torch.randn(5, 5, dtype=torch.float64),
        torch.randint(-100, 100, (5, 5), dtype=torch.int32),
    ]
    record = check(_diagonals, *xs, interpreter=False)
    kernels = [k for k in record.kernels if k.language != "extern"]
    shared = {k.name: k.config.get("compiled_as") for k in kernels if "compiled_as" in k.config}
    dtype_of = {k.name: x.dtype for k, x in zip(kernels, xs)}
    for name, first in shared.items():
        assert dtype_of[name] == dtype_of[first], (name, first)


class TwoBlocks(torch.nn.Module):
    """The same block twice with its own weights: the matmuls (extern calls) keep the two
    pointwise epilogues in kernels of their own, with the same code."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(32, 32), torch.nn.Linear(32, 32)
        self.scale = torch.nn.Parameter(torch.randn(32))

    def forward(self, x):
        x = torch.relu(self.a(x) * self.scale + 1).sin()
        x = torch.relu(self.b(x) * self.scale + 1).sin()
        return x


@pytest.mark.parametrize("emitter", ["cpp", "triton"])
def test_repeated_blocks_share_kernels_and_match_eager(emitter, monkeypatch):
    if emitter == "cpp":
        monkeypatch.delenv("COMPILER_CPU_EMITTER", raising=False)
    else:
        monkeypatch.setenv("COMPILER_CPU_EMITTER", "triton")
    compiled: list[int] = []
    load_many = cpp.CppEmitter.load_many

    def counting(self, kernels, mode=None):
        compiled.append(len(kernels))
        return load_many(self, kernels, mode)

    monkeypatch.setattr(cpp.CppEmitter, "load_many", counting)
    record = check(TwoBlocks().eval(), torch.randn(8, 32), interpreter=False)
    kernels = [k for k in record.kernels if k.language != "extern"]
    assert {k.language for k in kernels} == {emitter}
    assert len({k.name for k in kernels}) == len(kernels) >= 2  # each keeps its own name
    notes = [n for n in record.notes if "share its compiled code" in n]
    assert notes and notes[0].startswith(f"1 of {len(kernels)} kernels")
    (alias,) = [k for k in kernels if "compiled_as" in k.config]
    assert alias.config["compiled_as"] in {k.name for k in kernels} - {alias.name}
    if emitter == "cpp":
        assert compiled == [len(kernels) - 1]
