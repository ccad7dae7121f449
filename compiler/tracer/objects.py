"""Instances of Python classes in the trace: the methods their classes write in Python, the
builtin object and dict methods under them, attribute reads and attribute writes.

Two kinds of instance:
- built during tracing (`NewObjectVar`): its attributes are tracer values; an instance of a
  dict subclass (transformers' ModelOutput: a dataclass over OrderedDict) also holds its
  mapping as a DictVar. It is rebuilt for real, with both, when it leaves the graph.
- read from the frame (`ObjVar`): a real object. Attributes the trace writes to a plain one
  are kept in `Tracer.attr_writes` (reads in the trace see them) and written for real after
  the graph runs, as the changes to outside lists and dicts are.

A dunder the class defines in Python (`__getitem__`, `__setattr__`, ...) is inlined, as eager
would call it; where the class keeps object's or dict's, the tracer applies the builtin.
"""

from __future__ import annotations

import collections
import functools
import inspect
import types
from typing import TYPE_CHECKING, Any

import torch

from compiler.tracer.breaks import Break, Raised
from compiler.tracer.calls import call, call_method, is_skipped_module
from compiler.tracer.context import AttrWrites
from compiler.tracer.lookups import python_method
from compiler.tracer.variables import (
    ConstVar,
    DictVar,
    ExceptionVar,
    FunctionVar,
    MethodVar,
    NewObjectVar,
    ObjVar,
    Var,
)
from compiler.tracer.wrap import wrap, wrap_unguarded

if TYPE_CHECKING:
    from compiler.tracer.context import Tracer

# The builtin bases a traced instance may have: their construction takes no state the trace
# does not see (dict and OrderedDict start empty).
MAPPING_BASES = (dict, collections.OrderedDict)
_BUILTIN_BASES = (object, *MAPPING_BASES)
_MISSING = object()


def class_of(obj: Var) -> type | None:
    """The class whose methods apply to `obj`, for the instances this module knows."""
    if isinstance(obj, NewObjectVar):
        return obj.cls
    if isinstance(obj, DictVar):
        return obj.cls
    if isinstance(obj, ObjVar) and not isinstance(
        obj.held, (type, types.ModuleType, torch.Tensor)
    ):
        return type(obj.held)  # (a tensor subclass's Python dunders are torch's, not traced)
    return None


def call_dunder(tx: Tracer, obj: Var, name: str, args: list[Var]) -> Any:
    """`type(obj).name(obj, *args)` inlined when the class writes it in Python, else _MISSING."""
    cls = class_of(obj)
    fn = python_method(cls, name) if cls is not None and cls not in _BUILTIN_BASES else None
    if fn is None:
        return _MISSING
    return call(tx, FunctionVar(fn=fn), [obj, *args], {})


def found(value: Any) -> bool:
    return value is not _MISSING


def mapping_base(cls: type) -> type:
    """The builtin mapping under a dict subclass (what its C methods are)."""
    return next(k for k in cls.__mro__ if k in MAPPING_BASES)


# ---- instances built during tracing -------------------------------------------------------


def is_plain_class(cls: type) -> bool:
    """A Python class whose instances the trace can build: a __dict__ and no state from a
    constructor written in C (object, dict and OrderedDict bases only)."""
    meta = type(cls)
    if not issubclass(meta, type) or cls.__module__ == "builtins":
        return False
    if any("__call__" in k.__dict__ for k in meta.__mro__ if k not in (type, object)):
        return False  # a metaclass that changes how instances are made
    if is_skipped_module(cls.__module__) or getattr(cls, "__abstractmethods__", None):
        return False  # library classes; abstract ones raise when instantiated
    if not all(_plain_slots(k) for k in cls.__mro__ if k not in _BUILTIN_BASES):
        return False
    if any(k not in _BUILTIN_BASES and k.__module__ == "builtins" for k in cls.__mro__):
        return False
    return all(
        k in _BUILTIN_BASES or "__new__" not in k.__dict__ for k in cls.__mro__
    ) and not issubclass(cls, (BaseException, torch.nn.Module, torch.Tensor))


