"""Python builtins and torch's global-state functions, computed on tracer values: folded on
constants, put in the graph on tensors, or a graph break."""

from __future__ import annotations

import dataclasses
import enum
import inspect
import operator
import types
import typing
from typing import TYPE_CHECKING, Any, Callable

import torch

from compiler.tracer import calls, generators, objects
from compiler.tracer.breaks import Break, Raised
from compiler.tracer.exceptions import materialize, raise_python
from compiler.tracer.operations import (
    as_dict,
    binary,
    delete_attr,
    get_iter,
    has_keys,
    load_attr,
    store_attr,
    truth,
    unary,
    unpack_iterable,
)
from compiler.tracer.shapes import concrete, python_type
from compiler.tracer.values.table import describe, ops_of
from compiler.tracer.variables import (
    AttrCallVar,
    ConstVar,
    DictVar,
    EndlessIteratorVar,
    ExceptionVar,
    FunctionVar,
    GradModeVar,
    IteratorVar,
    ListVar,
    MethodVar,
    NewObjectVar,
    ObjVar,
    SetVar,
    SliceVar,
    SuperVar,
    TensorVar,
    TupleVar,
    Var,
    as_python_constant,
    contains_tensor,
    is_python_constant,
)
from compiler.tracer.wrap import wrap_unguarded

if TYPE_CHECKING:
    from compiler.tracer.context import Tracer

try:
    import numpy
except ImportError:  # torch runs without numpy; then nothing is a numpy function
    numpy = None

_PURE_MODULES = {"math", "cmath", "operator", "_operator"}
_PURE_BUILTINS = {
    abs, all, any, bool, chr, divmod, float, hash, int, len, max, min, ord, pow, repr, round,
    sorted, str, sum, format, hex, oct, bin, issubclass,
}  # fmt: skip


_SCALARS = (bool, int, float, complex)


def folds_numpy_scalars(fn: Any, args: list[Var], kwargs: dict[str, Var]) -> bool:
    """A numpy ufunc (`np.sqrt`) or scalar type (`np.float32`) called on Python or numpy
    scalars: pure, so computed now, its result a constant of the graph (an attention
    scale `/ np.sqrt(d)`), as torch.compile folds it. Arrays are not folded: their
    contents may change between calls."""
    if numpy is None or not (
        isinstance(fn, numpy.ufunc) or (isinstance(fn, type) and issubclass(fn, numpy.generic))
    ):
        return False
    values = [*args, *kwargs.values()]
    return all(
        isinstance(v, ConstVar) and isinstance(v.value, (*_SCALARS, numpy.generic)) for v in values
    )


def is_pure_builtin(fn: Any) -> bool:
    if fn in _PURE_BUILTINS:
        return True
    module = getattr(fn, "__module__", None)
    if module in _PURE_MODULES:
        return True
    # a method of an immutable value (`"a,b".split`, `"abc".__len__`, a method-wrapper) or
    # an alternate constructor of its type (`int.from_bytes`, `float.fromhex`)
    self_obj = getattr(fn, "__self__", None)
    return isinstance(fn, (types.BuiltinMethodType, types.MethodWrapperType)) and (
        isinstance(self_obj, _IMMUTABLE) or any(self_obj is t for t in _IMMUTABLE)
    )


_IMMUTABLE = (str, int, float, tuple, bytes, range)


_TEXT_BUILTINS = {str, repr, format, hash, ascii}
# Builtins that take one iterable and read its items.
_ITERATING = {sum, max, min, all, any, sorted}


