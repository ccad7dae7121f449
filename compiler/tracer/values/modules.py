"""nn.Module instances and Python modules, read from the frame (`ObjVar`). A module's
attribute is read in eager's order and through its source, so that its guard checks it;
module containers (ModuleList, Sequential, ModuleDict, ParameterList) index and iterate
over their items, each read from its own source."""

from __future__ import annotations

import inspect
import types
from typing import TYPE_CHECKING, Any, Callable

import torch

from compiler.support.static import mark_static_address
from compiler.tracer import calls
from compiler.tracer.breaks import Break
from compiler.tracer.exceptions import raise_python
from compiler.tracer.lookups import MISSING, lookup
from compiler.tracer.values import user_objects
from compiler.tracer.variables import (
    AttrCallVar,
    ConstVar,
    FunctionVar,
    IteratorVar,
    ListVar,
    ObjVar,
    TupleVar,
    Var,
)
from compiler.tracer.wrap import wrap, wrap_unguarded

if TYPE_CHECKING:
    from compiler.tracer.translator import Tracer

CONTAINERS = (
    torch.nn.ModuleList,
    torch.nn.Sequential,
    torch.nn.ModuleDict,
    torch.nn.ParameterList,
)


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
        return user_objects.class_attr(tx, mod_var, cls, name, attr)
    if name in d:
        return user_objects.attr_value(tx, d[name], src, name)
    if attr is not MISSING:
        if name in MODULE_METHODS and attr is getattr(torch.nn.Module, name) and src is not None:
            return AttrCallVar(mod_var, name)  # called through module_method below
        return user_objects.class_attr(tx, mod_var, cls, name, attr)
    for store in ("_parameters", "_buffers", "_modules"):
        table = d.get(store)
        if table is not None and name in table:
            if store == "_buffers" and isinstance(table[name], torch.Tensor):
                mark_static_address(table[name])  # a CUDA graph may read it in place
            return user_objects.attr_value(tx, table[name], src, name)
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


def call_module(tx: Tracer, mod_var: ObjVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    mod = mod_var.value
    from torch.nn.modules import module as module_mod

    hooks = (
        mod._forward_hooks or mod._forward_pre_hooks or mod._backward_hooks or
        getattr(mod, "_backward_pre_hooks", None) or module_mod._global_forward_hooks or
        module_mod._global_forward_pre_hooks or module_mod._global_backward_hooks
    )  # fmt: skip
    if hooks:
        raise Break(f"{type(mod).__name__} has hooks; calling it runs in Python", "module_hooks")
    forward = mod.__dict__.get("forward")
    if getattr(type(mod), "__compiled__", None) is not None and hasattr(type(mod), "_orig_mod"):
        # A module from compiler.compile called from compiled code: trace its original forward.
        original = type(mod).__mro__[1]
        fwd = inspect.getattr_static(original, "forward")
        return calls.call(tx, FunctionVar(fn=fwd), [mod_var, *args], kwargs)
    if forward is not None:
        return calls.call(
            tx,
            wrap(tx, forward, f"{mod_var.source}.forward") if mod_var.source else ObjVar(forward),
            args,
            kwargs,
        )
    forward = inspect.getattr_static(type(mod), "forward")
    src = f"type({mod_var.source}).forward" if mod_var.source else None
    return calls.call(tx, FunctionVar(fn=forward, source=src), [mod_var, *args], kwargs)


# ---- module containers ----------------------------------------------------------------------


def container_getitem(tx: Tracer, obj: ObjVar, key: Any) -> Var:
    if obj.source is None:
        raise Break("indexing a module container built during tracing")
    if isinstance(key, slice):
        return _module_list_slice(tx, obj, key)
    return wrap(tx, obj.value[key], f"{obj.source}[{key!r}]")


def _module_list_slice(tx: Tracer, obj: ObjVar, key: slice) -> Var:
    """`layers[:n]`: a new ModuleList of the same modules, each read from its own source."""
    container = obj.value
    if type(container) is not torch.nn.ModuleList:
        raise Break(f"slicing a {type(container).__name__}")
    tx.guards.length(obj.source, container)
    indices = range(len(container))[key]
    items = [wrap(tx, container[i], f"{obj.source}[{i}]") for i in indices]
    return ListVar(items, cls=torch.nn.ModuleList)


def container_items(tx: Tracer, v: ObjVar) -> list[Var]:
    if isinstance(v.value, torch.nn.ModuleDict):
        tx.guards.dict_keys(f"{v.source}._modules", v.value._modules)
        return [ConstVar(k) for k in v.value.keys()]
    tx.guards.length(v.source, v.value)
    return [wrap(tx, v.value[i], f"{v.source}[{i}]") for i in range(len(v.value))]


# ---- Python modules ---------------------------------------------------------------------------


def module_member(tx: Tracer, mod_var: ObjVar, name: str) -> Var:
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
