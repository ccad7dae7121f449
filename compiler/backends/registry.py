"""The backend registry: a backend is any `(gm, example_inputs) -> callable`.

Backends compose: a user's backend may count or log a graph and hand it on to a registered
one through `lookup_backend(name)`, or call `compiler.compile(gm)` on the GraphModule it was
given. The built-in backends (builtin.py) join the table at the first lookup.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

Backend = Callable[[torch.fx.GraphModule, Sequence[torch.Tensor]], Callable]

_BACKENDS: dict[str, Backend] = {}
_BUILTIN: set[str] = set()


def register_backend(compiler_fn: Backend | str | None = None, name: str | None = None):
    """Register a backend under `name` (default: the function's name).

    Usable as `@register_backend`, `@register_backend(name="x")`, `@register_backend("x")`
    or `register_backend(fn, name=...)`. Returns the function unchanged.
    """

    def add(fn: Backend) -> Backend:
        if not callable(fn):
            raise TypeError(f"a backend must be callable, got {type(fn).__name__}")
        key = name or getattr(fn, "__name__", None)
        if not key:
            raise TypeError("register_backend needs name= for a callable without a __name__")
        _BACKENDS[key] = fn
        return fn

    if compiler_fn is None:
        return add
    if isinstance(compiler_fn, str):  # register_backend("name") used as a decorator factory
        name = compiler_fn
        return add
    return add(compiler_fn)


def lookup_backend(name_or_fn: str | Backend) -> Backend:
    """The backend registered as `name`, as a plain `(gm, example_inputs) -> callable`."""
    if callable(name_or_fn):
        return name_or_fn
    if not isinstance(name_or_fn, str):
        raise TypeError(f"backend must be a name or a callable, got {type(name_or_fn).__name__}")
    _load_builtins()
    try:
        return _BACKENDS[name_or_fn]
    except KeyError:
        known = ", ".join(sorted(_BACKENDS))
        raise ValueError(f"unknown backend {name_or_fn!r}; registered backends: {known}") from None


def list_backends() -> list[str]:
    """Every registered backend name, the built-in ones and those users registered."""
    _load_builtins()
    return sorted(_BACKENDS)


def backend_name(backend: str | Backend) -> str:
    if isinstance(backend, str):
        return backend
    return getattr(backend, "__name__", type(backend).__name__)


def _load_builtins() -> None:
    """Once, the built-in backends join the table (a user's backend registered before
    under one of their names is replaced, as when they were registered at import)."""
    if _BUILTIN:
        return
    # Imported lazily: the code generator pulls in much more than the tracer needs.
    from compiler.backends.builtin import BUILTIN_BACKENDS

    _BACKENDS.update(BUILTIN_BACKENDS)
    _BUILTIN.update(BUILTIN_BACKENDS)
