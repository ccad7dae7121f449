"""`collections.deque`: a list of values with a `maxlen`, built in the trace (or read from the
frame: changed symbolically and replayed after the graph). Appending to a full deque drops an
item from the other end, as eager's does; a deque takes no slices."""

from __future__ import annotations

import collections
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from compiler.tracer import builtin_fns
from compiler.tracer import operations as ops
from compiler.tracer.breaks import Break, Raised
from compiler.tracer.exceptions import raise_python
from compiler.tracer.values import sets
from compiler.tracer.values.table import VALUE_OPS, Method, ValueOps
from compiler.tracer.variables import (
    AttrCallVar,
    ConstVar,
    DequeVar,
    ExceptionVar,
    IteratorVar,
    ListVar,
    SliceVar,
    Var,
    as_python_constant,
)

if TYPE_CHECKING:
    from compiler.tracer.context import Emitter, Tracer


def _deque(tx: Tracer, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """`collections.deque(iterable=(), maxlen=None)`."""
    if len(args) > 2 or set(kwargs) - {"iterable", "maxlen"}:
        raise Break("deque() with these arguments")  # Python's TypeError, in Python
    iterable = args[0] if args else kwargs.get("iterable")
    maxlen_var = args[1] if len(args) > 1 else kwargs.get("maxlen", ConstVar(None))
    maxlen = as_python_constant(maxlen_var)
    if maxlen is not None and (not isinstance(maxlen, int) or maxlen < 0):
        try:
            collections.deque((), maxlen)  # eager's own TypeError or ValueError
        except (TypeError, ValueError) as e:
            raise raise_python(e) from None
    items = ops.unpack_iterable(tx, iterable) if iterable is not None else []
    d = DequeVar([], cls=collections.deque, maxlen=maxlen)
    _add(d.items, items, maxlen, left=False)
    return d


def _add(items: list[Var], new: list[Var], maxlen: int | None, left: bool) -> None:
    for v in new:
        if left:
            items.insert(0, v)
            if maxlen is not None and len(items) > maxlen:
                items.pop()
        else:
            items.append(v)
            if maxlen is not None and len(items) > maxlen:
                items.pop(0)


def _change(change: Callable[[Tracer, DequeVar, list[Var]], Any]) -> Method:
    """A deque method that changes it in place: returns None unless `change` gives a value."""

    def method(tx: Tracer, d: DequeVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
        if kwargs:
            raise Break("a deque method with keyword arguments")  # Python's TypeError
        ops.mutable_list(tx, d)
        out = change(tx, d, args)
        return ConstVar(None) if out is None else out

    return method


def _pop(left: bool) -> Callable[[Tracer, DequeVar, list[Var]], Var]:
    def pop(tx: Tracer, d: DequeVar, args: list[Var]) -> Var:
        if not d.items:
            raise Raised(ExceptionVar(IndexError, [ConstVar("pop from an empty deque")]))
        return d.items.pop(0 if left else -1)

    return pop


def _rotate(tx: Tracer, d: DequeVar, args: list[Var]) -> None:
    n = as_python_constant(args[0]) if args else 1
    if d.items:
        n %= len(d.items)
        d.items[:] = d.items[-n:] + d.items[:-n] if n else d.items


def _remove(tx: Tracer, d: DequeVar, args: list[Var]) -> None:
    index = _position(tx, d, args[0])
    if index is None:
        raise Raised(ExceptionVar(ValueError, [ConstVar(f"{as_python_constant(args[0])!r} is not in deque")]))
    del d.items[index]


def _position(tx: Tracer, d: DequeVar, item: Var) -> int | None:
    """Where `item` first is, as `==` finds it on constants (identity for other values)."""
    for i, v in enumerate(d.items):
        if v is item:
            return i
        try:
            if as_python_constant(v) == as_python_constant(item):
                return i
        except TypeError:
            raise Break("deque search over values that are not constants") from None
    return None


def _insert(tx: Tracer, d: DequeVar, args: list[Var]) -> None:
    if d.maxlen is not None and len(d.items) >= d.maxlen:
        raise Raised(ExceptionVar(IndexError, [ConstVar("deque already at its maximum size")]))
    d.items.insert(as_python_constant(args[0]), args[1])


def _fold(name: str) -> Method:
    """A method that reads the deque, computed on its constant items."""

    def method(tx: Tracer, d: DequeVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
        try:
            real = collections.deque(as_python_constant(d), d.maxlen)
        except TypeError:
            raise Break(f"deque.{name} over values that are not constants") from None
        return builtin_fns.fold(tx, getattr(real, name), args, kwargs)

    return method


def _copy(d: DequeVar) -> DequeVar:
    return DequeVar(list(d.items), cls=collections.deque, maxlen=d.maxlen)


_METHODS: dict[str, Method] = {
    "append": _change(lambda tx, d, args: _add(d.items, [args[0]], d.maxlen, left=False)),
    "appendleft": _change(lambda tx, d, args: _add(d.items, [args[0]], d.maxlen, left=True)),
    "extend": _change(
        lambda tx, d, args: _add(d.items, ops.unpack_iterable(tx, args[0]), d.maxlen, False)
    ),
    "extendleft": _change(
        lambda tx, d, args: _add(d.items, ops.unpack_iterable(tx, args[0]), d.maxlen, True)
    ),
    "pop": _change(_pop(left=False)),
    "popleft": _change(_pop(left=True)),
    "rotate": _change(_rotate),
    "clear": _change(lambda tx, d, args: d.items.clear()),
    "reverse": _change(lambda tx, d, args: d.items.reverse()),
    "remove": _change(_remove),
    "insert": _change(_insert),
    "copy": lambda tx, d, args, kwargs: _copy(d),
    "__copy__": lambda tx, d, args, kwargs: _copy(d),
    "count": _fold("count"),
    "index": _fold("index"),
    "__len__": lambda tx, d, args, kwargs: ConstVar(len(d.items)),
}


def _attr(tx: Tracer, d: DequeVar, name: str) -> Var:
    if name == "maxlen":
        return ConstVar(d.maxlen)
    if name in _METHODS:
        return AttrCallVar(d, name)
    raise Raised(ExceptionVar(AttributeError, [ConstVar(f"'collections.deque' object has no attribute {name!r}")]))


def _getitem(tx: Tracer, d: DequeVar, index: Var) -> Var:
    if isinstance(index, SliceVar):
        message = ConstVar("sequence index must be integer, not 'slice'")
        raise Raised(ExceptionVar(TypeError, [message]))
    key = ops.const_index(index)
    try:
        return d.items[key]
    except IndexError:
        raise Raised(ExceptionVar(IndexError, [ConstVar("deque index out of range")])) from None
    except TypeError as e:
        raise raise_python(e) from None


def _setitem(tx: Tracer, d: DequeVar, index: Var, value: Var) -> None:
    _getitem(tx, d, index)  # eager's errors for a bad index
    ops.mutable_list(tx, d).items[ops.const_index(index)] = value


def _binary(tx: Tracer, op: Callable, a: DequeVar, b: Var) -> Var:
    if op in (operator.add, operator.iadd) and isinstance(b, DequeVar):
        out = _copy(a) if op is operator.add else ops.mutable_list(tx, a)
        _add(out.items, list(b.items), a.maxlen, left=False)
        return out
    if op in (operator.eq, operator.ne):
        if not isinstance(b, DequeVar):
            return ConstVar(op is operator.ne)
        return ops.binary(tx, op, ListVar(list(a.items)), ListVar(list(b.items)))
    return NotImplemented


def _rebuild(em: Emitter, d: DequeVar) -> str:
    items = "[" + ", ".join(em.expr(i) for i in d.items) + "]"
    return f"{em.ref(collections.deque, 'cls')}({items}, {d.maxlen!r})"


VALUE_OPS[DequeVar] = ValueOps(
    describe=lambda d: "a deque",
    attr=_attr,
    methods=_METHODS,
    getitem=_getitem,
    setitem=_setitem,
    binary=_binary,
    truth=lambda tx, d: bool(d.items),
    contains=lambda tx, d, item: _position(tx, d, item) is not None,
    iterate=lambda tx, d: list(d.items),
    get_iter=lambda tx, d: IteratorVar(list(d.items)),
    rebuild=_rebuild,
    one_object=True,
    replay_children=lambda d: list(d.items),
    replay=sets.refill_replay("extend"),
)
builtin_fns.SPECIAL[collections.deque] = _deque
