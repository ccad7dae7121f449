"""Constructing objects during tracing: named tuples, argument-free torch.nn modules,
tensors of the legacy constructors (torch.LongTensor([...]) as torch.tensor), and
instances of plain Python classes whose __init__ is inlined."""

from __future__ import annotations

import enum
import inspect
import types
from typing import TYPE_CHECKING, Any

import torch

from compiler.support import autocast
from compiler.tracer import builtin_fns, calls, objects
from compiler.tracer.breaks import Break
from compiler.tracer.exceptions import is_simple_exception_class
from compiler.tracer.operations import (
    unpack_iterable,
)
from compiler.tracer.values.containers import dict_method
from compiler.tracer.variables import (
    AutocastVar,
    ConstVar,
    ExceptionVar,
    FunctionVar,
    ListVar,
    ObjVar,
    TupleVar,
    Var,
    as_python_constant,
    contains_tensor,
    is_python_constant,
)
from compiler.tracer.wrap import wrap_unguarded

if TYPE_CHECKING:
    from compiler.tracer.context import Tracer


def is_plain_enum(cls: Any) -> bool:
    """An Enum class whose lookups (`Color(2)`, `Color["RED"]`, iterating it) are Enum's own:
    they find existing members and change nothing, so the trace computes them on the spot
    (the class itself is guarded, and its members are fixed when it is made)."""
    return (
        isinstance(cls, enum.EnumMeta)
        and type(cls).__call__ is enum.EnumMeta.__call__
        and type(cls).__getitem__ is enum.EnumMeta.__getitem__
        and type(cls).__iter__ is enum.EnumMeta.__iter__
        and getattr(cls._missing_, "__func__", None) is enum.Enum._missing_.__func__
    )


