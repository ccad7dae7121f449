"""Python constants (`ConstVar`): numbers, strings, None, dtypes and the other values the
graph is specialised on. Everything done to them runs at trace time."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from compiler.tracer import calls, operations
from compiler.tracer.breaks import Break
from compiler.tracer.exceptions import raise_python
from compiler.tracer.shapes import is_symbolic
from compiler.tracer.values.table import VALUE_OPS, ValueOps
from compiler.tracer.variables import ConstVar, ObjVar, Var
from compiler.tracer.wrap import wrap_unguarded

if TYPE_CHECKING:
    from compiler.tracer.context import Emitter, Tracer

# Constants written as Python literals in generated code; others are referenced by name.
SIMPLE_LITERALS = (int, str, bytes, bool, type(None))


def describe_value(v: ConstVar | ObjVar) -> str:
    """A constant or a real object by its qualified name, else by its type."""
    value = v.value
    name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
    module = getattr(value, "__module__", None)
    if name:
        return f"{module}.{name}" if module and module != "builtins" else name
    return f"a {type(value).__name__} object"


def held(v: ConstVar | ObjVar) -> Any:
    return v.held if isinstance(v, ObjVar) else v.value


def same_value(a: ConstVar | ObjVar, b: Var) -> bool | None:
    if not isinstance(b, (ConstVar, ObjVar)):
        return None
    if isinstance(a, ConstVar) or isinstance(b, ConstVar):
        # `x is None`: a constant is never an object the trace guards by type alone, so
        # the answer holds for any such object and need not pin it (ObjVar.identity)
        return held(a) is held(b)
    return a.value is b.value


def _attr(tx: Tracer, c: ConstVar, name: str) -> Var:
    try:
        attr = getattr(c.value, name)
    except AttributeError as e:
        raise raise_python(e) from None
    return wrap_unguarded(attr)


def _call(tx: Tracer, fn: ConstVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if not callable(fn.value):
        return NotImplemented
    return calls.call(tx, ObjVar(fn.value), args, kwargs)  # the object's own call


def _getitem(tx: Tracer, c: ConstVar, index: Var) -> Var:
    try:
        return wrap_unguarded(c.value[operations.const_index(index)])
    except Exception as e:
        raise raise_python(e) from None


def _unary(tx: Tracer, op: Callable, c: ConstVar) -> Var:
    try:
        return ConstVar(op(c.value))
    except Exception as e:
        raise raise_python(e) from None


def _iterate(tx: Tracer, c: ConstVar) -> list[Var]:
    try:
        return [wrap_unguarded(x) for x in c.value]
    except TypeError:
        raise Break(f"{type(c.value).__name__} is not iterable") from None


def _rebuild(em: Emitter, c: ConstVar) -> str:
    value = c.value
    if em.sym_text is not None and is_symbolic(value):
        return em.sym_text(value, em.ref)
    if type(value) in SIMPLE_LITERALS or (
        type(value) is float and value == value and abs(value) != float("inf")
    ):
        return repr(value)
    return em.ref(value)


VALUE_OPS[ConstVar] = ValueOps(
    describe=describe_value,
    attr=_attr,
    call=_call,
    getitem=_getitem,
    immutable=True,
    unary=_unary,
    truth=lambda tx, c: bool(c.value),
    same=same_value,
    iterate=_iterate,
    rebuild=_rebuild,
    source_first=False,
)
