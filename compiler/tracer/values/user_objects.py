"""Objects and classes: real objects read from the frame (`ObjVar`: instances, classes,
builtins, and nn.Modules and Python modules, whose attributes values/modules.py reads),
instances of Python classes built in the trace (`NewObjectVar`), `super()` and exceptions
raised in the trace. Their dunders written in Python are inlined (compiler/tracer/objects.py)."""

from __future__ import annotations

import functools
import inspect
import operator
import types
from typing import TYPE_CHECKING, Any, Callable

import torch

from compiler.tracer import builtin_fns, calls, construct, objects, operations
from compiler.tracer.breaks import Break, Raised
from compiler.tracer.exceptions import exception_attr, raise_python
from compiler.tracer.hints import call_kind
from compiler.tracer.lookups import python_method
from compiler.tracer.marked import marked_call
from compiler.tracer.values import containers, modules, torch_functions
from compiler.tracer.values.numbers import describe_value, same_value
from compiler.tracer.values.table import VALUE_OPS, ValueOps, describe
from compiler.tracer.variables import (
    AttrCallVar,
    ConstVar,
    DictVar,
    ExceptionVar,
    FunctionVar,
    MethodVar,
    NewObjectVar,
    ObjVar,
    SuperVar,
    TensorVar,
    Var,
    is_python_constant,
    key_var,
)
from compiler.tracer.wrap import wrap, wrap_unguarded

if TYPE_CHECKING:
    from compiler.tracer.context import Emitter, Tracer

_MISSING = object()


# ---- attributes of real objects ------------------------------------------------------------------


def _attr(tx: Tracer, obj: ObjVar, name: str) -> Var:
    value = obj.held  # its type decides; the object itself is pinned only where read
    if isinstance(value, torch.nn.Module):
        return modules.module_attr(tx, obj, name)
    if isinstance(value, types.ModuleType):
        return modules.module_member(tx, obj, name)
    return _object_attr(tx, obj, name)


def _object_attr(tx: Tracer, obj: ObjVar, name: str) -> Var:
    value = obj.held
    if isinstance(value, type):
        try:
            attr = inspect.getattr_static(value, name)
        except AttributeError:
            raise Break(f"{value.__name__} has no attribute {name!r}") from None
        if isinstance(attr, staticmethod):
            return FunctionVar(fn=attr.__func__)
        if isinstance(attr, classmethod):
            return MethodVar(FunctionVar(fn=attr.__func__), obj)
        if isinstance(attr, types.FunctionType):
            return FunctionVar(fn=attr)
        return objects.attr_value(tx, getattr(value, name), obj.source, name)
    if obj.source is not None and type(value).__module__.startswith("torch.backends."):
        # a backend flag (torch.backends.cuda.matmul.allow_tf32): its getter reads torch's
        # global state, so it is read now and guarded, as the trace depends on its value
        try:
            found = getattr(value, name)
        except AttributeError:
            found = _MISSING
        if isinstance(found, (bool, int, float, str, type(None))):
            return wrap(tx, found, f"{obj.source}.{name}")
    # Python's order: type(obj).__getattribute__ (object's, or one written in Python, which
    # is inlined), then __getattr__ where that raised AttributeError.
    getattribute = python_method(type(value), "__getattribute__")
    getattr_fn = python_method(type(value), "__getattr__")
    unwound = tx.unwound
    try:
        if getattribute is not None:
            return calls.call(tx, FunctionVar(fn=getattribute), [obj, ConstVar(name)], {})
        return object_getattribute(tx, obj, name)
    except Raised as r:
        if getattr_fn is None or not issubclass(r.exc.cls, AttributeError):
            raise
        tx.unwound = unwound  # caught here, as Python's attribute lookup does, not by a handler
    return calls.call(tx, FunctionVar(fn=getattr_fn), [obj, ConstVar(name)], {})


