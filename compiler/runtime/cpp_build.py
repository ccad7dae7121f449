"""Build C++ kernel sources into shared libraries with the system compiler, load them with
ctypes, and cache them on disk by content hash.

The cache key is the sha256 of the source, the flags, the compiler's version line and the
CPU's feature flags (`-march=native` code must not be loaded on another CPU when a home
directory is shared between machines). Every file lands by `os.replace` from a temporary
file in the same directory, so processes building the same kernel at the same time never
see a half-written library; a sidecar file holds the library's own sha256 and a library
that does not match it (truncated, corrupt, or replaced by hand) is rebuilt, never loaded.

A missing or failing compiler raises `CppCompileError` after one warning per compiler
command and failure kind; callers catch it and run the graph eagerly.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import platform
import shlex
import subprocess
import tempfile
import threading
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

# No -ffast-math: it lets the compiler assume no NaN/inf, which changes results of
# max/min/isnan and of every comparison users rely on. -fno-math-errno is what lets GCC
# call the vector math library (libmvec) for `#pragma omp simd` loops, and
# -fno-trapping-math lets it if-convert and vectorise selects; neither changes values.
# -fno-tree-pre: GCC's partial redundancy elimination merges the NaN tests of nested
# selects (NaN-propagating max of a ReLU in a max-pool window) into bool-valued selects its
# vectoriser then rejects, leaving such loops scalar (a 15x slower max-pool kernel, GCC 12).
FLAGS: tuple[str, ...] = (
    "-O3",
    "-march=native",
    "-fopenmp",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-fno-tree-pre",
    "-std=c++17",
    "-shared",
    "-fPIC",
)

_STDERR_TAIL = 2000  # characters of compiler output kept in errors and warnings


class CppCompileError(RuntimeError):
    """The C++ compiler is missing or rejected a kernel; the graph should run eagerly."""

    def __init__(self, message: str, command: str, stderr: str = "") -> None:
        super().__init__(message)
        self.command = command
        self.stderr = stderr


class CompilerUnavailable(CppCompileError):
    """No working C++ compiler (the `$CXX` or `c++` command cannot be run)."""


@dataclass(frozen=True)
class Toolchain:
    command: tuple[str, ...]  # e.g. ("c++",) or the words of $CXX
    version: str  # first line of `--version`, part of the cache key

    @property
    def display(self) -> str:
        return shlex.join(self.command)


_lock = threading.Lock()
_toolchains: dict[str, Toolchain | CompilerUnavailable] = {}
_warned: set[tuple[str, str]] = set()
_loaded: dict[Path, ctypes.CDLL] = {}


def compiler_command() -> tuple[str, ...]:
    """The C++ compiler command: the words of `$CXX`, or `c++`."""
    words = shlex.split(os.environ.get("CXX", "").strip())
    return tuple(words) if words else ("c++",)


def toolchain() -> Toolchain:
    """The compiler to use, probed once per command; raises `CompilerUnavailable`."""
    command = compiler_command()
    key = shlex.join(command)
    with _lock:
        found = _toolchains.get(key)
    if found is None:
        found = _probe(command)
        with _lock:
            _toolchains[key] = found
    if isinstance(found, CompilerUnavailable):
        raise found
    return found


def _probe(command: tuple[str, ...]) -> Toolchain | CompilerUnavailable:
    display = shlex.join(command)
    try:
        proc = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        err = CompilerUnavailable(
            f"C++ compiler {display!r} cannot be run ({exc}); set $CXX to a working g++ or "
            "clang++. Graphs on CPU run eagerly.",
            display,
            str(exc),
        )
        _warn_once(err, "unavailable")
        return err
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout)[-_STDERR_TAIL:]
        err = CompilerUnavailable(
            f"C++ compiler {display!r} failed on --version (exit {proc.returncode}):\n{tail}",
            display,
            tail,
        )
        _warn_once(err, "unavailable")
        return err
    return Toolchain(command, (proc.stdout.splitlines() or [""])[0])


def _warn_once(err: CppCompileError, kind: str) -> None:
    with _lock:
        if (err.command, kind) in _warned:
            return
        _warned.add((err.command, kind))
    warnings.warn(str(err), RuntimeWarning, stacklevel=3)


def cache_dir() -> Path:
    """Where built kernels live: `$COMPILER_CACHE_DIR/cpp`, else `~/.cache/jupyter-compile/cpp`
    (`$XDG_CACHE_HOME` respected). Per user, as home directories are."""
    root = os.environ.get("COMPILER_CACHE_DIR")
    return Path(root) / "cpp" if root else default_cache_dir()


def default_cache_dir() -> Path:
    """`cache_dir()` without $COMPILER_CACHE_DIR: where `make setup` builds the runtime's own
    extension (runtime/cpp_ext.py), which a process with a cache folder of its own
    still loads from there."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "jupyter-compile"
    return base / "cpp"


_cpu_id: str | None = None


