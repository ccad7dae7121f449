"""Turning real values read from the frame into tracer values, with their guards."""

from __future__ import annotations

import collections
import functools
import types
from typing import TYPE_CHECKING, Any

import torch

from compiler.support.autocast import DEVICE_TYPES, AutocastRestore
from compiler.tracer.breaks import Break
from compiler.tracer.guards import CONSTANT_TYPES, is_constant_tuple, numpy
from compiler.tracer.lookups import python_method
from compiler.tracer.reconstruct import GradRestore
from compiler.tracer.shapes import SYM_TYPES, is_attribute_source
from compiler.tracer.values.table import ops_of
from compiler.tracer.variables import (
    AutocastExitVar,
    AutocastVar,
    ConstVar,
    DequeVar,
    DictVar,
    FunctionVar,
    GradExitVar,
    IdentityKey,
    IteratorVar,
    ListVar,
    ObjVar,
    SetVar,
    TensorVar,
    TupleVar,
    Var,
)

if TYPE_CHECKING:
    from compiler.tracer.context import Tracer

_LIST_ITERATOR = type(iter([]))
_ITERATOR_TYPES = (_LIST_ITERATOR, type(iter(())), type(iter(range(0))))

# torch values the graph is specialised on; compared by equality.
_TORCH_CONSTANTS = (torch.dtype, torch.device, torch.memory_format, torch.layout, torch.Size)


def _constant_items(value: tuple, source: str) -> TupleVar:
    """A constant tuple whose one guard covers its elements: they get none of their own."""
    items = [
        _constant_items(v, f"{source}[{i}]") if type(v) is tuple else ConstVar(v, f"{source}[{i}]")
        for i, v in enumerate(value)
    ]
    return TupleVar(items, source, cls=tuple)


