"""Attribute access, subscripts, operators, truth and iteration over tracer values."""

from __future__ import annotations

import inspect
import operator
import types
from typing import TYPE_CHECKING, Any, Callable

import torch

from compiler.runtime.static import mark_static_address
from compiler.tracer import generators, objects
from compiler.tracer.breaks import Break, Raised
from compiler.tracer.exceptions import exception_attr, raise_python
from compiler.tracer.lookups import MISSING, lookup
from compiler.tracer.variables import (
    AttrCallVar,
    ConstVar,
    DictVar,
    ExceptionVar,
    FunctionVar,
    GradModeVar,
    IteratorVar,
    ListVar,
    MethodVar,
    NewObjectVar,
    NullVar,
    ObjVar,
    SetVar,
    SuperVar,
    TensorVar,
    TupleVar,
    Var,
    as_python_constant,
    is_python_constant,
    tuple_fields,
)
from compiler.tracer.wrap import wrap, wrap_unguarded

if TYPE_CHECKING:
    from compiler.tracer.translator import Tracer

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

# Tensor attributes that are metadata: constants, since the tensor's guards pin them.
TENSOR_META = {
    "shape", "dtype", "device", "ndim", "requires_grad", "is_cuda", "is_leaf", "layout",
    "is_sparse", "is_quantized", "is_meta", "is_mkldnn", "is_complex", "is_nested", "itemsize",
}  # fmt: skip
TENSOR_VIEW_ATTRS = {"T", "mT", "H", "mH", "real", "imag"}
_CONTAINERS = (
    torch.nn.ModuleList,
    torch.nn.Sequential,
    torch.nn.ModuleDict,
    torch.nn.ParameterList,
)


def describe(v: Var) -> str:
    if isinstance(v, (ObjVar, ConstVar)):
        value = v.value
        name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
        module = getattr(value, "__module__", None)
        if name:
            return f"{module}.{name}" if module and module != "builtins" else name
        return f"a {type(value).__name__} object"
    if isinstance(v, FunctionVar):
        code = v.get_code()
        return f"{code.co_name} ({code.co_filename}:{code.co_firstlineno})"
    if isinstance(v, TensorVar):
        return "a tensor"
    return type(v).__name__.replace("Var", "").lower()


# ---- attributes --------------------------------------------------------------------------------


def load_attr(tx: Tracer, obj: Var, name: str) -> Var:
    if isinstance(obj, TensorVar):
        return _tensor_attr(tx, obj, name)
    if isinstance(obj, ObjVar):
        value = obj.held  # its type decides; the object itself is pinned only where read
        if isinstance(value, torch.nn.Module):
            return module_attr(tx, obj, name)
        if isinstance(value, types.ModuleType):
            return _module_member(tx, obj, name)
        return _object_attr(tx, obj, name)
    if isinstance(obj, ConstVar):
        try:
            attr = getattr(obj.value, name)
        except AttributeError as e:
            raise raise_python(e) from None
        return wrap_unguarded(attr)
    if isinstance(obj, DictVar) and obj.cls is not dict:
        method = objects.python_method(obj.cls, name)  # a dict subclass's own method
        if method is not None:
            return MethodVar(FunctionVar(fn=method), obj)
    if isinstance(obj, (ListVar, DictVar, SetVar)):
        return AttrCallVar(obj, name)
    if isinstance(obj, TupleVar):
        fields = tuple_fields(obj.cls)
        if name in fields:
            return obj.items[fields.index(name)]
        return AttrCallVar(obj, name)
    if isinstance(obj, NewObjectVar):
        return objects.new_object_attr(tx, obj, name)
    if isinstance(obj, FunctionVar):
        return _function_attr(tx, obj, name)
    if isinstance(obj, SuperVar):
        return _super_attr(tx, obj, name)
    if isinstance(obj, ExceptionVar):
        return exception_attr(obj, name)
    raise Break(f"attribute {name!r} of {describe(obj)} is not traced")


