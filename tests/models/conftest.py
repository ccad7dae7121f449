"""tests/models: small versions of the real models benchmarks/models.py found failing, compiled
with compiler.compile and compared with eager. COMPILER_STRICT=1 makes an eager fallback a
test failure; each test gets its own empty kernel cache. TRITON_INTERPRET must be set before
triton is first imported (for the tests that run the Triton emitter on CPU tensors)."""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True)
def strict_fresh_cache(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("COMPILER_STRICT", "1")
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