def construct_object(tx: Tracer, cls_var: ObjVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    cls = cls_var.value
    if isinstance(cls, type) and issubclass(cls, torch.amp.autocast):
        return _autocast(cls, args, kwargs)
    if cls is torch.Size:
        return TupleVar(list(unpack_iterable(tx, args[0])) if args else [], cls=torch.Size)
    if cls in LEGACY_TENSOR_TYPES:
        return _legacy_tensor(tx, cls, args, kwargs)
    if issubclass(cls, tuple) and hasattr(cls, "_fields"):
        bound = inspect.signature(cls).bind(*args, **kwargs)
        bound.apply_defaults()
        return TupleVar([_as_var(v) for v in bound.arguments.values()], cls=cls)
    if (
        issubclass(cls, torch.nn.Module)
        and cls.__module__.startswith("torch.nn")
        and not contains_tensor(TupleVar(list(args) + list(kwargs.values())))
    ):
        module = cls(
            *[as_python_constant(a) for a in args],
            **{k: as_python_constant(v) for k, v in kwargs.items()},
        )
        if any(True for _ in module.parameters()) or any(True for _ in module.buffers()):
            raise Break(f"constructing {cls.__name__} creates parameters; it runs in Python")
        return ObjVar(module)
    if cls in (torch.device, torch.dtype, torch.finfo, torch.iinfo) and all(
        is_python_constant(a) for a in args
    ):
        return builtin_fns.fold(tx, cls, args, kwargs)
    if is_plain_enum(cls) and len(args) == 1 and not kwargs and is_python_constant(args[0]):
        return builtin_fns.fold(tx, cls, args, kwargs)  # `Color(2)`: the member, or ValueError
    if is_simple_exception_class(cls) and not kwargs:
        return ExceptionVar(cls, list(args))
    if objects.is_plain_class(cls):
        obj = objects.new_instance(cls)
        init = inspect.getattr_static(cls, "__init__")
        if isinstance(init, types.FunctionType):
            calls.call(tx, FunctionVar(fn=init), [obj, *args], kwargs)
        elif obj.items is not None and len(args) <= 1:
            dict_method(tx, obj.items, "update", list(args), kwargs)  # dict's __init__
        elif args or kwargs:
            raise Break(f"constructing a {cls.__qualname__} with arguments runs in Python")
        return obj
    raise Break(f"constructing a {cls.__qualname__} runs in Python")


# The legacy tensor constructors (torch.LongTensor, torch.cuda.HalfTensor, ..., and
# torch.Tensor itself): their dtype (None: the default dtype, which every entry's guards
# pin) and device. They ignore torch.set_default_device: CPU unless a torch.cuda class.
LEGACY_TENSOR_TYPES: dict[type, tuple[torch.dtype | None, str]] = {
    **{
        cls: (cls.dtype, "cuda" if cls.is_cuda else "cpu")
        for cls in torch._tensor_classes
        if not cls.is_sparse
    },
    torch.Tensor: (None, "cpu"),
}


def _legacy_tensor(tx: Tracer, cls: type, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """A legacy constructor as the factory that makes the same tensor: data (one list or
    tuple of numbers) as `torch.tensor(data, dtype=, device=)`, sizes (ints, or one
    torch.Size) as `torch.empty(sizes, ...)` (memory left uninitialised, as eager leaves
    it), no argument as an empty tensor. What eager gives an alias for (a tensor), reads
    from a storage or rejects (another device type) runs in Python."""
    dtype, device = LEGACY_TENSOR_TYPES[cls]
    where = {"dtype": ConstVar(dtype or torch.get_default_dtype()), "device": ConstVar(device)}
    name = f"{cls.__module__}.{cls.__qualname__}"
    given = kwargs.get("device")
    if set(kwargs) - {"device"} or (given is not None and not _device_type_is(given, device)):
        raise Break(f"{name} with these keyword arguments runs in Python")
    if not args:
        return tx.builder.call("call_function", torch.empty, [ConstVar(0)], where)
    if all(_is_size(a) for a in args):
        return tx.builder.call("call_function", torch.empty, list(args), where)
    if len(args) == 1 and _is_shape(args[0]):
        return tx.builder.call("call_function", torch.empty, [args[0]], where)
    if len(args) == 1 and isinstance(args[0], (ListVar, TupleVar)) and _numbers(args[0]):
        return tx.builder.call("call_function", torch.tensor, [args[0]], where)
    if len(args) == 1 and contains_tensor(args[0]):
        raise Break(f"{name} of a tensor (an alias of it, or an error) runs in Python")
    raise Break(f"constructing a {name} from these arguments runs in Python")


def _is_shape(v: Var) -> bool:
    """A torch.Size: traced (symbolic sizes) or constant."""
    if isinstance(v, TupleVar):
        return v.cls is torch.Size
    return isinstance(v, ConstVar) and type(v.value) is torch.Size


def _is_size(v: Var) -> bool:
    return isinstance(v, ConstVar) and (type(v.value) is int or isinstance(v.value, torch.SymInt))


def _numbers(v: Var) -> bool:
    """Nested lists and tuples of Python numbers (what torch.tensor takes as data)."""
    if isinstance(v, (ListVar, TupleVar)):
        return all(_numbers(i) for i in v.items)
    return isinstance(v, ConstVar) and type(v.value) in (int, float, bool)


def _device_type_is(v: Var, device_type: str) -> bool:
    try:
        return torch.device(as_python_constant(v)).type == device_type
    except (TypeError, RuntimeError):
        return False


def _autocast(cls: type, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """`torch.autocast(...)` (or torch.cuda.amp.autocast, ...) with constant arguments: the
    real object is made, which resolves them (the default dtype of the device, a device
    without autocast switched off with torch's own warning), and the block becomes state
    changes in the graph (compiler/support/autocast.py)."""
    if not all(is_python_constant(v) for v in (*args, *kwargs.values())):
        raise Break("torch.autocast with traced arguments runs in Python")
    real = cls(
        *[as_python_constant(a) for a in args],
        **{k: as_python_constant(v) for k, v in kwargs.items()},
    )
    if real.device not in autocast.DEVICE_TYPES:
        raise Break(f"torch.autocast on {real.device!r} runs in Python")
    return AutocastVar(real.device, bool(real._enabled), real.fast_dtype)


def _as_var(v: Any) -> Var:
    return v if isinstance(v, Var) else wrap_unguarded(v)
