"""functools.lru_cache / functools.cache applied in the trace (a decorator on a nested helper):
the wrapped function is inlined, and the cache is kept in the trace, as eager's wrapper keeps
it for the length of the call: a second call with the same arguments gives the value (the
same object) the first one returned and does not run the function again, so its side
effects happen as often as eagerly. Keys are what a dict files the arguments under (a tensor
by identity); the least recently used entry goes past maxsize, as in functools.

The wrapper made in the trace lives only there: where it outlives the graph (returned,
stored outside), the trace restarts at the instruction that made it, which then runs in
Python. A wrapper made before the trace is a real object: library_calls.py calls it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from compiler.tracer import builtin_fns, calls, operations
from compiler.tracer.breaks import Break
from compiler.tracer.values.table import VALUE_OPS, ValueOps
from compiler.tracer.variables import ConstVar, FunctionVar, Var

if TYPE_CHECKING:
    from compiler.tracer.context import Emitter, Tracer

_DEFAULT_MAXSIZE = 128  # functools.lru_cache's


@dataclass(eq=False)
class CacheDecoratorVar(Var):
    """`functools.lru_cache(maxsize)`, waiting for the function it decorates."""

    maxsize: int | None
    created_at: int  # the root-frame instruction that made it


@dataclass(eq=False)
class CachedFunctionVar(Var):
    """A function wrapped by lru_cache in the trace, with the cache its calls filled."""

    fn: FunctionVar
    maxsize: int | None
    created_at: int
    cache: dict[Any, Var] = field(default_factory=dict)  # in least recently used order


def _arguments(args: list[Var], kwargs: dict[str, Var]) -> tuple[Var, bool]:
    """lru_cache's arguments: (maxsize or the function, typed)."""
    values = dict(zip(("maxsize", "typed"), args)) | kwargs
    if len(args) > 2 or set(values) - {"maxsize", "typed"}:
        raise Break("functools.lru_cache() with other arguments runs in Python", "library_code")
    typed = values.get("typed", ConstVar(False))
    if not isinstance(typed, ConstVar):
        raise Break("functools.lru_cache() with a typed that is not a constant", "library_code")
    return values.get("maxsize", ConstVar(_DEFAULT_MAXSIZE)), bool(typed.value)


def _wrap(tx: Tracer, fn: Var, maxsize: int | None) -> Var:
    if not isinstance(fn, FunctionVar):
        raise Break("functools.lru_cache over something other than a Python function")
    if maxsize is not None and maxsize < 0:
        maxsize = 0  # as functools: a negative size caches nothing
    return CachedFunctionVar(fn, maxsize, tx.root_pc)


def _lru_cache(tx: Tracer, args: list[Var], kwargs: dict[str, Var]) -> Var:
    first, typed = _arguments(args, kwargs)
    if typed:
        raise Break("functools.lru_cache(typed=True) runs in Python", "library_code")
    if isinstance(first, FunctionVar):  # @lru_cache without parentheses
        return _wrap(tx, first, _DEFAULT_MAXSIZE)
    maxsize = first.value if isinstance(first, ConstVar) else first
    if maxsize is not None and not isinstance(maxsize, int):
        raise Break("functools.lru_cache() with a maxsize that is not an int", "library_code")
    return CacheDecoratorVar(maxsize, tx.root_pc)


def _cache(tx: Tracer, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if len(args) != 1 or kwargs:
        raise Break("functools.cache() with other arguments runs in Python", "library_code")
    return _wrap(tx, args[0], None)


def _call(tx: Tracer, f: CachedFunctionVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    # functools' key: the positional arguments, then each keyword and its value, in order
    key = (
        tuple(operations.dict_key(a) for a in args),
        tuple((k, operations.dict_key(v)) for k, v in kwargs.items()),
    )
    if key in f.cache:
        value = f.cache.pop(key)
        f.cache[key] = value  # now the most recently used
        return value
    value = calls.call(tx, f.fn, args, kwargs)
    if f.maxsize != 0 and key not in f.cache:  # a recursive call may have filed it already
        f.cache[key] = value
        if f.maxsize is not None and len(f.cache) > f.maxsize:
            del f.cache[next(iter(f.cache))]
    return value


def _attr(tx: Tracer, f: CachedFunctionVar, name: str) -> Var:
    if name == "__wrapped__":
        return f.fn
    if name in functools.WRAPPER_ASSIGNMENTS:
        return operations.load_attr(tx, f.fn, name)
    raise Break(f"attribute {name!r} of an lru_cache wrapper made in the trace")


def _unrebuildable(em: Emitter, v: Var) -> str:
    raise TypeError("an lru_cache wrapper made in the trace is not rebuilt")


VALUE_OPS[CacheDecoratorVar] = ValueOps(
    describe=lambda v: "a functools.lru_cache decorator",
    call=lambda tx, d, args, kwargs: (
        _wrap(tx, args[0], d.maxsize)
        if len(args) == 1 and not kwargs
        else NotImplemented
    ),
    truth=lambda tx, v: True,
    rebuild=_unrebuildable,
    made_at=lambda v: v.created_at,
)
VALUE_OPS[CachedFunctionVar] = ValueOps(
    describe=lambda v: f"the lru_cache wrapper of {v.fn.get_code().co_name}",
    attr=_attr,
    call=_call,
    truth=lambda tx, v: True,
    rebuild=_unrebuildable,
    made_at=lambda v: v.created_at,
)
builtin_fns.SPECIAL[functools.lru_cache] = _lru_cache
builtin_fns.SPECIAL[functools.cache] = _cache