def object_getattribute(tx: Tracer, obj: ObjVar, name: str) -> Var:
    """object.__getattribute__ on a real object: what the trace wrote to it, data descriptors
    of its class, its instance attributes, then its class's other attributes. An instance
    attribute is read through its source, whose guard checks it; an object guarded by its
    type alone also gets a guard that the class's attribute is not shadowed."""
    value = obj.held
    written = objects.written_attr(tx, obj, name)
    if objects.found(written):
        return written
    if name == "__dict__" and id(value) in tx.attr_writes:
        raise Break("reading __dict__ of an object whose attributes the trace wrote")
    cls = type(value)
    class_member = inspect.getattr_static(cls, name, _MISSING)
    instance_dict = getattr(value, "__dict__", None)
    data_descriptor = hasattr(type(class_member), "__set__")
    if not data_descriptor and isinstance(instance_dict, dict) and name in instance_dict:
        return objects.attr_value(tx, instance_dict[name], obj.source, name)
    if class_member is _MISSING:
        # AttributeError, as object.__getattribute__ raises it; a __getattr__ the class
        # writes in Python is then called (_object_attr); one written in C is not traced
        getattr_fn = getattr(cls, "__getattr__", None)
        if cls.__getattribute__ is object.__getattribute__ and (
            getattr_fn is None or python_method(cls, "__getattr__") is not None
        ):
            message = f"'{cls.__name__}' object has no attribute '{name}'"
            raise Raised(ExceptionVar(AttributeError, [ConstVar(message)]))
        raise Break(f"{cls.__name__} object has no attribute {name!r} the tracer can see")
    if isinstance(value, (types.MethodType, types.BuiltinMethodType)):
        raise Break(f"attribute {name!r} of {describe(obj)} is not traced")
    if obj.identity is not None and isinstance(instance_dict, dict):
        tx.guards.add(
            "HASATTR",
            obj.source,
            f"{name!r} not in {obj.source}.__dict__",
            f"{obj.source}.{name} is its class's",
            tx.builder.line,
        )
    return objects.class_attr(tx, obj, cls, name, class_member)


def _store_attr(tx: Tracer, obj: ObjVar, name: str, value: Var) -> Any:
    # by `held`: the type is guarded, and a write replayed through the object's source needs
    # no guard that it is the same object (a new argument object per call reuses the entry);
    # whether it is another object the trace read is guarded (wrap.object_alias_guards)
    if not isinstance(obj.held, torch.nn.Module):
        if objects.found(objects.call_dunder(tx, obj, "__setattr__", [ConstVar(name), value])):
            return None
        if objects.writable(obj, name):
            objects.write_attr(tx, obj, name, value)
            return None
    if isinstance(obj.value, torch.nn.Module) and isinstance(value, TensorVar):
        current = modules.module_attr(tx, obj, name) if hasattr(obj.value, name) else None
        if isinstance(current, TensorVar) and current.fake is value.fake:
            # `self.count += 1` on a buffer: updated in place, the attribute is unchanged
            return None
    if isinstance(obj.value, torch.nn.Module) and modules.traced_attr_write(obj, name, value):
        objects.write_attr(tx, obj, name, value)  # `self.calls += 1`, `self.buf = self.buf + 1`
        return None
    return NotImplemented


def _delete_attr(tx: Tracer, obj: ObjVar, name: str) -> Any:
    if objects.found(objects.call_dunder(tx, obj, "__delattr__", [ConstVar(name)])):
        return None
    if objects.writable(obj, name):
        objects.write_attr(tx, obj, name, None)
        return None
    return NotImplemented


# ---- calls and methods of real objects -----------------------------------------------------------


