"""Opcodes of f-strings: converting and formatting values, joining the parts."""

from __future__ import annotations

from typing import Any

from compiler.tracer.breaks import Break
from compiler.tracer.exceptions import materialize
from compiler.tracer.opcodes.registry import opcode
from compiler.tracer.shapes import concrete as concrete_value
from compiler.tracer.variables import (
    ConstVar,
    ExceptionVar,
    ObjVar,
    Var,
    as_python_constant,
    is_python_constant,
)

# `!s`, `!r` and `!a`, by the number the bytecode gives them
CONVERSIONS = {1: str, 2: repr, 3: ascii}


def _convert(value: Any, conversion: int) -> Any:
    return CONVERSIONS[conversion](value) if conversion in CONVERSIONS else value


def _formatted(v: Var) -> Any:
    """The Python value of `v` that an f-string formats: a constant, never a tensor (an
    exception raised in the trace formats as the real one made from its arguments)."""
    if isinstance(v, ExceptionVar):
        return materialize(v)
    if not is_python_constant(v) or isinstance(v, ObjVar):
        raise Break("an f-string formats a value that is not a Python constant")
    return concrete_value(as_python_constant(v))  # a symbolic size formats as its value


@opcode("BUILD_STRING")
class BuildString:
    def traced(tx, frame, ins):
        parts = tx.popn(frame, ins.arg)
        tx.push(frame, ConstVar("".join(as_python_constant(p) for p in parts)))

    def concrete(f, ins, call_real):
        parts = f.stack[len(f.stack) - ins.arg :] if ins.arg else []
        del f.stack[len(f.stack) - ins.arg :]
        f.stack.append("".join(parts))


@opcode("FORMAT_VALUE", until=(3, 13))
class FormatValue:
    """Up to 3.12 one opcode converts and formats: the argument's low bits are the
    conversion, bit 2 says a format spec lies on top of the value."""

    def traced(tx, frame, ins):
        flags = ins.arg or 0
        spec = as_python_constant(tx.pop(frame)) if flags & 0x04 else ""
        v = _formatted(tx.pop(frame))
        tx.push(frame, ConstVar(format(_convert(v, flags & 0x03), spec)))

    def concrete(f, ins, call_real):
        flags = ins.arg or 0
        spec = f.stack.pop() if flags & 0x04 else ""
        f.stack.append(format(_convert(f.stack.pop(), flags & 0x03), spec))


@opcode("CONVERT_VALUE", since=(3, 13))
class ConvertValue:
    """From 3.13 `!s`, `!r` and `!a` are an opcode of their own, before the formatting."""

    def traced(tx, frame, ins):
        tx.push(frame, ConstVar(_convert(_formatted(tx.pop(frame)), ins.arg)))

    def concrete(f, ins, call_real):
        f.stack.append(_convert(f.stack.pop(), ins.arg))


@opcode("FORMAT_SIMPLE", since=(3, 13))
class FormatSimple:
    def traced(tx, frame, ins):
        tx.push(frame, ConstVar(format(_formatted(tx.pop(frame)), "")))

    def concrete(f, ins, call_real):
        f.stack.append(format(f.stack.pop(), ""))


@opcode("FORMAT_WITH_SPEC", since=(3, 13))
class FormatWithSpec:
    """The format spec lies on top of the value."""

    def traced(tx, frame, ins):
        spec = as_python_constant(tx.pop(frame))
        tx.push(frame, ConstVar(format(_formatted(tx.pop(frame)), spec)))

    def concrete(f, ins, call_real):
        spec = f.stack.pop()
        f.stack.append(format(f.stack.pop(), spec))
