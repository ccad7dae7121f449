"""nn.Module instances and Python modules, read from the frame (`ObjVar`). A module's
attribute is read in eager's order and through its source, so that its guard checks it;
module containers (ModuleList, Sequential, ModuleDict, ParameterList) index and iterate
over their items, each read from its own source."""

from __future__ import annotations

import inspect
import operator
import types
from typing import TYPE_CHECKING, Any, Callable

import torch

from compiler.support.static import mark_static_address
from compiler.tracer import calls, objects
from compiler.tracer.breaks import Break
from compiler.tracer.exceptions import raise_python
from compiler.tracer.lookups import MISSING, lookup
from compiler.tracer.variables import (
    AttrCallVar,
    ConstVar,
    FunctionVar,
    IteratorVar,
    ListVar,
    ObjVar,
    TensorVar,
    TupleVar,
    Var,
    as_python_constant,
)
from compiler.tracer.wrap import wrap, wrap_unguarded

if TYPE_CHECKING:
    from compiler.tracer.context import Tracer

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
    written = objects.written_attr(tx, mod_var, name)
    if objects.found(written):
        return written
    if name == "__dict__" and id(mod) in tx.attr_writes:
        raise Break("reading __dict__ of a module whose attributes the trace wrote")
    if name == "_buffers":
        _check_buffers_current(tx, mod_var)
    if cls.__getattribute__ is not object.__getattribute__:
        raise Break(f"{cls.__name__} has its own __getattribute__: reading .{name} runs in Python")
    attr = lookup(cls, name)
    if hasattr(type(attr), "__set__") or hasattr(type(attr), "__delete__"):
        return objects.class_attr(tx, mod_var, cls, name, attr)
    if name in d:
        return objects.attr_value(tx, d[name], src, name)
    if attr is not MISSING:
        if name in MODULE_METHODS and attr is getattr(torch.nn.Module, name) and src is not None:
            return AttrCallVar(mod_var, name)  # called through module_method below
        return objects.class_attr(tx, mod_var, cls, name, attr)
    for store in ("_parameters", "_buffers", "_modules"):
        table = d.get(store)
        if table is not None and name in table:
            if store == "_buffers" and isinstance(table[name], torch.Tensor):
                mark_static_address(table[name])  # a CUDA graph may read it in place
            return objects.attr_value(tx, table[name], src, name)
    raise Break(f"{cls.__name__} has no attribute {name!r}")


def traced_attr_write(mod_var: ObjVar, name: str, value: Var) -> bool:
    """`module.name = value` that the trace records (reads see it, the entry writes it for
    real after the graph, through nn.Module.__setattr__): a Python value or a tensor that is
    not a Parameter under a name that is neither a parameter nor a submodule, or a tensor
    replacing a buffer (`self.count = self.count + 1`); no descriptor of its class."""
    mod = mod_var.value
    cls = type(mod)
    if mod_var.source is None or cls.__setattr__ is not torch.nn.Module.__setattr__:
        return False
    if name in mod._parameters or name in mod._modules:
        return False
    if isinstance(value, ObjVar) and isinstance(value.held, torch.nn.Module):
        return False
    if isinstance(value, TensorVar) and value.node.meta.get("is_parameter"):
        return False
    if name in mod._buffers and not isinstance(value, TensorVar):
        return False
    return not hasattr(type(inspect.getattr_static(cls, name, None)), "__set__")


def _check_buffers_current(tx: Tracer, mod_var: ObjVar) -> None:
    """The module's real buffer table is stale where the trace replaced one of its buffers:
    code that reads the table (state_dict(), named_buffers()) runs after the write, in Python."""
    writes = tx.attr_writes.get(id(mod_var.held))
    if writes is not None and any(n in mod_var.held._buffers for n in writes.values):
        raise Break(
            f"reading the buffers of a {type(mod_var.held).__name__} whose buffer the trace replaced"
        )


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


# The methods through which nn.Module lists its submodules and their members: a module
# whose class replaces any of them is walked by running its own code.
_WALKS = (
    "named_modules", "_named_members", "named_parameters", "named_buffers", "parameters",
    "buffers", "modules",
)  # fmt: skip