def _plain_slots(cls: type) -> bool:
    """`__slots__` whose every name is a plain slot (a member descriptor, read and written as
    an attribute is), besides `__dict__` and `__weakref__`."""
    slots = cls.__dict__.get("__slots__", ())
    names = (slots,) if isinstance(slots, str) else slots
    return all(
        n in ("__dict__", "__weakref__")
        or isinstance(cls.__dict__.get(_mangled(cls, n)), types.MemberDescriptorType)
        for n in names
    )


def _mangled(cls: type, name: str) -> str:
    """A slot's attribute name: a private `__x` slot is stored as `_Cls__x`."""
    if name.startswith("__") and not name.endswith("__"):
        return f"_{cls.__name__.lstrip('_')}{name}"
    return name


def has_instance_dict(cls: type) -> bool:
    """Whether instances of `cls` have a __dict__ (no class with __slots__ only)."""
    return cls.__dictoffset__ != 0


def is_slot(cls: type, name: str) -> bool:
    return isinstance(inspect.getattr_static(cls, name, None), types.MemberDescriptorType)


def new_instance(cls: type) -> NewObjectVar:
    items = DictVar({}) if issubclass(cls, MAPPING_BASES) else None
    return NewObjectVar(cls, {}, items)


def new_object_attr(tx: Tracer, obj: NewObjectVar, name: str) -> Var:
    """`obj.name` with Python's lookup order: data descriptors of the class, the instance's
    attributes, then the class's other attributes, then a Python __getattr__."""
    cls = obj.cls
    attr = inspect.getattr_static(cls, name, _MISSING)
    if isinstance(attr, property):
        return _call_fn(tx, attr.fget, [obj], name)
    if _is_data_descriptor(attr):
        return _descriptor_get(tx, obj, cls, name, attr)
    if name in obj.fields:
        return obj.fields[name]
    if name == "__dict__":
        if not has_instance_dict(cls) or any(is_slot(cls, k) for k in obj.fields):
            raise Break(f"the __dict__ of a {cls.__name__}, which has __slots__")
        return DictVar(obj.fields)  # the same dict: writes through it are attribute writes
    if name == "__class__":
        return ObjVar(cls)
    if attr is not _MISSING:
        return _class_member(tx, obj, cls, name, attr)
    getattr_fn = python_method(cls, "__getattr__")
    if getattr_fn is not None:
        return _call_fn(tx, getattr_fn, [obj, ConstVar(name)], name)
    raise Raised(
        ExceptionVar(
            AttributeError, [ConstVar(f"'{cls.__name__}' object has no attribute '{name}'")]
        )
    )


def _call_fn(tx: Tracer, fn: Any, args: list[Var], name: str) -> Var:
    if not isinstance(fn, types.FunctionType):
        raise Break(f"attribute {name!r} is computed by builtin code")
    return call(tx, FunctionVar(fn=fn), args, {})


def _class_member(tx: Tracer, obj: Var, cls: type, name: str, attr: Any) -> Var:
    if isinstance(attr, types.FunctionType):
        return MethodVar(FunctionVar(fn=attr), obj)
    if isinstance(attr, staticmethod):
        return (
            FunctionVar(fn=attr.__func__)
            if isinstance(attr.__func__, types.FunctionType)
            else ObjVar(attr.__func__)
        )
    if isinstance(attr, classmethod):
        return MethodVar(FunctionVar(fn=attr.__func__), ObjVar(cls))
    owner = next(k for k in cls.__mro__ if name in k.__dict__)
    if owner in _BUILTIN_BASES:
        # a method of object or of the mapping: applied to the traced instance by call_method
        from compiler.tracer.variables import AttrCallVar

        return AttrCallVar(obj, name)
    if isinstance(attr, functools.cached_property) and isinstance(obj, NewObjectVar):
        return _cached_property(tx, obj, name, attr)
    if hasattr(attr, "__get__") and not isinstance(attr, (type, types.BuiltinFunctionType)):
        return _descriptor_get(tx, obj, cls, name, attr)
    return wrap_unguarded(attr)  # a class constant


