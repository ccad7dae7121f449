"""Steering the compiler from user code, with torch.compiler's names and meanings.

- `disable(fn, recursive=True)`: `fn` always runs eagerly. Reached from compiled code, the
  graph breaks around its call. With `recursive=True` nothing it calls is compiled either;
  with `recursive=False` only its own frame runs eagerly, and the functions it calls are
  compiled as if called from compiled code.
- `allow_in_graph(fn)`: a call of `fn` goes into the graph as one opaque node instead of being
  traced into; while tracing `fn` runs on fake tensors to learn its outputs, and the backends
  run it as a Python call on the real tensors.
- `disallow_in_graph(fn)`: a call of `fn` that would go into the graph breaks it instead.
- `assume_constant_result(fn)`: `fn` is called once while tracing and its result baked into
  the compiled code as a constant, without a guard on it.
- `is_compiling()`: True while the tracer runs user code, False in eager code and in compiled
  code running for real.
- `mark_dynamic(t, dim)` / `mark_static(t, dim)`: per-dimension control of specialisation
  (compiler/tracer/shapes.py says how each dimension is decided).
- `set_stance(...)`: "default", "force_eager", "eager_on_recompile", "fail_on_recompile", as
  a call, a context manager or a decorator.

This module only records what the user asked for; the tracer (compiler/tracer/marked.py,
compiler/tracer/shapes.py) and the frame evaluator act on it.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import types
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Callable

import torch

__all__ = [
    "RecompileError",
    "allow_in_graph",
    "assume_constant_result",
    "disable",
    "disallow_in_graph",
    "is_compiling",
    "mark_dynamic",
    "mark_static",
    "maybe_mark_dynamic",
    "set_stance",
]


@dataclass(frozen=True)
class Mark:
    """What the user asked for one callable."""

    kind: str  # "disable", "allow_in_graph", "disallow_in_graph", "assume_constant_result", "is_compiling"
    fn: Any  # the callable it applies to (for "disable", the function the wrapper runs)
    recursive: bool = True  # "disable": nothing `fn` calls is compiled either
    reason: str | None = None  # "disable": the user's reason, shown in the break

    @property
    def name(self) -> str:
        fn = self.fn
        return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


# Keyed by id: builtins and torch ops cannot carry attributes, and some are unhashable. The
# entry holds the object, so its id is not reused while the mark exists.
_MARKS: dict[int, tuple[Any, Mark]] = {}


def mark_of(obj: Any) -> Mark | None:
    """The mark the user put on `obj`, if any (cheap: the tracer asks at every call)."""
    found = _MARKS.get(id(obj))
    return found[1] if found is not None and found[0] is obj else None


def _put(obj: Any, mark: Mark) -> None:
    _MARKS[id(obj)] = (obj, mark)


def _target(fn: Any, api: str, unbind: bool = True) -> Any:
    """The callable a mark applies to: a compiled function's original; with `unbind`, a bound
    method's function (the tracer meets methods as their function with `self`)."""
    if isinstance(fn, torch.nn.Module):
        raise TypeError(
            f"compiler.{api} takes a function; for a module, mark its forward "
            f"(e.g. `mod.forward = compiler.{api}(mod.forward)`)"
        )
    if not callable(fn):
        raise TypeError(f"compiler.{api} expects a callable, got {type(fn).__name__}")
    fn = getattr(fn, "_orig_fn", fn)
    if unbind and isinstance(fn, types.MethodType):
        fn = fn.__func__
    return fn


# ---- disable ------------------------------------------------------------------------------


def disable(
    fn: Callable | None = None, recursive: bool = True, *, reason: str | None = None
) -> Callable:
    """`fn` always runs eagerly; usable as `disable(fn)`, `@disable` and `@disable(...)`."""
    if fn is None:
        return lambda f: disable(f, recursive, reason=reason)
    fn = _target(fn, "disable", unbind=False)
    existing = disabled_mark(fn)
    if existing is not None:  # disabling a disabled function again: one wrapper, the new kind
        if existing.recursive == recursive and existing.reason == reason:
            return fn
        fn = existing.fn

    @functools.wraps(fn)
    def disabled(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    _put(disabled, Mark("disable", fn, recursive, reason))
    return disabled


def disabled_mark(fn: Any) -> Mark | None:
    mark = mark_of(fn)
    return mark if mark is not None and mark.kind == "disable" else None


def is_disabled(fn: Any) -> bool:
    """`fn` is a function made by `disable` (for tools deciding what to compile)."""
    return disabled_mark(fn) is not None


# ---- what goes into the graph ---------------------------------------------------------------


def allow_in_graph(fn: Callable | Sequence[Callable]) -> Any:
    """Calls of `fn` become one opaque node of the graph; returns `fn`."""
    return _mark_each(fn, "allow_in_graph")


def disallow_in_graph(fn: Callable | Sequence[Callable]) -> Any:
    """Calls of `fn` break the graph and run in Python; returns `fn`."""
    return _mark_each(fn, "disallow_in_graph")


def assume_constant_result(fn: Callable) -> Callable:
    """`fn`'s result, computed once while tracing, is a constant of the compiled code."""
    target = _target(fn, "assume_constant_result")
    _put(target, Mark("assume_constant_result", target))
    return fn


def _mark_each(fn: Any, kind: str) -> Any:
    if isinstance(fn, (list, tuple)):
        for f in fn:
            _mark_each(f, kind)
        return fn
    target = _target(fn, kind)
    _put(target, Mark(kind, target))
    return fn


# ---- is_compiling ---------------------------------------------------------------------------

_COMPILING: contextvars.ContextVar[bool] = contextvars.ContextVar("compiling", default=False)


def is_compiling() -> bool:
    """True while the tracer runs user code (inside compiled code being traced, the tracer
    reads this call as True), False in eager code and in compiled code running for real."""
    return _COMPILING.get()


@contextlib.contextmanager
def tracing() -> Iterator[None]:
    """The tracer is running user code: real calls it makes (fake-tensor runs of opaque
    functions, assume_constant_result calls) see `is_compiling()` as True."""
    token = _COMPILING.set(True)
    try:
        yield
    finally:
        _COMPILING.reset(token)


_put(is_compiling, Mark("is_compiling", is_compiling))
for _name in ("is_compiling", "is_dynamo_compiling"):
    # Code written for torch.compile asks torch.compiler; our tracer answers it the same way
    # (without calling it: it would ask torch._dynamo).
    _torch_fn = getattr(torch.compiler, _name, None)
    if _torch_fn is not None:
        _put(_torch_fn, Mark("is_compiling", _torch_fn))


# ---- dynamic and static dimensions ----------------------------------------------------------

# Attributes on the marked tensor: dim -> True where a specialisation should be warned about
# (mark_dynamic), False where it is fine (maybe_mark_dynamic); and the dims kept static.
DYNAMIC_ATTR = "_compiler_dynamic_dims"
STATIC_ATTR = "_compiler_static_dims"


def _dims(t: torch.Tensor, index: int | Sequence[int] | None, api: str) -> list[int]:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"compiler.{api} expects a tensor, got {type(t).__name__}")
    if index is None:
        return list(range(t.dim()))
    out = []
    for i in [index] if isinstance(index, int) else index:
        if not -t.dim() <= i < t.dim():
            raise IndexError(f"compiler.{api}: dim {i} is out of range for a {t.dim()}-d tensor")
        out.append(i % t.dim())
    return out


