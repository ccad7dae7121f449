"""Sets and frozensets (`SetVar`), and the keys view of a dict, which compares and combines as
a set. This module is all the tracer knows of them: construction (`set()`, `{...}`,
`frozenset(...)`, comprehensions), their methods and operators, membership, iteration,
rebuilding them after the graph, and replaying the changes made to a set from outside.

Items are filed under the key eager's set would use: the value of a constant (so `1` and
`True` are one item, as in eager), the real object of a module or other object read from
the frame, and the identity of a tensor or of an instance built in the trace (their hash
is their address). Every operation is done on a real set of those keys, so that the items
come out in the order eager's set iterates them. That order is the addresses' for tensors
and instances built in the trace, unknown while tracing: iterating over more than one of
them breaks the graph.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any, Callable

from compiler.tracer import builtin_fns, operations
from compiler.tracer.breaks import Break, Raised
from compiler.tracer.exceptions import raise_python
from compiler.tracer.lookups import python_method
from compiler.tracer.shapes import concrete
from compiler.tracer.values.containers import KEYS_VIEW
from compiler.tracer.values.table import VALUE_OPS, Method, ValueOps, class_method, describe
from compiler.tracer.variables import (
    ConstVar,
    ExceptionVar,
    IdentityKey,
    NewObjectVar,
    SetVar,
    TensorVar,
    Var,
    as_python_constant,
)

if TYPE_CHECKING:
    from compiler.tracer.context import Emitter, Tracer

_MUTATORS = (
    "add", "discard", "remove", "pop", "clear", "update", "intersection_update",
    "difference_update", "symmetric_difference_update",
)  # fmt: skip


def key_of(v: Var) -> Any:
    """The key eager's set files `v` under (raising TypeError, as eager does, for a value
    that cannot be hashed)."""
    if isinstance(v, TensorVar):
        return IdentityKey(v, v.fake)  # one tensor where fake mode gives one fake
    if isinstance(v, NewObjectVar):
        if any(python_method(v.cls, n) for n in ("__hash__", "__eq__")):
            raise Break(f"a {v.cls.__name__} with its own __hash__ or __eq__ in a set")
        return IdentityKey(v, v)
    try:
        value = as_python_constant(v)
    except TypeError:
        raise Break(f"{describe(v)} in a set is not traced") from None
    value = concrete(value)  # a symbolic size hashes as its value, under a guard on it
    try:
        hash(value)
    except TypeError as e:
        raise raise_python(e) from None
    return value


def _keyed(items: list[Var]) -> dict[Any, Var]:
    """Each item by its key, the first of equal ones kept (as a real set keeps it)."""
    out: dict[Any, Var] = {}
    for item in items:
        out.setdefault(key_of(item), item)
    return out


def _ordered(keys: set | frozenset, by_key: dict[Any, Var]) -> list[Var]:
    return [by_key[k] for k in keys]


def _made(keys: set | frozenset, by_key: dict[Any, Var], cls: type) -> SetVar:
    return SetVar(_ordered(keys, by_key), cls=cls, keys=keys)


def make(items: list[Var], cls: type = set) -> SetVar:
    """A new set of `items` (duplicates dropped), filled as BUILD_SET fills it."""
    keys: set = set()
    for item in items:
        keys.add(key_of(item))
    return _made(keys, _keyed(items), cls)


def _real(s: SetVar) -> set | frozenset:
    """The real set of `s`'s keys, which every change of `s` changes as eager changes its
    set: the layout of its table, hence its order, is eager's. One not kept yet (a keys
    view, a set read from the frame or computed on constants) is filled in `s`'s order."""
    if s.keys is None:
        s.keys = set()
        for item in s.items:
            s.keys.add(key_of(item))
    return s.keys


def _changed(tx: Tracer, s: SetVar, change: Callable[[set, dict[Any, Var]], Any]) -> Any:
    """Apply `change` to the real set of `s`'s keys; `s` then holds the result, in its order.
    A set from outside the graph gets the change replayed after the graph runs."""
    if s.cls is not set:
        raise Break(f"changing a {s.cls.__name__}")
    keys, by_key = _real(s), _keyed(s.items)
    out = change(keys, by_key)
    s.items[:] = _ordered(keys, by_key)
    s.mutated = s.source is not None
    tx.changed(s)
    return out