# A function's code and names: stable for the function object, whose identity is guarded.
_FUNCTION_CONSTANTS = ("__code__", "__name__", "__qualname__", "__module__", "__doc__")


def _function_attr(tx: Tracer, fn: FunctionVar, name: str) -> Var:
    if name == "__class__":
        return ObjVar(types.FunctionType)
    if fn.fn is None:  # made in the trace by MAKE_FUNCTION
        if name in ("__name__", "__qualname__"):
            return ConstVar(fn.name or fn.code.co_name)
        if name == "__module__":  # torchvision's _log_api_usage_once(fn) names its module
            return ConstVar(fn.get_globals().get("__name__"))
        if name == "__code__":
            return ObjVar(fn.code)
        raise Break(f"attribute {name!r} of a function made while tracing")
    if name in _FUNCTION_CONSTANTS:
        value = getattr(fn.fn, name)
        return ObjVar(value) if isinstance(value, types.CodeType) else wrap_unguarded(value)
    if fn.source is None:
        raise Break(f"attribute {name!r} of {describe(fn)}, which has no source to guard")
    try:
        value = getattr(fn.fn, name)
    except AttributeError as e:
        raise raise_python(e) from None
    return wrap(tx, value, f"{fn.source}.{name}")


def _tensor_attr(tx: Tracer, t: TensorVar, name: str) -> Var:
    if name in TENSOR_META:
        return ConstVar(getattr(t.fake, name))
    if name in TENSOR_VIEW_ATTRS:
        return tx.builder.call("call_function", getattr, [t, ConstVar(name)], {})
    if name == "data":
        return tx.builder.call("call_method", "detach", [t], {})
    if name == "grad":
        if t.source is None:
            raise Break("reading .grad of a tensor computed in the graph")
        real = eval(t.source, tx.guards.namespace, {"L": tx.frame_values, "G": tx.G})
        return wrap(tx, real.grad, f"{t.source}.grad")
    if callable(getattr(torch.Tensor, name, None)):
        return AttrCallVar(t, name)
    raise Break(f"tensor attribute {name!r} is not traced")


def module_attr(tx: Tracer, mod_var: ObjVar, name: str) -> Var:
    """`module.name` in eager's order: a data descriptor of the class (a property), the
    instance's `__dict__`, any other class attribute, and only then, as nn.Module.__getattr__
    is the fallback, the module's tables."""
    mod = mod_var.value
    src = mod_var.source
    d = mod.__dict__
    cls = type(mod)
    if cls.__getattribute__ is not object.__getattribute__:
        raise Break(f"{cls.__name__} has its own __getattribute__: reading .{name} runs in Python")
    attr = lookup(cls, name)
    if hasattr(type(attr), "__set__") or hasattr(type(attr), "__delete__"):
        return _class_attr(tx, mod_var, cls, name, attr)
    if name in d:
        return _attr_value(tx, d[name], src, name)
    if attr is not MISSING:
        if name in MODULE_METHODS and attr is getattr(torch.nn.Module, name) and src is not None:
            return AttrCallVar(mod_var, name)  # called through module_method below
        return _class_attr(tx, mod_var, cls, name, attr)
    for store in ("_parameters", "_buffers", "_modules"):
        table = d.get(store)
        if table is not None and name in table:
            if store == "_buffers" and isinstance(table[name], torch.Tensor):
                mark_static_address(table[name])  # a CUDA graph may read it in place
            return _attr_value(tx, table[name], src, name)
    raise Break(f"{cls.__name__} has no attribute {name!r}")


def _named_children(tx: Tracer, mod_var: ObjVar) -> list[tuple[str, Var]]:
    """nn.Module.named_children without running its generator (it dedupes through a set of
    modules): each child read from `_modules[name]`, under a guard on the names."""
    modules = mod_var.value._modules
    tx.guards.dict_keys(f"{mod_var.source}._modules", modules)
    seen: set[int] = set()
    out = []
    for key, child in modules.items():
        if child is not None and id(child) not in seen:
            seen.add(id(child))
            out.append((key, wrap(tx, child, f"{mod_var.source}._modules[{key!r}]")))
    return out


