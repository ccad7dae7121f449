"""The on-disk caches (generated kernel and wrapper modules, C++ libraries, max-autotune
configs): per user, written atomically, shared safely by processes compiling the same kernel
at the same time, and a truncated or corrupt entry is rebuilt, never loaded.

tests/codegen/test_cpp_build.py covers the C++ library cache on its own (corrupt libraries,
racing builds, compiler failures); these tests go through compile_fx.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from compiler.codegen.common import KernelSource
from compiler.runtime import cache, cpp_build, triton_launch
from tests.codegen.helpers import compile_and_run
from tests.conftest import REPO_ROOT


def fn(x, y):
    return (torch.sin(x) * y + y.sum(0),)


def _inputs():
    return torch.randn(6, 5), torch.randn(6, 5)


@pytest.fixture(autouse=True)
def own_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("COMPILER_STRICT", raising=False)
    return tmp_path / "cache"


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def _forget_loaded_modules() -> None:
    """What a new process would see: nothing of the cache imported yet."""
    for name in [n for n in sys.modules if n.startswith("jupyter_compile_")]:
        del sys.modules[name]


# ---- location -------------------------------------------------------------------------------


def test_caches_live_in_a_per_user_directory(monkeypatch, tmp_path):
    monkeypatch.delenv("COMPILER_CACHE_DIR")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    home_cache = tmp_path / "home" / ".cache" / "jupyter-compile"
    assert cache.cache_dir() == home_cache
    assert cpp_build.cache_dir() == home_cache / "cpp"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == tmp_path / "xdg" / "jupyter-compile"
    assert cpp_build.cache_dir() == tmp_path / "xdg" / "jupyter-compile" / "cpp"
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(tmp_path / "mine"))
    assert cache.cache_dir() == tmp_path / "mine"
    assert cpp_build.cache_dir() == tmp_path / "mine" / "cpp"


# ---- corrupt entries ------------------------------------------------------------------------

DAMAGE = {
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]),
    "garbage bytes": lambda p: p.write_bytes(b"\xff\xfe\x00garbage\x80" * 20),
    "empty": lambda p: p.write_bytes(b""),
    "other code": lambda p: p.write_text("raise SystemExit('a stale module was imported')\n"),
}


@pytest.mark.parametrize("emitter", ["cpp", "triton"])
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_module_is_rebuilt_not_loaded(emitter, damage, own_cache, monkeypatch):
    if emitter == "triton":
        monkeypatch.setenv("COMPILER_CPU_EMITTER", "triton")
    x, y = _inputs()
    compile_and_run(fn, x, y)
    modules = [p for p in _files(own_cache) if p.suffix == ".py"]
    good = {p: p.read_text() for p in modules}
    assert any("wrappers" in str(p) for p in modules)
    assert emitter == "cpp" or any("kernels" in str(p) for p in modules)
    for path in modules:
        DAMAGE[damage](path)
    _forget_loaded_modules()
    out, record, _ = compile_and_run(fn, x, y)
    assert record.fallback is None, record.fallback
    torch.testing.assert_close(out, fn(x, y))
    assert {p: p.read_text() for p in modules} == good, "damaged files are written again"
    assert not [p for p in _files(own_cache) if p.name.endswith(".tmp")]


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_a_damaged_cpp_library_is_rebuilt_not_loaded(damage, own_cache):
    x, y = _inputs()
    compile_and_run(fn, x, y)
    (lib,) = [p for p in _files(own_cache) if p.suffix == ".so"]
    data = lib.read_bytes()
    damaged = lib.with_name("damaged")
    damaged.write_bytes(data[: len(data) // 3] if damage == "truncate" else b"\x7fELF" + b"\0" * 64)
    # A new file in its place: this process still maps the old one (writing into a mapped
    # library would crash it, which is why the cache itself never does)
    os.replace(damaged, lib)
    cpp_build._loaded.clear()  # a new process: nothing loaded yet
    out, record, _ = compile_and_run(fn, x, y)
    assert record.fallback is None, record.fallback
    torch.testing.assert_close(out, fn(x, y))
    assert cpp_build.is_valid(lib)


# ---- max-autotune configs ----------------------------------------------------------------------

POINTWISE = KernelSource(
    name="triton_poi_fused_sin_0",
    language="triton",
    source="",
    call="",
    config={"kind": "pointwise", "xnumel": 4096, "XBLOCK": 1024, "num_warps": 4},
)


@pytest.mark.parametrize(
    "content",
    [
        b'{"XBLOCK": 256, "num_w',  # truncated
        b"\xff\x00\x13 not json",
        b"[256, 4]",
        b'{"XBLOCK": 256}',  # a key missing
        b'{"XBLOCK": 300, "num_warps": 4}',  # not a power of two
        b'{"XBLOCK": "256", "num_warps": 4}',
        b"",
    ],
)
def test_a_corrupt_autotune_file_is_ignored_and_retuned(content, own_cache, monkeypatch):
    """Before: json.loads raised in the kernel's constructor, so its graph failed to compile."""
    monkeypatch.setattr(triton_launch, "INTERPRET", False)  # max-autotune is off in the interpreter
    key = "k" + os.urandom(6).hex()
    kernel = triton_launch.TritonKernel(None, POINTWISE, "max-autotune", key)
    path = kernel._tuned_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    kernel = triton_launch.TritonKernel(None, POINTWISE, "max-autotune", key)
    assert kernel.autotune, "the kernel is tuned again"
    assert kernel.config == {"XBLOCK": 1024, "num_warps": 4}


