"""Lists, tuples (namedtuples, torch.Size, structseqs), dicts and slices built or read by the
trace. A list or dict from outside the graph is changed symbolically; the change is replayed
on the real one after the graph runs (`replay`)."""

from __future__ import annotations

import collections
import functools
import operator
from typing import TYPE_CHECKING, Any, Callable

import torch

from compiler.tracer import builtin_fns, calls, objects, operations
from compiler.tracer.breaks import Break, Raised
from compiler.tracer.exceptions import raise_python
from compiler.tracer.lookups import python_method
from compiler.tracer.values.numbers import SIMPLE_LITERALS
from compiler.tracer.values.table import VALUE_OPS, Method, ValueOps, class_method, ops_of
from compiler.tracer.variables import (
    ConstVar,
    DictVar,
    ExceptionVar,
    FunctionVar,
    IdentityKey,
    IteratorVar,
    ListVar,
    MethodVar,
    NewObjectVar,
    SetVar,
    SliceVar,
    TupleVar,
    Var,
    as_python_constant,
    dict_vars,
    is_python_constant,
    key_var,
    tuple_fields,
    tuple_kind,
)

if TYPE_CHECKING:
    from compiler.tracer.context import Emitter, Tracer

KEYS_VIEW = type({}.keys())

# A tuple of a class other than tuple, from its items, by the class's kind (tuple_kind): a
# namedtuple takes them as arguments; torch.Size, a structseq (torch.return_types.sort, ...)
# and other tuple subclasses take one sequence, as tuple does.
_TUPLE_BUILDS = {
    "namedtuple": "{cls}({items})",
    "size": "{cls}([{items}])",
    "structseq": "{cls}([{items}])",
    "subclass": "{cls}([{items}])",
}


# ---- lists and tuples ---------------------------------------------------------------------------


def _sequence_getitem(tx: Tracer, obj: ListVar | TupleVar, index: Var) -> Var:
    key = operations.const_index(index)
    if isinstance(key, slice):
        items = obj.items[key]
        if isinstance(obj, ListVar):
            return ListVar(list(items))
        # a torch.Size's slice is a torch.Size; other tuples' (a namedtuple's too) a tuple
        return TupleVar(list(items), cls=torch.Size if obj.cls is torch.Size else tuple)
    try:
        return obj.items[key]
    except (IndexError, TypeError) as e:
        raise raise_python(e) from None


def _list_setitem(tx: Tracer, lst: ListVar, index: Var, value: Var) -> None:
    key = operations.const_index(index)
    if isinstance(key, slice):
        operations.mutable_list(tx, lst).items[key] = operations.unpack_iterable(tx, value)
    else:
        operations.mutable_list(tx, lst).items[key] = value


def _list_delitem(tx: Tracer, lst: ListVar, index: Var) -> None:
    del operations.mutable_list(tx, lst).items[operations.const_index(index)]


def _list_binary(tx: Tracer, op: Callable, a: ListVar, b: Var) -> Var:
    # `+=` and `*=` change a list in place (every reference sees it); `+` and `*` make a new one
    if op is operator.iadd:
        operations.mutable_list(tx, a).items.extend(operations.unpack_iterable(tx, b))
        return a
    if a.cls is list and op is operator.imul and isinstance(b, ConstVar):
        items = operations.mutable_list(tx, a).items
        items[:] = items * b.value
        return a
    return _sequence_binary(tx, op, a, b)


_COMPARISONS = (operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge)


def _compare(tx: Tracer, op: Callable, a: ListVar | TupleVar, b: Var) -> Var:
    """`==`, `!=`, `<`, ... between two lists or two tuples holding traced values, as Python
    compares sequences: item by item, an item that is the other's very object equal without
    a comparison (`(t, 1) == (t, 1)` for a tensor t), the first unequal pair deciding, and
    the lengths when one is a prefix of the other."""
    if isinstance(a, ListVar) != isinstance(b, ListVar) or not isinstance(b, (ListVar, TupleVar)):
        return NotImplemented  # a list is never equal to a tuple; ordering them raises
    if getattr(a, "view_of", None) is not None or getattr(b, "view_of", None) is not None:
        return NotImplemented  # a dict's values() / items() view compares as its own type
    if op in (operator.eq, operator.ne) and len(a.items) != len(b.items):
        return ConstVar(op is operator.ne)
    for x, y in zip(a.items, b.items):
        if not operations.equal_items(tx, x, y):
            if op in (operator.eq, operator.ne):
                return ConstVar(op is operator.ne)
            return operations.binary(tx, op, x, y)
    return ConstVar(op(len(a.items), len(b.items)))