def _argument(tx: Tracer, a: Var) -> tuple[Any, dict[Any, Var]]:
    """An argument of a set method as eager's set would take it, and its items by key: the
    real set of a traced set, the real value of a constant (a frozenset literal), else the
    list of the keys of its items."""
    if isinstance(a, SetVar):
        return _real(a), _keyed(a.items)
    items = operations.unpack_iterable(tx, a)
    by_key = _keyed(items)
    if isinstance(a, ConstVar) and all(k is i for k, i in zip(by_key, a.value)):
        return a.value, by_key
    return [key_of(i) for i in items], by_key


def _others(tx: Tracer, args: list[Var]) -> list[tuple[Any, dict[Any, Var]]]:
    return [_argument(tx, a) for a in args]


# ---- methods --------------------------------------------------------------------------------


def _add(tx: Tracer, s: SetVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    key = key_of(args[0])

    def change(keys: set, by_key: dict) -> None:
        if key not in keys:
            keys.add(key)
            by_key[key] = args[0]

    _changed(tx, s, change)
    return ConstVar(None)


def _remove(name: str) -> Method:
    def method(tx: Tracer, s: SetVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
        key = key_of(args[0])
        if name == "remove" and key not in _real(s):
            raise Raised(ExceptionVar(KeyError, [args[0]]))
        _changed(tx, s, lambda keys, by_key: keys.discard(key))
        return ConstVar(None)

    return method


def _pop(tx: Tracer, s: SetVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if not s.items:
        raise Raised(ExceptionVar(KeyError, [ConstVar("pop from an empty set")]))
    return _changed(tx, s, lambda keys, by_key: by_key[keys.pop()])


def _update(name: str) -> Method:
    """update and the in-place forms of the operators, with any number of arguments."""

    def method(tx: Tracer, s: SetVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
        others = _others(tx, args)

        def change(keys: set, by_key: dict) -> None:
            getattr(keys, name)(*(k for k, _ in others))
            for _, items in others:
                for key, item in items.items():
                    by_key.setdefault(key, item)

        _changed(tx, s, change)
        return ConstVar(None)

    return method


def _combine(name: str) -> Method:
    """union, intersection, difference, symmetric_difference: a new set of the same class."""

    def method(tx: Tracer, s: SetVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
        keys, by_key = _real(s), _keyed(s.items)
        others = _others(tx, args)
        out = getattr(keys, name)(*(k for k, _ in others))
        for _, items in others:
            for key, item in items.items():
                by_key.setdefault(key, item)
        cls = _result_class(s)
        return _made(out if type(out) is cls else cls(out), by_key, cls)

    return method


def _compare(name: str) -> Method:
    """issubset, issuperset, isdisjoint: on the keys."""

    def method(tx: Tracer, s: SetVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
        ((other, _),) = _others(tx, args)
        return ConstVar(getattr(_real(s), name)(other))

    return method


def _result_class(s: SetVar) -> type:
    """The class of `s op other`: the left operand's, a keys view giving a set."""
    return frozenset if s.cls is frozenset else set


SET_METHODS: dict[str, Method] = {
    "add": _add,
    "discard": _remove("discard"),
    "remove": _remove("remove"),
    "pop": _pop,
    "clear": lambda tx, s, args, kwargs: _changed(tx, s, lambda k, b: k.clear()) or ConstVar(None),
    "update": _update("update"),
    "intersection_update": _update("intersection_update"),
    "difference_update": _update("difference_update"),
    "symmetric_difference_update": _update("symmetric_difference_update"),
    "copy": lambda tx, s, args, kwargs: _made(_real(s).copy(), _keyed(s.items), _result_class(s)),
    "union": _combine("union"),
    "intersection": _combine("intersection"),
    "difference": _combine("difference"),
    "symmetric_difference": _combine("symmetric_difference"),
    "issubset": _compare("issubset"),
    "issuperset": _compare("issuperset"),
    "isdisjoint": _compare("isdisjoint"),
    "__len__": lambda tx, s, args, kwargs: ConstVar(len(s.items)),
    "__contains__": lambda tx, s, args, kwargs: ConstVar(_contains(tx, s, args[0])),
}


def _attr(tx: Tracer, s: SetVar, name: str) -> Var:
    if s.cls is not set and name in _MUTATORS:
        message = f"'{s.cls.__name__}' object has no attribute '{name}'"
        raise Raised(ExceptionVar(AttributeError, [ConstVar(message)]))
    return class_method(s, s.cls, name)


# ---- operators ---------------------------------------------------------------------------------

# `s op t` between two sets, by the set method that computes it
_COMBINING = {
    operator.or_: "union", operator.and_: "intersection", operator.sub: "difference",
    operator.xor: "symmetric_difference",
}  # fmt: skip
_IN_PLACE = {
    operator.ior: "update", operator.iand: "intersection_update",
    operator.isub: "difference_update", operator.ixor: "symmetric_difference_update",
}  # fmt: skip
_COMPARING = (operator.le, operator.lt, operator.ge, operator.gt, operator.eq, operator.ne)


def _binary(tx: Tracer, op: Callable, a: SetVar, b: Var) -> Var:
    if not isinstance(b, SetVar):
        return NotImplemented
    if op in _IN_PLACE and a.cls is set:
        SET_METHODS[_IN_PLACE[op]](tx, a, [b], {})  # changes `a`: every reference sees it
        return a
    name = _COMBINING.get(op) or _COMBINING.get(operations.INPLACE_FALLBACK.get(op))
    if name is not None:
        return SET_METHODS[name](tx, a, [b], {})
    if op in _COMPARING:
        return ConstVar(op(_real(a), _real(b)))
    return NotImplemented


# ---- membership, iteration, rebuilding ---------------------------------------------------------


def _contains(tx: Tracer, s: SetVar, item: Var) -> bool:
    return key_of(item) in _real(s)


def _iterate(tx: Tracer, s: SetVar) -> list[Var]:
    by_address = [i for i in s.items if isinstance(key_of(i), IdentityKey)]
    if len(by_address) > 1 and s.cls is not KEYS_VIEW:
        raise Break("iteration over a set of tensors or objects: eager's order is their addresses")
    return list(s.items)


def _rebuild(em: Emitter, s: SetVar) -> str:
    if s.view_of is not None:  # the rebuilt dict's own keys view: live, of eager's type
        return f"{em.expr(s.view_of[0])}.keys()"
    items = "{" + ", ".join(em.expr(i) for i in s.items) + "}" if s.items else "set()"
    return f"frozenset({items})" if s.cls is frozenset else items


def refill_replay(method: str) -> Callable[[Emitter, Any, list[str]], None]:
    """The replay of a container from outside the graph that the trace changed: emptied, then
    refilled with its items by `method` (a set's update, a deque's extend)."""

    def replay(em: Emitter, v: Any, lines: list[str]) -> None:
        if v.mutated and v.source:
            new = em.temp(f"[{', '.join(em.expr(i) for i in v.items)}]")
            target = em.snapshot(v.source)
            lines.append(f"    {target}.clear()")
            lines.append(f"    {target}.{method}({new})")

    return replay


VALUE_OPS[SetVar] = ValueOps(
    attr=_attr,
    methods=SET_METHODS,
    binary=_binary,
    truth=lambda tx, s: bool(s.items),
    contains=_contains,
    iterate=_iterate,
    rebuild=_rebuild,
    one_object=True,
    replay_children=lambda s: list(s.items),
    replay=refill_replay("update"),
)


# ---- construction -------------------------------------------------------------------------------


def _construct(cls: type) -> Callable[[Tracer, list[Var], dict[str, Var]], Var]:
    def construct(tx: Tracer, args: list[Var], kwargs: dict[str, Var]) -> Var:
        if kwargs or len(args) > 1:
            raise Break(f"{cls.__name__}() with these arguments is not traced")
        if not args:
            return _made(cls(), {}, cls)
        keys, by_key = _argument(tx, args[0])
        return _made(cls(keys), by_key, cls)

    return construct


builtin_fns.SPECIAL[set] = _construct(set)
builtin_fns.SPECIAL[frozenset] = _construct(frozenset)