def test_a_saved_autotune_config_is_used(own_cache, monkeypatch):
    monkeypatch.setattr(triton_launch, "INTERPRET", False)
    key = "k" + os.urandom(6).hex()
    path = triton_launch.TritonKernel(None, POINTWISE, "max-autotune", key)._tuned_path()
    cache.write_atomic(path, json.dumps({"XBLOCK": 256, "num_warps": 8}))
    kernel = triton_launch.TritonKernel(None, POINTWISE, "max-autotune", key)
    assert not kernel.autotune and kernel.config == {"XBLOCK": 256, "num_warps": 8}


# ---- atomic writes ------------------------------------------------------------------------------


@pytest.mark.parametrize("interruption", [OSError, KeyboardInterrupt])
def test_an_interrupted_write_leaves_the_old_file_and_no_temporary(
    interruption, tmp_path, monkeypatch
):
    path = tmp_path / "m.py"
    path.write_text("old = 1\n")

    def fail(*args):
        raise interruption("disk full or ^C")

    monkeypatch.setattr(cache.os, "replace", fail)
    with pytest.raises(interruption):
        cache.write_atomic(path, "new = 2\n")
    assert path.read_text() == "old = 1\n"
    assert [p.name for p in tmp_path.iterdir()] == ["m.py"]


# ---- concurrent processes -------------------------------------------------------------------------

_RACER = """
import os, sys, time, torch
from tests.codegen.helpers import compile_and_run
while not os.path.exists({go!r}):  # start together
    time.sleep(0.01)
torch.manual_seed(0)
x, y = torch.randn(6, 5), torch.randn(6, 5)
fn = lambda x, y: (torch.sin(x) * y + y.sum(0),)
for emitter in ("cpp", "triton"):
    os.environ["COMPILER_CPU_EMITTER"] = emitter
    out, record, _ = compile_and_run(fn, x, y)
    assert record.fallback is None, record.fallback
    torch.testing.assert_close(out, fn(x, y))
    print(emitter, [k.language for k in record.kernels])
"""


def test_processes_compiling_the_same_kernels_at_once(own_cache, tmp_path):
    """Three processes start compiling the same graph at the same moment, with the C++ and
    the (interpreted) Triton emitter: all succeed, and the cache holds whole files."""
    go = tmp_path / "go"
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT),
        "COMPILER_CACHE_DIR": str(own_cache),
        "TRITON_INTERPRET": "1",
    }
    script = textwrap.dedent(_RACER.format(go=str(go)))
    procs = [
        subprocess.Popen(
            [sys.executable, "-W", "ignore", "-c", script],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    time.sleep(1.0)
    go.touch()
    results = [p.communicate(timeout=280) for p in procs]
    for proc, (out, err) in zip(procs, results):
        assert proc.returncode == 0, err[-3000:]
        assert out.splitlines() == ["cpp ['cpp']", "triton ['triton']"], out + err[-2000:]
    files = _files(own_cache)
    assert not [p for p in files if p.name.endswith(".tmp")], files
    libraries = [p for p in files if p.suffix == ".so"]
    assert len(libraries) == 1 and cpp_build.is_valid(libraries[0])
    for module in [p for p in files if p.suffix == ".py"]:
        compile(module.read_text(), str(module), "exec")  # whole files, not interleaved ones
