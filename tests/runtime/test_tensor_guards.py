"""The C++ tensor guard extension on its own: what a TensorChecker accepts and rejects, where
the library is cached, and that a missing or damaged library means Python guards."""

from __future__ import annotations

import sys

import pytest
import torch
from torch import nn

from compiler.runtime import cpp_build, cpp_ext


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COMPILER_CACHE_DIR", str(tmp_path_factory.mktemp("tensor-guards-cache")))
        try:
            lib = cpp_ext.build()
        except cpp_build.CppCompileError as e:
            pytest.skip(f"the tensor guard extension cannot be built here: {e}")
        yield lib


@pytest.fixture
def Checker(cache):
    return cpp_ext.load_library(cache).TensorChecker


def spec_of(t: torch.Tensor, shape: bool = True) -> tuple:
    strided = shape and t.layout == torch.strided
    return (
        type(t),
        t.dtype,
        t.device,
        tuple(t.shape) if shape else None,
        t.stride() if strided else None,
        t.requires_grad,
    )


def checker_for(Checker, *tensors, shape: bool = True):
    return Checker(tuple(spec_of(t, shape) for t in tensors), cpp_ext.CHECKED_TYPES)


def test_matching_tensors_pass(Checker):
    x, w = torch.randn(2, 3), nn.Parameter(torch.randn(3, 4))
    check = checker_for(Checker, x, w)
    assert check(x, w) is True
    assert check(torch.randn(2, 3), nn.Parameter(torch.randn(3, 4))) is True
    assert repr(check) == "<TensorChecker of 2 tensors>"


@pytest.mark.parametrize(
    "changed",
    [
        torch.randn(2, 3, dtype=torch.float64),
        torch.randn(3, 2),
        torch.randn(2, 3, 1),
        torch.randn(3, 2).t(),
        torch.randn(2, 6)[:, ::2],
        torch.randn(2, 3, requires_grad=True),
        torch.empty(2, 3, device="meta"),
        torch.randn(2, 3).to_sparse(),
        nn.Parameter(torch.randn(2, 3), requires_grad=False),
        torch.randn(2, 3).as_subclass(type("Sub", (torch.Tensor,), {})),
        2.0,
        None,
        [[0.0] * 3] * 2,
    ],
    ids=lambda v: type(v).__name__ if not isinstance(v, torch.Tensor) else None,
)
def test_any_change_fails(Checker, changed):
    x = torch.randn(2, 3)
    assert checker_for(Checker, x)(changed) is False


def test_parameter_changes_fail(Checker):
    w = nn.Parameter(torch.randn(3, 4))
    check = checker_for(Checker, w)
    assert check(w)
    w.requires_grad_(False)
    assert not check(w)
    w.requires_grad_(True)
    w.data = torch.randn(4, 3)
    assert not check(w)
    w.data = torch.randn(4, 3).t()  # shape (3, 4) again, strides (1, 3)
    assert not check(w)
    w.data = torch.randn(3, 4)
    assert check(w)
    assert not check(w.detach())  # a Tensor, not a Parameter


def test_without_shape_only_type_dtype_device_and_grad_are_checked(Checker):
    check = checker_for(Checker, torch.randn(2, 3), shape=False)
    assert check(torch.randn(5, 7, 1))
    assert not check(torch.randn(5, dtype=torch.float16))


def test_cpu_is_any_cpu_index_as_is_cpu(Checker):
    spec = (torch.Tensor, torch.float32, torch.device("cpu", 0), (2,), (1,), False)
    assert Checker((spec,), cpp_ext.CHECKED_TYPES)(torch.randn(2))


def test_misuse_raises(Checker):
    check = checker_for(Checker, torch.randn(2))
    with pytest.raises(TypeError, match="takes 1 positional"):
        check()
    with pytest.raises(TypeError):
        check(torch.randn(2), t=1)
    sub = type("Sub", (torch.Tensor,), {})
    with pytest.raises(TypeError, match="torch.Tensor and nn.Parameter only"):
        Checker(
            ((sub, torch.float32, torch.device("cpu"), None, None, False),),
            cpp_ext.CHECKED_TYPES,
        )
    with pytest.raises(TypeError):
        Checker(
            ((torch.Tensor, "float32", torch.device("cpu"), None, None, False),),
            cpp_ext.CHECKED_TYPES,
        )


def test_library_is_keyed_by_torch_python_and_source(cache):
    name = cache.name
    assert torch.__version__.replace("+", "_").replace(".", "_") in name
    assert sys.implementation.cache_tag in name
    mtime = cache.stat().st_mtime_ns
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COMPILER_CACHE_DIR", str(cache.parent.parent.parent))
        assert cpp_ext.build() == cache  # a cache hit: not compiled again
    assert cache.stat().st_mtime_ns == mtime


def test_damaged_or_missing_library_means_python_guards(cache, tmp_path, monkeypatch):
    damaged = tmp_path / cache.name
    damaged.write_bytes(cache.read_bytes()[:1000])
    (tmp_path / (cache.name + ".sha256")).write_text(cache.with_suffix(".so.sha256").read_text())
    with pytest.raises(ImportError, match="sha256"):
        cpp_ext.load_library(damaged)
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(tmp_path / "empty"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-default"))
    monkeypatch.setattr(cpp_ext, "_module", None)
    monkeypatch.setattr(cpp_ext, "_status", None)
    assert cpp_ext.checker_class() is None
    assert cpp_ext.status().startswith("Python (the C++ extension is not used")
    assert "is not built" in cpp_ext.status()


def test_a_cache_folder_without_the_library_loads_the_default_caches(cache, tmp_path, monkeypatch):
    # A benchmark's or a notebook's own $COMPILER_CACHE_DIR must not turn the C++ guards
    # `make setup` built (in the default cache) into Python guards.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    default = cpp_ext.library_path(cpp_build.default_cache_dir())
    assert default.parent == tmp_path / "xdg" / "jupyter-compile" / "cpp" / "cpp_ext"
    default.parent.mkdir(parents=True)
    for suffix in ("", ".sha256"):
        (default.parent / (cache.name + suffix)).write_bytes(
            (cache.parent / (cache.name + suffix)).read_bytes()
        )
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(tmp_path / "fresh"))
    assert cpp_ext._library_to_load() == default
    cpp_ext.load_library(default)  # valid: the sidecar matches
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(cache.parent.parent.parent))
    assert cpp_ext._library_to_load() == cache  # the cache in use comes first


def test_build_command(cache, monkeypatch, capsys):
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(cache.parent.parent.parent))
    assert cpp_ext.main(["build"]) == 0
    assert str(cache) in capsys.readouterr().out
