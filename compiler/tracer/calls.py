"""Calls: which callee is put in the graph, which is inlined, which is computed on constants,
and which ends the graph (runs in Python)."""

from __future__ import annotations

import functools
import inspect
import operator
import sysconfig
import types
from typing import TYPE_CHECKING, Any, Callable

import torch

from compiler.tracer.breaks import Break
from compiler.tracer.marked import marked_call
from compiler.tracer.operations import (
    as_dict,
    binary,
    describe,
    getitem,
    load_attr,
    mutable_dict,
    mutable_list,
    truth,
    unary,
    unpack_iterable,
)
from compiler.tracer.shapes import concrete, python_type
from compiler.tracer.variables import (
    AttrCallVar,
    CellVar,
    ConstVar,
    DictVar,
    FunctionVar,
    GradExitVar,
    GradModeVar,
    IteratorVar,
    ListVar,
    MethodVar,
    NewObjectVar,
    ObjVar,
    PartialVar,
    SetVar,
    SuperVar,
    TensorVar,
    TupleVar,
    Var,
    as_python_constant,
    contains_tensor,
    is_python_constant,
)
from compiler.tracer.wrap import wrap, wrap_unguarded

if TYPE_CHECKING:
    from compiler.tracer.translator import Tracer


class _RealNull:
    """The NULL CPython keeps below a callable, on the evaluator's real stack."""

    def __repr__(self) -> str:
        return "NULL"


REAL_NULL = _RealNull()

# Python packages whose functions are never traced into: they run in Python (or, for torch,
# go into the graph as one call).
SKIP_PACKAGES = {
    "compiler", "jupyter_compile", "numpy", "scipy", "IPython", "ipykernel", "pandas",
    "matplotlib", "tqdm", "logging", "warnings", "traceback", "inspect", "typing",
}  # fmt: skip
_STDLIB = sysconfig.get_paths()["stdlib"]

# torch functions with effects outside the graph: calling one ends the graph.
_BACKWARD_REASON = (
    "loss.backward() runs autograd's engine in Python: the graph before it is compiled with "
    "its backward, whose kernels the engine runs; tracing resumes after the call"
)
# torch functions that end the graph with a reason of their own
_AUTOGRAD_REASONS = {
    torch.autograd.backward: "torch.autograd." + _BACKWARD_REASON.replace("loss.", "", 1),
    torch.autograd.grad: (
        "torch.autograd.grad() runs autograd's engine in Python: the graph before it is "
        "compiled with its backward, whose kernels the engine runs"
    ),
}
_STATEFUL_TORCH_NAMES = ("manual_seed", "seed", "save", "load", "backward", "synchronize", "compile")
_BREAK_TENSOR_METHODS = {
    "item": "Tensor.item() reads a tensor's value into Python",
    "tolist": "Tensor.tolist() reads a tensor's values into Python",
    "numpy": "Tensor.numpy() leaves torch for NumPy",
    "__array__": "Tensor.__array__ leaves torch for NumPy",
    "backward": _BACKWARD_REASON,
    "register_hook": "Tensor.register_hook changes autograd state",
    "retain_grad": "Tensor.retain_grad changes autograd state",
    "requires_grad_": "Tensor.requires_grad_ changes autograd state",
    "data_ptr": "Tensor.data_ptr reads a memory address",
    "storage": "Tensor.storage is not traced",
    "untyped_storage": "Tensor.untyped_storage is not traced",
    "record_stream": "Tensor.record_stream is not traced",
    "share_memory_": "Tensor.share_memory_ is not traced",
    "__bool__": "bool() of a tensor reads its value into Python",
    "__float__": "float() of a tensor reads its value into Python",
    "__int__": "int() of a tensor reads its value into Python",
    "__index__": "a tensor used as an index reads its value into Python",
}


def constant(value: Any) -> Var:
    if type(value) is tuple:
        return TupleVar([constant(v) for v in value])
    return ConstVar(value)


def builtin_var(value: Any) -> Var:
    return ObjVar(value)


def is_skipped(fn: types.FunctionType) -> bool:
    module = getattr(fn, "__module__", None) or ""
    if module.split(".")[0] in SKIP_PACKAGES:
        return True
    filename = fn.__code__.co_filename
    return filename.startswith(_STDLIB) and "site-packages" not in filename


