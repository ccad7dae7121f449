"""Attribute access, subscripts, operators, truth and iteration over tracer values."""

from __future__ import annotations

import inspect
import operator
import types
from typing import TYPE_CHECKING, Any, Callable

import torch

from compiler.runtime.static import mark_static_address
from compiler.tracer.breaks import Break
from compiler.tracer.variables import (
    AttrCallVar,
    ConstVar,
    DictVar,
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
)
from compiler.tracer.wrap import wrap, wrap_unguarded

if TYPE_CHECKING:
    from compiler.tracer.translator import Tracer

# Tensor attributes that are metadata: constants, since the tensor's guards pin them.
TENSOR_META = {
    "shape", "dtype", "device", "ndim", "requires_grad", "is_cuda", "is_leaf", "layout",
    "is_sparse", "is_quantized", "is_meta", "is_mkldnn", "is_complex", "is_nested", "itemsize",
}  # fmt: skip
TENSOR_VIEW_ATTRS = {"T", "mT", "H", "mH", "real", "imag"}
_CONTAINERS = (torch.nn.ModuleList, torch.nn.Sequential, torch.nn.ModuleDict, torch.nn.ParameterList)


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
        value = obj.value
        if isinstance(value, torch.nn.Module):
            return module_attr(tx, obj, name)
        if isinstance(value, types.ModuleType):
            return _module_member(tx, obj, name)
        return _object_attr(tx, obj, name)
    if isinstance(obj, ConstVar):
        try:
            attr = getattr(obj.value, name)
        except AttributeError as e:
            raise Break(f"attribute error while tracing: {e}") from None
        return wrap_unguarded(attr)
    if isinstance(obj, (ListVar, DictVar, SetVar)):
        return AttrCallVar(obj, name)
    if isinstance(obj, TupleVar):
        fields = getattr(obj.cls, "_fields", None)
        if fields and name in fields:
            return obj.items[fields.index(name)]
        return AttrCallVar(obj, name)
    if isinstance(obj, NewObjectVar):
        if name in obj.fields:
            return obj.fields[name]
        attr = inspect.getattr_static(obj.cls, name, None)
        if isinstance(attr, types.FunctionType):
            return MethodVar(FunctionVar(fn=attr), obj)
        if name in getattr(obj.cls, "__dataclass_fields__", {}):
            return ConstVar(getattr(obj.cls, name, None))
        raise Break(f"attribute {name!r} of a {obj.cls.__name__} built during tracing")
    if isinstance(obj, FunctionVar) and name in ("__name__", "__qualname__"):
        return ConstVar(obj.get_code().co_name)
    if isinstance(obj, FunctionVar) and name == "__module__":
        # torchvision's _log_api_usage_once(fn) names the function it is called for
        module = obj.fn.__module__ if obj.fn is not None else obj.get_globals().get("__name__")
        return ConstVar(module)
    if isinstance(obj, FunctionVar) and name == "__class__":
        return ObjVar(types.FunctionType)
    if isinstance(obj, SuperVar):
        return _super_attr(tx, obj, name)
    raise Break(f"attribute {name!r} of {describe(obj)} is not traced")


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
    mod = mod_var.value
    src = mod_var.source
    d = mod.__dict__
    for store in ("_parameters", "_buffers", "_modules"):
        table = d.get(store)
        if table is not None and name in table:
            if store == "_buffers" and isinstance(table[name], torch.Tensor):
                mark_static_address(table[name])  # a CUDA graph may read it in place
            return _attr_value(tx, table[name], src, name)
    if name in d:
        return _attr_value(tx, d[name], src, name)
    attr = inspect.getattr_static(type(mod), name, _MISSING)
    if attr is _MISSING:
        raise Break(f"{type(mod).__name__} has no attribute {name!r}")
    if name in MODULE_METHODS and attr is getattr(torch.nn.Module, name) and src is not None:
        return AttrCallVar(mod_var, name)  # called through module_method below
    return _class_attr(tx, mod_var, type(mod), name, attr)


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
    if isinstance(attr, (types.BuiltinFunctionType, types.MethodDescriptorType, types.WrapperDescriptorType)):
        raise Break(f"builtin method {cls.__name__}.{name} runs in Python")
    value = getattr(obj.value, name) if isinstance(obj, ObjVar) else attr
    return _attr_value(tx, value, src, name)


def _module_member(tx: Tracer, mod_var: ObjVar, name: str) -> Var:
    try:
        value = getattr(mod_var.value, name)
    except AttributeError as e:
        raise Break(f"attribute error while tracing: {e}") from None
    if isinstance(value, (types.FunctionType, type, types.ModuleType, types.BuiltinFunctionType)) or callable(value):
        # Module members are looked up again at every call only through the module itself,
        # whose identity is guarded: functions are taken as stable, as TorchDynamo does.
        if isinstance(value, types.FunctionType):
            return FunctionVar(fn=value, source=f"{mod_var.source}.{name}" if mod_var.source else None)
        return ObjVar(value, f"{mod_var.source}.{name}" if mod_var.source else None)
    if mod_var.source is None:
        return wrap_unguarded(value)
    return wrap(tx, value, f"{mod_var.source}.{name}")


