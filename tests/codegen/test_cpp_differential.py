"""The codegen differential suite (tests/codegen/test_triton_*.py) again, with the C++ emitter.

Every test function of those modules is collected here a second time, with this module's
autouse fixture instead of theirs: on CPU, compile_fx then picks the C++ emitter (its
default) rather than interpreted Triton. Tests that look at Triton source or count Triton
kernels are left out (their C++ counterparts are in test_cpp_pipeline.py and
test_cpp_kernels.py); everything else — the compiled result equals eager and the loop-IR
interpreter — must hold for both emitters.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest

from tests.codegen.helpers import check, rand

_TRITON_SPECIFIC = ("triton_kernels", "tl.", "TritonEmitter", "XBLOCK", "RBLOCK", "num_warps")
# Modules about what only the Triton path does: split reductions are planned from a GPU's
# processor count, and the C++ emitter gives none; size-generic Triton kernels are counted by
# Triton module loads (their module's `loads` fixture; the C++ ones: test_size_generic.py);
# combined kernels are the Triton emitter's alone.
_TRITON_ONLY_MODULES = (
    "test_triton_split_reductions",
    "test_triton_size_generic",
    "test_triton_combo",
)


def _collect() -> dict:
    tests = {}
    for path in sorted(Path(__file__).parent.glob("test_triton_*.py")):
        if path.stem in _TRITON_ONLY_MODULES:
            continue
        module = importlib.import_module(f"tests.codegen.{path.stem}")
        for name, fn in vars(module).items():
            if not (name.startswith("test_") and inspect.isfunction(fn)):
                continue
            if any(word in inspect.getsource(fn) for word in _TRITON_SPECIFIC):
                continue
            tests[f"{name}__{path.stem.removeprefix('test_triton_')}"] = fn
    return tests


globals().update(_collect())


@pytest.fixture(autouse=True)
def cpp_on_cpu(monkeypatch, tmp_path_factory):
    monkeypatch.delenv("COMPILER_CPU_EMITTER", raising=False)
    monkeypatch.setenv("COMPILER_STRICT", "1")  # a fallback to eager would hide a bug
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cpp-cache"))


def test_the_suite_runs_cpp_kernels():
    import torch

    record = check(lambda x, y: (torch.sin(x) + torch.cos(y),), rand(1000), rand(1000))
    assert [(k.name, k.language) for k in record.kernels] == [
        ("cpp_poi_fused_add_cos_sin_0", "cpp")
    ]
    assert record.kernels[0].fused_nodes and "sinf(" in record.kernels[0].source
    assert "cpp_poi_fused_add_cos_sin_0(" in record.wrapper_source
    assert [s.stage for s in record.stage_times] == [
        "aot",
        "lower",
        "schedule",
        "codegen",
        "compile",
    ]


def test_missing_compiler_falls_back_to_eager_with_one_warning(monkeypatch):
    import uuid
    import warnings

    import torch

    from tests.codegen.helpers import compile_and_run

    monkeypatch.setenv("COMPILER_STRICT", "0")
    monkeypatch.setenv("CXX", f"/nonexistent/g++-{uuid.uuid4().hex[:8]}")
    x = rand(64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out, record, _ = compile_and_run(lambda a: (torch.sin(a) * 2,), x)
    torch.testing.assert_close(out[0], torch.sin(x) * 2)
    assert record.fallback is not None and "nonexistent" in record.fallback
    assert any("nonexistent" in str(w.message) for w in caught)