def fold(tx: Tracer, fn: Callable, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """Compute a pure function of constants now; with tensors, record it as a graph op."""
    args = [_read_iterator(tx, fn, a) if isinstance(a, IteratorVar) else a for a in args]
    if fn in _ITERATING and len(args) == 1 and _items_traced(args[0]):
        args = [ListVar(unpack_iterable(tx, args[0]))]  # its items, through its own __iter__
    if any(contains_tensor(a) for a in args) or any(contains_tensor(v) for v in kwargs.values()):
        if fn in (abs, pow) or getattr(fn, "__module__", None) in ("operator", "_operator"):
            return tx.builder.call("call_function", fn, args, kwargs)
        if fn in (max, min, sum, all, any, sorted):
            return _reduce_builtin(tx, fn, args)
        if fn in (bool, int, float) and args and isinstance(args[0], TensorVar):
            raise Break(
                f"{fn.__name__}() of a tensor reads its value into Python", "tensor_to_python"
            )
        if fn is len and args and isinstance(args[0], TensorVar):
            return ConstVar(len(args[0].fake))
        raise Break(f"{getattr(fn, '__name__', fn)} on tensors is not traced")
    if fn in (str, repr, format) and args and isinstance(args[0], ExceptionVar):
        args = [ObjVar(materialize(args[0])), *args[1:]]  # the text of a fresh equal exception
    try:
        a = [as_python_constant(x) for x in args]
        k = {n: as_python_constant(v) for n, v in kwargs.items()}
        if fn in _TEXT_BUILTINS:  # text of a symbolic size is its value's (shapes.py)
            a = [concrete(x) for x in a]
    except TypeError:
        if fn is len and args:
            return _len(tx, args[0])
        raise Break(f"{getattr(fn, '__name__', fn)} of non-constant values is not traced") from None
    if fn in (int, float) and len(a) == 1 and not k and isinstance(a[0], torch.SymFloat):
        # int() or float() of a symbolic float (a `.item()` handed on by a break) stays
        # symbolic: they would specialise the trace on its value, recompiling for each one
        return ConstVar(torch.sym_int(a[0]) if fn is int else a[0])
    try:
        return wrap_unguarded(fn(*a, **k))
    except Exception as e:
        raise raise_python(e) from None


def _items_traced(v: Var) -> bool:
    """An iterable whose items the trace reads one by one: any but a constant, and a module
    container (`sum(self.params)` over a ParameterList), whose items are tensors to read
    through their sources rather than the real objects folded in."""
    return not is_python_constant(v) or (
        isinstance(v, ObjVar) and isinstance(v.held, torch.nn.Module)
    )


def _read_iterator(tx: Tracer, fn: Callable, it: IteratorVar) -> ListVar:
    """The items `fn` reads from an iterator, which it consumes as in eager: all of them, or
    for any() and all() those up to the first that decides the answer."""
    generators.check_read(tx, it)
    rest = it.items[it.index :]
    if fn not in _ITERATING:
        return ListVar(rest)
    read = len(rest)
    if fn in (any, all):
        for i, item in enumerate(rest):
            if not is_python_constant(item):
                return ListVar(rest)  # tensors: _reduce_builtin breaks, consuming nothing
            if bool(as_python_constant(item)) == (fn is any):
                read = i + 1
                break
    it.move(it.index + read, exhausted=read == len(rest))
    return ListVar(rest[:read])


def _reduce_builtin(tx: Tracer, fn: Callable, args: list[Var]) -> Var:
    if fn is sum:
        items = unpack_iterable(tx, args[0])
        total = args[1] if len(args) > 1 else ConstVar(0)
        for item in items:
            total = binary(tx, operator.add, total, item)
        return total
    raise Break(f"{fn.__name__}() over tensors compares tensor values")


def _len(tx: Tracer, v: Var) -> Var:
    length = ops_of(v).length
    if length is not None:
        return length(tx, v)
    if isinstance(v, ConstVar):
        try:
            return ConstVar(len(v.value))
        except TypeError as e:
            raise raise_python(e) from None
    if isinstance(v, (ListVar, TupleVar, SetVar)):
        return ConstVar(len(v.items))
    if isinstance(v, DictVar):
        return ConstVar(len(v.items))
    if isinstance(v, IteratorVar):
        raise Break("len() of an iterator")
    if isinstance(v, TensorVar):
        return ConstVar(len(v.fake))
    if isinstance(v, ObjVar) and isinstance(v.value, types.MappingProxyType):
        return ConstVar(len(v.value))  # a read-only view (a signature's parameters)
    if isinstance(v, ObjVar) and getattr(type(v.value), "__len__", None) is enum.EnumMeta.__len__:
        return ConstVar(len(v.value))  # an Enum class: its members are fixed when it is made
    if isinstance(v, ObjVar) and isinstance(v.value, torch.nn.Module) and v.source:
        tx.guards.length(v.source, v.value)
        return ConstVar(len(v.value))
    if isinstance(v, (NewObjectVar, ObjVar)):
        out = objects.call_dunder(tx, v, "__len__", [])
        if objects.found(out):
            return out
        if isinstance(v, NewObjectVar) and v.items is not None:
            return ConstVar(len(v.items.items))
    raise Break(f"len() of {describe(v)}")


def _python_type(v: Var) -> type:
    if isinstance(v, TensorVar):
        return torch.nn.Parameter if v.source and _is_parameter(v) else torch.Tensor
    if isinstance(v, ObjVar):
        # by `held`: an object's type is guarded, so its class does not pin the object itself
        # (a run-time object passed in anew per call, ObjVar.identity)
        return python_type(v.held)
    if isinstance(v, ConstVar):
        return python_type(v.value)
    if isinstance(v, ListVar):
        return v.cls
    if isinstance(v, TupleVar):
        return v.cls
    if isinstance(v, DictVar):
        return v.cls
    if isinstance(v, SetVar):
        return v.cls
    if isinstance(v, (FunctionVar,)):
        return types.FunctionType
    if isinstance(v, MethodVar):
        return types.MethodType
    if isinstance(v, (NewObjectVar, ExceptionVar)):
        return v.cls
    raise Break(f"type of {describe(v)}")


def _is_parameter(v: TensorVar) -> bool:
    return bool(v.node.meta.get("is_parameter"))


def _isinstance(tx: Tracer, args: list[Var], kwargs: dict[str, Var]) -> Var:
    obj, classes = args[0], as_python_constant(args[1])
    if isinstance(obj, ObjVar):
        return ConstVar(isinstance(obj.value, classes))
    if isinstance(obj, TensorVar):
        return ConstVar(
            issubclass(_python_type(obj), classes)
            or (
                not _is_parameter(obj)
                and isinstance(obj.fake, classes)
                and classes is not torch.nn.Parameter
            )
        )
    return ConstVar(issubclass(_python_type(obj), classes))


def _getattr(tx: Tracer, args: list[Var], kwargs: dict[str, Var]) -> Var:
    name = as_python_constant(args[1])
    if len(args) > 2 and not _hasattr_value(tx, args[0], name):
        return args[2]
    return load_attr(tx, args[0], name)


def _attr_name(args: list[Var], count: int) -> str:
    """The attribute name of setattr()/delattr(), which take exactly `count` arguments."""
    if len(args) != count or not is_python_constant(args[1]):
        raise Break("setattr()/delattr() with these arguments")
    name = as_python_constant(args[1])
    if not isinstance(name, str):
        raise raise_python(TypeError(f"attribute name must be string, not '{type(name).__name__}'"))
    return name


def _setattr(tx: Tracer, args: list[Var], kwargs: dict[str, Var]) -> Var:
    # `setattr(obj, "name", v)` is `obj.name = v`: the same store, with the same handlers
    store_attr(tx, args[0], _attr_name(args, 3), args[2])
    return ConstVar(None)


def _delattr(tx: Tracer, args: list[Var], kwargs: dict[str, Var]) -> Var:
    delete_attr(tx, args[0], _attr_name(args, 2))
    return ConstVar(None)


def _object_slot(name: str) -> Callable:
    """`object.__setattr__(self, name, value)` called directly (a frozen dataclass's
    __init__, a class that bypasses its own __setattr__): object's own attribute method on
    an instance built in the trace or on a real one, as `super().__setattr__` is."""

    def run(tx: Tracer, args: list[Var], kwargs: dict[str, Var]) -> Var:
        if not args or kwargs:
            raise Break(f"object.{name} with these arguments")
        target, rest = args[0], list(args[1:])
        if isinstance(target, NewObjectVar):
            if name != "__getattribute__":
                tx.changed(target)
            return objects.object_method(tx, target, name, rest, {})
        if isinstance(target, ObjVar):
            return objects.real_object_method(tx, target, name, rest)
        raise Break(f"object.{name} on {describe(target)}")

    return run


def _hasattr_value(tx: Tracer, obj: Var, name: str) -> bool:
    if isinstance(obj, ObjVar) and tx.attr_writes.get(id(obj.value)) is not None:
        written = tx.attr_writes[id(obj.value)].values
        if name in written:
            return written[name] is not None
    if isinstance(obj, (ObjVar, ConstVar)):
        present = hasattr(obj.value, name)
        if isinstance(obj, ObjVar) and obj.source is not None:
            tx.guards.has_attr(obj.source, name, present, tx.builder.line)
        return present
    if isinstance(obj, TensorVar):
        present = hasattr(obj.fake, name)
        real = tx.builder.real_input(obj)
        if real is not None and obj.source is not None and not hasattr(type(real), name):
            # An attribute set on the tensor object itself, which its fake lacks.
            if hasattr(real, name):
                raise Break(f"hasattr()/getattr() of {name!r}, set on a tensor input itself")
            tx.guards.has_attr(obj.source, name, False, tx.builder.line)
        return present
    unwound = tx.unwound
    try:
        load_attr(tx, obj, name)
        return True
    except Raised as r:
        if not issubclass(r.exc.cls, AttributeError):
            raise
        tx.unwound = unwound  # caught by hasattr, not by a handler
        return False


def _hasattr(tx: Tracer, args: list[Var], kwargs: dict[str, Var]) -> Var:
    return ConstVar(_hasattr_value(tx, args[0], as_python_constant(args[1])))


def _range(tx, args, kwargs):
    return ConstVar(range(*[as_python_constant(a) for a in args]))


def _list(tx, args, kwargs):
    return ListVar(unpack_iterable(tx, args[0]) if args else [])


def _tuple(tx, args, kwargs):
    return TupleVar(unpack_iterable(tx, args[0]) if args else [])


def _dict(tx, args, kwargs):
    items: dict[Any, Var] = {}
    if args:
        src = args[0]
        if isinstance(src, DictVar):
            items.update(src.items)
        elif has_keys(src):  # another mapping: its keys() and items, as dict() reads them
            items.update(as_dict(tx, src).items)
        else:
            for pair in unpack_iterable(tx, src):
                k, v = unpack_iterable(tx, pair)
                items[as_python_constant(k)] = v
    items.update(kwargs)
    return DictVar(items)


def _enumerate(tx, args, kwargs):
    start = (
        as_python_constant(args[1])
        if len(args) > 1
        else as_python_constant(kwargs.get("start", ConstVar(0)))
    )
    (items,) = _lazy_columns(tx, [args[0]])
    out = IteratorVar([TupleVar([ConstVar(i + start), v]) for i, v in enumerate(items)])
    return _lazily_reads(tx, out, args[:1], [len(items)])


def _zip(tx, args, kwargs):
    columns = _lazy_columns(tx, args)
    out = IteratorVar([TupleVar(list(row)) for row in zip(*columns)])
    return _lazily_reads(tx, out, args, [len(c) for c in columns])


def _lazy_columns(tx: Tracer, args: list[Var]) -> list[list[Var]]:
    """The items a lazy builtin (enumerate, zip, map, filter) may read from each argument:
    an iterator's are left unconsumed (`_lazily_reads` links them). An endless iterator
    (itertools.count) gives one item more than the longest other argument, so it is never
    the one that runs short."""
    read_once(args)
    columns: list[list[Var] | None] = []
    for a in args:
        if isinstance(a, EndlessIteratorVar):
            columns.append(None)
        elif isinstance(a, IteratorVar):
            generators.check_read(tx, a)
            columns.append(a.items[a.index :])
        else:
            columns.append(unpack_iterable(tx, a))
    finite = [len(c) for c in columns if c is not None]
    if not finite:
        raise Break("zip() or map() over endless iterators only never stops", "unsupported")
    for k, a in enumerate(args):
        if columns[k] is None:
            a.extend(a.index + max(finite) + 1)
            columns[k] = a.items[a.index :]
    return columns


def read_once(args: list[Var]) -> None:
    """One iterator passed twice (`zip(it, it)`) is read in turns by the two places, which
    items computed ahead per argument do not model: the call runs in Python."""
    seen = [a for a in args if isinstance(a, IteratorVar)]
    if len({id(a) for a in seen}) < len(seen):
        raise Break("one iterator read lazily as two arguments runs in Python", "unsupported")


def _lazily_reads(
    tx: Tracer,
    out: IteratorVar,
    args: list[Var],
    reads: list[int],
    own: generators.Inlined | None = None,
    filtered: list[int] | None = None,
) -> IteratorVar:
    """`out`, the iterator of a lazy builtin over `args`, linked to the iterators among them
    so that consuming it consumes them as in eager: it pulls one item from each argument in
    turn per value, and when it runs out, the arguments before the first that ran short
    (`reads`: how many items each can give) have given one item more. filter reads its one
    argument to its end, `filtered[k]` items for its first k values. A generator's run-ahead
    checks follow it (generators.py)."""
    n = len(out.items)
    short = next((j for j, r in enumerate(reads) if r <= n), len(args))
    for j, a in enumerate(args):
        if not isinstance(a, IteratorVar):
            continue
        base = a.index
        if filtered is not None:
            steps, final = filtered, (base + reads[j], True)
        else:
            steps = list(range(n + 1))
            final = (base + n + 1, False) if j < short else (base + n, j == short)
        out.links.append((a, [base + k for k in steps], final))
        out.made_at = tx.root_pc
    return generators.follow(tx, out, args, own)


def _reversed(tx, args, kwargs):
    return IteratorVar(list(reversed(unpack_iterable(tx, args[0]))))


def _iter(tx, args, kwargs):
    return get_iter(tx, args[0])


def _next(tx, args, kwargs):
    it = args[0]
    if isinstance(it, IteratorVar):
        generators.check_read(tx, it)
    if isinstance(it, IteratorVar) and it.index < len(it.items):
        it.move(it.index + 1)
        return it.items[it.index - 1]
    if isinstance(it, IteratorVar):
        it.move(it.index, exhausted=True)
    if isinstance(it, IteratorVar) and len(args) > 1:
        return args[1]
    if isinstance(it, IteratorVar):
        raise Raised(ExceptionVar(StopIteration, []))
    raise Break("next() on an unknown iterator")


def _map(tx, args, kwargs):
    columns = _lazy_columns(tx, args[1:])
    before = generators.run_started(tx)
    values = [calls.call(tx, args[0], list(row), {}) for row in zip(*columns)]
    own = generators.ran_ahead(tx, "map", before, args)
    out = IteratorVar(values)
    return _lazily_reads(tx, out, args[1:], [len(c) for c in columns], own=own)


def _filter(tx, args, kwargs):
    (items,) = _lazy_columns(tx, args[1:2])
    before = generators.run_started(tx)
    if isinstance(args[0], ConstVar) and args[0].value is None:
        kept = [k for k, i in enumerate(items) if truth(tx, i)]
    else:
        kept = [k for k, i in enumerate(items) if truth(tx, calls.call(tx, args[0], [i], {}))]
    own = generators.ran_ahead(tx, "filter", before, args)
    out = IteratorVar([items[k] for k in kept])
    steps = [0] + [k + 1 for k in kept]  # the argument's position after each kept item
    return _lazily_reads(tx, out, args[1:2], [len(items)], own, steps)


def _print(tx, args, kwargs):
    raise Break("print() writes output; it runs in Python", "print")


def _type(tx, args, kwargs):
    if len(args) != 1:
        raise Break("type() with three arguments")
    return ObjVar(_python_type(args[0]))


def _callable(tx, args, kwargs):
    v = args[0]
    if isinstance(v, (FunctionVar, MethodVar, AttrCallVar)):
        return ConstVar(True)
    if isinstance(v, (ObjVar, ConstVar)):
        return ConstVar(callable(v.value))
    return ConstVar(False)


def _super(tx, args, kwargs):
    if len(args) == 2:
        return SuperVar(as_python_constant(args[0]), args[1])
    frame = tx.current_frame
    if "__class__" not in frame.cells:
        raise Break("zero-argument super() outside a method")
    cls = as_python_constant(tx.cell_contents(frame.cells["__class__"]))
    first = frame.code.code.co_varnames[0]
    return SuperVar(cls, tx.resolve(frame.locals[first]))


def _grad_ctx(enabled: bool) -> Callable:
    def make(tx, args, kwargs):
        return GradModeVar(enabled)

    return make


def inference_mode(tx: Tracer, mode: bool) -> GradModeVar:
    """`torch.inference_mode(mode)`: in the graph, a region without autograd, as no_grad (the
    values it makes are computed alike; eager also marks them inference tensors, which only
    changes what in-place updates outside the region are allowed). inference_mode(False)
    changes nothing where inference mode is off, as it is in a trace."""
    if not mode:
        return GradModeVar(None)
    return GradModeVar(False, inference_at=tx.root_pc)


def _set_grad_enabled(tx, args, kwargs):
    enabled = bool(as_python_constant(args[0]))
    prev = tx.builder.grad_enabled
    tx.builder.set_grad_enabled(enabled)
    return GradModeVar(enabled, prev)


def _is_grad_enabled(tx, args, kwargs):
    return ConstVar(tx.builder.grad_enabled)


def _min_max(fn):
    """min() and max() as Python computes them: `key` called on each item through the
    tracer, the first best item kept (a later one replaces it only if strictly better),
    `default` for an empty iterable. Comparing tensors reads their values: the comparison's
    truth breaks the graph there, as any data-dependent branch does."""
    better = operator.gt if fn is max else operator.lt

    def run(tx, args, kwargs):
        if set(kwargs) - {"key", "default"} or not args or (len(args) > 1 and "default" in kwargs):
            return fold(tx, fn, args, kwargs)  # what Python says about these arguments
        items = unpack_iterable(tx, args[0]) if len(args) == 1 else list(args)
        if not items:
            if "default" in kwargs:
                return kwargs["default"]
            return fold(tx, fn, [ListVar([])], {})  # Python's own ValueError
        key = kwargs.get("key")
        if key is not None and is_python_constant(key) and as_python_constant(key) is None:
            key = None
        keys = items if key is None else [calls.call(tx, key, [i], {}) for i in items]
        best = 0
        for i in range(1, len(items)):
            if truth(tx, binary(tx, better, keys[i], keys[best])):
                best = i
        return items[best]

    return run


def sort_items(tx: Tracer, items: list[Var], key: Var | None, reverse: Var | None) -> list[Var]:
    """`items` in the order sorted() and list.sort() give: stable, `key` called once on each
    item through the tracer (so its effects are traced, not run at trace time). The keys
    must be Python values; ordering tensors or real objects reads them in Python."""
    if key is not None and is_python_constant(key) and as_python_constant(key) is None:
        key = None
    keys = items if key is None else [calls.call(tx, key, [i], {}) for i in items]
    if not all(is_python_constant(k) and not isinstance(k, ObjVar) for k in keys):
        raise Break("sorting compares tensor values or objects in Python")
    values = [as_python_constant(k) for k in keys]
    backwards = reverse is not None and truth(tx, reverse)
    try:
        order = sorted(range(len(items)), key=values.__getitem__, reverse=backwards)
    except Exception as e:
        raise raise_python(e) from None
    return [items[i] for i in order]


def _sorted(tx, args, kwargs):
    if len(args) != 1 or set(kwargs) - {"key", "reverse"}:
        return fold(tx, sorted, args, kwargs)  # what Python says about these arguments
    items = unpack_iterable(tx, args[0])
    return ListVar(sort_items(tx, items, kwargs.get("key"), kwargs.get("reverse")))


def _bool(tx, args, kwargs):
    if not args:
        return ConstVar(False)
    return ConstVar(truth(tx, args[0]))


def _unary_builtin(op):
    def run(tx, args, kwargs):
        if isinstance(args[0], TensorVar):
            return unary(tx, op, args[0])
        return fold(tx, op, args, kwargs)

    return run


def _slice(tx, args, kwargs):
    if kwargs or not 1 <= len(args) <= 3:
        raise Break("slice() with these arguments")
    if len(args) == 1:
        return SliceVar(ConstVar(None), args[0], ConstVar(None))
    return SliceVar(args[0], args[1], args[2] if len(args) == 3 else ConstVar(None))


def _class_of(v: Var) -> type:
    """The class a dataclasses helper reads: `v` itself when it is a class."""
    if isinstance(v, ObjVar) and isinstance(v.held, type):
        return v.value  # a class: pinned by identity
    return _python_type(v)


def _dataclass_fields(tx, args, kwargs):
    # Fields belong to the class (the guards on the object pin its class): a constant.
    try:
        return wrap_unguarded(dataclasses.fields(_class_of(args[0])))
    except TypeError as e:
        raise raise_python(e) from None


def _signature(tx, args, kwargs):
    """inspect.signature of a function: computed from its code and defaults, a constant."""
    fn = args[0]
    if isinstance(fn, MethodVar) and isinstance(fn.func, FunctionVar) and fn.func.fn is not None:
        sig = inspect.signature(fn.func.fn)
        return ConstVar(sig.replace(parameters=list(sig.parameters.values())[1:]))
    if isinstance(fn, FunctionVar) and fn.fn is not None:
        return ConstVar(inspect.signature(fn.fn))
    if isinstance(fn, (ObjVar, ConstVar)) and callable(fn.value):
        return ConstVar(inspect.signature(fn.value))
    raise Break(f"inspect.signature of {describe(fn)}")


def _vars(tx, args, kwargs):
    if len(args) != 1:
        raise Break("vars() without an argument")
    return load_attr(tx, args[0], "__dict__")


def _is_dataclass(tx, args, kwargs):
    return ConstVar(dataclasses.is_dataclass(_class_of(args[0])))


SPECIAL: dict[Any, Callable] = {
    isinstance: _isinstance,
    getattr: _getattr,
    setattr: _setattr,
    delattr: _delattr,
    object.__setattr__: _object_slot("__setattr__"),
    object.__delattr__: _object_slot("__delattr__"),
    object.__getattribute__: _object_slot("__getattribute__"),
    hasattr: _hasattr,
    range: _range,
    list: _list,
    tuple: _tuple,
    dict: _dict,
    enumerate: _enumerate,
    zip: _zip,
    reversed: _reversed,
    iter: _iter,
    next: _next,
    print: _print,
    map: _map,
    filter: _filter,
    type: _type,
    callable: _callable,
    super: _super,
    max: _min_max(max),
    min: _min_max(min),
    sorted: _sorted,
    bool: _bool,
    abs: _unary_builtin(operator.abs),
    len: lambda tx, args, kwargs: _len(tx, args[0]),
    torch.no_grad: _grad_ctx(False),
    torch.enable_grad: _grad_ctx(True),
    torch.set_grad_enabled: _set_grad_enabled,
    torch.is_grad_enabled: _is_grad_enabled,
    slice: _slice,
    dataclasses.fields: _dataclass_fields,
    dataclasses.is_dataclass: _is_dataclass,
    inspect.signature: _signature,
    vars: _vars,
    typing.cast: lambda tx, args, kwargs: args[1] if len(args) == 2 else kwargs["val"],
    torch.inference_mode: lambda tx, args, kwargs: inference_mode(
        tx, bool(as_python_constant(args[0] if args else kwargs.get("mode", ConstVar(True))))
    ),
}
if hasattr(torch, "_C") and hasattr(torch._C, "_has_torch_function"):
    for _fn in (
        torch._C._has_torch_function,
        torch._C._has_torch_function_unary,
        torch._C._has_torch_function_variadic,
        torch.overrides.has_torch_function,
        torch.overrides.has_torch_function_unary,
        torch.overrides.has_torch_function_variadic,
    ):
        # Plain tensors never carry __torch_function__ overrides (subclasses are guarded out).
        SPECIAL[_fn] = lambda tx, args, kwargs: ConstVar(False)