def wrap(tx: Tracer, value: Any, source: str) -> Var:
    """A tracer value for `value`, read from `source` at the start of the entry."""
    line = tx.builder.line
    guards = tx.guards
    if isinstance(value, torch.Tensor):
        if type(value) not in (torch.Tensor, torch.nn.Parameter, torch.nn.parameter.Buffer):
            guards.type_of(source, value, line)
            return ObjVar(value, source)
        return tx.builder.add_input(value, source)
    if isinstance(value, CONSTANT_TYPES):
        shapes = tx.builder.shapes
        symbolic = (
            shapes.int_input(value, source, line)
            if type(value) is int
            else shapes.float_input(float(value), source, line)
            if isinstance(value, float)  # a numpy float64 too
            else None
        )
        if symbolic is not None:
            guards.type_of(source, value, line, "its value is an input of the graph")
            return ConstVar(symbolic, source)
        guards.constant(source, value, line)
        return ConstVar(value, source)
    if isinstance(value, _TORCH_CONSTANTS):
        if isinstance(value, torch.Size):
            guards.constant(source, value, line)
        else:
            guards.identity(source, value, line) if isinstance(
                value, torch.dtype
            ) else guards.constant(source, value, line)
        return ConstVar(value, source)
    if (
        type(value) in (list, collections.deque)
        or type(value) is dict
        or (isinstance(value, dict) and _plain_mapping(value))
        or _literal_set(value)
    ):
        known = tx.external_containers.get(id(value))
        if known is not None:
            # the same list or dict reached again (a global read twice, one list passed as
            # two arguments): one tracer value, so a change through one path is seen through
            # the other; the next call must reach the same object the same ways
            guards.same_as(source, known.source, "the same object as ", line)
            return known
    if type(value) is list:
        guards.length(source, value, line)
        var = ListVar([], source)
        tx.external_containers[id(value)] = var  # before the items: a list may contain itself
        var.items = [wrap(tx, v, f"{source}[{i}]") for i, v in enumerate(value)]
        return var
    if type(value) is collections.deque:
        guards.length(source, value, line)
        guards.constant(f"{source}.maxlen", value.maxlen, line)
        var = DequeVar([], source, cls=collections.deque, maxlen=value.maxlen)
        tx.external_containers[id(value)] = var
        var.items = [wrap(tx, v, f"{source}[{i}]") for i, v in enumerate(value)]
        return var
    if _literal_set(value):
        # guarded by its contents, which the trace reads and may change (replayed after)
        guards.type_of(source, value, line)
        guards.add("CONSTANT_MATCH", source, f"{source} == {value!r}", f"{source} == {value!r}", line)
        var = SetVar([ConstVar(v) for v in value], source, cls=type(value), keys=set(value))
        tx.external_containers[id(value)] = var
        return var
    if is_constant_tuple(value) and is_attribute_source(source):
        guards.constant_tuple(source, value, line)
        return _constant_items(value, source)
    if isinstance(value, tuple):
        guards.length(source, value, line)
        items = [wrap(tx, v, f"{source}[{i}]") for i, v in enumerate(value)]
        return TupleVar(items, source, cls=type(value))
    if type(value) is dict or (isinstance(value, dict) and _plain_mapping(value)):
        guards.dict_keys(source, value, line)
        var = DictVar({}, source, cls=type(value))
        tx.external_containers[id(value)] = var
        if isinstance(value, collections.defaultdict):
            var.default = wrap(tx, value.default_factory, f"{source}.default_factory")
        for i, (k, v) in enumerate(value.items()):
            if isinstance(k, CONSTANT_TYPES) or is_constant_tuple(k):
                var.items[k] = wrap(tx, v, f"{source}[{k!r}]")
            else:
                key_source = f"list({source}.keys())[{i}]"
                var.items[_object_key(tx, k, key_source)] = wrap(tx, v, f"{source}[{key_source}]")
        return var
    if isinstance(value, _ITERATOR_TYPES):
        return _real_iterator(tx, value, source)
    if isinstance(value, types.FunctionType):
        guards.identity(source, value, line)
        return FunctionVar(fn=value, source=source)
    if isinstance(value, GradRestore):
        # the exit of a grad-mode `with` block that an earlier entry entered
        guards.type_of(source, value, line)
        guards.add(
            "CONSTANT_MATCH",
            source,
            f"{source}.restore is {value.restore}",
            f"the block restores grad mode {value.restore}",
            line,
        )
        return GradExitVar(value.restore)
    if isinstance(value, AutocastRestore):
        # the exit of an autocast `with` block that an earlier entry entered
        guards.type_of(source, value, line)
        guards.constant(f"{source}.device_type", value.device_type, line)
        guards.constant(f"{source}.before", value.before, line)
        return AutocastExitVar(value.device_type, value.before)
    if type(value) is torch.inference_mode or (
        type(value) is types.MethodType and type(value.__self__) is torch.inference_mode
    ):
        # made by an earlier entry, or its __exit__ (the block runs in Python,
        # values/torch_functions.py): a new object per call, the same by its type and mode
        manager = f"{source}.__self__" if type(value) is types.MethodType else source
        guards.type_of(manager, getattr(value, "__self__", value), line)
        guards.constant(f"{manager}.mode", getattr(value, "__self__", value).mode, line)
        if type(value) is types.MethodType:
            guards.constant(f"{source}.__name__", value.__name__, line)
        return ObjVar(value, source)
    if isinstance(value, torch.amp.autocast):
        # made by an earlier entry, entered by this one: its resolved arguments are guarded
        guards.type_of(source, value, line)
        for name in ("device", "_enabled", "fast_dtype"):
            guards.constant(f"{source}.{name}", getattr(value, name), line)
        if value.device not in DEVICE_TYPES:
            guards.identity(source, value, line)
            return ObjVar(value, source)
        return AutocastVar(value.device, bool(value._enabled), value.fast_dtype)
    if numpy is not None and type(value) is numpy.ndarray:
        # made at run time more often than not (`np.arange(3.0)` before a break): an
        # identity guard failed at every call. The trace never reads its contents
        # (opaque), so its type is all it relies on.
        guards.type_of(source, value, line, "only its type: its contents are never read")
        return ObjVar(value, source, opaque=True)
    if (
        numpy is not None
        and isinstance(value, types.BuiltinMethodType)
        and type(value.__self__) is numpy.ndarray
    ):
        # `a.sum` loaded before the call that breaks: the method of such an array
        guards.type_of(f"{source}.__self__", value.__self__, line, "a method of an array")
        guards.constant(f"{source}.__name__", value.__name__, line)
        return ObjVar(value, source, opaque=True)
    if isinstance(
        value, (torch.nn.Module, type, types.ModuleType, types.BuiltinFunctionType)
    ) or callable(value):
        guards.identity(source, value, line)
        if isinstance(value, torch.nn.Module):
            tx.builder.shapes.module_sources.add(source)
        return ObjVar(value, source)
    tx.frame_objects[source] = value
    if _made_at_run_time(value):
        guards.type_of(source, value, line)
        pin = functools.partial(guards.identity, source, value, line)
        return ObjVar(value, source, identity=pin)
    guards.identity(source, value, line)
    return ObjVar(value, source)


