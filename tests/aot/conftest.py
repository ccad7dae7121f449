"""tests/aot: without a GPU, Triton kernels run in Triton's interpreter on CPU tensors (the
C++ emitter stays the CPU default unless a test sets COMPILER_CPU_EMITTER=triton).
TRITON_INTERPRET must be set before triton is first imported, hence at conftest import."""

import os

import pytest
import torch

import compiler

if not torch.cuda.is_available():  # on a GPU machine the gpu tests use real Triton
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True)
def fresh(monkeypatch, tmp_path):
    """Each test from a clean compiler, its own caches and seed 0; a fallback to eager would
    hide a bug, so it raises (COMPILER_STRICT)."""
    monkeypatch.setenv("COMPILER_STRICT", "1")
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(tmp_path / "cache"))
    compiler.reset()
    torch.manual_seed(0)
    yield
    compiler.reset()
