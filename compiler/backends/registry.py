"""The backend registry: a backend is any `(gm, example_inputs) -> callable`.

Backends compose: a user's backend may count or log a graph and hand it on to a registered
one through `lookup_backend(name)`, or call `compiler.compile(gm)` on the GraphModule it was
given. The mode and options of the `compile(...)` call being served are visible to every
backend it reaches through `current_options()`, so a wrapped "inductor" compiles in the mode
the user asked for, as torch.compile's wrapped backends do.
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import torch

Backend = Callable[[torch.fx.GraphModule, Sequence[torch.Tensor]], Callable]

_BACKENDS: dict[str, Backend] = {}
_BUILTIN: set[str] = set()


@dataclass(frozen=True)
class BackendOptions:
    """The `mode=`, `options=` and `fullgraph=` of the compile call whose graph a backend is
    compiling (with fullgraph, a failing code generator raises instead of running eagerly)."""

    mode: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    fullgraph: bool = False


_current_options: contextvars.ContextVar[BackendOptions | None] = contextvars.ContextVar(
    "backend_options", default=None
)


def current_options() -> BackendOptions:
    return _current_options.get() or BackendOptions()


@contextlib.contextmanager
def backend_options(
    mode: str | None, options: dict | None, fullgraph: bool = False
) -> Iterator[None]:
    token = _current_options.set(BackendOptions(mode, dict(options or {}), fullgraph))
    try:
        yield
    finally:
        _current_options.reset(token)


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


def _builtin(name: str):
    def add(fn: Backend) -> Backend:
        _BACKENDS[name] = fn
        _BUILTIN.add(name)
        return fn

    return add


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
    # Imported lazily: the code generator pulls in much more than the tracer needs.
    from compiler.backends import builtin  # noqa: F401