def _cpu_fingerprint() -> str:
    global _cpu_id
    if _cpu_id is None:
        flags = ""
        try:
            with open("/proc/cpuinfo") as f:
                flags = next((line for line in f if line.startswith("flags")), "")
        except OSError:
            pass
        _cpu_id = f"{platform.machine()} {platform.processor()} {flags.strip()}"
    return _cpu_id


def cache_key(source: str, flags: Sequence[str] = FLAGS) -> str:
    tool = toolchain()
    h = hashlib.sha256()
    for part in (source, "\0".join(flags), tool.display, tool.version, _cpu_fingerprint()):
        h.update(part.encode())
        h.update(b"\0\0")
    return h.hexdigest()


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def is_valid(lib: Path) -> bool:
    """The library exists and its bytes match the sha256 recorded when it was built."""
    try:
        recorded = lib.with_suffix(".so.sha256").read_text().strip()
        return recorded == _file_sha256(lib)
    except OSError:
        return False


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def build(source: str, flags: Sequence[str] = FLAGS) -> Path:
    """The path of the shared library built from `source`, compiling it unless a valid
    copy is already cached. Raises `CppCompileError` (after one warning) on failure."""
    key = cache_key(source, flags)
    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    lib = directory / f"{key}.so"
    if is_valid(lib):
        return lib
    compile_library(source, flags, lib)
    return lib


def compile_library(source: str, flags: Sequence[str], lib: Path) -> None:
    """Compile `source` into the library `lib` (its directory must exist), landing it and
    its sha256 sidecar atomically. Raises `CppCompileError` (after one warning) on failure."""
    directory, key = lib.parent, lib.name.removesuffix(".so")
    # The source is kept next to the library (useful when reading a crash); it is written
    # atomically too, as its path is what the compiler records in the library's symbols.
    src = directory / f"{key}.cpp"
    _write_atomic(src, source.encode())
    compile_files([src], flags, lib)


def compile_files(sources: Sequence[Path], flags: Sequence[str], lib: Path) -> None:
    """Compile the translation units `sources` into the one library `lib` (its directory
    must exist), landing it and its sha256 sidecar atomically; several units are compiled
    in parallel, then linked. Raises `CppCompileError` (after one warning) on failure."""
    tool = toolchain()
    directory, key = lib.parent, lib.name.removesuffix(".so")
    fd, tmp_name = tempfile.mkstemp(dir=directory, prefix=f"{key}.", suffix=".so.tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    objects = [tmp.with_name(f"{tmp.name}.{k}.o") for k in range(len(sources))]
    try:
        if len(sources) == 1:
            _run_compiler(tool, [*flags, str(sources[0]), "-o", str(tmp)], key, sources)
        else:

            def unit(k: int) -> None:
                args = [*flags, "-c", str(sources[k]), "-o", str(objects[k])]
                _run_compiler(tool, args, key, [sources[k]])

            with ThreadPoolExecutor(max_workers=min(len(sources), os.cpu_count() or 1)) as pool:
                list(pool.map(unit, range(len(sources))))
            _run_compiler(tool, [*flags, *map(str, objects), "-o", str(tmp)], key, sources)
        digest = _file_sha256(tmp)
        # Library first, then its checksum: a reader between the two sees a mismatch and
        # rebuilds, which is wasted work but never a wrong load.
        os.replace(tmp, lib)
        _write_atomic(lib.with_suffix(".so.sha256"), digest.encode())
    finally:
        for path in (tmp, *objects):
            with contextlib.suppress(OSError):
                path.unlink()


def _run_compiler(tool: Toolchain, args: list[str], key: str, sources: Sequence[Path]) -> None:
    command = [*tool.command, *args]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        err = CompilerUnavailable(
            f"C++ compiler {tool.display!r} could not be run ({exc}). Graphs on CPU run eagerly.",
            tool.display,
            str(exc),
        )
        _warn_once(err, "unavailable")
        raise err from None
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout)[-_STDERR_TAIL:]
        err = CppCompileError(
            f"C++ compiler {tool.display!r} failed (exit {proc.returncode}) on "
            f"{', '.join(map(str, sources))}:\n{tail}",
            shlex.join(command),
            tail,
        )
        _warn_once(err, f"failed:{key}")
        raise err


def load(source: str, flags: Sequence[str] = FLAGS) -> ctypes.CDLL:
    """Build (or find in the cache) and load `source`; one handle per library per process."""
    lib = build(source, flags)
    with _lock:
        handle = _loaded.get(lib)
    if handle is None:
        handle = ctypes.CDLL(str(lib))
        with _lock:
            handle = _loaded.setdefault(lib, handle)
    return handle


def load_many(sources: Sequence[str], flags: Sequence[str] = FLAGS) -> list[ctypes.CDLL]:
    """`load` for several sources, compiling them in parallel (one compiler process per
    core; the threads only wait on subprocesses)."""
    toolchain()  # fail once, up front, rather than in every worker
    if len(sources) <= 1:
        return [load(s, flags) for s in sources]
    workers = min(len(sources), os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda s: load(s, flags), sources))
