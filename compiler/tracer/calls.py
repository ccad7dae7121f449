"""Calls: which callee is put in the graph, which is inlined, which is computed on constants,
and which ends the graph (runs in Python). Each kind of callee has its `call` handler in
values.table.VALUE_OPS (functions in values/functions.py, real objects and classes in
values/user_objects.py, ...); builtins are in builtin_fns.py, constructors in construct.py,
argument binding for inlined functions in binding.py."""

from __future__ import annotations

import contextlib
import sysconfig
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from compiler.tracer.breaks import Break
from compiler.tracer.values.table import describe, ops_of
from compiler.tracer.variables import ConstVar, ObjVar, TupleVar, Var

if TYPE_CHECKING:
    from compiler.tracer.context import Tracer


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


def constant(value: Any) -> Var:
    if type(value) is tuple:
        return TupleVar([constant(v) for v in value])
    return ConstVar(value)


# Callable objects handled by their type (a functools.lru_cache wrapper, the `apply` of a
# custom autograd Function): handlers registered by the value families, each returning
# NotImplemented for an object of that type it does not handle.
CALL_BY_TYPE: dict[type, list[Callable[[Tracer, ObjVar, list[Var], dict[str, Var]], Var]]] = {}


def call_by_type(tx: Tracer, fn: ObjVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    for handler in CALL_BY_TYPE.get(type(fn.held), ()):
        out = handler(tx, fn, args, kwargs)
        if out is not NotImplemented:
            return out
    return NotImplemented


# Python functions handled by their code object: one code shared by many closures (every
# @contextmanager function is a closure of contextlib's `helper`), registered by the value
# families (values/context_managers.py).
CALL_BY_CODE: dict[types.CodeType, Callable[[Tracer, Var, list[Var], dict[str, Var]], Var]] = {}


def builtin_var(value: Any) -> Var:
    return ObjVar(value)


# Standard-library code that is plain Python with no effect outside its object: traced
# like user code (transformers returns a nullcontext() where no autocast is needed). The
# value families add theirs (values/stdlib_python.py: heapq, bisect, ChainMap).
TRACED_STDLIB = {
    f.__code__
    for f in (
        contextlib.nullcontext.__init__,
        contextlib.nullcontext.__enter__,
        contextlib.nullcontext.__exit__,
        contextlib.suppress.__init__,
        contextlib.suppress.__enter__,
        contextlib.suppress.__exit__,
    )
}


def is_skipped(fn: types.FunctionType) -> bool:
    module = getattr(fn, "__module__", None) or ""
    if module.split(".")[0] in SKIP_PACKAGES:
        return True
    if fn.__code__ in TRACED_STDLIB:
        return False
    filename = fn.__code__.co_filename
    return filename.startswith(_STDLIB) and "site-packages" not in filename


def is_skipped_module(module: str) -> bool:
    return module.split(".")[0] in SKIP_PACKAGES or module.split(".")[0] == "torch"


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


# ---- the call dispatchers ----------------------------------------------------------------------


def call(tx: Tracer, fn: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    handler = ops_of(fn).call
    if handler is not None:
        out = handler(tx, fn, args, kwargs)
        if out is not NotImplemented:
            return out
    raise Break(f"calling {describe(fn)} is not traced")


def call_method(tx: Tracer, obj: Var, name: str, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """`obj.name(*args, **kwargs)` for a method of a tensor or a container, called by name
    (AttrCallVar): the kind's method of that name, else its catch-all."""
    ops = ops_of(obj)
    method = ops.methods.get(name)
    out = NotImplemented
    if method is not None:
        out = method(tx, obj, args, kwargs)
    elif ops.method is not None:
        out = ops.method(tx, obj, name, args, kwargs)
    if out is not NotImplemented:
        return out
    raise Break(f"method {name!r} of {describe(obj)} is not traced")