def _named_modules(
    tx: Tracer, mod_var: ObjVar, prefix: str, remove_duplicate: bool, memo: set[int]
) -> list[tuple[str, ObjVar]]:
    """nn.Module.named_modules without running its generators: the modules in its order,
    each read from `_modules[name]` under a guard on the names; `memo` holds the ids of the
    modules seen, as torch's set of them does."""
    mod = mod_var.value
    cls = type(mod)
    if any(getattr(cls, n) is not getattr(torch.nn.Module, n) for n in _WALKS):
        raise Break(f"{cls.__name__} replaces how nn.Module lists its submodules")
    if id(mod) in memo:
        return []
    if remove_duplicate:
        memo.add(id(mod))
    out = [(prefix, mod_var)]
    modules = mod._modules
    tx.guards.dict_keys(f"{mod_var.source}._modules", modules)
    for name, child in modules.items():
        child_var = wrap(tx, child, f"{mod_var.source}._modules[{name!r}]")
        if child is not None:
            child_prefix = prefix + ("." if prefix else "") + name
            out += _named_modules(tx, child_var, child_prefix, remove_duplicate, memo)
    return out


def _named_members(tx: Tracer, mod_var: ObjVar, table: str, params: dict) -> list[TupleVar]:
    """nn.Module._named_members over `table` (_parameters or _buffers): each member read from
    its table under a guard on the names, the duplicates of one tensor left out."""
    prefix, remove_duplicate = params["prefix"], params["remove_duplicate"]
    if params["recurse"]:
        modules = _named_modules(tx, mod_var, prefix, remove_duplicate, set())
    else:
        modules = [(prefix, mod_var)]
    memo: set[int] = set()
    out = []
    for module_prefix, module in modules:
        if table == "_buffers":
            _check_buffers_current(tx, module)
        members = module.value.__dict__[table]
        tx.guards.dict_keys(f"{module.source}.{table}", members)
        for key, member in members.items():
            var = wrap(tx, member, f"{module.source}.{table}[{key!r}]")
            if member is None or id(member) in memo:
                continue
            if remove_duplicate:
                memo.add(id(member))
            if table == "_buffers" and isinstance(member, torch.Tensor):
                mark_static_address(member)  # a CUDA graph may read it in place
            name = module_prefix + ("." if module_prefix else "") + key
            out.append(TupleVar([ConstVar(name), var]))
    return out


def _values(pairs: list[TupleVar]) -> IteratorVar:
    return IteratorVar([pair.items[1] for pair in pairs])


MODULE_METHODS: dict[str, Callable[[Tracer, ObjVar, dict], Var]] = {
    # timm's RegStage: `for block in self.children(): x = block(x)`
    "children": lambda tx, m, p: IteratorVar([v for _, v in _named_children(tx, m)]),
    "named_children": lambda tx, m, p: IteratorVar(
        [TupleVar([ConstVar(k), v]) for k, v in _named_children(tx, m)]
    ),
    # Hugging Face's `self.device` / `self.dtype`: `next(self.parameters())`; torch's own
    # code dedupes through a set that its generators change as they run (generators.py)
    "named_modules": lambda tx, m, p: IteratorVar(
        [TupleVar([ConstVar(k), v]) for k, v in _named_modules_of(tx, m, p)]
    ),
    "modules": lambda tx, m, p: IteratorVar(
        [v for _, v in _named_modules_of(tx, m, {**p, "prefix": ""})]
    ),
    "named_parameters": lambda tx, m, p: IteratorVar(_named_members(tx, m, "_parameters", p)),
    "parameters": lambda tx, m, p: _values(
        _named_members(tx, m, "_parameters", {**p, "prefix": "", "remove_duplicate": True})
    ),
    "named_buffers": lambda tx, m, p: IteratorVar(_named_members(tx, m, "_buffers", p)),
    "buffers": lambda tx, m, p: _values(
        _named_members(tx, m, "_buffers", {**p, "prefix": "", "remove_duplicate": True})
    ),
}