MODULE_METHODS: dict[str, Callable[[Tracer, ObjVar], Var]] = {
    # timm's RegStage: `for block in self.children(): x = block(x)`
    "children": lambda tx, m: IteratorVar([v for _, v in _named_children(tx, m)]),
    "named_children": lambda tx, m: IteratorVar(
        [TupleVar([ConstVar(k), v]) for k, v in _named_children(tx, m)]
    ),
}


def module_method(tx: Tracer, mod_var: ObjVar, name: str, args: list[Var], kwargs: dict) -> Var:
    if args or kwargs:
        raise Break(f"nn.Module.{name} with arguments is not traced")
    return MODULE_METHODS[name](tx, mod_var)


_MISSING = object()


def _attr_value(tx: Tracer, value: Any, src: str | None, name: str) -> Var:
    if src is None:
        if isinstance(value, torch.Tensor):
            raise Break(f"tensor attribute {name!r} of an object built during tracing")
        return wrap_unguarded(value)
    return wrap(tx, value, f"{src}.{name}")


def _class_attr(tx: Tracer, obj: Var, cls: type, name: str, attr: Any) -> Var:
    src = obj.source
    if isinstance(attr, types.FunctionType):
        fn_src = f"type({src}).{name}" if src else None
        return MethodVar(FunctionVar(fn=attr, source=fn_src), obj)
    if isinstance(attr, staticmethod):
        return FunctionVar(fn=attr.__func__)
    if isinstance(attr, classmethod):
        return MethodVar(FunctionVar(fn=attr.__func__), ObjVar(cls))
    if isinstance(attr, property) and isinstance(attr.fget, types.FunctionType):
        from compiler.tracer.calls import call

        return call(tx, FunctionVar(fn=attr.fget), [obj], {})
    if isinstance(
        attr, (types.BuiltinFunctionType, types.MethodDescriptorType, types.WrapperDescriptorType)
    ):
        raise Break(f"builtin method {cls.__name__}.{name} runs in Python")
    value = getattr(obj.held, name) if isinstance(obj, ObjVar) else attr
    return _attr_value(tx, value, src, name)


def _module_member(tx: Tracer, mod_var: ObjVar, name: str) -> Var:
    try:
        value = getattr(mod_var.value, name)
    except AttributeError as e:
        raise raise_python(e) from None
    if isinstance(
        value, (types.FunctionType, type, types.ModuleType, types.BuiltinFunctionType)
    ) or callable(value):
        # Module members are looked up again at every call only through the module itself,
        # whose identity is guarded: functions are taken as stable, as TorchDynamo does.
        if isinstance(value, types.FunctionType):
            return FunctionVar(
                fn=value, source=f"{mod_var.source}.{name}" if mod_var.source else None
            )
        return ObjVar(value, f"{mod_var.source}.{name}" if mod_var.source else None)
    if mod_var.source is None:
        return wrap_unguarded(value)
    return wrap(tx, value, f"{mod_var.source}.{name}")


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
        return _attr_value(tx, getattr(value, name), obj.source, name)
    # Python's order: type(obj).__getattribute__ (object's, or one written in Python, which
    # is inlined), then __getattr__ where that raised AttributeError.
    getattribute = objects.python_method(type(value), "__getattribute__")
    getattr_fn = objects.python_method(type(value), "__getattr__")
    from compiler.tracer.calls import call

    unwound = tx.unwound
    try:
        if getattribute is not None:
            return call(tx, FunctionVar(fn=getattribute), [obj, ConstVar(name)], {})
        return object_getattribute(tx, obj, name)
    except Raised as r:
        if getattr_fn is None or not issubclass(r.exc.cls, AttributeError):
            raise
        tx.unwound = unwound  # caught here, as Python's attribute lookup does, not by a handler
    return call(tx, FunctionVar(fn=getattr_fn), [obj, ConstVar(name)], {})


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
    class_attr = inspect.getattr_static(cls, name, _MISSING)
    instance_dict = getattr(value, "__dict__", None)
    data_descriptor = hasattr(type(class_attr), "__set__")
    if not data_descriptor and isinstance(instance_dict, dict) and name in instance_dict:
        return _attr_value(tx, instance_dict[name], obj.source, name)
    if class_attr is _MISSING:
        if cls.__getattribute__ is object.__getattribute__ and not hasattr(cls, "__getattr__"):
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
    return _class_attr(tx, obj, cls, name, class_attr)


