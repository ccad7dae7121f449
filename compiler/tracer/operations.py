"""Attribute access, subscripts, operators, truth and iteration over tracer values: each
looks up the value's kind in values.table.VALUE_OPS, where the family modules of
compiler/tracer/values/ register what it does; what no kind handles breaks the graph here."""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable

from compiler.tracer import objects
from compiler.tracer.breaks import Break
from compiler.tracer.calls import call
from compiler.tracer.exceptions import raise_python
from compiler.tracer.lookups import MISSING, lookup
from compiler.tracer.values.table import describe, ops_of
from compiler.tracer.variables import (
    ConstVar,
    DictVar,
    IdentityKey,
    IteratorVar,
    ListVar,
    NewObjectVar,
    Var,
    as_python_constant,
    is_python_constant,
)
from compiler.tracer.wrap import wrap_unguarded

if TYPE_CHECKING:
    from compiler.tracer.context import Tracer

# The operators of BINARY_OP and COMPARE_OP, by their argrepr.
BINARY_OPS: dict[str, Callable] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "//": operator.floordiv, "%": operator.mod, "**": operator.pow, "@": operator.matmul,
    "&": operator.and_, "|": operator.or_, "^": operator.xor, "<<": operator.lshift,
    ">>": operator.rshift,
    "+=": operator.iadd, "-=": operator.isub, "*=": operator.imul, "/=": operator.itruediv,
    "//=": operator.ifloordiv, "%=": operator.imod, "**=": operator.ipow, "@=": operator.imatmul,
    "&=": operator.iand, "|=": operator.ior, "^=": operator.ixor, "<<=": operator.ilshift,
    ">>=": operator.irshift,
}  # fmt: skip
COMPARE_OPS: dict[str, Callable] = {
    "<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne,
    ">": operator.gt, ">=": operator.ge,
}  # fmt: skip


def _handled(out: Any) -> bool:
    return out is not NotImplemented


# ---- attributes --------------------------------------------------------------------------------


def load_attr(tx: Tracer, obj: Var, name: str) -> Var:
    attr = ops_of(obj).attr
    if attr is None:
        raise Break(f"attribute {name!r} of {describe(obj)} is not traced")
    return attr(tx, obj, name)


def delete_attr(tx: Tracer, obj: Var, name: str) -> None:
    delete = ops_of(obj).delete_attr
    if delete is None or not _handled(delete(tx, obj, name)):
        raise Break(f"del of attribute {name!r} of {describe(obj)} runs in Python")


def store_attr(tx: Tracer, obj: Var, name: str, value: Var) -> None:
    store = ops_of(obj).store_attr
    if store is None or not _handled(store(tx, obj, name, value)):
        raise Break(f"setting attribute {name!r} on {describe(obj)} runs in Python")


# ---- subscripts ---------------------------------------------------------------------------------


def getitem(tx: Tracer, obj: Var, index: Var) -> Var:
    get = ops_of(obj).getitem
    if get is not None:
        out = get(tx, obj, index)
        if _handled(out):
            return out
    return _mapping_op(tx, obj, "__getitem__", [index], f"indexing {describe(obj)}")


def _mapping_op(tx: Tracer, obj: Var, name: str, args: list[Var], what: str) -> Var:
    """A dunder on an instance of a Python class: its own method inlined, else the builtin
    mapping's for a dict subclass built in the trace."""
    out = objects.call_dunder(tx, obj, name, args)
    if objects.found(out):
        return out
    mapping = ops_of(obj).mapping
    if mapping is not None:
        out = mapping(tx, obj, name, args)
        if _handled(out):
            return out
    raise Break(f"{what} is not traced")


def const_index(index: Var) -> Any:
    try:
        return as_python_constant(index)
    except TypeError:
        raise Break("an index that is not a Python constant") from None


def setitem(tx: Tracer, obj: Var, index: Var, value: Var) -> None:
    put = ops_of(obj).setitem
    if put is not None and _handled(put(tx, obj, index, value)):
        return
    what = f"item assignment on {describe(obj)} that exists outside the graph"
    _mapping_op(tx, obj, "__setitem__", [index, value], what)