def _named_modules_of(tx: Tracer, mod_var: ObjVar, params: dict) -> list[tuple[str, ObjVar]]:
    if params.get("memo") is not None:
        raise Break("nn.Module.named_modules with a memo of its caller's is not traced")
    return _named_modules(tx, mod_var, params["prefix"], params["remove_duplicate"], set())


def module_method(tx: Tracer, mod_var: ObjVar, name: str, args: list[Var], kwargs: dict) -> Var:
    """One of nn.Module's own MODULE_METHODS, its arguments bound as its signature does."""
    try:
        values = [as_python_constant(a) for a in args]
        named = {k: as_python_constant(v) for k, v in kwargs.items()}
    except TypeError:
        raise Break(f"nn.Module.{name} with arguments that are not constants") from None
    try:
        bound = inspect.signature(getattr(torch.nn.Module, name)).bind(None, *values, **named)
    except TypeError as e:
        raise raise_python(e) from None
    bound.apply_defaults()
    params = dict(bound.arguments)
    params.pop("self")
    return MODULE_METHODS[name](tx, mod_var, params)


def call_module(tx: Tracer, mod_var: ObjVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    mod = mod_var.value
    from torch.nn.modules import module as module_mod

    hooks = (
        mod._backward_hooks or getattr(mod, "_backward_pre_hooks", None) or
        module_mod._global_forward_hooks or module_mod._global_forward_pre_hooks or
        module_mod._global_backward_hooks or mod._forward_hooks_always_called or
        mod._forward_pre_hooks_with_kwargs or mod._forward_hooks_with_kwargs
    )  # fmt: skip
    if hooks or ((mod._forward_hooks or mod._forward_pre_hooks) and mod_var.source is None):
        raise Break(f"{type(mod).__name__} has hooks; calling it runs in Python", "module_hooks")
    if mod._forward_hooks or mod._forward_pre_hooks:
        return _call_with_forward_hooks(tx, mod_var, args, kwargs)
    return _call_forward(tx, mod_var, args, kwargs)


def _hooks(tx: Tracer, mod_var: ObjVar, name: str) -> list[Var]:
    """The hooks of one of the module's hook dicts, in order, guarded to be the same ones:
    a hook added or removed later recompiles (none are guarded on a module without them, as
    under torch.compile)."""
    table = getattr(mod_var.value, name)
    source = f"{mod_var.source}.{name}"
    keys = list(table)
    tx.guards.add(
        "HOOKS", source, f"list({source}) == {keys!r}", f"{source} holds hooks {keys}", tx.builder.line
    )
    return [wrap(tx, table[k], f"{source}[{k!r}]") for k in keys]


def _call_with_forward_hooks(
    tx: Tracer, mod_var: ObjVar, args: list[Var], kwargs: dict[str, Var]
) -> Var:
    """Module.__call__ with forward pre-hooks and forward hooks, inlined in its order: each
    pre-hook may replace the positional arguments (a non-tuple result is the one argument),
    each hook the output."""
    for hook in _hooks(tx, mod_var, "_forward_pre_hooks"):
        out = calls.call(tx, hook, [mod_var, TupleVar(list(args))], {})
        if not (isinstance(out, ConstVar) and out.value is None):
            args = list(out.items) if isinstance(out, TupleVar) and out.cls is tuple else [out]
    result = _call_forward(tx, mod_var, args, kwargs)
    for hook in _hooks(tx, mod_var, "_forward_hooks"):
        out = calls.call(tx, hook, [mod_var, TupleVar(list(args)), result], {})
        if not (isinstance(out, ConstVar) and out.value is None):
            result = out
    return result


def _call_forward(tx: Tracer, mod_var: ObjVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    mod = mod_var.value
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
    # operator.getitem, not `obj.value[key]`: CPython 3.13.0's specialised subscript at this
    # hot line kept calling a container class's old __getitem__ after the class replaced it
    # (its cache is not cleared for a class without a version tag), so the trace indexed as
    # before while eager called the new method: a silently wrong entry
    return wrap(tx, operator.getitem(obj.value, key), f"{obj.source}[{key!r}]")


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
    items = [operator.getitem(v.value, i) for i in range(len(v.value))]  # as container_getitem
    return [wrap(tx, item, f"{v.source}[{i}]") for i, item in enumerate(items)]


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
