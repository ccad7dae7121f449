"""Calls: which callee is put in the graph, which is inlined, which is computed on constants,
and which ends the graph (runs in Python). Builtins are in builtin_fns.py, constructors in
construct.py, argument binding for inlined functions in binding.py."""

from __future__ import annotations

import contextlib
import functools
import inspect
import sysconfig
import types
from typing import TYPE_CHECKING, Any, Callable

import torch

from compiler import optim
from compiler.tracer import builtin_fns, construct, objects
from compiler.tracer.breaks import Break, Raised
from compiler.tracer.hints import call_kind, tensor_method_kind
from compiler.tracer.marked import marked_call
from compiler.tracer.operations import (
    as_dict,
    describe,
    dict_key,
    module_method,
    mutable_dict,
    mutable_list,
    unpack_iterable,
)
from compiler.tracer.variables import (
    AttrCallVar,
    AutocastExitVar,
    ConstVar,
    DictVar,
    ExceptionVar,
    FunctionVar,
    GradExitVar,
    IteratorVar,
    ListVar,
    MethodVar,
    NewObjectVar,
    ObjVar,
    PartialVar,
    SetVar,
    TensorVar,
    TupleVar,
    Var,
    as_python_constant,
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
_STATEFUL_TORCH_NAMES = (
    "manual_seed",
    "seed",
    "save",
    "load",
    "backward",
    "synchronize",
    "compile",
)
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


# Standard-library code that is plain Python with no effect outside its object: traced
# like user code (transformers returns a nullcontext() where no autocast is needed).
_TRACED_STDLIB = {
    f.__code__
    for f in (
        contextlib.nullcontext.__init__,
        contextlib.nullcontext.__enter__,
        contextlib.nullcontext.__exit__,
    )
}


def is_skipped(fn: types.FunctionType) -> bool:
    module = getattr(fn, "__module__", None) or ""
    if module.split(".")[0] in SKIP_PACKAGES:
        return True
    if fn.__code__ in _TRACED_STDLIB:
        return False
    filename = fn.__code__.co_filename
    return filename.startswith(_STDLIB) and "site-packages" not in filename


def is_torch_function(fn: Any) -> bool:
    module = getattr(fn, "__module__", None) or ""
    if isinstance(
        fn, (types.FunctionType, types.BuiltinFunctionType, types.MethodDescriptorType)
    ) or type(fn).__name__ in ("OpOverload", "OpOverloadPacket", "builtin_function_or_method"):
        if module.startswith("torch.nn.modules") or module.startswith("torch.nn.utils.parametriz"):
            return False
        if isinstance(fn, types.FunctionType) and "<" in fn.__qualname__:
            # A lambda or a local function (OpInfo's `op=lambda x: x.chalf()`): a graph node
            # calling it would be named by its module and qualified name, which do not
            # reach it (the graph's own code then raises AttributeError): traced instead.
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
            return call(
                tx,
                FunctionVar(fn=orig, source=f"{fn.source}._orig_fn" if fn.source else None),
                args,
                kwargs,
            )
        marked = marked_call(tx, real, args, kwargs) if real is not None else None
        if marked is not None:
            return marked
        if (
            real is not None
            and real.__code__.co_name == "decorate_context"
            and hasattr(real, "__wrapped__")
        ):
            return _call_grad_decorated(tx, fn, args, kwargs)
        if real is not None:
            special = builtin_fns.SPECIAL.get(real)
            if special is not None:
                return special(tx, args, kwargs)
            if args and _is_optimizer(args[0]):
                raise Break(_optimizer_reason(real.__name__, args[0].value), "optimizer")
            if args and _is_lr_scheduler(args[0]):
                raise Break(_lr_scheduler_reason(real.__name__), "optimizer")
            scheduled = optim.scheduled_optimizer(real)
            if scheduled is not None:  # opt.step once an LR scheduler wrapped it
                raise Break(_optimizer_reason("step", scheduled), "optimizer")
            if is_torch_function(real):
                return torch_call(tx, real, args, kwargs)
            if is_skipped(real):
                raise Break(
                    f"call to {describe(fn)} runs in Python (library code is not traced)",
                    call_kind(real, library=True),
                )
        return tx.inline(fn, args, kwargs)
    if isinstance(fn, MethodVar):
        return call(tx, fn.func, [fn.self_var, *args], kwargs)
    if isinstance(fn, AttrCallVar):
        return call_method(tx, fn.obj, fn.name, args, kwargs)
    if isinstance(fn, GradExitVar):
        tx.builder.set_grad_enabled(fn.restore)
        return ConstVar(None)
    if isinstance(fn, AutocastExitVar):
        tx.builder.set_autocast(fn.device_type, fn.before)
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
        special = builtin_fns.SPECIAL.get(value)
    except TypeError:  # unhashable callable
        special = None
    if special is not None:
        return special(tx, args, kwargs)
    if builtin_fns.is_pure_builtin(value) or builtin_fns.folds_numpy_scalars(value, args, kwargs):
        return builtin_fns.fold(tx, value, args, kwargs)
    if isinstance(value, type):
        return construct.construct_object(tx, fn, args, kwargs)
    if is_torch_function(value):
        return torch_call(tx, value, args, kwargs)
    if isinstance(value, types.MethodType) and isinstance(value.__func__, types.FunctionType):
        self_src = f"{fn.source}.__self__" if fn.source else None
        self_var = (
            wrap(tx, value.__self__, self_src) if self_src else wrap_unguarded(value.__self__)
        )
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
    raise Break(
        f"call to {describe(fn)} runs in Python (it is not a torch op or Python code)",
        call_kind(value),
    )


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
        return call(tx, FunctionVar(fn=fwd), [mod_var, *args], kwargs)
    if forward is not None:
        return call(
            tx,
            wrap(tx, forward, f"{mod_var.source}.forward") if mod_var.source else ObjVar(forward),
            args,
            kwargs,
        )
    forward = inspect.getattr_static(type(mod), "forward")
    src = f"type({mod_var.source}).forward" if mod_var.source else None
    return call(tx, FunctionVar(fn=forward, source=src), [mod_var, *args], kwargs)


def _is_optimizer(v: Var) -> bool:
    return isinstance(v, ObjVar) and isinstance(v.value, torch.optim.Optimizer)


def _is_lr_scheduler(v: Var) -> bool:
    return isinstance(v, ObjVar) and isinstance(v.value, torch.optim.lr_scheduler.LRScheduler)


def _optimizer_reason(method: str, opt: torch.optim.Optimizer) -> str:
    if method == "step":
        return optim.trace_reason(opt)
    if method == "zero_grad":
        return (
            "optimizer.zero_grad() runs in Python: it resets the parameters' .grad attributes, "
            "which a graph does not hold; the next graph starts after it (torch's own "
            "zero_grad with set_to_none=True runs as one loop over the parameters, "
            "compiler/optim/zero_grad.py)"
        )
    return f"optimizer.{method}() runs in Python: torch.optim is not traced"


def _lr_scheduler_reason(method: str) -> str:
    if method == "step":
        return (
            "lr_scheduler.step() runs in Python: it sets the param groups' lr, which a "
            "compiled optimizer step reads as a tensor input (a new lr does not recompile)"
        )
    return f"lr_scheduler.{method}() runs in Python: torch.optim is not traced"


def torch_call(tx: Tracer, fn: Callable, args: list[Var], kwargs: dict[str, Var]) -> Var:
    reason = _AUTOGRAD_REASONS.get(fn)
    if reason is not None:
        raise Break(reason, "autograd_engine")
    name = getattr(fn, "__name__", "")
    if name in _STATEFUL_TORCH_NAMES or name.startswith("set_") or name.startswith("_set_"):
        raise Break(f"torch.{name} changes global state; it runs in Python", "global_state")
    return tx.builder.call("call_function", fn, args, kwargs)


def call_method(tx: Tracer, obj: Var, name: str, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if isinstance(obj, TensorVar):
        reason = _BREAK_TENSOR_METHODS.get(name)
        if reason:
            raise Break(reason, tensor_method_kind(name))
        return tx.builder.call("call_method", name, [obj, *args], kwargs)
    if isinstance(obj, ListVar):
        return _list_method(tx, obj, name, args)
    if isinstance(obj, DictVar):
        return dict_method(tx, obj, name, args, kwargs)
    if isinstance(obj, NewObjectVar):
        return objects.object_method(tx, obj, name, args, kwargs)
    if isinstance(obj, ObjVar) and name in ("__getattribute__", "__setattr__", "__delattr__"):
        return objects.real_object_method(tx, obj, name, args)
    if isinstance(obj, SetVar) and name in ("add", "discard") and is_python_constant(args[0]):
        present = [i for i in obj.items if as_python_constant(i) != as_python_constant(args[0])]
        tx.changed()
        obj.items[:] = present + ([args[0]] if name == "add" else [])
        return ConstVar(None)
    if isinstance(obj, TupleVar) and name in ("index", "count"):
        return builtin_fns.fold(tx, getattr(tuple(as_python_constant(obj)), name), args, kwargs)
    if isinstance(obj, ObjVar) and isinstance(obj.value, torch.nn.Module):
        return module_method(tx, obj, name, args, kwargs)
    raise Break(f"method {name!r} of {describe(obj)} is not traced")


def _list_method(tx: Tracer, lst: ListVar, name: str, args: list[Var]) -> Var:
    if name in ("index", "count", "copy", "__len__"):
        if name == "copy":
            return ListVar(list(lst.items))
        return builtin_fns.fold(tx, getattr(as_python_constant(lst), name), args, {})
    items = mutable_list(tx, lst).items
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


def dict_method(tx: Tracer, d: DictVar, name: str, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """dict's own method `name` (never a subclass's override: the caller resolved those)."""
    if name == "items":
        return ListVar([TupleVar([ConstVar(k), v]) for k, v in d.items.items()])
    if name in ("keys", "__iter__"):
        keys = [ConstVar(k) for k in d.items]
        # a keys view compares and combines as a set, and iterates in insertion order
        return SetVar(keys) if name == "keys" else IteratorVar(keys, seq=d)
    if name == "values":
        return ListVar(list(d.items.values()))
    if name == "get":
        key = dict_key(args[0])
        return d.items.get(key, args[1] if len(args) > 1 else ConstVar(None))
    if name == "copy":
        return DictVar(dict(d.items), cls=d.cls)
    if name == "__getitem__":
        key = dict_key(args[0])
        if key not in d.items:
            raise Raised(ExceptionVar(KeyError, [args[0]]))
        return d.items[key]
    if name == "__contains__":
        return ConstVar(dict_key(args[0]) in d.items)
    if name == "__len__":
        return ConstVar(len(d.items))
    items = mutable_dict(tx, d).items
    if name == "__setitem__":
        items[dict_key(args[0])] = args[1]
        return ConstVar(None)
    if name in ("__delitem__", "pop"):
        key = dict_key(args[0])
        if key in items:
            value = items.pop(key)
            return value if name == "pop" else ConstVar(None)
        if name == "pop" and len(args) > 1:
            return args[1]
        raise Raised(ExceptionVar(KeyError, [args[0]]))
    if name == "update":
        for a in args:
            items.update(as_dict(tx, a).items)
        items.update(kwargs)
        return ConstVar(None)
    if name == "setdefault":
        key = dict_key(args[0])
        return items.setdefault(key, args[1] if len(args) > 1 else ConstVar(None))
    if name == "clear":
        items.clear()
        return ConstVar(None)
    raise Break(f"dict.{name} is not traced")


def _call_grad_decorated(
    tx: Tracer, fn: FunctionVar, args: list[Var], kwargs: dict[str, Var]
) -> Var:
    """A function decorated with @torch.no_grad() / @torch.enable_grad(): the wrapped function
    is inlined with the grad mode switched around it."""
    real = fn.fn
    closure = dict(
        zip(real.__code__.co_freevars, (c.cell_contents for c in real.__closure__ or ()))
    )
    factory = closure.get("ctx_factory")
    ctx = factory() if callable(factory) else None
    if type(ctx) not in (torch.no_grad, torch.enable_grad):
        raise Break(
            f"call to {describe(fn)} runs in Python (a context-manager decorator)",
            "context_manager",
        )
    enabled = type(ctx) is torch.enable_grad
    prev = tx.builder.grad_enabled
    tx.builder.set_grad_enabled(enabled)
    result = call(tx, FunctionVar(fn=real.__wrapped__), args, kwargs)
    tx.builder.set_grad_enabled(prev)
    return result
