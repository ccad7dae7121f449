"""The on-disk cache of generated modules (kernels and wrappers).

A module's file name is the sha256 of its source, the device kind and the Triton version, so
a second process that generates the same source finds the file (and Triton's own cache finds
the compiled binary): nothing is compiled twice. Files are written to a temporary name and
renamed into place, so concurrent processes never see half a file.

Location: $COMPILER_CACHE_DIR, else ~/.cache/jupyter-compile ($XDG_CACHE_HOME respected). A
file that does not hold its source (truncated, corrupt, edited) is written again before it
is imported, never imported as it is.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
import threading
from pathlib import Path
from types import ModuleType

_lock = threading.Lock()


def cache_dir() -> Path:
    """$COMPILER_CACHE_DIR, else jupyter-compile/ in $XDG_CACHE_HOME or ~/.cache (per user, as
    home directories are; the C++ libraries go to its cpp/ folder)."""
    root = os.environ.get("COMPILER_CACHE_DIR")
    if root:
        return Path(root)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "jupyter-compile"


def _triton_version() -> str:
    try:
        import triton

        return triton.__version__
    except ImportError:
        return "none"


def source_key(source: str, device: str) -> str:
    h = hashlib.sha256()
    for part in (source, device, _triton_version()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:40]


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _holds(path: Path, source: str) -> bool:
    try:
        return path.read_text() == source
    except (OSError, UnicodeDecodeError):
        return False


def module_path(source: str, device: str, kind: str = "kernels") -> Path:
    return cache_dir() / kind / f"m{source_key(source, device)}.py"


def load_module(
    source: str, device: str, kind: str = "kernels", shared: bool = True
) -> tuple[ModuleType, bool]:
    """Import `source` from the cache (writing it first if absent). Returns the module and
    whether the file already existed (a cache hit).

    `shared=False` executes the file into a new module object on every call: for a module
    the caller binds names into (a wrapper gets its graph's kernels and constants), since two
    graphs can generate the same wrapper text around different kernels."""
    path = module_path(source, device, kind)
    name = f"jupyter_compile_{kind}_{path.stem}"
    with _lock:
        if shared and name in sys.modules:
            return sys.modules[name], True
        hit = _holds(path, source)
        if not hit:  # absent, or truncated or corrupt: written again, never loaded
            write_atomic(path, source)
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        if shared:
            sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        if shared:
            sys.modules.pop(name, None)
        raise
    return module, hit