def is_torch_function(fn: Any) -> bool:
    module = getattr(fn, "__module__", None) or ""
    if isinstance(fn, (types.FunctionType, types.BuiltinFunctionType, types.MethodDescriptorType)) or type(
        fn
    ).__name__ in ("OpOverload", "OpOverloadPacket", "builtin_function_or_method"):
        if module.startswith("torch.nn.modules") or module.startswith("torch.nn.utils.parametriz"):
            return False
        return module == "torch" or module.startswith("torch.") or module.startswith("torch._")
    return False


# ---- the call dispatcher -----------------------------------------------------------------------


def call(tx: Tracer, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if isinstance(fn, FunctionVar):
        real = fn.fn
        orig = getattr(real, "_orig_fn", None)
        if orig is not None and getattr(real, "__compiled__", None) is not None:
            # A compiled function called from compiled code: trace its original into this graph.
            return call(tx, FunctionVar(fn=orig, source=f"{fn.source}._orig_fn" if fn.source else None), args, kwargs)
        marked = marked_call(tx, real, args, kwargs) if real is not None else None
        if marked is not None:
            return marked
        if real is not None and real.__code__.co_name == "decorate_context" and hasattr(real, "__wrapped__"):
            return _call_grad_decorated(tx, fn, args, kwargs)
        if real is not None:
            special = _SPECIAL.get(real)
            if special is not None:
                return special(tx, args, kwargs)
            if args and _is_optimizer(args[0]):
                raise Break(_optimizer_reason(real.__name__))
            if is_torch_function(real):
                return torch_call(tx, real, args, kwargs)
            if is_skipped(real):
                raise Break(f"call to {describe(fn)} runs in Python (library code is not traced)")
        return tx.inline(fn, args, kwargs)
    if isinstance(fn, MethodVar):
        return call(tx, fn.func, [fn.self_var, *args], kwargs)
    if isinstance(fn, AttrCallVar):
        return call_method(tx, fn.obj, fn.name, args, kwargs)
    if isinstance(fn, GradExitVar):
        tx.builder.set_grad_enabled(fn.restore)
        return ConstVar(None)
    if isinstance(fn, ObjVar):
        return _call_object(tx, fn, args, kwargs)
    if isinstance(fn, PartialVar):
        return call(tx, fn.func, [*fn.args, *args], {**fn.kwargs, **kwargs})
    if isinstance(fn, ConstVar) and callable(fn.value):
        return _call_object(tx, ObjVar(fn.value), args, kwargs)
    raise Break(f"calling {describe(fn)} is not traced")


def _call_object(tx: Tracer, fn: ObjVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    value = fn.value
    marked = marked_call(tx, value, args, kwargs)
    if marked is not None:
        return marked
    if isinstance(value, torch.nn.Module):
        return call_module(tx, fn, args, kwargs)
    try:
        special = _SPECIAL.get(value)
    except TypeError:  # unhashable callable
        special = None
    if special is not None:
        return special(tx, args, kwargs)
    if _is_pure_builtin(value):
        return _fold(tx, value, args, kwargs)
    if isinstance(value, type):
        return _construct(tx, fn, args, kwargs)
    if is_torch_function(value):
        return torch_call(tx, value, args, kwargs)
    if isinstance(value, types.MethodType) and isinstance(value.__func__, types.FunctionType):
        self_src = f"{fn.source}.__self__" if fn.source else None
        self_var = wrap(tx, value.__self__, self_src) if self_src else wrap_unguarded(value.__self__)
        return call(tx, FunctionVar(fn=value.__func__), [self_var, *args], kwargs)
    if isinstance(value, types.FunctionType):
        return call(tx, FunctionVar(fn=value, source=fn.source), args, kwargs)
    if isinstance(value, functools.partial) and fn.source:
        inner = wrap(tx, value.func, f"{fn.source}.func")
        bound = [wrap(tx, a, f"{fn.source}.args[{i}]") for i, a in enumerate(value.args)]
        kw = {k: wrap(tx, v, f"{fn.source}.keywords[{k!r}]") for k, v in value.keywords.items()}
        return call(tx, inner, [*bound, *args], {**kw, **kwargs})
    call_attr = inspect.getattr_static(type(value), "__call__", None)
    if isinstance(call_attr, types.FunctionType):
        return call(tx, FunctionVar(fn=call_attr), [fn, *args], kwargs)
    raise Break(f"call to {describe(fn)} runs in Python (it is not a torch op or Python code)")


def call_module(tx: Tracer, mod_var: ObjVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    mod = mod_var.value
    from torch.nn.modules import module as module_mod

    hooks = (
        mod._forward_hooks or mod._forward_pre_hooks or mod._backward_hooks or
        getattr(mod, "_backward_pre_hooks", None) or module_mod._global_forward_hooks or
        module_mod._global_forward_pre_hooks or module_mod._global_backward_hooks
    )  # fmt: skip
    if hooks:
        raise Break(f"{type(mod).__name__} has hooks; calling it runs in Python")
    forward = mod.__dict__.get("forward")
    if getattr(type(mod), "__compiled__", None) is not None and hasattr(type(mod), "_orig_mod"):
        # A module from compiler.compile called from compiled code: trace its original forward.
        original = type(mod).__mro__[1]
        fwd = inspect.getattr_static(original, "forward")
        return call(tx, FunctionVar(fn=fwd), [mod_var, *args], kwargs)
    if forward is not None:
        return call(tx, wrap(tx, forward, f"{mod_var.source}.forward") if mod_var.source else ObjVar(forward), args, kwargs)
    forward = inspect.getattr_static(type(mod), "forward")
    src = f"type({mod_var.source}).forward" if mod_var.source else None
    return call(tx, FunctionVar(fn=forward, source=src), [mod_var, *args], kwargs)


def _is_optimizer(v: Var) -> bool:
    return isinstance(v, ObjVar) and isinstance(v.value, torch.optim.Optimizer)


def _optimizer_reason(method: str) -> str:
    if method == "step":
        return (
            "optimizer.step() runs in Python: torch.optim's update runs eagerly between the "
            "compiled graphs, on the gradients the compiled backward wrote"
        )
    if method == "zero_grad":
        return (
            "optimizer.zero_grad() runs in Python: it resets the parameters' .grad attributes, "
            "which a graph does not hold; the next graph starts after it"
        )
    return f"optimizer.{method}() runs in Python: torch.optim is not traced"


def torch_call(tx: Tracer, fn: Callable, args: list[Var], kwargs: dict[str, Var]) -> Var:
    reason = _AUTOGRAD_REASONS.get(fn)
    if reason is not None:
        raise Break(reason)
    name = getattr(fn, "__name__", "")
    if name in _STATEFUL_TORCH_NAMES or name.startswith("set_") or name.startswith("_set_"):
        raise Break(f"torch.{name} changes global state; it runs in Python")
    return tx.builder.call("call_function", fn, args, kwargs)


def call_method(tx: Tracer, obj: Var, name: str, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if isinstance(obj, TensorVar):
        reason = _BREAK_TENSOR_METHODS.get(name)
        if reason:
            raise Break(reason)
        return tx.builder.call("call_method", name, [obj, *args], kwargs)
    if isinstance(obj, ListVar):
        return _list_method(tx, obj, name, args)
    if isinstance(obj, DictVar):
        return _dict_method(tx, obj, name, args, kwargs)
    if isinstance(obj, SetVar) and name in ("add", "discard") and is_python_constant(args[0]):
        present = [i for i in obj.items if as_python_constant(i) != as_python_constant(args[0])]
        obj.items[:] = present + ([args[0]] if name == "add" else [])
        return ConstVar(None)
    if isinstance(obj, TupleVar) and name in ("index", "count"):
        return _fold(tx, getattr(tuple(as_python_constant(obj)), name), args, kwargs)
    if isinstance(obj, ObjVar) and isinstance(obj.value, torch.nn.Module):
        from compiler.tracer.operations import module_method

        return module_method(tx, obj, name, args, kwargs)
    raise Break(f"method {name!r} of {describe(obj)} is not traced")


def _list_method(tx: Tracer, lst: ListVar, name: str, args: list[Var]) -> Var:
    if name in ("index", "count", "copy", "__len__"):
        if name == "copy":
            return ListVar(list(lst.items))
        return _fold(tx, getattr(as_python_constant(lst), name), args, {})
    items = mutable_list(lst).items
    if name == "append":
        items.append(args[0])
    elif name == "extend":
        items.extend(unpack_iterable(tx, args[0]))
    elif name == "insert":
        items.insert(as_python_constant(args[0]), args[1])
    elif name == "pop":
        return items.pop(as_python_constant(args[0]) if args else -1)
    elif name == "clear":
        items.clear()
    elif name == "reverse":
        items.reverse()
    else:
        raise Break(f"list.{name} is not traced")
    return ConstVar(None)


def _dict_method(tx: Tracer, d: DictVar, name: str, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if name == "items":
        return ListVar([TupleVar([ConstVar(k), v]) for k, v in d.items.items()])
    if name == "keys":
        return ListVar([ConstVar(k) for k in d.items])
    if name == "values":
        return ListVar(list(d.items.values()))
    if name == "get":
        key = as_python_constant(args[0])
        return d.items.get(key, args[1] if len(args) > 1 else ConstVar(None))
    if name == "copy":
        return DictVar(dict(d.items), cls=d.cls)
    if name == "__getitem__":
        return getitem(tx, d, args[0])
    if name == "__contains__":
        return ConstVar(as_python_constant(args[0]) in d.items)
    items = mutable_dict(d).items
    if name == "update":
        for a in args:
            items.update(as_dict(tx, a).items)
        items.update(kwargs)
        return ConstVar(None)
    if name == "pop":
        key = as_python_constant(args[0])
        if key in items:
            return items.pop(key)
        if len(args) > 1:
            return args[1]
        raise Break(f"dict.pop of missing key {key!r}")
    if name == "setdefault":
        key = as_python_constant(args[0])
        return items.setdefault(key, args[1] if len(args) > 1 else ConstVar(None))
    raise Break(f"dict.{name} is not traced")


# ---- constructing objects --------------------------------------------------------------------


def _construct(tx: Tracer, cls_var: ObjVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    cls = cls_var.value
    if isinstance(cls, type) and issubclass(cls, torch.amp.autocast):
        return _autocast(cls, args, kwargs)
    if cls is torch.Size:
        return TupleVar(list(unpack_iterable(tx, args[0])) if args else [], cls=torch.Size)
    if issubclass(cls, tuple) and hasattr(cls, "_fields"):
        bound = inspect.signature(cls).bind(*args, **kwargs)
        bound.apply_defaults()
        return TupleVar([_as_var(v) for v in bound.arguments.values()], cls=cls)
    if issubclass(cls, torch.nn.Module) and cls.__module__.startswith("torch.nn") and not contains_tensor(
        TupleVar(list(args) + list(kwargs.values()))
    ):
        module = cls(*[as_python_constant(a) for a in args], **{k: as_python_constant(v) for k, v in kwargs.items()})
        if any(True for _ in module.parameters()) or any(True for _ in module.buffers()):
            raise Break(f"constructing {cls.__name__} creates parameters; it runs in Python")
        return ObjVar(module)
    if cls in (torch.device, torch.dtype, torch.finfo, torch.iinfo) and all(is_python_constant(a) for a in args):
        return _fold(tx, cls, args, kwargs)
    if cls is functools.partial and args:
        return PartialVar(args[0], list(args[1:]), dict(kwargs))
    if _is_plain_class(cls):
        obj = NewObjectVar(cls, {})
        init = inspect.getattr_static(cls, "__init__")
        if isinstance(init, types.FunctionType):
            call(tx, FunctionVar(fn=init), [obj, *args], kwargs)
        elif args or kwargs:
            raise Break(f"constructing a {cls.__qualname__} with arguments runs in Python")
        return obj
    raise Break(f"constructing a {cls.__qualname__} runs in Python")


def _autocast(cls: type, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """`torch.autocast(..., enabled=False)` while autocast is off (every entry guards that)
    changes nothing: a context that keeps the grad mode. timm's efficientvit computes its
    attention under one. Autocast switched on runs in Python."""
    if not all(is_python_constant(v) for v in (*args, *kwargs.values())):
        raise Break("torch.autocast with traced arguments runs in Python")
    bound = inspect.signature(cls.__init__).bind(
        None, *[as_python_constant(a) for a in args],
        **{k: as_python_constant(v) for k, v in kwargs.items()},
    )  # fmt: skip
    bound.apply_defaults()
    if bound.arguments.get("enabled") is False and not torch._C._is_any_autocast_enabled():
        return GradModeVar(None)
    raise Break("torch.autocast that switches autocast on or off runs in Python")


def _is_plain_class(cls: type) -> bool:
    """A Python class whose instances are plain objects with a __dict__: built symbolically."""
    if type(cls) is not type or cls.__module__ == "builtins" or is_skipped_module(cls.__module__):
        return False
    if any("__slots__" in k.__dict__ for k in cls.__mro__[:-1]):
        return False
    return all(k is object or "__new__" not in k.__dict__ for k in cls.__mro__) and not issubclass(
        cls, (BaseException, torch.nn.Module, torch.Tensor)
    )


def is_skipped_module(module: str) -> bool:
    return module.split(".")[0] in SKIP_PACKAGES or module.split(".")[0] == "torch"


def _call_grad_decorated(tx: Tracer, fn: FunctionVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """A function decorated with @torch.no_grad() / @torch.enable_grad(): the wrapped function
    is inlined with the grad mode switched around it."""
    real = fn.fn
    closure = dict(zip(real.__code__.co_freevars, (c.cell_contents for c in real.__closure__ or ())))
    factory = closure.get("ctx_factory")
    ctx = factory() if callable(factory) else None
    if type(ctx) not in (torch.no_grad, torch.enable_grad):
        raise Break(f"call to {describe(fn)} runs in Python (a context-manager decorator)")
    enabled = type(ctx) is torch.enable_grad
    prev = tx.builder.grad_enabled
    tx.builder.set_grad_enabled(enabled)
    result = call(tx, FunctionVar(fn=real.__wrapped__), args, kwargs)
    tx.builder.set_grad_enabled(prev)
    return result


def _as_var(v: Any) -> Var:
    return v if isinstance(v, Var) else wrap_unguarded(v)


# ---- builtins -----------------------------------------------------------------------------------

_PURE_MODULES = {"math", "cmath", "operator", "_operator"}
_PURE_BUILTINS = {
    abs, all, any, bool, chr, divmod, float, hash, int, len, max, min, ord, pow, repr, round,
    sorted, str, sum, format, hex, oct, bin,
}  # fmt: skip


_TEXT_BUILTINS = {str, repr, format, hash, ascii}


def _is_pure_builtin(fn: Any) -> bool:
    if fn in _PURE_BUILTINS:
        return True
    module = getattr(fn, "__module__", None)
    if module in _PURE_MODULES:
        return True
    self_obj = getattr(fn, "__self__", None)
    return isinstance(fn, types.BuiltinMethodType) and isinstance(self_obj, (str, int, float, tuple, bytes))


def _fold(tx: Tracer, fn: Callable, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """Compute a pure function of constants now; with tensors, record it as a graph op."""
    args = [ListVar(a.items[a.index :]) if isinstance(a, IteratorVar) else a for a in args]
    if any(contains_tensor(a) for a in args) or any(contains_tensor(v) for v in kwargs.values()):
        if fn in (abs, pow) or getattr(fn, "__module__", None) in ("operator", "_operator"):
            return tx.builder.call("call_function", fn, args, kwargs)
        if fn in (max, min, sum, all, any, sorted):
            return _reduce_builtin(tx, fn, args)
        if fn in (bool, int, float) and args and isinstance(args[0], TensorVar):
            raise Break(f"{fn.__name__}() of a tensor reads its value into Python")
        if fn is len and args and isinstance(args[0], TensorVar):
            return ConstVar(len(args[0].fake))
        raise Break(f"{getattr(fn, '__name__', fn)} on tensors is not traced")
    try:
        a = [as_python_constant(x) for x in args]
        k = {n: as_python_constant(v) for n, v in kwargs.items()}
        if fn in _TEXT_BUILTINS:  # text of a symbolic size is its value's (shapes.py)
            a = [concrete(x) for x in a]
    except TypeError:
        if fn is len and args:
            return _len(tx, args[0])
        raise Break(f"{getattr(fn, '__name__', fn)} of non-constant values is not traced") from None
    try:
        return wrap_unguarded(fn(*a, **k))
    except Exception as e:
        raise Break(f"{getattr(fn, '__name__', fn)} raised {type(e).__name__}: {e}") from None


def _reduce_builtin(tx: Tracer, fn: Callable, args: list[Var]) -> Var:
    if fn is sum:
        items = unpack_iterable(tx, args[0])
        total = args[1] if len(args) > 1 else ConstVar(0)
        for item in items:
            total = binary(tx, operator.add, total, item)
        return total
    raise Break(f"{fn.__name__}() over tensors compares tensor values")


def _len(tx: Tracer, v: Var) -> Var:
    if isinstance(v, ConstVar):
        try:
            return ConstVar(len(v.value))
        except TypeError as e:
            raise Break(f"len() raised TypeError: {e}") from None
    if isinstance(v, (ListVar, TupleVar, SetVar)):
        return ConstVar(len(v.items))
    if isinstance(v, DictVar):
        return ConstVar(len(v.items))
    if isinstance(v, IteratorVar):
        raise Break("len() of an iterator")
    if isinstance(v, TensorVar):
        return ConstVar(len(v.fake))
    if isinstance(v, ObjVar) and isinstance(v.value, torch.nn.Module) and v.source:
        tx.guards.length(v.source, v.value)
        return ConstVar(len(v.value))
    if isinstance(v, NewObjectVar):
        return ConstVar(len(v.fields))
    raise Break(f"len() of {describe(v)}")


def _python_type(v: Var) -> type:
    if isinstance(v, TensorVar):
        return torch.nn.Parameter if v.source and _is_parameter(v) else torch.Tensor
    if isinstance(v, (ConstVar, ObjVar)):
        return python_type(v.value)
    if isinstance(v, ListVar):
        return list
    if isinstance(v, TupleVar):
        return v.cls
    if isinstance(v, DictVar):
        return v.cls
    if isinstance(v, SetVar):
        return set
    if isinstance(v, (FunctionVar,)):
        return types.FunctionType
    if isinstance(v, MethodVar):
        return types.MethodType
    if isinstance(v, NewObjectVar):
        return v.cls
    raise Break(f"type of {describe(v)}")


def _is_parameter(v: TensorVar) -> bool:
    return bool(v.node.meta.get("is_parameter"))


def _isinstance(tx: Tracer, args: list[Var], kwargs: dict[str, Var]) -> Var:
    obj, classes = args[0], as_python_constant(args[1])
    if isinstance(obj, ObjVar):
        return ConstVar(isinstance(obj.value, classes))
    if isinstance(obj, TensorVar):
        return ConstVar(issubclass(_python_type(obj), classes) or (
            not _is_parameter(obj) and isinstance(obj.fake, classes) and classes is not torch.nn.Parameter
        ))
    return ConstVar(issubclass(_python_type(obj), classes))


def _getattr(tx: Tracer, args: list[Var], kwargs: dict[str, Var]) -> Var:
    name = as_python_constant(args[1])
    if len(args) > 2 and not _hasattr_value(tx, args[0], name):
        return args[2]
    return load_attr(tx, args[0], name)


def _hasattr_value(tx: Tracer, obj: Var, name: str) -> bool:
    if isinstance(obj, (ObjVar, ConstVar)):
        return hasattr(obj.value, name)
    if isinstance(obj, TensorVar):
        return hasattr(obj.fake, name)
    if isinstance(obj, NewObjectVar):
        return name in obj.fields or hasattr(obj.cls, name)
    try:
        load_attr(tx, obj, name)
        return True
    except Break:
        return False


def _hasattr(tx: Tracer, args: list[Var], kwargs: dict[str, Var]) -> Var:
    return ConstVar(_hasattr_value(tx, args[0], as_python_constant(args[1])))


def _range(tx, args, kwargs):
    return ConstVar(range(*[as_python_constant(a) for a in args]))


def _list(tx, args, kwargs):
    return ListVar(unpack_iterable(tx, args[0]) if args else [])


def _tuple(tx, args, kwargs):
    return TupleVar(unpack_iterable(tx, args[0]) if args else [])


def _dict(tx, args, kwargs):
    items: dict[Any, Var] = {}
    if args:
        src = args[0]
        if isinstance(src, DictVar):
            items.update(src.items)
        else:
            for pair in unpack_iterable(tx, src):
                k, v = unpack_iterable(tx, pair)
                items[as_python_constant(k)] = v
    items.update(kwargs)
    return DictVar(items)


def _enumerate(tx, args, kwargs):
    start = as_python_constant(args[1]) if len(args) > 1 else as_python_constant(kwargs.get("start", ConstVar(0)))
    items = unpack_iterable(tx, args[0])
    return IteratorVar([TupleVar([ConstVar(i + start), v]) for i, v in enumerate(items)])


def _zip(tx, args, kwargs):
    columns = [unpack_iterable(tx, a) for a in args]
    return IteratorVar([TupleVar(list(row)) for row in zip(*columns)])


def _reversed(tx, args, kwargs):
    return IteratorVar(list(reversed(unpack_iterable(tx, args[0]))))


def _iter(tx, args, kwargs):
    from compiler.tracer.operations import get_iter

    return get_iter(tx, args[0])


def _next(tx, args, kwargs):
    it = args[0]
    if isinstance(it, IteratorVar) and it.index < len(it.items):
        it.index += 1
        return it.items[it.index - 1]
    if isinstance(it, IteratorVar) and len(args) > 1:
        return args[1]
    raise Break("next() on an exhausted or unknown iterator")


def _map(tx, args, kwargs):
    columns = [unpack_iterable(tx, a) for a in args[1:]]
    return IteratorVar([call(tx, args[0], list(row), {}) for row in zip(*columns)])


def _filter(tx, args, kwargs):
    items = unpack_iterable(tx, args[1])
    if isinstance(args[0], ConstVar) and args[0].value is None:
        return IteratorVar([i for i in items if truth(tx, i)])
    return IteratorVar([i for i in items if truth(tx, call(tx, args[0], [i], {}))])


def _print(tx, args, kwargs):
    raise Break("print() writes output; it runs in Python")


def _type(tx, args, kwargs):
    if len(args) != 1:
        raise Break("type() with three arguments")
    return ObjVar(_python_type(args[0]))


def _callable(tx, args, kwargs):
    v = args[0]
    if isinstance(v, (FunctionVar, MethodVar, AttrCallVar)):
        return ConstVar(True)
    if isinstance(v, (ObjVar, ConstVar)):
        return ConstVar(callable(v.value))
    return ConstVar(False)


def _super(tx, args, kwargs):
    if len(args) == 2:
        return SuperVar(as_python_constant(args[0]), args[1])
    frame = tx.current_frame
    if "__class__" not in frame.cells:
        raise Break("zero-argument super() outside a method")
    cls = as_python_constant(tx.cell_contents(frame.cells["__class__"]))
    first = frame.code.code.co_varnames[0]
    return SuperVar(cls, tx.resolve(frame.locals[first]))


def _grad_ctx(enabled: bool) -> Callable:
    def make(tx, args, kwargs):
        return GradModeVar(enabled)

    return make


def _set_grad_enabled(tx, args, kwargs):
    enabled = bool(as_python_constant(args[0]))
    prev = tx.builder.grad_enabled
    tx.builder.set_grad_enabled(enabled)
    return GradModeVar(enabled, prev)


def _is_grad_enabled(tx, args, kwargs):
    return ConstVar(tx.builder.grad_enabled)


def _min_max(fn):
    def fold(tx, args, kwargs):
        if len(args) == 1:
            items = unpack_iterable(tx, args[0])
        else:
            items = list(args)
        if all(is_python_constant(i) and not isinstance(i, ObjVar) for i in items):
            return ConstVar(fn(as_python_constant(i) for i in items))
        raise Break(f"{fn.__name__}() over tensors compares tensor values")

    return fold


def _bool(tx, args, kwargs):
    if not args:
        return ConstVar(False)
    return ConstVar(truth(tx, args[0]))


def _unary_builtin(op):
    def run(tx, args, kwargs):
        if isinstance(args[0], TensorVar):
            return unary(tx, op, args[0])
        return _fold(tx, op, args, kwargs)

    return run


_SPECIAL: dict[Any, Callable] = {
    isinstance: _isinstance,
    getattr: _getattr,
    hasattr: _hasattr,
    range: _range,
    list: _list,
    tuple: _tuple,
    dict: _dict,
    enumerate: _enumerate,
    zip: _zip,
    reversed: _reversed,
    iter: _iter,
    next: _next,
    print: _print,
    map: _map,
    filter: _filter,
    type: _type,
    callable: _callable,
    super: _super,
    max: _min_max(max),
    min: _min_max(min),
    bool: _bool,
    abs: _unary_builtin(operator.abs),
    len: lambda tx, args, kwargs: _len(tx, args[0]),
    torch.no_grad: _grad_ctx(False),
    torch.enable_grad: _grad_ctx(True),
    torch.set_grad_enabled: _set_grad_enabled,
    torch.is_grad_enabled: _is_grad_enabled,
    torch.inference_mode: lambda tx, a, k: (_ for _ in ()).throw(Break("torch.inference_mode runs in Python")),
}
if hasattr(torch, "_C") and hasattr(torch._C, "_has_torch_function"):
    for _fn in (
        torch._C._has_torch_function,
        torch._C._has_torch_function_unary,
        torch._C._has_torch_function_variadic,
        torch.overrides.has_torch_function,
        torch.overrides.has_torch_function_unary,
        torch.overrides.has_torch_function_variadic,
    ):
        # Plain tensors never carry __torch_function__ overrides (subclasses are guarded out).
        _SPECIAL[_fn] = lambda tx, args, kwargs: ConstVar(False)


# ---- argument binding for inlined functions --------------------------------------------------


def bind_arguments(tx: Tracer, fn: FunctionVar, args: list[Var], kwargs: dict[str, Var]) -> dict[str, Var]:
    code = fn.get_code()
    nargs, posonly, kwonly = code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount
    names = code.co_varnames
    pos_names = names[:nargs]
    kwonly_names = names[nargs : nargs + kwonly]
    i = nargs + kwonly
    varargs_name = varkw_name = None
    if code.co_flags & inspect.CO_VARARGS:
        varargs_name = names[i]
        i += 1
    if code.co_flags & inspect.CO_VARKEYWORDS:
        varkw_name = names[i]
    fname = code.co_name
    bound: dict[str, Var] = {}
    for name, a in zip(pos_names, args):
        bound[name] = a
    extra = args[nargs:]
    if extra and varargs_name is None:
        raise Break(f"{fname}() takes {nargs} positional arguments but {len(args)} were given")
    if varargs_name is not None:
        bound[varargs_name] = TupleVar(list(extra))
    varkw: dict[str, Var] = {}
    for k, v in kwargs.items():
        if k in pos_names[posonly:] or k in kwonly_names:
            if k in bound:
                raise Break(f"{fname}() got multiple values for argument {k!r}")
            bound[k] = v
        elif varkw_name is not None:
            varkw[k] = v
        else:
            raise Break(f"{fname}() got an unexpected keyword argument {k!r}")
    defaults = _defaults(tx, fn)
    first_default = nargs - len(defaults)
    for j, name in enumerate(pos_names):
        if name not in bound:
            if j >= first_default:
                bound[name] = defaults[j - first_default]
            else:
                raise Break(f"{fname}() missing required argument {name!r}")
    kwdefaults = _kwdefaults(tx, fn)
    for name in kwonly_names:
        if name not in bound:
            if name not in kwdefaults:
                raise Break(f"{fname}() missing required keyword-only argument {name!r}")
            bound[name] = kwdefaults[name]
    if varkw_name is not None:
        bound[varkw_name] = DictVar(varkw)
    return bound


def _defaults(tx: Tracer, fn: FunctionVar) -> list[Var]:
    if fn.fn is None:
        return list(fn.defaults.items) if fn.defaults is not None else []
    values = fn.fn.__defaults__ or ()
    return [_default_var(tx, fn, v, f"__defaults__[{i}]") for i, v in enumerate(values)]


def _kwdefaults(tx: Tracer, fn: FunctionVar) -> dict[str, Var]:
    if fn.fn is None:
        return dict(fn.kwdefaults.items) if fn.kwdefaults is not None else {}
    values = fn.fn.__kwdefaults__ or {}
    return {k: _default_var(tx, fn, v, f"__kwdefaults__[{k!r}]") for k, v in values.items()}


def _default_var(tx: Tracer, fn: FunctionVar, value: Any, attr: str) -> Var:
    if isinstance(value, torch.Tensor) or isinstance(value, (list, dict)):
        if fn.source is None:
            raise Break("a tensor or mutable default argument of a function without a source")
        return wrap(tx, value, f"{fn.source}.{attr}")
    return wrap_unguarded(value)


def function_closure(tx: Tracer, fn: FunctionVar) -> list[CellVar]:
    if fn.fn is None:
        return list(fn.closure or [])
    cells = fn.fn.__closure__ or ()
    names = fn.fn.__code__.co_freevars
    return [
        CellVar(cell=c, name=n, source=f"{fn.source}.__closure__[{i}].cell_contents" if fn.source else None)
        for i, (n, c) in enumerate(zip(names, cells))
    ]