def mark_dynamic(t: torch.Tensor, index: int | Sequence[int]) -> None:
    """Trace `t`'s dimension(s) `index` with a symbolic size at the next compile that sees
    `t`; a warning says so if the trace has to specialise it anyway."""
    _mark_dynamic(t, _dims(t, index, "mark_dynamic"), strict=True)


def maybe_mark_dynamic(t: torch.Tensor, index: int | Sequence[int]) -> None:
    """Like `mark_dynamic`, without the warning when the trace specialises the dimension."""
    _mark_dynamic(t, _dims(t, index, "maybe_mark_dynamic"), strict=False)


def _mark_dynamic(t: torch.Tensor, dims: list[int], strict: bool) -> None:
    marked = dict(getattr(t, DYNAMIC_ATTR, {}))
    static = set(getattr(t, STATIC_ATTR, ())) - set(dims)
    marked.update(dict.fromkeys(dims, strict))
    setattr(t, DYNAMIC_ATTR, marked)
    setattr(t, STATIC_ATTR, static)


def mark_static(t: torch.Tensor, index: int | Sequence[int] | None = None) -> None:
    """Keep `t`'s dimension(s) `index` (all of them when None) static, whatever `dynamic=`
    says and however often their size changes."""
    dims = _dims(t, index, "mark_static")
    marked = {d: s for d, s in getattr(t, DYNAMIC_ATTR, {}).items() if d not in dims}
    setattr(t, DYNAMIC_ATTR, marked)
    setattr(t, STATIC_ATTR, set(getattr(t, STATIC_ATTR, ())) | set(dims))


# ---- stances --------------------------------------------------------------------------------

STANCES = ("default", "force_eager", "eager_on_recompile", "fail_on_recompile")
_stance = "default"


class RecompileError(RuntimeError):
    """A compiled function needed a recompile under `set_stance("fail_on_recompile")`."""


def stance() -> str:
    return _stance


def _set(value: str) -> str:
    global _stance
    prev, _stance = _stance, value
    return prev


_UNSET = object()


class _StanceChange(contextlib.ContextDecorator):
    """What `set_stance` returns: the stance is already set; as a context manager it is put
    back on exit, as a decorator it applies only during each call of the function."""

    def __init__(self, value: str) -> None:
        self.value = value
        self._before_call: Any = _set(value)  # restored by the `with` that may follow
        self._stack: list[str] = []

    def __call__(self, fn: Callable) -> Callable:
        if self._before_call is not _UNSET:
            _set(self._before_call)  # a decorator changes nothing until the function runs
            self._before_call = _UNSET
        return super().__call__(fn)

    def __enter__(self) -> _StanceChange:
        before = self._before_call if self._before_call is not _UNSET else _stance
        self._before_call = _UNSET
        self._stack.append(before)
        _set(self.value)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        _set(self._stack.pop())


def set_stance(stance: str = "default") -> _StanceChange:
    """How compiled functions behave from now on, inside a `with` block, or during the calls
    of a decorated function:

    - "default": compile, recompile when guards fail (up to `config.cache_size_limit`);
    - "force_eager": every compiled function runs eagerly, nothing is compiled;
    - "eager_on_recompile": entries already compiled are used, and where a recompile would be
      needed the code runs eagerly instead;
    - "fail_on_recompile": where a recompile would be needed, raise `RecompileError` naming
      the guard that failed.
    """
    if stance not in STANCES:
        raise ValueError(
            f"unknown stance {stance!r}; choose one of {', '.join(map(repr, STANCES))}"
        )
    return _StanceChange(stance)