def _object_attr(tx: Tracer, obj: ObjVar, name: str) -> Var:
    value = obj.value
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
    try:
        attr = inspect.getattr_static(value, name)
    except AttributeError:
        raise Break(f"{type(value).__name__} object has no attribute {name!r}") from None
    instance_dict = getattr(value, "__dict__", None)
    if isinstance(instance_dict, dict) and name in instance_dict:
        return _attr_value(tx, instance_dict[name], obj.source, name)
    if isinstance(value, (types.MethodType, types.BuiltinMethodType)) or not hasattr(type(value), "__dict__"):
        raise Break(f"attribute {name!r} of {describe(obj)} is not traced")
    return _class_attr(tx, obj, type(value), name, attr)


def _super_attr(tx: Tracer, sup: SuperVar, name: str) -> Var:
    mro = type(sup.obj.value).__mro__ if isinstance(sup.obj, ObjVar) else sup.cls.__mro__
    after = mro[mro.index(sup.cls) + 1 :]
    for klass in after:
        if name in klass.__dict__:
            attr = klass.__dict__[name]
            if isinstance(attr, types.FunctionType):
                return MethodVar(FunctionVar(fn=attr), sup.obj)
            break
    raise Break(f"super().{name} is not traced")


def store_attr(tx: Tracer, obj: Var, name: str, value: Var) -> None:
    if isinstance(obj, NewObjectVar):
        obj.fields[name] = value
        return
    if isinstance(obj, ObjVar) and isinstance(obj.value, torch.nn.Module) and isinstance(value, TensorVar):
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
            raise Break(f"indexing raised {type(e).__name__}: {e}") from None
    if isinstance(obj, DictVar):
        key = _const_index(index)
        if key not in obj.items:
            raise Break(f"key {key!r} is not in the dict")
        return obj.items[key]
    if isinstance(obj, ConstVar):
        try:
            return wrap_unguarded(obj.value[_const_index(index)])
        except Exception as e:
            raise Break(f"indexing raised {type(e).__name__}: {e}") from None
    if isinstance(obj, ObjVar) and isinstance(obj.value, _CONTAINERS):
        key = _const_index(index)
        if isinstance(key, slice) or obj.source is None:
            raise Break("slicing a module container")
        return wrap(tx, obj.value[key], f"{obj.source}[{key!r}]")
    if isinstance(obj, NewObjectVar):
        key = _const_index(index)
        if isinstance(key, str):
            return obj.fields[key]
        present = [v for v in obj.fields.values() if not (isinstance(v, ConstVar) and v.value is None)]
        return present[key]
    raise Break(f"indexing {describe(obj)} is not traced")


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
            mutable_list(obj).items[key] = unpack_iterable(tx, value)
        else:
            mutable_list(obj).items[key] = value
        return
    if isinstance(obj, DictVar):
        mutable_dict(obj).items[dict_key(index)] = value
        return
    if isinstance(obj, NewObjectVar):
        obj.fields[_const_index(index)] = value
        return
    raise Break(f"item assignment on {describe(obj)} that exists outside the graph runs in Python")


def delitem(tx: Tracer, obj: Var, index: Var) -> None:
    if isinstance(obj, ListVar):
        del mutable_list(obj).items[_const_index(index)]
        return
    if isinstance(obj, DictVar):
        mutable_dict(obj).items.pop(dict_key(index), None)
        return
    raise Break(f"del on {describe(obj)} runs in Python")


def dict_key(v: Var) -> Any:
    key = _const_index(v)
    try:
        hash(key)
    except TypeError:
        raise Break("an unhashable dict key") from None
    return key


def mutable_list(v: Var) -> ListVar:
    """A list that may be changed. A list from outside the graph is changed symbolically and
    the change is replayed on the real list after the graph runs."""
    if isinstance(v, ListVar):
        v.mutated = v.source is not None
        return v
    raise Break(f"mutation of {describe(v)}")


def mutable_dict(v: Var) -> DictVar:
    if isinstance(v, DictVar):
        v.mutated = v.source is not None
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


_OUT_OF_PLACE = {
    operator.iadd: operator.add,
    operator.isub: operator.sub,
    operator.imul: operator.mul,
    operator.itruediv: operator.truediv,
    operator.ifloordiv: operator.floordiv,
    operator.imod: operator.mod,
    operator.ipow: operator.pow,
    operator.imatmul: operator.matmul,
    operator.iand: operator.and_,
    operator.ior: operator.or_,
    operator.ixor: operator.xor,
    operator.ilshift: operator.lshift,
    operator.irshift: operator.rshift,
}


