"""`collections.Counter` built in the trace: a dict of counts whose missing keys count 0.
Counter's own methods (update, subtract, most_common, elements, total, the arithmetic) are
computed by a real Counter made from the constant counts, and a change is written back to
the trace's dict; counts that are not constants (a tensor as a count) break the graph."""

from __future__ import annotations

import collections
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from compiler.tracer import builtin_fns
from compiler.tracer import operations as ops
from compiler.tracer.breaks import Break
from compiler.tracer.exceptions import raise_python
from compiler.tracer.values import containers
from compiler.tracer.values.table import VALUE_OPS, Method, ValueOps
from compiler.tracer.variables import (
    AttrCallVar,
    ConstVar,
    CounterVar,
    DictVar,
    Var,
    as_python_constant,
)
from compiler.tracer.wrap import wrap_unguarded

if TYPE_CHECKING:
    from compiler.tracer.context import Tracer


def _real(v: Var) -> Any:
    """The Python value of a var of constants (a Counter for a CounterVar)."""
    try:
        value = as_python_constant(v)
    except TypeError:
        raise Break("a Counter method over counts or items that are not constants") from None
    return collections.Counter(value) if isinstance(v, CounterVar) else value


def _from_real(counter: collections.Counter) -> CounterVar:
    return CounterVar({k: ConstVar(n) for k, n in counter.items()}, cls=collections.Counter)


def _run(tx: Tracer, c: CounterVar, name: str, args: list[Var], kwargs: dict[str, Var]) -> Any:
    real = _real(c)
    try:
        out = getattr(real, name)(*[_real(a) for a in args], **{k: _real(v) for k, v in kwargs.items()})
    except (TypeError, ValueError, KeyError) as e:
        raise raise_python(e) from None
    return real, out


def _changing(name: str) -> Method:
    """A Counter method that changes the counts in place (update, subtract)."""

    def method(tx: Tracer, c: CounterVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
        real, _ = _run(tx, c, name, args, kwargs)
        ops.mutable_dict(tx, c).items = {k: ConstVar(n) for k, n in real.items()}
        containers.refresh_views(c)
        return ConstVar(None)

    return method


def _reading(name: str) -> Method:
    def method(tx: Tracer, c: CounterVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
        _, out = _run(tx, c, name, args, kwargs)
        if isinstance(out, collections.Counter):
            return _from_real(out)
        if name == "elements":
            out = list(out)
        return wrap_unguarded(out)

    return method


_METHODS: dict[str, Method] = {
    **containers.DICT_METHODS,
    "update": _changing("update"),
    "subtract": _changing("subtract"),
    "most_common": _reading("most_common"),
    "elements": _reading("elements"),
    "total": _reading("total"),
    "copy": _reading("copy"),
    "__getitem__": lambda tx, c, args, kwargs: _getitem(tx, c, args[0]),
    "get": lambda tx, c, args, kwargs: containers.DICT_METHODS["get"](tx, c, args, kwargs),
}


def _counter(tx: Tracer, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """`collections.Counter(iterable_or_mapping, **counts)`."""
    c = CounterVar({}, cls=collections.Counter)
    if len(args) > 1:
        raise Break("Counter() with more than one positional argument")
    if args or kwargs:
        source = args[0] if args else None
        if source is not None and not isinstance(source, DictVar):
            # an iterable of keys: counted by hashing each as a dict would
            for item in ops.unpack_iterable(tx, source):
                key = ops.dict_key(item)
                before = c.items.get(key)
                c.items[key] = ConstVar((as_python_constant(before) if before else 0) + 1)
            source = None
        _METHODS["update"](tx, c, [source] if source is not None else [], kwargs)
    return c


def _getitem(tx: Tracer, c: CounterVar, index: Var) -> Var:
    key = ops.dict_key(index)
    return c.items[key] if key in c.items else ConstVar(0)  # Counter.__missing__


def _attr(tx: Tracer, c: CounterVar, name: str) -> Var:
    if name in _METHODS or name in _OPERATORS:
        return AttrCallVar(c, name)
    raise Break(f"Counter.{name} is not traced")


_OPERATORS: dict[Callable, str] = {
    operator.add: "__add__",
    operator.sub: "__sub__",
    operator.or_: "__or__",
    operator.and_: "__and__",
    operator.iadd: "__iadd__",
    operator.isub: "__isub__",
    operator.ior: "__ior__",
    operator.iand: "__iand__",
    operator.eq: "__eq__",
    operator.ne: "__ne__",
    operator.le: "__le__",
    operator.lt: "__lt__",
    operator.ge: "__ge__",
    operator.gt: "__gt__",
}


def _binary(tx: Tracer, op: Callable, a: CounterVar, b: Var) -> Var:
    name = _OPERATORS.get(op)
    if name is None or not isinstance(b, DictVar):
        return NotImplemented
    real, out = _run(tx, a, name, [b], {})
    if out is NotImplemented:
        return NotImplemented
    if name.startswith("__i"):  # in place: every reference sees the new counts
        ops.mutable_dict(tx, a).items = {k: ConstVar(n) for k, n in real.items()}
        containers.refresh_views(a)
        return a
    return _from_real(out) if isinstance(out, collections.Counter) else ConstVar(out)


def _setitem(tx: Tracer, c: CounterVar, index: Var, value: Var) -> None:
    ops.mutable_dict(tx, c).items[ops.dict_key(index)] = value
    containers.refresh_views(c)


VALUE_OPS[CounterVar] = ValueOps(
    describe=lambda c: "a Counter",
    attr=_attr,
    methods=_METHODS,
    method=lambda tx, c, name, args, kwargs: containers.dict_method(tx, c, name, args, kwargs),
    getitem=_getitem,
    setitem=_setitem,
    binary=_binary,
    truth=lambda tx, c: bool(c.items),
    contains=lambda tx, c, item: ops.dict_key(item) in c.items,
    iterate=VALUE_OPS[DictVar].iterate,
    get_iter=VALUE_OPS[DictVar].get_iter,
    rebuild=VALUE_OPS[DictVar].rebuild,
    one_object=True,
    replay_children=VALUE_OPS[DictVar].replay_children,
    replay=VALUE_OPS[DictVar].replay,
)
builtin_fns.SPECIAL[collections.Counter] = _counter