def _super_attr(tx: Tracer, sup: SuperVar, name: str) -> Var:
    mro = (objects.class_of(sup.obj) or sup.cls).__mro__
    after = mro[mro.index(sup.cls) + 1 :]
    for klass in after:
        if name in klass.__dict__:
            attr = klass.__dict__[name]
            if isinstance(attr, types.FunctionType):
                return MethodVar(FunctionVar(fn=attr), sup.obj)
            if isinstance(attr, property) and isinstance(attr.fget, types.FunctionType):
                from compiler.tracer.calls import call

                return call(tx, FunctionVar(fn=attr.fget), [sup.obj], {})
            if klass in objects.MAPPING_BASES + (object,) and isinstance(
                sup.obj, (NewObjectVar, DictVar, ObjVar)
            ):
                return AttrCallVar(sup.obj, name)  # object's or dict's own method
            break
    raise Break(f"super().{name} is not traced")


def delete_attr(tx: Tracer, obj: Var, name: str) -> None:
    if isinstance(obj, NewObjectVar):
        objects.delete_new_object_attr(tx, obj, name)
        return
    if isinstance(obj, ObjVar) and objects.found(
        objects.call_dunder(tx, obj, "__delattr__", [ConstVar(name)])
    ):
        return
    if isinstance(obj, ObjVar) and objects.writable(obj, name):
        objects.write_attr(tx, obj, name, None)
        return
    raise Break(f"del of attribute {name!r} of {describe(obj)} runs in Python")


def store_attr(tx: Tracer, obj: Var, name: str, value: Var) -> None:
    if isinstance(obj, NewObjectVar):
        objects.store_new_object_attr(tx, obj, name, value)
        return
    if isinstance(obj, ObjVar) and not isinstance(obj.value, torch.nn.Module):
        if objects.found(objects.call_dunder(tx, obj, "__setattr__", [ConstVar(name), value])):
            return
        if objects.writable(obj, name):
            objects.write_attr(tx, obj, name, value)
            return
    if (
        isinstance(obj, ObjVar)
        and isinstance(obj.value, torch.nn.Module)
        and isinstance(value, TensorVar)
    ):
        current = module_attr(tx, obj, name) if hasattr(obj.value, name) else None
        if isinstance(current, TensorVar) and current.fake is value.fake:
            return  # `self.count += 1` on a buffer: updated in place, the attribute is unchanged
    raise Break(f"setting attribute {name!r} on {describe(obj)} runs in Python")


# ---- subscripts ---------------------------------------------------------------------------------


def getitem(tx: Tracer, obj: Var, index: Var) -> Var:
    if isinstance(obj, TensorVar):
        return tx.builder.call("call_function", operator.getitem, [obj, index], {})
    if isinstance(obj, (ListVar, TupleVar)):
        key = _const_index(index)
        if isinstance(key, slice):
            items = obj.items[key]
            return ListVar(list(items)) if isinstance(obj, ListVar) else TupleVar(list(items))
        try:
            return obj.items[key]
        except (IndexError, TypeError) as e:
            raise raise_python(e) from None
    if isinstance(obj, DictVar):
        key = _const_index(index)
        if key not in obj.items:
            raise Raised(ExceptionVar(KeyError, [index]))
        return obj.items[key]
    if isinstance(obj, ConstVar):
        try:
            return wrap_unguarded(obj.value[_const_index(index)])
        except Exception as e:
            raise raise_python(e) from None
    if isinstance(obj, ObjVar) and isinstance(obj.value, _CONTAINERS):
        key = _const_index(index)
        if obj.source is None:
            raise Break("indexing a module container built during tracing")
        if isinstance(key, slice):
            return _module_list_slice(tx, obj, key)
        return wrap(tx, obj.value[key], f"{obj.source}[{key!r}]")
    return _mapping_op(tx, obj, "__getitem__", [index], f"indexing {describe(obj)}")


