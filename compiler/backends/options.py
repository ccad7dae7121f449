"""The mode and options of the `compile(...)` call being served, visible to every backend it
reaches through `current_options()`, so a wrapped "inductor" compiles in the mode the user
asked for, as torch.compile's wrapped backends do."""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass, field
from typing import Any, Iterator

# torch.compile's `options=` for its inductor backend that have a meaning here, each as the
# mode whose behaviour it names; inductor's other settings have no counterpart in our code
# generator, so a name outside this table is refused rather than silently ignored.
OPTION_MODES: dict[str, str] = {
    "triton.cudagraphs": "reduce-overhead",
    "max_autotune": "max-autotune",
}


def mode_of_options(mode: str | None, options: dict[str, Any] | None) -> str | None:
    """The mode `compile(..., mode=mode, options=options)` compiles in with the "inductor"
    backend. As torch.compile, mode and options do not go together."""
    if not options:
        return mode
    unknown = [name for name in options if name not in OPTION_MODES]
    if unknown:
        raise ValueError(
            f"unknown option {unknown[0]!r} for the inductor backend; the options are "
            + ", ".join(f"{name!r} (as mode={m!r})" for name, m in OPTION_MODES.items())
        )
    if mode not in (None, "default"):
        raise ValueError("pass mode or options, not both (as torch.compile)")
    chosen = [OPTION_MODES[name] for name, on in options.items() if on]
    if len(chosen) > 1:
        raise ValueError(
            f"options {', '.join(repr(n) for n, on in options.items() if on)} pick different "
            f"modes ({' and '.join(chosen)}); choose one"
        )
    return chosen[0] if chosen else mode


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
