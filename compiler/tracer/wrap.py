"""Turning real values read from the frame into tracer values, with their guards."""

from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any

import torch

from compiler.tracer.guards import CONSTANT_TYPES, is_constant_tuple, numpy
from compiler.tracer.shapes import SYM_TYPES, is_attribute_source
from compiler.tracer.variables import (
    ConstVar,
    DictVar,
    FunctionVar,
    GradExitVar,
    IteratorVar,
    ListVar,
    ObjVar,
    TupleVar,
    Var,
)

if TYPE_CHECKING:
    from compiler.tracer.translator import Tracer

_ITERATOR_TYPES = (type(iter([])), type(iter(())), type(iter(range(0))))

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
    if type(value) is list:
        guards.length(source, value, line)
        var = ListVar([wrap(tx, v, f"{source}[{i}]") for i, v in enumerate(value)], source)
        tx.external_containers.append(var)
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
        items = {k: wrap(tx, v, f"{source}[{k!r}]") for k, v in value.items()}
        var = DictVar(items, source, cls=type(value))
        tx.external_containers.append(var)
        return var
    if isinstance(value, _ITERATOR_TYPES):
        # An iterator left on the stack by an earlier entry: read what remains without
        # consuming it.
        remaining = iterator_rest(value)
        guards.length(f"___iter_rest({source})", remaining, line)
        tx.guards.namespace["___iter_rest"] = iterator_rest
        return IteratorVar(
            [wrap(tx, v, f"___iter_rest({source})[{i}]") for i, v in enumerate(remaining)]
        )
    if isinstance(value, types.FunctionType):
        guards.identity(source, value, line)
        return FunctionVar(fn=value, source=source)
    from compiler.tracer.reconstruct import GradRestore

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
        return ObjVar(value, source)
    guards.identity(source, value, line)
    return ObjVar(value, source)


def _plain_mapping(value: dict) -> bool:
    """A dict subclass instance the trace holds as its mapping: no attributes of its own, and
    the reads guards and item sources make (keys, `[key]`) are the builtin ones. Methods
    the class writes in Python are still called (operations.load_attr)."""
    from compiler.tracer.objects import python_method

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
    return ObjVar(value)


def iterator_rest(it: Any) -> list:
    reduced = it.__reduce__()
    seq = reduced[1][0] if reduced[1] else ()
    index = reduced[2] if len(reduced) > 2 else 0
    return list(seq)[index:]
