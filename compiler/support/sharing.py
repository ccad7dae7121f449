"""A compiled module that shares its original's state: an object of a subclass made on the
fly, whose __dict__ is the original's (parameters, buffers, hooks, state_dict and flags such
as DDP's no_sync are one), with some methods replaced."""

from __future__ import annotations

from typing import Any, Callable


def sharing_state(obj: Any, ctx: Any, methods: dict[str, Callable]) -> Any:
    """`obj` with `methods` replaced, `_orig_mod` the original and `__compiled__` the compile
    context, under the original class's name (reprs and isinstance checks read as before)."""
    cls = type(obj)
    namespace = {**methods, "_orig_mod": obj, "__compiled__": ctx, "__module__": cls.__module__}
    compiled_cls = type(cls.__name__, (cls,), namespace)
    compiled_cls.__qualname__ = cls.__qualname__
    compiled = object.__new__(compiled_cls)
    compiled.__dict__ = obj.__dict__
    return compiled