def _sequence_binary(tx: Tracer, op: Callable, a: ListVar | TupleVar, b: Var) -> Var:
    if op in _COMPARISONS and not (is_python_constant(a) and is_python_constant(b)):
        return _compare(tx, op, a, b)
    # torch.Size's + and * give a torch.Size; other tuples' (a namedtuple's too) a tuple
    sizes = [v for v in (a, b) if isinstance(v, TupleVar) and v.cls is torch.Size]
    cls = torch.Size if sizes else tuple
    if isinstance(b, (ListVar, TupleVar)) and op in (operator.add, operator.iadd):
        if isinstance(a, ListVar):
            return type(a)(a.items + b.items)
        return TupleVar(a.items + b.items, cls=cls)
    if isinstance(b, ConstVar) and op in (operator.mul, operator.imul):
        items = a.items * b.value
        return ListVar(items) if isinstance(a, ListVar) else TupleVar(items, cls=cls)
    return NotImplemented


def _fold_method(name: str) -> Method:
    """A list method that reads it, computed on its constant items."""

    def method(tx: Tracer, lst: ListVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
        return builtin_fns.fold(tx, getattr(as_python_constant(lst), name), args, {})

    return method


def _search_method(name: str, fold: Method) -> Method:
    """`seq.index(v)` / `seq.count(v)`: folded on constants; over traced items, each compared
    as the sequence compares it (the very object counts without a comparison)."""

    def method(tx: Tracer, seq: ListVar | TupleVar, args: list[Var], kwargs: dict) -> Var:
        if is_python_constant(seq) and all(is_python_constant(a) for a in args):
            return fold(tx, seq, args, kwargs)
        if kwargs or not args or (name == "count" and len(args) != 1) or len(args) > 3:
            raise Break(f"{name}() with these arguments")
        bounds = slice(*(as_python_constant(a) for a in args[1:])) if args[1:] else slice(None)
        positions = range(len(seq.items))[bounds]
        if name == "count":
            return ConstVar(
                sum(operations.equal_items(tx, seq.items[i], args[0]) for i in positions)
            )
        for i in positions:  # index() compares only up to the first match, as eager does
            if operations.equal_items(tx, seq.items[i], args[0]):
                return ConstVar(i)
        kind = "list" if isinstance(seq, ListVar) else "tuple"
        message = f"{kind}.index(x): x not in {kind}"
        raise Raised(ExceptionVar(ValueError, [ConstVar(message)]))

    return method


def _tuple_fold_method(name: str) -> Method:
    def method(tx: Tracer, t: TupleVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
        return builtin_fns.fold(tx, getattr(tuple(as_python_constant(t)), name), args, kwargs)

    return method


def _list_change(change: Callable[[Tracer, list[Var], list[Var]], Any]) -> Method:
    """A list method that changes the list in place: returns None unless `change` gives a
    value (pop)."""

    def method(tx: Tracer, lst: ListVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
        out = change(tx, operations.mutable_list(tx, lst).items, args)
        return ConstVar(None) if out is None else out

    return method


LIST_METHODS: dict[str, Method] = {
    "index": _search_method("index", _fold_method("index")),
    "count": _search_method("count", _fold_method("count")),
    "__len__": _fold_method("__len__"),
    "copy": lambda tx, lst, args, kwargs: ListVar(list(lst.items)),
    "append": _list_change(lambda tx, items, args: items.append(args[0])),
    "extend": _list_change(
        lambda tx, items, args: items.extend(operations.unpack_iterable(tx, args[0]))
    ),
    "insert": _list_change(
        lambda tx, items, args: items.insert(as_python_constant(args[0]), args[1])
    ),
    "pop": _list_change(
        lambda tx, items, args: items.pop(as_python_constant(args[0]) if args else -1)
    ),
    "clear": _list_change(lambda tx, items, args: items.clear()),
    "remove": _list_change(lambda tx, items, args: _list_remove(tx, items, args)),
    "reverse": _list_change(lambda tx, items, args: items.reverse()),
    "sort": lambda tx, lst, args, kwargs: _list_sort(tx, lst, args, kwargs),
}


def _list_remove(tx: Tracer, items: list[Var], args: list[Var]) -> None:
    """`lst.remove(v)`: the first item equal to v, compared as list.index compares it."""
    for i, item in enumerate(items):
        if operations.equal_items(tx, item, args[0]):
            del items[i]
            return
    message = ConstVar("list.remove(x): x not in list")
    raise Raised(ExceptionVar(ValueError, [message]))


def _size_numel(tx: Tracer, t: TupleVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """`torch.Size.numel()`: the product of the sizes (symbolic ones multiply as symbols)."""
    if t.cls is not torch.Size or args or kwargs or not all(isinstance(i, ConstVar) for i in t.items):
        raise Break(f"method 'numel' of {t.cls.__name__} is not traced")
    return ConstVar(functools.reduce(operator.mul, (i.value for i in t.items), 1))


def _namedtuple_replace(tx: Tracer, t: TupleVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """`nt._replace(**changes)` of a namedtuple: a new one of its class."""
    fields = tuple_fields(t.cls)
    if args or tuple_kind(t.cls) != "namedtuple" or set(kwargs) - set(fields):
        message = ConstVar(f"Got unexpected field names: {sorted(set(kwargs) - set(fields))!r}")
        raise Raised(ExceptionVar(ValueError, [message]))
    items = [kwargs.get(name, item) for name, item in zip(fields, t.items)]
    return TupleVar(items, cls=t.cls)


def _namedtuple_make(tx: Tracer, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """`Point._make(iterable)`, the classmethod every namedtuple class has (one code object):
    its class made from the items, TypeError for the wrong number of them."""
    cls_var, rest = (args[0], args[1:]) if args else (None, [])
    cls = getattr(cls_var, "value", None)
    if kwargs or len(rest) != 1 or not isinstance(cls, type) or tuple_kind(cls) != "namedtuple":
        raise Break("namedtuple _make() with these arguments runs in Python")
    items = operations.unpack_iterable(tx, rest[0])
    if len(items) != len(cls._fields):
        message = ConstVar(f"Expected {len(cls._fields)} arguments, got {len(items)}")
        raise Raised(ExceptionVar(TypeError, [message]))
    return TupleVar(list(items), cls=cls)


def _namedtuple_asdict(tx: Tracer, t: TupleVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if args or kwargs or tuple_kind(t.cls) != "namedtuple":
        raise Break("_asdict() of this tuple")
    return DictVar(dict(zip(tuple_fields(t.cls), t.items)))


def _list_sort(tx: Tracer, lst: ListVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if args or set(kwargs) - {"key", "reverse"}:
        raise Break("list.sort() with these arguments")  # Python's TypeError, in Python
    ordered = builtin_fns.sort_items(tx, list(lst.items), kwargs.get("key"), kwargs.get("reverse"))
    operations.mutable_list(tx, lst).items[:] = ordered
    return ConstVar(None)


def _list_method(tx: Tracer, lst: ListVar, name: str, args: list[Var], kwargs: dict) -> Var:
    operations.mutable_list(tx, lst)
    raise Break(f"list.{name} is not traced")


def _tuple_attr(tx: Tracer, t: TupleVar, name: str) -> Var:
    fields = tuple_fields(t.cls)
    if name in fields:
        return t.items[fields.index(name)]
    return class_method(t, t.cls, name)


def _list_rebuild(em: Emitter, lst: ListVar) -> str:
    if lst.view_of is not None:  # the rebuilt dict's own view: live, of eager's type
        d, kind = lst.view_of
        return f"{em.expr(d)}.{kind}()"
    items = "[" + ", ".join(em.expr(i) for i in lst.items) + "]"
    return items if lst.cls is list else f"{em.ref(lst.cls, 'cls')}({items})"


def _tuple_rebuild(em: Emitter, t: TupleVar) -> str:
    inner = ", ".join(em.expr(i) for i in t.items)
    if t.cls is tuple:
        return f"({inner},)" if len(t.items) == 1 else f"({inner})"
    return _TUPLE_BUILDS[tuple_kind(t.cls)].format(cls=em.ref(t.cls, "cls"), items=inner)


def _list_replay(em: Emitter, lst: ListVar, lines: list[str]) -> None:
    if lst.mutated and lst.source:
        new = em.temp(f"[{', '.join(em.expr(i) for i in lst.items)}]")
        target = em.snapshot(lst.source)
        lines.append(f"    {target}[:] = {new}")


def _list_iter(tx: Tracer, lst: ListVar) -> Var:
    if lst.cls is list:
        return IteratorVar(lst.items, seq=lst)  # a live view: it sees the list's later changes
    return NotImplemented


VALUE_OPS[ListVar] = ValueOps(
    attr=lambda tx, lst, name: class_method(lst, lst.cls, name),
    methods=LIST_METHODS,
    method=_list_method,
    getitem=_sequence_getitem,
    setitem=_list_setitem,
    delitem=_list_delitem,
    binary=_list_binary,
    truth=lambda tx, lst: bool(lst.items),
    iterate=lambda tx, lst: list(lst.items),
    get_iter=_list_iter,
    rebuild=_list_rebuild,
    one_object=True,
    replay_children=lambda lst: list(lst.items),
    replay=_list_replay,
)

VALUE_OPS[TupleVar] = ValueOps(
    attr=_tuple_attr,
    methods={
        "index": _search_method("index", _tuple_fold_method("index")),
        "count": _search_method("count", _tuple_fold_method("count")),
        "numel": _size_numel,
        "_replace": _namedtuple_replace,
        "_asdict": _namedtuple_asdict,
    },
    getitem=_sequence_getitem,
    binary=_sequence_binary,
    truth=lambda tx, t: bool(t.items),
    iterate=lambda tx, t: list(t.items),
    rebuild=_tuple_rebuild,
    replay_children=lambda t: list(t.items),
)


# ---- dicts --------------------------------------------------------------------------------------


def _dict_get(tx: Tracer, d: DictVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    key = operations.dict_key(args[0])
    return d.items.get(key, args[1] if len(args) > 1 else ConstVar(None))


def _dict_getitem_method(tx: Tracer, d: DictVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    key = operations.dict_key(args[0])
    if key not in d.items:
        return _missing(tx, d, key, args[0])
    return d.items[key]


def _missing(tx: Tracer, d: DictVar, key: Any, index: Var) -> Var:
    """`d[key]` for a key `d` lacks: KeyError, or for a defaultdict with a default_factory,
    a new value from it, stored under the key (dict.__missing__ as defaultdict writes it)."""
    if d.default is None or (isinstance(d.default, ConstVar) and d.default.value is None):
        raise Raised(ExceptionVar(KeyError, [index]))
    value = calls.call(tx, d.default, [], {})
    operations.mutable_dict(tx, d).items[key] = value
    refresh_views(d)
    return value


def _dict_change(change: Callable[[Tracer, dict, list[Var], dict[str, Var]], Any]) -> Method:
    """A dict method that changes the dict in place: returns None unless `change` gives a
    value (pop, setdefault)."""

    def method(tx: Tracer, d: DictVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
        out = change(tx, operations.mutable_dict(tx, d).items, args, kwargs)
        refresh_views(d)
        return ConstVar(None) if out is None else out

    return method


def _dict_setitem(tx: Tracer, items: dict, args: list[Var], kwargs: dict[str, Var]) -> None:
    items[operations.dict_key(args[0])] = args[1]


def _dict_pop(name: str) -> Callable[[Tracer, dict, list[Var], dict[str, Var]], Any]:
    def change(tx: Tracer, items: dict, args: list[Var], kwargs: dict[str, Var]) -> Any:
        key = operations.dict_key(args[0])
        if key in items:
            value = items.pop(key)
            return value if name == "pop" else None
        if name == "pop" and len(args) > 1:
            return args[1]
        raise Raised(ExceptionVar(KeyError, [args[0]]))

    return change


def _dict_update(tx: Tracer, items: dict, args: list[Var], kwargs: dict[str, Var]) -> None:
    for a in args:
        items.update(operations.as_dict(tx, a).items)
    items.update(kwargs)


def _dict_popitem(tx: Tracer, d: DictVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """`d.popitem()` (the last item), `od.popitem(last=False)` of an OrderedDict (whose items
    an OrderedDict built in the trace holds in a plain dict's: objects.object_method)."""
    last = as_python_constant(args[0] if args else kwargs.get("last", ConstVar(True)))
    items = operations.mutable_dict(tx, d).items
    if not items:
        message = "popitem(): dictionary is empty" if d.cls is dict else "dictionary is empty"
        raise Raised(ExceptionVar(KeyError, [ConstVar(message)]))
    key = next(reversed(items)) if last else next(iter(items))
    value = items.pop(key)
    refresh_views(d)
    return TupleVar([key_var(key), value])


def _move_to_end(tx: Tracer, d: DictVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """`od.move_to_end(key, last=True)` of an OrderedDict (a plain dict has none: _dict_attr)."""
    key = operations.dict_key(args[0])
    last = as_python_constant(args[1] if len(args) > 1 else kwargs.get("last", ConstVar(True)))
    items = operations.mutable_dict(tx, d).items
    if key not in items:
        raise Raised(ExceptionVar(KeyError, [args[0]]))
    value = items.pop(key)
    if last:
        items[key] = value
    else:
        rest = dict(items)
        items.clear()
        items[key] = value
        items.update(rest)
    refresh_views(d)
    return ConstVar(None)


def _dict_setdefault(tx: Tracer, items: dict, args: list[Var], kwargs: dict[str, Var]) -> Var:
    key = operations.dict_key(args[0])
    return items.setdefault(key, args[1] if len(args) > 1 else ConstVar(None))


def _view_items(d: DictVar, kind: str) -> list[Var]:
    if kind == "keys":
        return [key_var(k) for k in d.items]
    if kind == "values":
        return list(d.items.values())
    return [TupleVar([key_var(k), v]) for k, v in d.items.items()]


def _view(kind: str) -> Method:
    """`d.keys()`, `d.values()`, `d.items()`: views that follow the dict's later changes (a
    snapshot read after `d[k] = v` missed k), rebuilt as the rebuilt dict's own views. A
    keys view compares and combines as a set, and iterates in insertion order."""

    def method(tx: Tracer, d: DictVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
        items = _view_items(d, kind)
        view = (
            SetVar(items, cls=KEYS_VIEW, view_of=(d, kind))
            if kind == "keys"
            else ListVar(items, view_of=(d, kind))
        )
        d.views.append(view)
        return view

    return method


def refresh_views(d: DictVar) -> None:
    """After a change of `d` in the trace: its views show the change, as eager's do."""
    for view in d.views:
        _, kind = view.view_of
        view.items[:] = _view_items(d, kind)
        if isinstance(view, SetVar):
            view.keys = None  # recomputed from the items when next needed (values/sets.py)


DICT_METHODS: dict[str, Method] = {
    "items": _view("items"),
    "keys": _view("keys"),
    "__iter__": lambda tx, d, args, kwargs: IteratorVar([ConstVar(k) for k in d.items], seq=d),
    "values": _view("values"),
    "get": _dict_get,
    "copy": lambda tx, d, args, kwargs: DictVar(dict(d.items), cls=d.cls, default=d.default),
    "__getitem__": _dict_getitem_method,
    "__contains__": lambda tx, d, args, kwargs: ConstVar(operations.dict_key(args[0]) in d.items),
    "__len__": lambda tx, d, args, kwargs: ConstVar(len(d.items)),
    "__setitem__": _dict_change(_dict_setitem),
    "__delitem__": _dict_change(_dict_pop("__delitem__")),
    "pop": _dict_change(_dict_pop("pop")),
    "update": _dict_change(_dict_update),
    "setdefault": _dict_change(_dict_setdefault),
    "popitem": _dict_popitem,
    "move_to_end": _move_to_end,
    "clear": _dict_change(lambda tx, items, args, kwargs: items.clear()),
}


def dict_method(tx: Tracer, d: DictVar, name: str, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """dict's own method `name` (never a subclass's override: the caller resolved those)."""
    method = DICT_METHODS.get(name)
    if method is not None:
        return method(tx, d, args, kwargs)
    operations.mutable_dict(tx, d)
    raise Break(f"dict.{name} is not traced")


# OrderedDict's methods that dict lacks (an OrderedDict built in the trace holds a plain
# dict's items: objects.object_method calls these on them)
_ORDERED_ONLY = frozenset({"move_to_end"})


def _dict_attr(tx: Tracer, d: DictVar, name: str) -> Var:
    if name == "default_factory" and d.default is not None:
        return d.default
    if name in _ORDERED_ONLY and not issubclass(d.cls, collections.OrderedDict):
        message = ConstVar(f"'{d.cls.__name__}' object has no attribute '{name}'")
        raise Raised(ExceptionVar(AttributeError, [message]))
    if d.cls is not dict:
        method = python_method(d.cls, name)  # a dict subclass's own method
        if method is not None:
            return MethodVar(FunctionVar(fn=method), d)
    return class_method(d, d.cls, name)


def _dict_getitem(tx: Tracer, d: DictVar, index: Var) -> Var:
    key = operations.dict_key(index)
    if key not in d.items:
        return _missing(tx, d, key, index)
    return d.items[key]


def _dict_setitem_op(tx: Tracer, d: DictVar, index: Var, value: Var) -> Any:
    if d.cls is not dict:
        return NotImplemented
    operations.mutable_dict(tx, d).items[operations.dict_key(index)] = value
    refresh_views(d)
    return None


def _dict_mapping(tx: Tracer, d: DictVar, name: str, args: list[Var]) -> Var:
    return dict_method(
        tx, d if name == "__getitem__" else operations.mutable_dict(tx, d), name, args, {}
    )


def _dict_binary(tx: Tracer, op: Callable, a: DictVar, b: Var) -> Var:
    # `|=` changes the dict in place (every reference sees it); `|` makes a new one
    if a.cls is dict and op is operator.ior and isinstance(b, DictVar):
        operations.mutable_dict(tx, a).items.update(b.items)
        refresh_views(a)
        return a
    if isinstance(b, DictVar) and op in (operator.or_, operator.ior):
        return DictVar({**a.items, **b.items})
    if mapping_of(b) is not None and op in (operator.eq, operator.ne):
        if is_python_constant(a) and is_python_constant(b):
            return NotImplemented  # folded
        return ConstVar(mappings_equal(tx, a, b).value != (op is operator.ne))
    return NotImplemented


def mapping_of(v: Var) -> tuple[DictVar, type] | None:
    """The items and the class of a dict, or of an instance of a dict subclass built in the
    trace (an OrderedDict, a ModelOutput): what dict equality compares."""
    if isinstance(v, DictVar):
        return v, v.cls
    if isinstance(v, NewObjectVar) and v.items is not None:
        return v.items, v.cls
    return None


def mappings_equal(tx: Tracer, a: Var, b: Var) -> Var:
    """`a == b` for a mapping `a` built in the trace: NotImplemented unless `b` is one too."""
    left, right = mapping_of(a), mapping_of(b)
    if left is None or right is None:
        return ConstVar(NotImplemented)
    return ConstVar(_dicts_equal(tx, *left, *right))


def _dicts_equal(tx: Tracer, a: DictVar, a_cls: type, b: DictVar, b_cls: type) -> bool:
    """dict equality: the same keys, each value equal as containers compare items (the very
    object without a comparison); two OrderedDicts must also have the same order."""
    if len(a.items) != len(b.items) or any(k not in b.items for k in a.items):
        return False
    ordered = issubclass(a_cls, collections.OrderedDict) and issubclass(
        b_cls, collections.OrderedDict
    )
    if ordered and list(a.items) != list(b.items):
        return False
    return all(operations.equal_items(tx, a.items[k], b.items[k]) for k in a.items)


def _dict_iter(tx: Tracer, d: DictVar) -> Var:
    if d.cls is dict:
        return IteratorVar([key_var(k) for k in d.items], seq=d)
    return NotImplemented


def _key_expr(em: Emitter, key: Any) -> str:
    """The rebuild code's expression of a dict key: the value it was filed from, for one
    hashed by its address (a tensor, a module), else the constant."""
    if isinstance(key, IdentityKey):
        return em.expr(key.var)
    return repr(key) if type(key) in SIMPLE_LITERALS else em.ref(key, "k")


def _dict_rebuild(em: Emitter, d: DictVar) -> str:
    inner = ", ".join(
        f"{_key_expr(em, k)}: {em.expr(i)}" for k, i in d.items.items()
    )
    if d.cls is dict:
        return "{" + inner + "}"
    if d.default is not None:
        return f"{em.ref(d.cls, 'cls')}({em.expr(d.default)}, {{{inner}}})"
    return f"{em.ref(d.cls, 'cls')}({{{inner}}})"


def _dict_replay(em: Emitter, d: DictVar, lines: list[str]) -> None:
    if d.mutated and d.source:
        # through the builtin mapping's methods: a subclass's own may do more (or refuse)
        base = em.ref(objects.mapping_base(d.cls), "cls")
        items = ", ".join(f"{_key_expr(em, k)}: {em.expr(i)}" for k, i in d.items.items())
        new = em.temp(f"{{{items}}}")
        target = em.snapshot(d.source)
        lines.append(f"    {base}.clear({target})")
        lines.append(f"    for k, v in {new}.items(): {base}.__setitem__({target}, k, v)")


VALUE_OPS[DictVar] = ValueOps(
    attr=_dict_attr,
    methods=DICT_METHODS,
    method=lambda tx, d, name, args, kwargs: dict_method(tx, d, name, args, kwargs),
    getitem=_dict_getitem,
    setitem=_dict_setitem_op,
    mapping=_dict_mapping,
    binary=_dict_binary,
    truth=lambda tx, d: bool(d.items),
    contains=lambda tx, d, item: operations.dict_key(item) in d.items,
    iterate=lambda tx, d: [key_var(k) for k in d.items],
    get_iter=_dict_iter,
    rebuild=_dict_rebuild,
    one_object=True,
    replay_children=dict_vars,
    replay=_dict_replay,
)


def _defaultdict(tx: Tracer, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """`collections.defaultdict(factory, *mapping, **items)`."""
    default = args[0] if args else ConstVar(None)
    if not (isinstance(default, ConstVar) and default.value is None) and not _callable(default):
        message = ConstVar("first argument must be callable or None")
        raise Raised(ExceptionVar(TypeError, [message]))
    d = DictVar({}, cls=collections.defaultdict, default=default)
    if len(args) > 2:
        raise Break("defaultdict() with more than one mapping")
    if len(args) > 1 or kwargs:
        dict_method(tx, d, "update", list(args[1:]), kwargs)
    return d


def _callable(v: Var) -> bool:
    return ops_of(v).call is not None and not isinstance(v, ConstVar)


def _fromkeys(cls: type) -> Callable[[Tracer, list[Var], dict[str, Var]], Var]:
    """`dict.fromkeys(keys, value=None)`: every key maps to the one value object, as eagerly."""

    def make(tx: Tracer, args: list[Var], kwargs: dict[str, Var]) -> Var:
        if kwargs or not 1 <= len(args) <= 2:
            raise Break(f"{cls.__name__}.fromkeys() with other arguments runs in Python")
        value = args[1] if len(args) == 2 else ConstVar(None)
        keys = operations.unpack_iterable(tx, args[0])
        # a defaultdict made so has no default_factory
        default = ConstVar(None) if cls is collections.defaultdict else None
        return DictVar({operations.dict_key(k): value for k in keys}, cls=cls, default=default)

    return make


builtin_fns.SPECIAL[collections.defaultdict] = _defaultdict
calls.CALL_BY_CODE[collections.namedtuple("_Any", "a")._make.__func__.__code__] = _namedtuple_make
for _cls in (dict, collections.OrderedDict, collections.defaultdict):
    builtin_fns.SPECIAL[_cls.fromkeys] = _fromkeys(_cls)


# ---- slices -------------------------------------------------------------------------------------


def _slice_attr(tx: Tracer, s: SliceVar, name: str) -> Var:
    if name in ("start", "stop", "step"):
        return getattr(s, name)
    raise Break(f"attribute {name!r} of slice is not traced")


VALUE_OPS[SliceVar] = ValueOps(
    attr=_slice_attr,
    rebuild=lambda em, s: f"slice({em.expr(s.start)}, {em.expr(s.stop)}, {em.expr(s.step)})",
)
