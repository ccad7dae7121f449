"""copy.copy and copy.deepcopy of values the trace holds, as the copy module makes them: a
new list, dict, set or user object in the trace (rebuilt for real if it leaves the graph),
tensors deep-copied as clones in the graph.

The copy module itself is not traced: its memo is keyed by id(), which a value of the trace
does not have. Each kind says here how it is copied; any other value breaks the graph, and
the copy is made in Python as eagerly.
"""

from __future__ import annotations

import collections
import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from compiler.tracer import builtin_fns, calls
from compiler.tracer.breaks import Break
from compiler.tracer.objects import is_plain_class
from compiler.tracer.values import torch_functions
from compiler.tracer.values.table import describe, ops_of
from compiler.tracer.variables import (
    ConstVar,
    DictVar,
    ListVar,
    NewObjectVar,
    SetVar,
    TensorVar,
    TupleVar,
    Var,
    tuple_kind,
)

if TYPE_CHECKING:
    from compiler.tracer.context import Tracer

# Container classes whose `copy()` method is what copy.copy calls (the copy module's dispatch
# table, or the class's __copy__, which for these classes is the same method).
_SHALLOW_KINDS = (ListVar, DictVar, SetVar)
_SHALLOW_BY_METHOD = {list, dict, set, collections.OrderedDict, collections.defaultdict}


def _copyable_class(cls: type) -> bool:
    """A plain class that copy rebuilds as `cls.__new__(cls)` plus its __dict__: no __copy__,
    __deepcopy__, __reduce__, __reduce_ex__, __getstate__ or __setstate__ of its own."""
    if not is_plain_class(cls):
        return False
    return (
        cls.__reduce_ex__ is object.__reduce_ex__
        and cls.__reduce__ is object.__reduce__
        and getattr(cls, "__getstate__", object.__getstate__) is object.__getstate__
        and not any(
            hasattr(cls, name) for name in ("__copy__", "__deepcopy__", "__setstate__")
        )
    )


def _shallow(tx: Tracer, v: Var) -> Var:
    if isinstance(v, (ConstVar, TupleVar)):
        return v  # immutable: copy.copy returns the object itself
    if (
        isinstance(v, (ListVar, DictVar, SetVar))
        and type(v) in _SHALLOW_KINDS
        and v.cls in _SHALLOW_BY_METHOD
        and getattr(v, "view_of", None) is None
    ):
        return calls.call_method(tx, v, "copy", [], {})
    if isinstance(v, NewObjectVar) and v.items is None and _copyable_class(v.cls):
        return NewObjectVar(v.cls, dict(v.fields))
    raise Break(f"copy.copy of {describe(v)} runs in Python", "library_code")


def _deep_tensor(tx: Tracer, t: TensorVar) -> Var:
    fake = t.fake
    if fake.requires_grad:
        # eager makes a new leaf (or raises, for a non-leaf): neither is a graph op
        raise Break("copy.deepcopy of a tensor that requires grad runs in Python", "library_code")
    if fake._is_view():
        # eager copies the whole storage and keeps the view's offset and strides
        raise Break("copy.deepcopy of a view of a tensor runs in Python", "library_code")
    return torch_functions.torch_call(tx, torch.clone, [t], {})


def _deep(tx: Tracer, v: Var, memo: dict[int, Var]) -> Var:
    """The deep copy of `v`; `memo` maps what was copied already to its copy, so that a value
    reached twice is copied once and aliasing is kept, as eager's memo keeps it."""
    identity = ops_of(v).identity
    key_obj = identity(v) if identity is not None else NotImplemented
    key = id(v if key_obj is NotImplemented else key_obj)
    if key in memo:
        return memo[key]
    copier = _DEEP.get(type(v))
    if copier is None:
        raise Break(f"copy.deepcopy of {describe(v)} runs in Python", "library_code")
    out = copier(tx, v, memo)
    memo[key] = out
    return out


def _deep_const(tx: Tracer, v: ConstVar, memo: dict[int, Var]) -> Var:
    value = v.value
    if isinstance(value, (torch.Tensor, torch.nn.Module)):
        raise Break(f"copy.deepcopy of {describe(v)} runs in Python", "library_code")
    return ConstVar(copy.deepcopy(value))


def _deep_list(tx: Tracer, v: ListVar, memo: dict[int, Var]) -> Var:
    if v.cls is not list or v.view_of is not None:
        raise Break(f"copy.deepcopy of {describe(v)} runs in Python", "library_code")
    out = ListVar([])
    memo[id(v)] = out  # a list that holds itself
    out.items = [_deep(tx, item, memo) for item in v.items]
    return out


def _deep_tuple(tx: Tracer, v: TupleVar, memo: dict[int, Var]) -> Var:
    if tuple_kind(v.cls) not in ("tuple", "namedtuple"):
        raise Break(f"copy.deepcopy of {describe(v)} runs in Python", "library_code")
    items = [_deep(tx, item, memo) for item in v.items]
    if all(a is b for a, b in zip(items, v.items)):
        return v  # nothing inside changed: deepcopy returns the tuple itself
    return TupleVar(items, cls=v.cls)


def _deep_dict(tx: Tracer, v: DictVar, memo: dict[int, Var]) -> Var:
    if type(v) is not DictVar or v.cls is not dict or v.default is not None:
        raise Break(f"copy.deepcopy of {describe(v)} runs in Python", "library_code")
    out = DictVar({})
    memo[id(v)] = out
    # keys are Python constants: their deep copies are equal and hash alike
    out.items = {k: _deep(tx, item, memo) for k, item in v.items.items()}
    return out


def _deep_object(tx: Tracer, v: NewObjectVar, memo: dict[int, Var]) -> Var:
    if v.items is not None or not _copyable_class(v.cls):
        raise Break(f"copy.deepcopy of {describe(v)} runs in Python", "library_code")
    out = NewObjectVar(v.cls)
    memo[id(v)] = out
    out.fields = {name: _deep(tx, item, memo) for name, item in v.fields.items()}
    return out


_DEEP: dict[type, Callable[[Tracer, Any, dict[int, Var]], Var]] = {
    ConstVar: _deep_const,
    TensorVar: lambda tx, v, memo: _deep_tensor(tx, v),
    ListVar: _deep_list,
    TupleVar: _deep_tuple,
    DictVar: _deep_dict,
    NewObjectVar: _deep_object,
}


def _copy(tx: Tracer, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if len(args) != 1 or kwargs:
        raise Break("copy.copy with other arguments runs in Python", "library_code")
    return _shallow(tx, args[0])


def _deepcopy(tx: Tracer, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if len(args) != 1 or kwargs:
        raise Break("copy.deepcopy with a memo runs in Python", "library_code")
    return _deep(tx, args[0], {})


builtin_fns.SPECIAL[copy.copy] = _copy
builtin_fns.SPECIAL[copy.deepcopy] = _deepcopy
