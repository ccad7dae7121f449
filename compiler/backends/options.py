"""The mode and options of the `compile(...)` call being served, visible to every backend it
reaches through `current_options()`, so a wrapped "inductor" compiles in the mode the user
asked for, as torch.compile's wrapped backends do."""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass, field
from typing import Any, Iterator


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
