"""The C++ build cache: compile, load, reuse, survive corruption and races, and fail clearly."""

from __future__ import annotations

import ctypes
import subprocess
import sys
import textwrap
import uuid
import warnings

import pytest

from compiler.runtime import cpp_build

SOURCE = textwrap.dedent(
    """
    #include <stdint.h>
    extern "C" int64_t add_%s(int64_t a, int64_t b) { return a + b; }
    """
)


def _source() -> tuple[str, str]:
    """A source unique to the test, so the in-process handle cache never answers for it."""
    tag = uuid.uuid4().hex[:12]
    return SOURCE % tag, f"add_{tag}"


def _call(lib: ctypes.CDLL, name: str, a: int, b: int) -> int:
    fn = getattr(lib, name)
    fn.argtypes = [ctypes.c_int64, ctypes.c_int64]
    fn.restype = ctypes.c_int64
    return fn(a, b)


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(tmp_path))
    return tmp_path / "cpp"


def test_build_and_load(cache):
    source, name = _source()
    lib = cpp_build.load(source)
    assert _call(lib, name, 2, 40) == 42
    built = list(cache.glob("*.so"))
    assert len(built) == 1 and cpp_build.is_valid(built[0])
    assert not list(cache.glob("*.tmp")), "temporary files must not be left behind"


def test_second_build_is_a_cache_hit(cache, monkeypatch):
    source, _ = _source()
    first = cpp_build.build(source)
    calls = []
    real_run = subprocess.run

    def counting_run(cmd, *args, **kwargs):
        calls.append(cmd)
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(cpp_build.subprocess, "run", counting_run)
    assert cpp_build.build(source) == first
    assert calls == []


def test_key_depends_on_source_and_flags():
    source, _ = _source()
    other, _ = _source()
    key = cpp_build.cache_key(source)
    assert key != cpp_build.cache_key(other)
    assert key != cpp_build.cache_key(source, (*cpp_build.FLAGS, "-DX=1"))


@pytest.mark.parametrize("damage", ["truncate", "garbage", "no_sidecar"])
def test_corrupt_library_is_rebuilt_not_loaded(cache, damage):
    source, name = _source()
    lib = cpp_build.build(source)
    good = lib.read_bytes()
    if damage == "truncate":
        lib.write_bytes(good[: len(good) // 3])
    elif damage == "garbage":
        lib.write_bytes(b"\x7fELF" + b"\0" * 100)
    else:
        lib.with_suffix(".so.sha256").unlink()
    assert not cpp_build.is_valid(lib)
    rebuilt = cpp_build.build(source)
    assert rebuilt == lib and cpp_build.is_valid(lib)
    assert _call(cpp_build.load(source), name, 1, 2) == 3


def test_concurrent_processes_share_one_library(cache, tmp_path):
    source, name = _source()
    script = textwrap.dedent(
        f"""
        import ctypes, sys
        from compiler.runtime import cpp_build
        lib = cpp_build.load({source!r})
        fn = lib.{name}
        fn.argtypes = [ctypes.c_int64, ctypes.c_int64]
        fn.restype = ctypes.c_int64
        sys.exit(0 if fn(20, 22) == 42 else 1)
        """
    )
    procs = [subprocess.Popen([sys.executable, "-c", script]) for _ in range(4)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    libs = list(cache.glob("*.so"))
    assert len(libs) == 1 and cpp_build.is_valid(libs[0])
    assert not list(cache.glob("*.tmp"))


def test_load_many_compiles_in_parallel_and_keeps_order():
    pairs = [_source() for _ in range(3)]
    libs = cpp_build.load_many([s for s, _ in pairs])
    assert [_call(lib, name, i, 1) for i, (lib, (_, name)) in enumerate(zip(libs, pairs))] == [
        1,
        2,
        3,
    ]


def test_missing_compiler_warns_once_and_raises(monkeypatch):
    missing = f"/nonexistent/c++-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("CXX", missing)
    source, _ = _source()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            with pytest.raises(cpp_build.CompilerUnavailable) as info:
                cpp_build.load(source)
    assert missing in str(info.value)
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1 and missing in messages[0]


def test_compile_error_names_command_and_stderr(cache):
    bad = f'extern "C" int broken_{uuid.uuid4().hex[:8]}() {{ return undeclared_name; }}'
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(cpp_build.CppCompileError) as info:
            cpp_build.build(bad)
    assert "undeclared_name" in info.value.stderr
    assert "undeclared_name" in str(info.value)
    assert any("undeclared_name" in str(w.message) for w in caught)
    assert not list(cache.glob("*.so")) and not list(cache.glob("*.tmp"))