def delitem(tx: Tracer, obj: Var, index: Var) -> None:
    delete = ops_of(obj).delitem
    if delete is not None and _handled(delete(tx, obj, index)):
        return
    _mapping_op(tx, obj, "__delitem__", [index], f"del on {describe(obj)}")


def dict_key(v: Var) -> Any:
    """The key eager's dict files `v` under: the identity of a value hashed by its address,
    else its constant value."""
    identity = ops_of(v).identity
    obj = identity(v) if identity is not None else NotImplemented
    if _handled(obj):
        return IdentityKey(v, obj)
    key = const_index(v)
    try:
        hash(key)
    except TypeError:
        raise Break("an unhashable dict key") from None
    return key


def mutable_list(tx: Tracer, v: Var) -> ListVar:
    """A list that may be changed. A list from outside the graph is changed symbolically and
    the change is replayed on the real list after the graph runs."""
    if isinstance(v, ListVar):
        v.mutated = v.source is not None
        tx.changed(v)
        return v
    raise Break(f"mutation of {describe(v)}")


def mutable_dict(tx: Tracer, v: Var) -> DictVar:
    if isinstance(v, DictVar):
        v.mutated = v.source is not None
        tx.changed(v)
        return v
    raise Break(f"mutation of {describe(v)}")


def as_python_constant_or_none(v: Var) -> Any:
    try:
        return as_python_constant(v)
    except TypeError:
        raise Break(f"{describe(v)} where a constant is needed") from None


def has_keys(v: Var) -> bool:
    """`v` is a mapping to dict() and `**`: its class has a keys() method."""
    cls = objects.class_of(v)
    return cls is not None and lookup(cls, "keys") is not MISSING


def as_dict(tx: Tracer, v: Var) -> DictVar:
    if isinstance(v, DictVar):
        return v
    if isinstance(v, NewObjectVar) and v.items is not None and lookup(v.cls, "keys") is dict.keys:
        return v.items  # a dict subclass built in the trace: its own mapping
    cls = objects.class_of(v)
    keys_fn = lookup(cls, "keys") if cls is not None else MISSING
    if keys_fn is not MISSING:
        # another mapping (a user's MutableMapping): what `**m` and dict(m) read of it, its
        # keys() and then each item, in that order; Mapping's own keys() is a view that
        # iterates the mapping itself
        keys = unpack_iterable(
            tx, v if keys_fn is Mapping.keys else call(tx, load_attr(tx, v, "keys"), [], {})
        )
        return DictVar({dict_key(k): getitem(tx, v, k) for k in keys})
    raise Break(f"{describe(v)} used as a mapping")


# ---- operators ----------------------------------------------------------------------------------


# `a op= b` on an immutable `a` (a Python number) computes `a op b`: Python finds no in-place
# method and falls back, so the result is a new value (a tensor, when b is one).
INPLACE_FALLBACK = {
    operator.iadd: operator.add, operator.isub: operator.sub, operator.imul: operator.mul,
    operator.itruediv: operator.truediv, operator.ifloordiv: operator.floordiv,
    operator.imod: operator.mod, operator.ipow: operator.pow, operator.imatmul: operator.matmul,
    operator.iand: operator.and_, operator.ior: operator.or_, operator.ixor: operator.xor,
    operator.ilshift: operator.lshift, operator.irshift: operator.rshift,
}  # fmt: skip


def binary(tx: Tracer, op: Callable, a: Var, b: Var) -> Var:
    a_ops, b_ops = ops_of(a), ops_of(b)
    if a_ops.immutable and op in INPLACE_FALLBACK:
        op = INPLACE_FALLBACK[op]
    # a class's own operator methods: the left operand's, then the right's reflected one
    first = [a_ops.binary if a_ops.own_operators else None]
    first.append(b_ops.rbinary if b_ops.own_operators else None)
    for handler in first:
        out = handler(tx, op, a, b) if handler is not None else NotImplemented
        if _handled(out):
            return out
    graph = a_ops.operators or b_ops.operators  # a graph value on either side takes it
    if graph is not None:
        return graph(tx, op, a, b)
    if a_ops.binary is not None and not a_ops.own_operators:
        out = a_ops.binary(tx, op, a, b)
        if _handled(out):
            return out
    if a_ops.foldable and b_ops.foldable and is_python_constant(a) and is_python_constant(b):
        try:
            return wrap_unguarded(op(as_python_constant(a), as_python_constant(b)))
        except Exception as e:
            raise raise_python(e) from None
    if op in (operator.eq, operator.ne):
        return _equality(tx, a, b, op is operator.ne)
    raise Break(f"operator {op.__name__} on {describe(a)} and {describe(b)} is not traced")