def _module_list_slice(tx: Tracer, obj: ObjVar, key: slice) -> Var:
    """`layers[:n]`: a new ModuleList of the same modules, each read from its own source."""
    container = obj.value
    if type(container) is not torch.nn.ModuleList:
        raise Break(f"slicing a {type(container).__name__}")
    tx.guards.length(obj.source, container)
    indices = range(len(container))[key]
    items = [wrap(tx, container[i], f"{obj.source}[{i}]") for i in indices]
    return ListVar(items, cls=torch.nn.ModuleList)


def _mapping_op(tx: Tracer, obj: Var, name: str, args: list[Var], what: str) -> Var:
    """A dunder on an instance of a Python class: its own method inlined, else the builtin
    mapping's for a dict subclass built in the trace."""
    out = objects.call_dunder(tx, obj, name, args)
    if objects.found(out):
        return out
    if isinstance(obj, DictVar):
        from compiler.tracer.calls import dict_method

        return dict_method(
            tx, obj if name == "__getitem__" else mutable_dict(tx, obj), name, args, {}
        )
    if isinstance(obj, NewObjectVar) and obj.items is not None:
        return objects.object_method(tx, obj, name, args, {})
    raise Break(f"{what} is not traced")


def _const_index(index: Var) -> Any:
    try:
        return as_python_constant(index)
    except TypeError:
        raise Break("an index that is not a Python constant") from None


def setitem(tx: Tracer, obj: Var, index: Var, value: Var) -> None:
    if isinstance(obj, TensorVar):
        tx.builder.call("call_function", operator.setitem, [obj, index, value], {})
        return
    if isinstance(obj, ListVar):
        key = _const_index(index)
        if isinstance(key, slice):
            mutable_list(tx, obj).items[key] = unpack_iterable(tx, value)
        else:
            mutable_list(tx, obj).items[key] = value
        return
    if isinstance(obj, DictVar) and obj.cls is dict:
        mutable_dict(tx, obj).items[dict_key(index)] = value
        return
    what = f"item assignment on {describe(obj)} that exists outside the graph"
    _mapping_op(tx, obj, "__setitem__", [index, value], what)


def delitem(tx: Tracer, obj: Var, index: Var) -> None:
    if isinstance(obj, ListVar):
        del mutable_list(tx, obj).items[_const_index(index)]
        return
    _mapping_op(tx, obj, "__delitem__", [index], f"del on {describe(obj)}")


def dict_key(v: Var) -> Any:
    key = _const_index(v)
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


def as_dict(tx: Tracer, v: Var) -> DictVar:
    if isinstance(v, DictVar):
        return v
    if isinstance(v, NewObjectVar):
        return DictVar(dict(v.fields))
    raise Break(f"{describe(v)} used as a mapping")


# ---- operators ----------------------------------------------------------------------------------


# `a op= b` on an immutable `a` (a Python number) computes `a op b`: Python finds no in-place
# method and falls back, so the result is a new value (a tensor, when b is one).
_INPLACE_FALLBACK = {
    operator.iadd: operator.add, operator.isub: operator.sub, operator.imul: operator.mul,
    operator.itruediv: operator.truediv, operator.ifloordiv: operator.floordiv,
    operator.imod: operator.mod, operator.ipow: operator.pow, operator.imatmul: operator.matmul,
    operator.iand: operator.and_, operator.ior: operator.or_, operator.ixor: operator.xor,
    operator.ilshift: operator.lshift, operator.irshift: operator.rshift,
}  # fmt: skip