def _object_key(tx: Tracer, key: Any, source: str) -> IdentityKey:
    """A key of a dict from outside the graph that eager hashes by its address (a tensor, a
    module): the very object is guarded, as a lookup or `in` test with another object of the
    trace was answered by identity."""
    if not isinstance(key, torch.Tensor) and type(key).__hash__ is not object.__hash__:
        raise Break("a dict keyed by objects hashed by value, from outside the graph")
    if source.startswith("list(L[") and tx.resumed:
        # a local dict after a graph break is made anew on every call, its keys with it:
        # guarded by identity, it would recompile on every call (an argument is guarded so,
        # as torch.compile guards it). A tensor key is a graph input instead, the same one
        # as each input it is (or a distinct one, as each it is not: key_alias_guards)
        if type(key) in (torch.Tensor, torch.nn.Parameter):
            var = wrap(tx, key, source)
            tx.key_tensors.append(var)
            return IdentityKey(var, var.fake)
        if _made_at_run_time(key):
            raise Break("a dict keyed by objects made before a graph break")
    tx.guards.identity(source, key, tx.builder.line)
    var = wrap(tx, key, source)
    identity = ops_of(var).identity
    obj = identity(var) if identity is not None else NotImplemented
    if obj is NotImplemented or obj is None:
        raise Break("a dict keyed by objects hashed by value, from outside the graph")
    return IdentityKey(var, obj)


# The items of a set read from the frame that the trace takes in: those whose repr is Python
# that makes them again, for the guard that compares the set.
_SET_ITEM_TYPES = (int, str, bytes, bool, type(None))


def _literal_set(value: Any) -> bool:
    return type(value) in (set, frozenset) and all(type(v) in _SET_ITEM_TYPES for v in value)


def _made_at_run_time(value: Any) -> bool:
    """A plain instance of a Python class (a model's output record, a user's dataclass):
    such objects are made anew by each call (returned from a call at a graph break), so a
    guard on the object itself would fail on every call. They are guarded by type and by
    what the trace reads of them (ObjVar.identity)."""
    cls = type(value)
    return (
        isinstance(getattr(value, "__dict__", None), dict)
        and cls.__module__ != "builtins"
        and not any(
            "__getattribute__" in k.__dict__ for k in cls.__mro__ if k.__module__ != "builtins"
        )
    )

def _real_iterator(tx: Tracer, value: Any, source: str) -> IteratorVar:
    """An iterator made by an earlier entry or passed in, read without consuming it: the
    real one is advanced after the graph by what the trace consumed (reconstruct.py), so
    every reference to it sees the same position. A list iterator iterates the list's
    tracer value (changes the trace makes to the list are seen); a tuple's or a range's
    what remains of them."""
    line = tx.builder.line
    known = tx.real_iterators.get(id(value))
    if known is not None:
        tx.guards.same_as(source, known.source, "the same iterator as ", line)
        return known
    tx.guards.type_of(source, value, line)
    seq, index = _iterated(value)
    if type(value) is _LIST_ITERATOR and type(seq) is list:
        tx.guards.namespace["___iter_seq"] = lambda it: _iterated(it)[0]
        tx.guards.namespace["___iter_pos"] = lambda it: _iterated(it)[1]
        tx.guards.constant(f"___iter_pos({source})", index, line)
        seq_var = wrap(tx, seq, f"___iter_seq({source})")
        var = IteratorVar(seq_var.items, index, seq=seq_var, source=source, start=index)
    else:
        remaining = list(seq)[index:]
        tx.guards.namespace["___iter_rest"] = iterator_rest
        guards_source = f"___iter_rest({source})"
        tx.guards.length(guards_source, remaining, line)
        items = [wrap(tx, v, f"{guards_source}[{i}]") for i, v in enumerate(remaining)]
        var = IteratorVar(items, source=source)
    tx.real_iterators[id(value)] = var
    return var


