"""Exceptions raised while tracing: their values, and how the trace raises and catches them.

Since 3.11 a try block has no instructions of its own: the normal path of try/finally and
of a `with` block is straight-line code the tracer runs like any other. Only an exception
raised while tracing reaches a handler. Python-level exceptions of traced code (`raise`, a
missing dict key, a failing builtin on constants) are `Raised` with an ExceptionVar; the
instruction's entry in the exception table (bytecode.Handler) says where they go, exactly as
CPython unwinds: cut the stack to the handler's depth, push the raising instruction's index
when the entry asks for it, push the exception, jump. An exception no handler in the trace
catches ends the graph before the root-frame instruction it came from, which then raises it
for real (and the frame evaluator runs the handlers of the real frame).

A graph break inside a handler that the trace entered cannot hand its state to the real
frame (the exception exists only in the trace), so the trace restarts and ends before the
root-frame instruction that raised instead (`Tracer.unwound`).

The opcode handlers are in exception_opcodes.py; this module holds the values they share
with the rest of the tracer.
"""

from __future__ import annotations

import types
from typing import Any

from compiler.tracer.breaks import Break, Raised
from compiler.tracer.variables import (
    ConstVar,
    ExceptionVar,
    ObjVar,
    TupleVar,
    Var,
    as_python_constant,
)
from compiler.tracer.wrap import wrap_unguarded

# An exception whose class and arguments are known is rebuilt for real at a graph break; these
# carry state a rebuilt one would not have (OSError picks a subclass from its arguments).
_NOT_REBUILT = (OSError,)


def raise_python(error: BaseException) -> Raised:
    """The `Raised` for an exception computed on constants while tracing (a builtin that
    failed), to raise from a handler: `raise raise_python(e) from None`."""
    return Raised(ExceptionVar(type(error), [wrap_unguarded(a) for a in error.args]))


def is_simple_exception_class(cls: Any) -> bool:
    """An exception class built and raised in the trace: its construction only stores its
    arguments (no Python __init__ or __new__), so the trace knows all of its state."""
    return (
        isinstance(cls, type)
        and issubclass(cls, BaseException)
        and not issubclass(cls, _NOT_REBUILT)
        and not any(
            isinstance(klass.__dict__.get(name), (staticmethod, types.FunctionType))
            for klass in cls.__mro__
            for name in ("__init__", "__new__")
        )
    )


def materialize(exc: ExceptionVar) -> BaseException:
    """A real exception equal to `exc`, for pure builtins (str, repr) applied to it."""
    try:
        return exc.cls(*[as_python_constant(a) for a in exc.args])
    except TypeError:
        raise Break(f"a {exc.cls.__name__} whose arguments are not constants") from None


def describe_exception(exc: ExceptionVar) -> str:
    """`KeyError('b')`: the class and the first line of the message, short."""
    try:
        text = str(materialize(exc))
    except Break:
        text = ""
    text = text.splitlines()[0] if text else ""
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{exc.cls.__name__}({text!r})" if text else exc.cls.__name__


def exception_attr(exc: ExceptionVar, name: str) -> Var:
    """The attributes of an exception the trace knows: its arguments and class."""
    if name == "args":
        return TupleVar(list(exc.args))
    if name == "__class__":
        return ObjVar(exc.cls)
    if name == "__cause__":
        return exc.cause if exc.cause is not None else ConstVar(None)
    if name == "value" and issubclass(exc.cls, StopIteration):
        return exc.args[0] if exc.args else ConstVar(None)
    raise Break(f"attribute {name!r} of a {exc.cls.__name__} raised while tracing")