def binary(tx: Tracer, op: Callable, a: Var, b: Var) -> Var:
    if isinstance(a, ConstVar) and op in _INPLACE_FALLBACK:
        op = _INPLACE_FALLBACK[op]
    if isinstance(a, TensorVar) or isinstance(b, TensorVar):
        if not all(isinstance(x, TensorVar) or is_python_constant(x) for x in (a, b)):
            raise Break(
                f"operator {op.__name__} between a tensor and {describe(b if isinstance(a, TensorVar) else a)}"
            )
        return tx.builder.call("call_function", op, [a, b], {})
    # `+=`, `*=` and `|=` change a list or dict in place (every reference sees it); the
    # plain operators make a new one
    if isinstance(a, ListVar) and op is operator.iadd:
        mutable_list(tx, a).items.extend(unpack_iterable(tx, b))
        return a
    if isinstance(a, ListVar) and a.cls is list and op is operator.imul and isinstance(b, ConstVar):
        items = mutable_list(tx, a).items
        items[:] = items * b.value
        return a
    if isinstance(a, DictVar) and a.cls is dict and op is operator.ior and isinstance(b, DictVar):
        mutable_dict(tx, a).items.update(b.items)
        return a
    if (
        isinstance(a, (ListVar, TupleVar))
        and isinstance(b, (ListVar, TupleVar))
        and op in (operator.add, operator.iadd)
    ):
        return type(a)(a.items + b.items) if isinstance(a, ListVar) else TupleVar(a.items + b.items)
    if (
        isinstance(a, (ListVar, TupleVar))
        and isinstance(b, ConstVar)
        and op in (operator.mul, operator.imul)
    ):
        items = a.items * b.value
        return ListVar(items) if isinstance(a, ListVar) else TupleVar(items)
    if isinstance(a, DictVar) and isinstance(b, DictVar) and op in (operator.or_, operator.ior):
        return DictVar({**a.items, **b.items})
    if (
        is_python_constant(a)
        and is_python_constant(b)
        and not isinstance(a, ObjVar)
        and not isinstance(b, ObjVar)
    ):
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
            if objects.found(out) and not _not_implemented(out):
                return out
        out = objects.call_dunder(tx, x, "__eq__", [y])
        if objects.found(out) and not _not_implemented(out):
            return ConstVar(not truth(tx, out)) if negate else out
    return ConstVar(is_same(a, b) != negate)


def _not_implemented(v: Var) -> bool:
    return isinstance(v, (ConstVar, ObjVar)) and v.value is NotImplemented


def unary(tx: Tracer, op: Callable, a: Var) -> Var:
    if isinstance(a, TensorVar):
        return tx.builder.call("call_function", op, [a], {})
    if isinstance(a, ConstVar):
        try:
            return ConstVar(op(a.value))
        except Exception as e:
            raise raise_python(e) from None
    raise Break(f"operator {op.__name__} on {describe(a)} is not traced")


def truth(tx: Tracer, v: Var) -> bool:
    if isinstance(v, ConstVar):
        return bool(v.value)
    if isinstance(v, TensorVar):
        raise Break(
            "data-dependent control flow: the branch depends on the value of a tensor "
            "(Python has to look at the data, so the graph ends here and the condition runs eagerly)",
            "data_dependent_branch",
        )
    if isinstance(v, (ListVar, TupleVar, SetVar)):
        return bool(v.items)
    if isinstance(v, DictVar):
        return bool(v.items)
    if isinstance(v, ObjVar):
        value = v.value
        if isinstance(value, _CONTAINERS):
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
    if isinstance(v, NewObjectVar):
        for name in ("__bool__", "__len__"):
            out = objects.call_dunder(tx, v, name, [])
            if objects.found(out):
                return truth(tx, out)
        return bool(v.items.items) if v.items is not None else True
    if isinstance(v, (FunctionVar, MethodVar, GradModeVar, IteratorVar, AttrCallVar, ExceptionVar)):
        return True
    raise Break(f"truth value of {describe(v)} is not traced")


def is_none(v: Var) -> bool:
    return isinstance(v, ConstVar) and v.value is None