def _equality(tx: Tracer, a: Var, b: Var, negate: bool) -> Var:
    """`a == b` / `a != b` between objects: an __eq__ (or __ne__) the classes write in Python
    (a dataclass's), the reflected one when it returns NotImplemented, else identity."""
    for x, y in ((a, b), (b, a)):
        if negate:
            out = objects.call_dunder(tx, x, "__ne__", [y])
            if objects.found(out) and not is_not_implemented(out):
                return out
        out = objects.call_dunder(tx, x, "__eq__", [y])
        if objects.found(out) and not is_not_implemented(out):
            return ConstVar(not truth(tx, out)) if negate else out
    for x, y in ((a, b), (b, a)):  # a dict subclass built in the trace: dict's own __eq__
        mapping = ops_of(x).mapping
        out = mapping(tx, x, "__eq__", [y]) if mapping is not None else NotImplemented
        if _handled(out) and not is_not_implemented(out):
            return ConstVar(not truth(tx, out)) if negate else out
    return ConstVar(is_same(a, b) != negate)


def is_not_implemented(v: Var) -> bool:
    """A method's answer that it does not apply (`return NotImplemented`)."""
    return getattr(v, "value", None) is NotImplemented


def unary(tx: Tracer, op: Callable, a: Var) -> Var:
    apply = ops_of(a).unary
    if apply is None:
        raise Break(f"operator {op.__name__} on {describe(a)} is not traced")
    return apply(tx, op, a)


def truth(tx: Tracer, v: Var) -> bool:
    test = ops_of(v).truth
    if test is None:
        raise Break(f"truth value of {describe(v)} is not traced")
    return test(tx, v)


def is_none(v: Var) -> bool:
    return ops_of(v).immutable and v.value is None


def is_same(a: Var, b: Var) -> bool:
    if a is b:
        return True
    for first, second in ((a, b), (b, a)):  # the kind that can tell, on either side
        same = ops_of(first).same
        if same is not None:
            out = same(first, second)
            if out is not None:
                return out
    return a.source is not None and a.source == b.source


def equal_items(tx: Tracer, a: Var, b: Var) -> bool:
    """Whether two items of containers are equal, as containers compare them: the very same
    object without a comparison, else the truth of `a == b` (a tensor's reads its value)."""
    return is_same(a, b) or truth(tx, binary(tx, operator.eq, a, b))


def contains(tx: Tracer, container: Var, item: Var) -> bool:
    if objects.class_of(container) is not None:
        out = objects.call_dunder(tx, container, "__contains__", [item])
        if objects.found(out):
            return truth(tx, out)
    test = ops_of(container).contains
    if test is not None:
        out = test(tx, container, item)
        if _handled(out):
            return out
    if ops_of(item).operators or ops_of(container).operators:
        raise Break("`in` with a tensor compares tensor values")
    try:
        return as_python_constant(item) in as_python_constant(container)
    except TypeError:
        raise Break(f"`in` over {describe(container)} is not traced") from None


# ---- iteration ----------------------------------------------------------------------------------


def unpack_iterable(tx: Tracer, v: Var) -> list[Var]:
    iterate = ops_of(v).iterate
    if iterate is not None:
        out = iterate(tx, v)
        if _handled(out):
            return out
    raise Break(f"iteration over {describe(v)} is not traced")


def get_iter(tx: Tracer, v: Var) -> IteratorVar:
    make = ops_of(v).get_iter
    if make is not None:
        out = make(tx, v)
        if _handled(out):
            return out
    return IteratorVar(unpack_iterable(tx, v))
