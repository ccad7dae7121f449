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


def _traced_call(tx, frame, argc: int, kw_names: tuple) -> None:
    args = tx.popn(frame, argc)
    fn, first_args = _traced_callable(tx, frame)
    args, kwargs = _split_keywords([*first_args, *args], kw_names)
    tx.push(frame, calls.call(tx, fn, args, kwargs))


def _real_call(f, argc: int, kw_names: tuple, call_real) -> None:
    args = f.stack[len(f.stack) - argc :] if argc else []
    del f.stack[len(f.stack) - argc :]
    fn, first_args = _real_callable(f)
    args, kwargs = _split_keywords([*first_args, *args], kw_names)
    reads_frame = _FRAME_READERS.get(id(fn))
    if reads_frame is not None and not args and not kwargs:
        f.stack.append(reads_frame(f))
    else:
        f.stack.append(call_real(fn, args, kwargs))


# Builtins that read their caller's frame: called from the evaluator they would read its own,
# so they read the user's frame here, with 3.13's meaning (PEP 667: `locals()` in a function
# is a new snapshot at each call).
_FRAME_READERS: dict[int, Callable[[Any], Any]] = {
    id(locals): lambda f: f.local_values(),
    id(vars): lambda f: f.local_values(),
    id(dir): lambda f: sorted(f.local_values()),
}


@opcode("CALL")
class Call:
    """Up to 3.12 a KW_NAMES before the CALL names its keyword arguments."""

    def traced(tx, frame, ins):
        kw_names = frame.kw_names or ()
        frame.kw_names = None
        _traced_call(tx, frame, ins.arg, kw_names)

    def concrete(f, ins, call_real):
        kw_names = f.kw_names or ()
        f.kw_names = None
        _real_call(f, ins.arg, kw_names, call_real)


@opcode("CALL_KW", since=(3, 13))
class CallKw:
    """3.13's call with keywords: their names, a constant tuple, lie on top of the arguments."""

    def traced(tx, frame, ins):
        _traced_call(tx, frame, ins.arg, as_python_constant(tx.pop(frame)))

    def concrete(f, ins, call_real):
        _real_call(f, ins.arg, f.stack.pop(), call_real)


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


# ---- function objects -----------------------------------------------------------------------

# The attributes a new function may get: closure, annotations, keyword defaults, defaults, by
# their flag, in the order they lie on the stack (the closure on top) and are set in 3.13.
_ATTRIBUTES = (0x08, 0x04, 0x02, 0x01)


def _new_traced_function(frame, code: types.CodeType) -> FunctionVar:
    return FunctionVar(code=code, globals=frame.globals, name=code.co_name)


def _set_traced_attribute(tx, fn: FunctionVar, flag: int, value: Var) -> None:
    if flag == 0x08:
        fn.closure = list(value.items)
    elif flag == 0x04:  # (name, annotation, name, annotation, ...)
        items = ops.unpack_iterable(tx, value)
        names = [as_python_constant(n) for n in items[::2]]
        fn.annotations = DictVar(dict(zip(names, items[1::2])))
    elif flag == 0x02:
        fn.kwdefaults = value
    elif flag == 0x01:
        fn.defaults = value


def _new_real_function(f, code: types.CodeType, closure: tuple | None) -> types.FunctionType:
    fn = types.FunctionType(code, f.globals, code.co_name, None, closure)
    fn.__qualname__ = code.co_qualname
    return fn


def _set_real_attribute(fn: types.FunctionType, flag: int, value: Any) -> types.FunctionType:
    """`fn` with the attribute set; a closure is fixed when a function is made, so setting
    one makes the function again."""
    if flag == 0x08:
        new = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, value)
        new.__qualname__ = fn.__qualname__
        new.__kwdefaults__ = fn.__kwdefaults__
        return new
    if flag == 0x04:
        fn.__annotations__ = (
            dict(zip(value[::2], value[1::2])) if isinstance(value, tuple) else value
        )
    elif flag == 0x02:
        fn.__kwdefaults__ = value
    elif flag == 0x01:
        fn.__defaults__ = value
    return fn


@opcode("MAKE_FUNCTION", until=(3, 13))
class MakeFunction312:
    """The argument's flags say which attributes (_ATTRIBUTES) lie below the code object."""

    def traced(tx, frame, ins):
        fn = _new_traced_function(frame, as_python_constant(tx.pop(frame)))
        for flag in _ATTRIBUTES:
            if ins.arg & flag:
                _set_traced_attribute(tx, fn, flag, tx.pop(frame))
        tx.push(frame, fn)

    def concrete(f, ins, call_real):
        code = f.stack.pop()
        values = {flag: f.stack.pop() for flag in _ATTRIBUTES if ins.arg & flag}
        fn = _new_real_function(f, code, values.pop(0x08, None))
        for flag, value in values.items():
            fn = _set_real_attribute(fn, flag, value)
        f.stack.append(fn)


@opcode("MAKE_FUNCTION", since=(3, 13))
class MakeFunction:
    """From 3.13 the code object alone; a SET_FUNCTION_ATTRIBUTE follows for each attribute."""

    def traced(tx, frame, ins):
        tx.push(frame, _new_traced_function(frame, as_python_constant(tx.pop(frame))))

    def concrete(f, ins, call_real):
        code = f.stack.pop()
        # empty cells until SET_FUNCTION_ATTRIBUTE brings the closure
        closure = tuple(types.CellType() for _ in code.co_freevars) or None
        f.stack.append(_new_real_function(f, code, closure))


@opcode("SET_FUNCTION_ATTRIBUTE", since=(3, 13))
class SetFunctionAttribute:
    """The function on top, the attribute's value below it; the argument is its flag."""

    def traced(tx, frame, ins):
        fn = tx.pop(frame)
        value = tx.pop(frame)
        if not isinstance(fn, FunctionVar) or fn.fn is not None:
            raise Break("setting an attribute of a function not made in the trace")
        _set_traced_attribute(tx, fn, ins.arg, value)
        tx.push(frame, fn)

    def concrete(f, ins, call_real):
        fn = f.stack.pop()
        value = f.stack.pop()
        f.stack.append(_set_real_attribute(fn, ins.arg, value))