def is_same(a: Var, b: Var) -> bool:
    if a is b:
        return True
    if isinstance(a, (ConstVar, ObjVar)) and isinstance(b, (ConstVar, ObjVar)):
        if isinstance(a, ConstVar) or isinstance(b, ConstVar):
            # `x is None`: a constant is never an object the trace guards by type alone, so
            # the answer holds for any such object and need not pin it (ObjVar.identity)
            return _held(a) is _held(b)
        return a.value is b.value
    if isinstance(a, TensorVar) and isinstance(b, TensorVar):
        return a.node is b.node
    if a.source is not None and a.source == b.source:
        return True
    if isinstance(a, NullVar) or isinstance(b, NullVar):
        return isinstance(a, NullVar) and isinstance(b, NullVar)
    return False


def _held(v: ConstVar | ObjVar) -> Any:
    return v.held if isinstance(v, ObjVar) else v.value


def contains(tx: Tracer, container: Var, item: Var) -> bool:
    if objects.class_of(container) is not None:
        out = objects.call_dunder(tx, container, "__contains__", [item])
        if objects.found(out):
            return truth(tx, out)
    if isinstance(container, DictVar):
        return dict_key(item) in container.items
    if isinstance(container, NewObjectVar) and container.items is not None:
        return dict_key(item) in container.items.items
    if isinstance(item, TensorVar) or isinstance(container, TensorVar):
        raise Break("`in` with a tensor compares tensor values")
    if isinstance(container, SetVar):
        return _const_index(item) in {as_python_constant(i) for i in container.items}
    if isinstance(container, ObjVar) and isinstance(container.value, torch.nn.ModuleDict):
        return _const_index(item) in container.value
    try:
        return as_python_constant(item) in as_python_constant(container)
    except TypeError:
        raise Break(f"`in` over {describe(container)} is not traced") from None


# ---- iteration ----------------------------------------------------------------------------------


def unpack_iterable(tx: Tracer, v: Var) -> list[Var]:
    if isinstance(v, (ListVar, TupleVar)):
        return list(v.items)
    if isinstance(v, IteratorVar):
        generators.check_read(tx, v)
        items = v.items[v.index :]
        v.move(len(v.items), exhausted=True)
        return items
    if isinstance(v, DictVar):
        return [ConstVar(k) for k in v.items]
    if isinstance(v, SetVar):
        return list(v.items)
    if isinstance(v, ConstVar):
        try:
            return [wrap_unguarded(x) for x in v.value]
        except TypeError:
            raise Break(f"{type(v.value).__name__} is not iterable") from None
    if isinstance(v, TensorVar):
        if v.fake.dim() == 0:
            raise Break("iteration over a 0-d tensor")
        return [
            tx.builder.call("call_function", operator.getitem, [v, ConstVar(i)], {})
            for i in range(v.fake.shape[0])
        ]
    if isinstance(v, ObjVar) and isinstance(v.value, _CONTAINERS) and v.source is not None:
        if isinstance(v.value, torch.nn.ModuleDict):
            tx.guards.dict_keys(f"{v.source}._modules", v.value._modules)
            return [ConstVar(k) for k in v.value.keys()]
        tx.guards.length(v.source, v.value)
        return [wrap(tx, v.value[i], f"{v.source}[{i}]") for i in range(len(v.value))]
    if isinstance(v, (NewObjectVar, ObjVar)):
        out = objects.call_dunder(tx, v, "__iter__", [])
        if objects.found(out):
            return unpack_iterable(tx, out)
        if isinstance(v, NewObjectVar) and v.items is not None:
            return [ConstVar(k) for k in v.items.items]
    raise Break(f"iteration over {describe(v)} is not traced")


def get_iter(tx: Tracer, v: Var) -> IteratorVar:
    if isinstance(v, IteratorVar):
        return v
    if isinstance(v, ListVar) and v.cls is list:
        return IteratorVar(v.items, seq=v)  # a live view: it sees the list's later changes
    if isinstance(v, DictVar) and v.cls is dict:
        return IteratorVar([ConstVar(k) for k in v.items], seq=v)
    return IteratorVar(unpack_iterable(tx, v))
