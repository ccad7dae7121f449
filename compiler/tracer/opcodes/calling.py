"""Opcodes of calls and function objects, and where a call keeps its callable.

A call finds two slots below its arguments: up to 3.12 [NULL, callable] or [method, self]
(the NULL below the callable), from 3.13 [callable, NULL] or [method, self] (the NULL
above). LOAD_GLOBAL, LOAD_ATTR and LOAD_SUPER_ATTR push these slots for a call to come;
`with_null` and `callable_slots` are the one place that knows the order.
"""

from __future__ import annotations

import types
from typing import Any, Callable

from compiler.tracer import calls
from compiler.tracer import operations as ops
from compiler.tracer.breaks import Break
from compiler.tracer.calls import REAL_NULL
from compiler.tracer.opcodes.registry import PYTHON, opcode
from compiler.tracer.variables import DictVar, FunctionVar, NullVar, Var, as_python_constant

NULL_BELOW_CALLABLE = PYTHON < (3, 13)


def with_null(value: Any, null: Any) -> list:
    """The two slots of a callable loaded for a call that passes no `self`."""
    return [null, value] if NULL_BELOW_CALLABLE else [value, null]


def callable_slots(first: Any, second: Any, is_null: Callable[[Any], bool]) -> tuple[Any, list]:
    """The callable and its first arguments ([self] or none) from the two slots, the lower
    one first."""
    if NULL_BELOW_CALLABLE:
        return (second, []) if is_null(first) else (first, [second])
    return first, ([] if is_null(second) else [second])


def _traced_callable(tx, frame) -> tuple[Var, list[Var]]:
    second = tx.resolve(frame.stack.pop())
    first = tx.resolve(frame.stack.pop())
    return callable_slots(first, second, lambda v: isinstance(v, NullVar))


def _real_callable(f) -> tuple[Any, list]:
    second = f.stack.pop()
    first = f.stack.pop()
    return callable_slots(first, second, lambda v: v is REAL_NULL)


def _split_keywords(args: list, kw_names: tuple) -> tuple[list, dict]:
    if not kw_names:
        return args, {}
    cut = len(args) - len(kw_names)
    return args[:cut], dict(zip(kw_names, args[cut:]))


@opcode("KW_NAMES", until=(3, 13))
class KwNames:
    """The keyword names of the CALL that follows (3.11's argument indexes co_consts)."""

    def traced(tx, frame, ins):
        frame.kw_names = _kw_names(frame, ins)

    def concrete(f, ins, call_real):
        f.kw_names = _kw_names(f, ins)


def _kw_names(frame, ins) -> tuple:
    return ins.argval if isinstance(ins.argval, tuple) else frame.code.code.co_consts[ins.arg]


@opcode("CALL")
class Call:
    def traced(tx, frame, ins):
        kw_names = frame.kw_names or ()
        frame.kw_names = None
        args = tx.popn(frame, ins.arg)
        fn, first_args = _traced_callable(tx, frame)
        args, kwargs = _split_keywords([*first_args, *args], kw_names)
        tx.push(frame, calls.call(tx, fn, args, kwargs))

    def concrete(f, ins, call_real):
        kw_names = f.kw_names or ()
        f.kw_names = None
        args = f.stack[len(f.stack) - ins.arg :] if ins.arg else []
        del f.stack[len(f.stack) - ins.arg :]
        fn, first_args = _real_callable(f)
        args, kwargs = _split_keywords([*first_args, *args], kw_names)
        f.stack.append(call_real(fn, args, kwargs))


@opcode("CALL_FUNCTION_EX")
class CallFunctionEx:
    """`f(*args, **kwargs)`: bit 0 of the argument says a mapping of keywords is passed."""

    def traced(tx, frame, ins):
        kwargs_var = tx.pop(frame) if ins.arg & 1 else None
        args_var = tx.pop(frame)
        fn, first_args = _traced_callable(tx, frame)
        args = [*first_args, *ops.unpack_iterable(tx, args_var)]
        kwargs: dict[str, Var] = {}
        if kwargs_var is not None:
            if not isinstance(kwargs_var, DictVar):
                raise Break("**kwargs of an unknown mapping")
            kwargs = dict(kwargs_var.items)
        tx.push(frame, calls.call(tx, fn, args, kwargs))

    def concrete(f, ins, call_real):
        kwargs = f.stack.pop() if ins.arg & 1 else {}
        args = f.stack.pop()
        fn, first_args = _real_callable(f)
        f.stack.append(call_real(fn, [*first_args, *args], dict(kwargs)))


@opcode("MAKE_FUNCTION")
class MakeFunction:
    """The argument's flags say which of closure (0x08), annotations (0x04), keyword
    defaults (0x02) and defaults (0x01) lie below the code object."""

    def traced(tx, frame, ins):
        flags = ins.arg or 0
        code_var = tx.pop(frame)
        closure = tx.pop(frame) if flags & 0x08 else None
        if flags & 0x04:
            tx.pop(frame)  # annotations
        kwdefaults = tx.pop(frame) if flags & 0x02 else None
        defaults = tx.pop(frame) if flags & 0x01 else None
        code = as_python_constant(code_var)
        tx.push(
            frame,
            FunctionVar(
                code=code,
                globals=frame.globals,
                name=code.co_name,
                defaults=defaults,
                kwdefaults=kwdefaults,
                closure=list(closure.items) if closure is not None else None,
            ),
        )

    def concrete(f, ins, call_real):
        flags = ins.arg or 0
        code = f.stack.pop()
        closure = f.stack.pop() if flags & 0x08 else None
        annotations = f.stack.pop() if flags & 0x04 else None
        kwdefaults = f.stack.pop() if flags & 0x02 else None
        defaults = f.stack.pop() if flags & 0x01 else None
        fn = types.FunctionType(code, f.globals, code.co_name, defaults, closure)
        if kwdefaults:
            fn.__kwdefaults__ = kwdefaults
        if annotations:
            fn.__annotations__ = (
                dict(zip(annotations[::2], annotations[1::2]))
                if isinstance(annotations, tuple)
                else annotations
            )
        fn.__qualname__ = code.co_qualname
        f.stack.append(fn)
