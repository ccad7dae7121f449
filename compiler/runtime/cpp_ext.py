"""The C++ extension of guards, CUDA graph outputs, optimizer gradient grouping and kernel
launches (csrc/): build it ahead of time, load it if built.

Its parts, one translation unit each (csrc/cpp_ext.h lists them), for host work that costs
a Python attribute read per tensor or a C module built per kernel:
- guards.cpp: a guard function checks ~6 attributes of every tensor input, each a Python
  attribute read; for a resnet's ~100 parameters that is most of a call's guard time.
  `TensorChecker` checks them all in one call (compiler/tracer/guards.py decides which).
  `FrozenReads` lets a call skip the checks of module attributes no write has touched since
  the last call that passed (compiler/tracer/frozen.py decides which). `ClassLookups` checks
  that no class attribute, property or `__dict__` entry hides what a guard reads from a
  module's tables (compiler/tracer/lookups.py). `AliasGuard`: do a graph's mutated inputs
  share memory with another input (aliasing.py).
- graph_outputs.cpp: the storage moves of gradients handed out in a CUDA graph's memory
  (cudagraphs.py).
- grad_grouping.cpp: a compiled optimizer step's per-parameter checks (compiler/optim/step.py).
- launch.cpp: loading and launching compiled Triton kernels through the CUDA driver
  (triton_binary.py).

It is built by `make setup` (`python -m compiler.runtime.cpp_ext build`), never while
compiling a user's function: a first compile must not wait for a C++ build. At runtime it is
loaded if present; when it is absent, stale or fails to load, the guards stay in Python and
the guard source says why.

The library lives in the C++ cache (`cpp_build.cache_dir()`/cpp_ext; a process whose
$COMPILER_CACHE_DIR holds none loads the default cache's), named by the torch version, the
Python version and the sha256 of the sources and flags, so another torch or Python (a shared
home directory, a second venv) builds and loads its own. It lands atomically with a sha256
sidecar (`cpp_build.compile_files`), and one that does not match it is not loaded.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.machinery
import importlib.util
import sys
import sysconfig
import time
from pathlib import Path
from types import ModuleType
from typing import Callable

import torch

from compiler.runtime import cpp_build

SOURCE_DIR = Path(__file__).with_name("csrc")
# The translation units, compiled into one library, and the headers they include
UNITS = [
    SOURCE_DIR / name
    for name in ("module.cpp", "guards.cpp", "graph_outputs.cpp", "grad_grouping.cpp", "launch.cpp")
]
HEADERS = [
    SOURCE_DIR / name
    for name in ("cpp_ext.h", "alias_guard.h", "frozen_reads.h", "class_lookups.h")
]
MODULE_NAME = "_jc_cpp_ext"  # PyInit__jc_cpp_ext in module.cpp

# The tensor types the checker takes: a subclass may change what its attributes return
# (`__torch_function__`, properties), so its checks stay in Python.
CHECKED_TYPES = (torch.Tensor, torch.nn.Parameter)

_module: ModuleType | None = None
_status: str | None = None  # why the extension is not used, once a load was tried


def built_for() -> str:
    """The torch and Python the library must have been built for."""
    return f"torch {torch.__version__}, Python {sys.version_info[0]}.{sys.version_info[1]}"


def library_path(cache: Path | None = None) -> Path:
    """Where `build()` puts the library: in `cache` (default: the C++ cache in use)."""
    h = hashlib.sha256()
    for source in (*UNITS, *HEADERS):
        h.update(source.read_bytes())
    h.update("\0".join(flags()).encode())  # the include paths and ABI: another torch install
    digest = h.hexdigest()[:16]
    torch_tag = torch.__version__.replace("+", "_").replace(".", "_")
    python_tag = sys.implementation.cache_tag  # cpython-311
    name = f"torch{torch_tag}-{python_tag}-{digest}.so"
    return (cache or cpp_build.cache_dir()) / "cpp_ext" / name


def _library_to_load() -> Path:
    """The cache in use's library, else the default cache's: a process given a fresh
    $COMPILER_CACHE_DIR (a cold-compile benchmark, a notebook with a cache of its own) keeps
    the C++ guards `make setup` built, instead of falling back to Python guards."""
    lib = library_path()
    if lib.exists():
        return lib
    default = library_path(cpp_build.default_cache_dir())
    return default if default.exists() else lib


def flags() -> list[str]:
    """Compiler flags: torch's and Python's headers, and c10 (TensorImpl's out-of-line
    methods) from torch's own lib folder; torch's Python types are read from torch._C."""
    torch_include = Path(torch.__file__).parent / "include"
    torch_lib = Path(torch.__file__).parent / "lib"
    abi = int(torch.compiled_with_cxx11_abi())
    return [
        "-O2",
        "-std=c++20",  # torch 2.14's c10 headers need it; older ones compile under it too
        "-shared",
        "-fPIC",
        f"-I{sysconfig.get_paths()['include']}",
        f"-I{torch_include}",
        f"-I{SOURCE_DIR}",  # HEADERS
        f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
        f'-DJC_BUILT_FOR="{built_for()}"',
        f"-L{torch_lib}",
        "-Wl,--no-as-needed",  # the libraries come before the source on the command line
        "-lc10",
        f"-Wl,-rpath,{torch_lib}",
    ]


def build(cache: Path | None = None) -> Path:
    """Build the library in `cache` (default: the C++ cache in use) unless a valid one is
    there; raises `cpp_build.CppCompileError`."""
    lib = library_path(cache)
    if cpp_build.is_valid(lib):
        return lib
    lib.parent.mkdir(parents=True, exist_ok=True)
    cpp_build.compile_files(UNITS, flags(), lib)
    return lib


def checker_class() -> type | None:
    """The extension's `TensorChecker`, or None when it is not built or cannot be loaded
    (then `status()` says why). Loads at most once per process; never builds."""
    module = _load()
    return None if module is None else module.TensorChecker


def frozen_class() -> type | None:
    """The extension's `FrozenReads` where tensor checks are in C++ by this extension and
    this Python has dict version tags (3.11, 3.12), else None."""
    checker = checker_class()
    module = _load()
    if checker is None or module is None or module.TensorChecker is not checker:
        return None
    return module.FrozenReads if module.DICT_VERSIONS else None


def lookups_class() -> type | None:
    """The extension's `ClassLookups` where tensor checks are in C++ by this extension (the
    Python guards then use compiler/tracer/lookups.py's), else None."""
    checker = checker_class()
    module = _load()
    if checker is None or module is None or module.TensorChecker is not checker:
        return None
    return module.ClassLookups