def container_alias_guards(tx: Tracer) -> None:
    """Guards that each list or dict the trace changed is none of the other lists or dicts it
    read: traced as distinct objects, a later call that passes one object for both would see
    the change through one path only. (Objects reached twice in the trace are one value,
    with an ALIAS_MATCH guard: see `wrap`.)"""
    containers = list(tx.external_containers.values())
    for changed in containers:
        if not changed.mutated:
            continue
        for other in containers:
            if other is not changed and type(other) is type(changed):
                tx.guards.add(
                    "ALIAS_MATCH",
                    changed.source,
                    f"{changed.source} is not {other.source}",
                    f"{changed.source} and {other.source} are different objects",
                    None,
                )


def object_alias_guards(tx: Tracer) -> None:
    """Guards that each object the trace wrote an attribute of is (or is not) each other
    plain object it read, as at the trace: writes are kept by object (Tracer.attr_writes), so
    what the trace read through another reference holds only while the two stay the same
    object (or distinct). The written object itself is guarded by its type alone (a new
    argument object per call reuses the entry)."""
    written = {w.obj.source: w.obj.held for w in tx.attr_writes.values() if w.obj.source}
    for source, obj in written.items():
        for other, value in tx.frame_objects.items():
            if other == source or type(value) is not type(obj):
                continue
            same = value is obj
            tx.guards.add(
                "ALIAS_MATCH",
                source,
                f"{source} {'is' if same else 'is not'} {other}",
                f"{source} and {other} are {'the same object' if same else 'different objects'}",
                None,
            )


def key_alias_guards(tx: Tracer) -> None:
    """Guards that each tensor key of a dict made before a graph break is none of the other
    tensor inputs it was not at the trace: lookups in the trace compare keys by identity, and
    the next call's new keys are not pinned (the same ones are guarded by add_input)."""
    for key in tx.key_tensors:
        for other in tx.builder.inputs:
            if isinstance(other, TensorVar) and other is not key:
                tx.guards.add(
                    "ALIAS_MATCH",
                    key.source,
                    f"{key.source} is not {other.source}",
                    f"{key.source} and {other.source} are different tensors",
                    None,
                )


def _plain_mapping(value: dict) -> bool:
    """A dict subclass instance the trace holds as its mapping: no attributes of its own, and
    the reads guards and item sources make (keys, `[key]`) are the builtin ones. Methods
    the class writes in Python are still called (operations.load_attr)."""
    cls = type(value)
    if cls.__module__ == "collections":
        return True
    if getattr(value, "__dict__", None):
        return False
    return all(
        python_method(cls, name) is None for name in ("__getitem__", "keys", "__iter__", "__len__")
    )


def wrap_unguarded(value: Any) -> Var:
    """A tracer value for an object produced during tracing (not read from the frame)."""
    if isinstance(value, (CONSTANT_TYPES, _TORCH_CONSTANTS, SYM_TYPES)):
        return ConstVar(value)
    if isinstance(value, types.FunctionType):
        return FunctionVar(fn=value)
    if type(value) is tuple:
        return TupleVar([wrap_unguarded(v) for v in value])
    if type(value) is list:
        return ListVar([wrap_unguarded(v) for v in value])
    if type(value) in (set, frozenset):
        return SetVar([wrap_unguarded(v) for v in value], cls=type(value), keys=set(value))
    return ObjVar(value)


def _iterated(it: Any) -> tuple[Any, int]:
    """The sequence a list, tuple or range iterator iterates, and its position."""
    reduced = it.__reduce__()
    seq = reduced[1][0] if reduced[1] else ()
    return seq, reduced[2] if len(reduced) > 2 else 0


def iterator_rest(it: Any) -> list:
    seq, index = _iterated(it)
    return list(seq)[index:]