def call_object(tx: Tracer, fn: ObjVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    value = fn.value
    marked = marked_call(tx, value, args, kwargs)
    if marked is not None:
        return marked
    if isinstance(value, torch.nn.Module):
        return modules.call_module(tx, fn, args, kwargs)
    try:
        special = builtin_fns.SPECIAL.get(value)
    except TypeError:  # unhashable callable
        special = None
    if special is not None:
        return special(tx, args, kwargs)
    by_type = calls.call_by_type(tx, fn, args, kwargs)
    if by_type is not NotImplemented:
        return by_type
    if builtin_fns.is_pure_builtin(value) or builtin_fns.folds_numpy_scalars(value, args, kwargs):
        return builtin_fns.fold(tx, value, args, kwargs)
    if isinstance(value, type):
        return construct.construct_object(tx, fn, args, kwargs)
    if calls.is_torch_function(value):
        return torch_functions.torch_call(tx, value, args, kwargs)
    if isinstance(value, types.MethodType) and isinstance(value.__func__, types.FunctionType):
        self_src = f"{fn.source}.__self__" if fn.source else None
        self_var = (
            wrap(tx, value.__self__, self_src) if self_src else wrap_unguarded(value.__self__)
        )
        return calls.call(tx, FunctionVar(fn=value.__func__), [self_var, *args], kwargs)
    if isinstance(value, types.FunctionType):
        return calls.call(tx, FunctionVar(fn=value, source=fn.source), args, kwargs)
    if isinstance(value, functools.partial) and fn.source:
        inner = wrap(tx, value.func, f"{fn.source}.func")
        bound = [wrap(tx, a, f"{fn.source}.args[{i}]") for i, a in enumerate(value.args)]
        kw = {k: wrap(tx, v, f"{fn.source}.keywords[{k!r}]") for k, v in value.keywords.items()}
        return calls.call(tx, inner, [*bound, *args], {**kw, **kwargs})
    call_attr = inspect.getattr_static(type(value), "__call__", None)
    if isinstance(call_attr, types.FunctionType):
        return calls.call(tx, FunctionVar(fn=call_attr), [fn, *args], kwargs)
    if _tensor_method_descriptor(value) and args and isinstance(args[0], TensorVar):
        # `torch.Tensor.add(x, 3)`, `map(torch.Tensor.relu, xs)`: the method called on x
        return calls.call_method(tx, args[0], value.__name__, list(args[1:]), kwargs)
    raise Break(
        f"call to {describe(fn)} runs in Python (it is not a torch op or Python code)",
        call_kind(value),
    )


def _tensor_method_descriptor(value: object) -> bool:
    """A method of torch.Tensor's C base read from the class (unbound)."""
    return isinstance(
        value, (types.MethodDescriptorType, types.WrapperDescriptorType)
    ) and value.__objclass__ in (torch._C.TensorBase, torch.Tensor)


def _method(tx: Tracer, obj: ObjVar, name: str, args: list[Var], kwargs: dict) -> Var:
    if name in ("__getattribute__", "__setattr__", "__delattr__"):
        return _real_object_method(tx, obj, name, args)
    if isinstance(obj.value, torch.nn.Module):
        return modules.module_method(tx, obj, name, args, kwargs)
    return NotImplemented


def _real_object_method(tx: Tracer, obj: ObjVar, name: str, args: list[Var]) -> Var:
    """object's own attribute methods on a real object, reached through super() from the
    ones its class writes in Python (a config's __getattribute__ and __setattr__)."""
    key = objects.const_name(args[0]) if args else ""
    if name == "__getattribute__" and len(args) == 1:
        return object_getattribute(tx, obj, key)
    if name in ("__setattr__", "__delattr__") and objects.writable(obj, key):
        value = args[1] if name == "__setattr__" and len(args) == 2 else None
        objects.write_attr(tx, obj, key, value)
        return ConstVar(None)
    raise Break(f"object.{name} on a {type(obj.value).__name__} runs in Python")


# ---- operators written in Python -------------------------------------------------------------

# `a op b` by the method of a's class, then the reflected one of b's
_OPERATOR_METHODS = {
    operator.add: ("__add__", "__radd__"), operator.sub: ("__sub__", "__rsub__"),
    operator.mul: ("__mul__", "__rmul__"), operator.truediv: ("__truediv__", "__rtruediv__"),
    operator.floordiv: ("__floordiv__", "__rfloordiv__"), operator.mod: ("__mod__", "__rmod__"),
    operator.pow: ("__pow__", "__rpow__"), operator.matmul: ("__matmul__", "__rmatmul__"),
    operator.and_: ("__and__", "__rand__"), operator.or_: ("__or__", "__ror__"),
    operator.xor: ("__xor__", "__rxor__"), operator.lshift: ("__lshift__", "__rlshift__"),
    operator.rshift: ("__rshift__", "__rrshift__"),
    operator.lt: ("__lt__", "__gt__"), operator.le: ("__le__", "__ge__"),
    operator.gt: ("__gt__", "__lt__"), operator.ge: ("__ge__", "__le__"),
}  # fmt: skip


def _answer(out: Any) -> Any:
    """A dunder's result, or NotImplemented where the class has none or declined."""
    if not objects.found(out) or operations.is_not_implemented(out):
        return NotImplemented
    return out


def _binary(tx: Tracer, op: Callable, a: Var, b: Var) -> Any:
    """`a op b` (`a op= b`) by the operator methods a's class writes in Python; the reflected
    method of b's class is tried by the dispatcher (`_rbinary`)."""
    if op is operator.or_ and _union_operand(a) and _union_operand(b):
        return _union(a, b)
    fallback = operations.INPLACE_FALLBACK.get(op)
    if fallback is not None:
        out = _answer(objects.call_dunder(tx, a, f"__i{op.__name__[1:]}__", [b]))
        if out is not NotImplemented:
            return out
        op = fallback
    names = _OPERATOR_METHODS.get(op)
    if names is None:
        return NotImplemented
    return _answer(objects.call_dunder(tx, a, names[0], [b]))


def _rbinary(tx: Tracer, op: Callable, a: Var, b: Var) -> Any:
    if op is operator.or_ and _union_operand(a) and _union_operand(b):
        return _union(a, b)
    names = _OPERATOR_METHODS.get(operations.INPLACE_FALLBACK.get(op, op))
    if names is None or objects.class_of(a) is objects.class_of(b):
        return NotImplemented  # Python reflects only onto another class
    return _answer(objects.call_dunder(tx, b, names[1], [a]))


_UNARY_METHODS = {
    operator.neg: "__neg__",
    operator.pos: "__pos__",
    operator.invert: "__invert__",
    operator.abs: "__abs__",
}


def _unary(tx: Tracer, op: Callable, a: Var) -> Var:
    """`-a`, `+a`, `~a`, `abs(a)` by the method a's class writes in Python."""
    name = _UNARY_METHODS.get(op)
    out = objects.call_dunder(tx, a, name, []) if name is not None else None
    if name is None or not objects.found(out):
        raise Break(f"operator {op.__name__} on {describe(a)} is not traced")
    return out


# ---- subscripts, truth, membership, iteration of real objects ----------------------------------


def _getitem(tx: Tracer, obj: ObjVar, index: Var) -> Var:
    if _is_annotation_form(obj.held):
        return _annotation(obj, index)
    if construct.is_plain_enum(obj.held) and is_python_constant(index):
        return builtin_fns.fold(tx, operator.getitem, [obj, index], {})  # `Color["RED"]`
    if not isinstance(obj.value, modules.CONTAINERS):
        return NotImplemented
    return modules.container_getitem(tx, obj, operations.const_index(index))


def _is_annotation_form(value: Any) -> bool:
    """A generic class or typing form whose subscript only builds an annotation object
    (`list[int]`, `dict[str, torch.Tensor]`, `typing.Optional[X]`, `typing.List[X]`, a
    `Generic[T]` subclass): the class's __class_getitem__ is C's, types.GenericAlias or
    typing's, or the form is typing's."""
    if isinstance(value, type):
        make = getattr(value, "__class_getitem__", None)
        fn = getattr(make, "__func__", None)
        return (
            isinstance(make, types.BuiltinMethodType)
            or fn is types.GenericAlias
            or getattr(fn, "__module__", None) == "typing"
        )
    return isinstance(value, (types.GenericAlias, types.UnionType)) or (
        type(value).__module__ == "typing"
    )


def _union_operand(v: Var) -> bool:
    """A side of `X | None` in an annotation (PEP 604): None, a class whose metaclass keeps
    type's `|`, or an annotation object."""
    if isinstance(v, ConstVar):
        return v.value is None
    if not isinstance(v, ObjVar):
        return False
    if isinstance(v.held, type):
        return type(v.held).__or__ is type.__or__
    return _is_annotation_form(v.held)


def _union(a: Var, b: Var) -> Var:
    """`a | b` of classes and annotations: a union, made at trace time as eager makes it."""
    try:
        return wrap_unguarded(
            operations.as_python_constant_or_none(a) | operations.as_python_constant_or_none(b)
        )
    except Exception as e:
        raise raise_python(e) from None


def _annotation(obj: ObjVar, index: Var) -> Var:
    """`form[index]`, made at trace time as eager makes it: no effect, and a result that
    depends only on the form and the classes and constants it is given."""
    try:
        return wrap_unguarded(obj.value[operations.as_python_constant_or_none(index)])
    except Exception as e:
        raise raise_python(e) from None


def _hashed_by_address(cls: type) -> bool:
    """Instances of `cls` hash and compare by their address: it keeps object's __hash__
    and __eq__ (modules, classes, functions, most objects)."""
    return cls.__hash__ is object.__hash__ and cls.__eq__ is object.__eq__


def _identity(v: ObjVar) -> Any:
    """A real object hashed by its address, as a dict key: the object, pinned, since which
    object it is decides what the dict finds."""
    if v.opaque or not _hashed_by_address(type(v.held)):
        return NotImplemented
    return v.value


def _truth(tx: Tracer, v: ObjVar) -> bool:
    value = v.value
    if isinstance(value, modules.CONTAINERS):
        return len(value) > 0
    if isinstance(
        value,
        (
            torch.nn.Module,
            types.FunctionType,
            type,
            types.ModuleType,
            types.BuiltinFunctionType,
        ),
    ):
        return True
    raise Break(f"truth value of {describe(v)} is not traced")


def _contains(tx: Tracer, container: ObjVar, item: Var) -> Any:
    if isinstance(item, TensorVar) or not isinstance(container.value, torch.nn.ModuleDict):
        return NotImplemented
    return operations.const_index(item) in container.value


def _iterate(tx: Tracer, v: ObjVar) -> list[Var]:
    if construct.is_plain_enum(v.held):
        return [wrap_unguarded(member) for member in v.value]  # the class is guarded
    if isinstance(v.value, modules.CONTAINERS) and v.source is not None:
        return modules.container_items(tx, v)
    out = objects.call_dunder(tx, v, "__iter__", [])
    if objects.found(out):
        return operations.unpack_iterable(tx, out)
    return NotImplemented


VALUE_OPS[ObjVar] = ValueOps(
    describe=describe_value,
    attr=_attr,
    store_attr=_store_attr,
    delete_attr=_delete_attr,
    call=call_object,
    method=_method,
    getitem=_getitem,
    binary=_binary,
    rbinary=_rbinary,
    own_operators=True,
    foldable=False,
    truth=_truth,
    same=same_value,
    identity=_identity,
    contains=_contains,
    iterate=_iterate,
    rebuild=lambda em, v: em.ref(v.value, "obj"),
)


def _id(tx: Tracer, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """`id(obj)` of a real object the entry pins (its identity is guarded), or of a
    singleton constant; the address of anything else changes from call to call."""
    if len(args) != 1 or kwargs:
        raise Break("id() with these arguments")
    v = args[0]
    if isinstance(v, ObjVar) and not v.opaque:
        return ConstVar(id(v.value))
    if isinstance(v, FunctionVar) and v.fn is not None and v.source is not None:
        return ConstVar(id(v.fn))
    if isinstance(v, ConstVar) and (v.value is None or type(v.value) is bool):
        return ConstVar(id(v.value))
    raise Break(f"id() of {describe(v)}: its address is not known while tracing")


builtin_fns.SPECIAL[id] = _id


# ---- instances built in the trace ---------------------------------------------------------------


def _new_object_mapping(tx: Tracer, obj: NewObjectVar, name: str, args: list[Var]) -> Var:
    if obj.items is None:
        return NotImplemented
    if name == "__eq__" and len(args) == 1:
        return containers.mappings_equal(tx, obj, args[0])
    return objects.object_method(tx, obj, name, args, {})


def _new_object_truth(tx: Tracer, v: NewObjectVar) -> bool:
    for name in ("__bool__", "__len__"):
        out = objects.call_dunder(tx, v, name, [])
        if objects.found(out):
            return operations.truth(tx, out)
    return bool(v.items.items) if v.items is not None else True


def _new_object_contains(tx: Tracer, container: NewObjectVar, item: Var) -> Any:
    if container.items is None:
        return NotImplemented
    return operations.dict_key(item) in container.items.items


def _new_object_iterate(tx: Tracer, v: NewObjectVar) -> list[Var]:
    out = objects.call_dunder(tx, v, "__iter__", [])
    if objects.found(out):
        return operations.unpack_iterable(tx, out)
    if v.items is not None:
        return [key_var(k) for k in v.items.items]
    return NotImplemented


def _new_object(cls: type, fields: dict, items: dict | None) -> Any:
    """An instance built in the trace, made for real from its state, as its constructor left
    it: no constructor runs again. The mapping of a dict subclass is filled through the
    builtin base's methods, which the subclass may have replaced (ModelOutput's raise)."""
    obj = cls.__new__(cls)
    if items:
        base = objects.mapping_base(cls)
        for key, value in items.items():
            base.__setitem__(obj, key, value)
    for name, value in fields.items():
        if objects.is_slot(cls, name):
            inspect.getattr_static(cls, name).__set__(obj, value)
        else:
            obj.__dict__[name] = value
    return obj


def _new_object_rebuild(em: Emitter, v: NewObjectVar) -> str:
    fields = ", ".join(f"{k!r}: {em.expr(i)}" for k, i in v.fields.items())
    items = em.expr(v.items) if v.items is not None else "None"
    return f"{em.ref(_new_object, 'fn')}({em.ref(v.cls, 'cls')}, {{{fields}}}, {items})"


VALUE_OPS[NewObjectVar] = ValueOps(
    attr=objects.new_object_attr,
    store_attr=objects.store_new_object_attr,
    delete_attr=objects.delete_new_object_attr,
    method=objects.object_method,
    mapping=_new_object_mapping,
    binary=_binary,
    rbinary=_rbinary,
    own_operators=True,
    unary=_unary,
    truth=_new_object_truth,
    identity=lambda v: v if _hashed_by_address(v.cls) else NotImplemented,
    contains=_new_object_contains,
    iterate=_new_object_iterate,
    rebuild=_new_object_rebuild,
    one_object=True,
    replay_children=lambda v: list(v.fields.values()),
)


# ---- super() and exceptions ------------------------------------------------------------------


def _super_attr(tx: Tracer, sup: SuperVar, name: str) -> Var:
    mro = (objects.class_of(sup.obj) or sup.cls).__mro__
    after = mro[mro.index(sup.cls) + 1 :]
    for klass in after:
        if name in klass.__dict__:
            attr = klass.__dict__[name]
            if isinstance(attr, types.FunctionType):
                return MethodVar(FunctionVar(fn=attr), sup.obj)
            if isinstance(attr, property) and isinstance(attr.fget, types.FunctionType):
                return calls.call(tx, FunctionVar(fn=attr.fget), [sup.obj], {})
            if klass in objects.MAPPING_BASES + (object,) and isinstance(
                sup.obj, (NewObjectVar, DictVar, ObjVar)
            ):
                return AttrCallVar(sup.obj, name)  # object's or dict's own method
            break
    raise Break(f"super().{name} is not traced")


def _exception_rebuild(em: Emitter, v: ExceptionVar) -> str:
    if v.cause is not None:
        raise TypeError(f"cannot rebuild a {type(v).__name__}")
    # an exception raised and caught in the trace, kept in a variable: its class and
    # arguments (the traceback of a raise that happened only in the trace is empty)
    args = "".join(f"{em.expr(a)}, " for a in v.args)
    return f"{em.ref(v.cls, 'cls')}({args})"


VALUE_OPS[SuperVar] = ValueOps(
    attr=_super_attr,
    rebuild=lambda em, v: f"super({em.ref(v.cls, 'cls')}, {em.expr(v.obj)})",
)

VALUE_OPS[ExceptionVar] = ValueOps(
    attr=lambda tx, e, name: exception_attr(e, name),
    truth=lambda tx, e: True,
    rebuild=_exception_rebuild,
)