def alias_guard_class() -> type | None:
    """The extension's `AliasGuard` (compiler/runtime/aliasing.py), or None without it."""
    module = _load()
    return None if module is None else module.AliasGuard


def same_addresses_function() -> Callable | None:
    """The extension's `same_addresses` (compiler/runtime/cudagraphs.py), or None."""
    module = _load()
    return None if module is None else module.same_addresses


def storage_moves() -> tuple[Callable, Callable] | None:
    """The extension's `live_storages` and `adopt_storage` (compiler/runtime/cudagraphs.py),
    or None: without them a CUDA graph's outputs are returned as copies."""
    module = _load()
    if module is None:
        return None
    return module.live_storages, module.adopt_storage


def group_grads_function() -> Callable | None:
    """The extension's `group_grads` (compiler/optim/step.py), or None without it."""
    module = _load()
    return None if module is None else module.group_grads


def cuda_launch_api() -> tuple[Callable, type] | None:
    """The extension's `cuda_load` and `CudaLaunch` (compiler/runtime/triton_binary.py), or
    None: without them Triton's own loader and launchers run the kernels."""
    module = _load()
    if module is None or not hasattr(module, "CudaLaunch"):
        return None
    return module.cuda_load, module.CudaLaunch


def _load() -> ModuleType | None:
    global _module, _status
    if _module is None and _status is None:
        try:
            _module = load_library(_library_to_load())
        except Exception as e:  # any failure means Python guards, as without the extension
            _status = f"{type(e).__name__}: {e}"
    return _module


def status() -> str:
    """How tensor guards are checked in this process, for guard sources and the inspector."""
    if checker_class() is not None:
        return f"C++ (the C++ extension, {built_for()})"
    return f"Python (the C++ extension is not used: {_status or 'disabled'})"


def load_library(lib: Path) -> ModuleType:
    """Import the extension from `lib`, checking its sha256 sidecar and what it was built for."""
    if not lib.exists():
        raise FileNotFoundError(
            f"{lib} is not built; `python -m compiler.runtime.cpp_ext build` builds it"
        )
    if not cpp_build.is_valid(lib):
        raise ImportError(f"{lib} does not match its recorded sha256 (rebuild it)")
    loader = importlib.machinery.ExtensionFileLoader(MODULE_NAME, str(lib))
    spec = importlib.util.spec_from_file_location(MODULE_NAME, lib, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    if module.BUILT_FOR != built_for():
        raise ImportError(f"{lib} was built for {module.BUILT_FOR}, not {built_for()}")
    return module


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m compiler.runtime.cpp_ext", description=__doc__.splitlines()[0]
    )
    parser.add_argument("command", choices=["build"])
    parser.parse_args(argv)
    start = time.perf_counter()
    try:
        lib = build()
        load_library(lib)
    except Exception as e:
        print(f"C++ extension not built ({type(e).__name__}: {e}); guards run in Python")
        return 1
    print(f"C++ extension: {lib} ({time.perf_counter() - start:.1f} s, {built_for()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