def binary(tx: Tracer, op: Callable, a: Var, b: Var) -> Var:
    if isinstance(a, TensorVar) or isinstance(b, TensorVar):
        if not all(isinstance(x, TensorVar) or is_python_constant(x) for x in (a, b)):
            raise Break(f"operator {op.__name__} between a tensor and {describe(b if isinstance(a, TensorVar) else a)}")
        if not isinstance(a, TensorVar):
            # `out = 0; out += t`: a number has no in-place form, Python computes `0 + t`
            op = _OUT_OF_PLACE.get(op, op)
        return tx.builder.call("call_function", op, [a, b], {})
    if isinstance(a, (ListVar, TupleVar)) and isinstance(b, (ListVar, TupleVar)) and op in (operator.add, operator.iadd):
        if op is operator.iadd and isinstance(a, ListVar):
            mutable_list(a).items.extend(b.items)
            return a
        return type(a)(a.items + b.items) if isinstance(a, ListVar) else TupleVar(a.items + b.items)
    if isinstance(a, (ListVar, TupleVar)) and isinstance(b, ConstVar) and op in (operator.mul, operator.imul):
        items = a.items * b.value
        return ListVar(items) if isinstance(a, ListVar) else TupleVar(items)
    if isinstance(a, DictVar) and isinstance(b, DictVar) and op in (operator.or_, operator.ior):
        return DictVar({**a.items, **b.items})
    if is_python_constant(a) and is_python_constant(b) and not isinstance(a, ObjVar) and not isinstance(b, ObjVar):
        try:
            return wrap_unguarded(op(as_python_constant(a), as_python_constant(b)))
        except Exception as e:
            raise Break(f"{op.__name__} raised {type(e).__name__}: {e}") from None
    if op in (operator.eq, operator.ne):
        same = is_same(a, b)
        return ConstVar(same if op is operator.eq else not same)
    raise Break(f"operator {op.__name__} on {describe(a)} and {describe(b)} is not traced")


def unary(tx: Tracer, op: Callable, a: Var) -> Var:
    if isinstance(a, TensorVar):
        return tx.builder.call("call_function", op, [a], {})
    if isinstance(a, ConstVar):
        try:
            return ConstVar(op(a.value))
        except Exception as e:
            raise Break(f"{op.__name__} raised {type(e).__name__}: {e}") from None
    raise Break(f"operator {op.__name__} on {describe(a)} is not traced")


def truth(tx: Tracer, v: Var) -> bool:
    if isinstance(v, ConstVar):
        return bool(v.value)
    if isinstance(v, TensorVar):
        raise Break(
            "data-dependent control flow: the branch depends on the value of a tensor "
            "(Python has to look at the data, so the graph ends here and the condition runs eagerly)"
        )
    if isinstance(v, (ListVar, TupleVar, SetVar)):
        return bool(v.items)
    if isinstance(v, DictVar):
        return bool(v.items)
    if isinstance(v, ObjVar):
        value = v.value
        if isinstance(value, _CONTAINERS):
            return len(value) > 0
        if isinstance(value, (torch.nn.Module, types.FunctionType, type, types.ModuleType, types.BuiltinFunctionType)):
            return True
        raise Break(f"truth value of {describe(v)} is not traced")
    if isinstance(v, (FunctionVar, MethodVar, NewObjectVar, GradModeVar, IteratorVar, AttrCallVar)):
        return True
    raise Break(f"truth value of {describe(v)} is not traced")


def is_none(v: Var) -> bool:
    return isinstance(v, ConstVar) and v.value is None


def is_same(a: Var, b: Var) -> bool:
    if a is b:
        return True
    if isinstance(a, (ConstVar, ObjVar)) and isinstance(b, (ConstVar, ObjVar)):
        return a.value is b.value
    if isinstance(a, TensorVar) and isinstance(b, TensorVar):
        return a.node is b.node
    if a.source is not None and a.source == b.source:
        return True
    if isinstance(a, NullVar) or isinstance(b, NullVar):
        return isinstance(a, NullVar) and isinstance(b, NullVar)
    return False


def contains(tx: Tracer, container: Var, item: Var) -> bool:
    if isinstance(container, DictVar):
        return dict_key(item) in container.items
    if isinstance(container, NewObjectVar):
        return _const_index(item) in container.fields
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
        items = v.items[v.index :]
        v.index = len(v.items)
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
            tx.builder.call("call_function", operator.getitem, [v, ConstVar(i)], {}) for i in range(v.fake.shape[0])
        ]
    if isinstance(v, ObjVar) and isinstance(v.value, _CONTAINERS) and v.source is not None:
        if isinstance(v.value, torch.nn.ModuleDict):
            tx.guards.dict_keys(f"{v.source}._modules", v.value._modules)
            return [ConstVar(k) for k in v.value.keys()]
        tx.guards.length(v.source, v.value)
        return [wrap(tx, v.value[i], f"{v.source}[{i}]") for i in range(len(v.value))]
    if isinstance(v, NewObjectVar):
        return [ConstVar(k) for k in v.fields]
    raise Break(f"iteration over {describe(v)} is not traced")


def get_iter(tx: Tracer, v: Var) -> IteratorVar:
    if isinstance(v, IteratorVar):
        return v
    return IteratorVar(unpack_iterable(tx, v))