def _is_data_descriptor(attr: Any) -> bool:
    """A data descriptor written in Python: it comes before the instance's own attributes.
    (Builtin ones, an instance's `__dict__`, are the attributes this module reads itself.)"""
    kind = type(attr)
    return python_method(kind, "__get__") is not None and (
        hasattr(kind, "__set__") or hasattr(kind, "__delete__")
    )


def _descriptor_get(tx: Tracer, obj: Var, cls: type, name: str, attr: Any) -> Var:
    """`type(attr).__get__(attr, obj, cls)`, inlined where the descriptor's class writes it in
    Python (a user's validating field); the descriptor itself is a class constant."""
    get = python_method(type(attr), "__get__")
    if get is None:
        raise Break(f"class attribute {name!r} of {cls.__name__} is a builtin descriptor")
    return call(tx, FunctionVar(fn=get), [wrap_unguarded(attr), obj, ObjVar(cls)], {})


def _cached_property(
    tx: Tracer, obj: NewObjectVar, name: str, attr: functools.cached_property
) -> Var:
    """functools.cached_property on an instance built in the trace: its function called once,
    the value stored in the instance's __dict__ under the property's name, where later reads
    find it first (the property is not a data descriptor), as eagerly."""
    if attr.attrname is None or not isinstance(attr.func, types.FunctionType):
        raise Break(f"cached_property {name!r} without a name or a Python function")
    value = call(tx, FunctionVar(fn=attr.func), [obj], {})
    tx.changed(obj)
    obj.fields[attr.attrname] = value
    return value


def store_new_object_attr(tx: Tracer, obj: NewObjectVar, name: str, value: Var) -> None:
    tx.changed(obj)
    setattr_fn = python_method(obj.cls, "__setattr__")
    if setattr_fn is not None:
        _call_fn(tx, setattr_fn, [obj, ConstVar(name), value], name)
        return
    raw_store(tx, obj, name, value)


def raw_store(tx: Tracer, obj: NewObjectVar, name: str, value: Var) -> None:
    """object.__setattr__: a data descriptor of the class takes the write (its __set__ or a
    property's setter inlined where written in Python), else the instance."""
    attr = inspect.getattr_static(obj.cls, name, None)
    if isinstance(attr, types.MemberDescriptorType):
        obj.fields[name] = value  # a slot: rebuilt through its descriptor
        return
    if not hasattr(type(attr), "__set__"):
        if not has_instance_dict(obj.cls):
            raise Break(
                f"attribute {name!r} of a {obj.cls.__name__}, which has only __slots__: "
                "it raises in Python"
            )
        obj.fields[name] = value
        return
    if isinstance(attr, property):
        setter, args = attr.fset, [obj, value]
    else:
        setter, args = python_method(type(attr), "__set__"), [wrap_unguarded(attr), obj, value]
    if not isinstance(setter, types.FunctionType):
        raise Break(f"attribute {name!r} of {obj.cls.__name__} is set through a descriptor")
    call(tx, FunctionVar(fn=setter), args, {})


def delete_new_object_attr(tx: Tracer, obj: NewObjectVar, name: str) -> None:
    tx.changed(obj)
    delattr_fn = python_method(obj.cls, "__delattr__")
    if delattr_fn is not None:
        _call_fn(tx, delattr_fn, [obj, ConstVar(name)], name)
        return
    if name not in obj.fields:
        raise Raised(ExceptionVar(AttributeError, [ConstVar(name)]))
    del obj.fields[name]


def object_method(
    tx: Tracer, obj: NewObjectVar, name: str, args: list[Var], kwargs: dict[str, Var]
) -> Var:
    """A builtin method of object or of the mapping base, on an instance built in the trace
    (reached through super() or because the class keeps the builtin one)."""
    if name == "__setattr__" and len(args) == 2:
        raw_store(tx, obj, const_name(args[0]), args[1])
        return ConstVar(None)
    if name == "__getattribute__" and len(args) == 1:
        key = const_name(args[0])
        if key in obj.fields:
            return obj.fields[key]
        return new_object_attr(tx, obj, key)
    if name == "__delattr__" and len(args) == 1:
        key = const_name(args[0])
        if key not in obj.fields:
            raise Raised(ExceptionVar(AttributeError, [ConstVar(key)]))
        del obj.fields[key]
        return ConstVar(None)
    if name == "__init__" and obj.items is None and not args and not kwargs:
        return ConstVar(None)
    if obj.items is not None:  # dict's own method, on the mapping the instance holds
        return call_method(tx, obj.items, name, args, kwargs)
    raise Break(f"method {name!r} of a {obj.cls.__name__} built during tracing")


def const_name(v: Var) -> str:
    if isinstance(v, ConstVar) and isinstance(v.value, str):
        return v.value
    raise Break("an attribute name that is not a constant string")


# ---- attributes of real objects -------------------------------------------------------------


def attr_value(tx: Tracer, value: Any, src: str | None, name: str) -> Var:
    """The attribute `name` of a real object read through `src` (guarded there), its value
    `value`; an object without a source gives its attribute unguarded."""
    if src is None:
        if isinstance(value, torch.Tensor):
            raise Break(f"tensor attribute {name!r} of an object built during tracing")
        return wrap_unguarded(value)
    return wrap(tx, value, f"{src}.{name}")


def class_attr(tx: Tracer, obj: Var, cls: type, name: str, attr: Any) -> Var:
    """`obj.name` where the lookup found `attr` on `obj`'s class `cls`: a method bound to it,
    a property's getter inlined, a plain class attribute read."""
    src = obj.source
    if isinstance(attr, types.FunctionType):
        fn_src = f"type({src}).{name}" if src else None
        return MethodVar(FunctionVar(fn=attr, source=fn_src), obj)
    if isinstance(attr, staticmethod):
        return FunctionVar(fn=attr.__func__)
    if isinstance(attr, classmethod):
        return MethodVar(FunctionVar(fn=attr.__func__), ObjVar(cls))
    if isinstance(attr, property) and isinstance(attr.fget, types.FunctionType):
        return call(tx, FunctionVar(fn=attr.fget), [obj], {})
    if isinstance(
        attr, (types.BuiltinFunctionType, types.MethodDescriptorType, types.WrapperDescriptorType)
    ):
        raise Break(f"builtin method {cls.__name__}.{name} runs in Python")
    value = getattr(obj.held, name) if isinstance(obj, ObjVar) else attr
    return attr_value(tx, value, src, name)


# ---- attribute writes to real objects -------------------------------------------------------


def writable(obj: ObjVar, name: str) -> bool:
    """A real object whose attribute `name` object.__setattr__ may write in the trace: an
    instance with a __dict__, read from a source, no descriptor of its class for the name,
    and no __setattr__ / __delattr__ written in C (those written in Python are inlined)."""
    cls = type(obj.held)
    if obj.source is None or isinstance(obj.held, (type, types.ModuleType, torch.nn.Module)):
        return False
    for slot in ("__setattr__", "__delattr__"):
        if getattr(cls, slot) is not getattr(object, slot) and python_method(cls, slot) is None:
            return False
    if not isinstance(getattr(obj.held, "__dict__", None), dict):
        return False
    return not hasattr(type(inspect.getattr_static(cls, name, None)), "__set__")


def written_attr(tx: Tracer, obj: ObjVar, name: str) -> Any:
    """The value the trace wrote to `obj.name` earlier (raising as a deleted one would), or
    _MISSING when the trace has not written it."""
    writes = tx.attr_writes.get(id(obj.held))
    if writes is None or name not in writes.values:
        return _MISSING
    value = writes.values[name]
    if value is None:
        raise Raised(
            ExceptionVar(
                AttributeError,
                [ConstVar(f"'{type(obj.held).__name__}' object has no attribute '{name}'")],
            )
        )
    return value


def write_attr(tx: Tracer, obj: ObjVar, name: str, value: Var | None) -> None:
    """Record `obj.name = value` (`del obj.name` for None) to replay after the graph."""
    tx.changed()
    writes = tx.attr_writes.setdefault(id(obj.held), AttrWrites(obj))
    if value is None and writes.values.get(name) is None:
        # deleting what the trace did not write: whether it exists is not guarded
        raise Break(f"del of attribute {name!r} of a {type(obj.value).__name__} runs in Python")
    writes.values[name] = value
