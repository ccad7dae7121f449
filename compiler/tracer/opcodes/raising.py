"""Opcodes of exceptions and `with` blocks (exceptions.py has the tracer's model; the
exception table sends a raised exception to its handler: Translator.unwind, concrete.step)."""

from __future__ import annotations

import sys
import types

from compiler.tracer import calls
from compiler.tracer import operations as ops
from compiler.tracer.breaks import Break, Raised
from compiler.tracer.exceptions import is_simple_exception_class
from compiler.tracer.opcodes.registry import opcode
from compiler.tracer.values.table import describe, ops_of
from compiler.tracer.variables import (
    AutocastExitVar,
    AutocastVar,
    ConstVar,
    ExceptionVar,
    FunctionVar,
    GradExitVar,
    GradModeVar,
    MethodVar,
    NewObjectVar,
    ObjVar,
    Var,
    as_python_constant,
    is_python_constant,
)

# ---- raising --------------------------------------------------------------------------------


@opcode("RAISE_VARARGS")
class RaiseVarargs:
    """`raise` (argument 0), `raise exc` (1), `raise exc from cause` (2)."""

    def traced(tx, frame, ins):
        if ins.arg == 0:
            if not isinstance(tx.current_exc, ExceptionVar):
                raise Break("a bare `raise` re-raises an exception the trace did not raise")
            raise Raised(tx.current_exc)
        cause = tx.pop(frame) if ins.arg == 2 else None
        exc = exception_value(tx.pop(frame))
        if cause is not None:
            if not (ops.is_none(cause) or isinstance(cause, ExceptionVar)):
                cause = exception_value(cause)
            exc.cause = cause
        raise Raised(exc)

    def concrete(f, ins, call_real):
        if ins.arg == 0:
            active = sys.exc_info()[1]  # the handled exception, of this frame or of a caller
            if active is None:
                raise RuntimeError("No active exception to reraise")
            raise active
        cause = f.stack.pop() if ins.arg == 2 else None
        exc = f.stack.pop()
        if isinstance(exc, type):
            exc = exc()
        if ins.arg == 2:
            raise exc from cause
        raise exc


def exception_value(v: Var) -> ExceptionVar:
    """What `raise v` raises: v itself, or a new instance of the class v."""
    if isinstance(v, ExceptionVar):
        return v
    if isinstance(v, ObjVar) and is_simple_exception_class(v.value):
        return ExceptionVar(v.value, [])
    raise Break(f"raise of {describe(v)} runs in Python", "exception")


@opcode("RERAISE")
class Reraise:
    def traced(tx, frame, ins):
        exc = tx.pop(frame)
        if not isinstance(exc, ExceptionVar):
            raise Break("re-raise of an exception the trace did not raise")
        raise Raised(exc)

    def concrete(f, ins, call_real):
        raise f.stack.pop()  # its traceback has the line it was first raised at (its argument's)


@opcode("LOAD_ASSERTION_ERROR")
class LoadAssertionError:
    def traced(tx, frame, ins):
        tx.push(frame, ObjVar(AssertionError))

    def concrete(f, ins, call_real):
        f.stack.append(AssertionError)


# ---- handlers -------------------------------------------------------------------------------


@opcode("PUSH_EXC_INFO")
class PushExcInfo:
    """A handler starts: the exception handled before it goes below the new one, for the
    POP_EXCEPT that ends the handler to put back."""

    def traced(tx, frame, ins):
        exc = tx.pop(frame)
        tx.push(frame, tx.current_exc)
        tx.current_exc = exc
        tx.handling += 1
        tx.push(frame, exc)

    def concrete(f, ins, call_real):
        exc = f.stack.pop()
        f.stack.append(f.handled if f.handled is not None else sys.exc_info()[1])
        f.handled = exc
        f.handling += 1
        f.stack.append(exc)


@opcode("POP_EXCEPT")
class PopExcept:
    def traced(tx, frame, ins):
        tx.current_exc = tx.pop(frame)
        tx.handling -= 1
        if tx.handling == 0:
            tx.unwound = None  # handled: the trace is again what the real frame would hold

    def concrete(f, ins, call_real):
        previous = f.stack.pop()
        f.handling -= 1
        # The last handler's previous exception is the caller's (or none), which is what
        # sys.exc_info() reports without our help.
        f.handled = previous if f.handling else None
        if f.handling == 0 and f.code.instructions[f.pc].opname != "RERAISE":
            f.unwinding = False  # handled (a cleanup block restores the state, then re-raises)


@opcode("CHECK_EXC_MATCH")
class CheckExcMatch:
    def traced(tx, frame, ins):
        match = tx.pop(frame)
        exc = tx.resolve(frame.stack[-1])
        if not isinstance(exc, ExceptionVar) or not is_python_constant(match):
            raise Break(f"`except` over {describe(match)} is not traced")
        classes = as_python_constant(match)
        for cls in classes if isinstance(classes, tuple) else (classes,):
            if not (isinstance(cls, type) and issubclass(cls, BaseException)):
                raise Break("`except` over a class that is not an exception runs in Python")
        tx.push(frame, ConstVar(issubclass(exc.cls, classes)))

    def concrete(f, ins, call_real):
        match = f.stack.pop()
        classes = match if isinstance(match, tuple) else (match,)
        if not all(isinstance(c, type) and issubclass(c, BaseException) for c in classes):
            raise TypeError(
                "catching classes that do not inherit from BaseException is not allowed"
            )
        f.stack.append(isinstance(f.stack[-1], match))


# ---- with blocks ----------------------------------------------------------------------------


@opcode("BEFORE_WITH")
class BeforeWith:
    """Leaves [__exit__, the value of __enter__()]. The grad-mode and autocast context
    managers change the graph's state instead of being called."""

    def traced(tx, frame, ins):
        ctx = tx.resolve(frame.stack[-1])
        if isinstance(ctx, GradModeVar):
            frame.stack.pop()
            prev = tx.builder.grad_enabled if ctx.prev is None else ctx.prev
            if ctx.enabled is not None:
                tx.builder.set_grad_enabled(ctx.enabled)
            if ctx.inference_at is not None:
                tx.builder.inference += 1
                if tx.builder.inference_at is None:
                    tx.builder.inference_at = ctx.inference_at
            tx.push(frame, GradExitVar(prev, ctx.inference_at))
            tx.push(frame, ConstVar(None))
            return
        if isinstance(ctx, AutocastVar):
            if frame.code.instructions[frame.pc + 1].opname != "POP_TOP":
                raise Break("`with torch.autocast(...) as name` runs in Python")
            frame.stack.pop()
            before = tx.builder.autocast[ctx.device_type]
            # the weight-cast cache stays off inside (compiler/support/autocast.py)
            tx.builder.set_autocast(ctx.device_type, (ctx.enabled, ctx.dtype, False))
            tx.push(frame, AutocastExitVar(ctx.device_type, before))
            tx.push(frame, ConstVar(None))
            return
        enter_kind = ops_of(ctx).enter
        if enter_kind is not None:
            exit_, value = enter_kind(tx, ctx)
            frame.stack.pop()
            tx.push(frame, exit_)
            tx.push(frame, value)
            return
        enter, exit_ = python_context_methods(ctx)
        frame.stack.pop()
        tx.push(frame, MethodVar(exit_, ctx))
        tx.push(frame, calls.call(tx, MethodVar(enter, ctx), [], {}))

    def concrete(f, ins, call_real):
        ctx = f.stack.pop()
        exit_fn = type(ctx).__exit__.__get__(ctx)
        result = type(ctx).__enter__(ctx)
        f.stack.append(exit_fn)
        f.stack.append(result)


def python_context_methods(ctx: Var) -> tuple[FunctionVar, FunctionVar]:
    """__enter__ and __exit__ of a context manager written in Python, to inline."""
    cls = ctx.cls if isinstance(ctx, NewObjectVar) else None
    if (
        isinstance(ctx, ObjVar)
        and ctx.source is not None
        and not type(ctx.value).__module__.startswith("torch")
    ):
        cls = type(ctx.value)  # torch's context managers change global state: not inlined
    found = [getattr(cls, name, None) for name in ("__enter__", "__exit__")] if cls else []
    if len(found) != 2 or not all(isinstance(f, types.FunctionType) for f in found):
        raise Break(f"`with` over {describe(ctx)} runs in Python", "context_manager")
    return FunctionVar(fn=found[0]), FunctionVar(fn=found[1])


@opcode("WITH_EXCEPT_START")
class WithExceptStart:
    """The stack holds __exit__, lasti, the previous exception and the exception."""

    def traced(tx, frame, ins):
        exit_ = tx.resolve(frame.stack[-4])
        exc = tx.resolve(frame.stack[-1])
        if not isinstance(exc, ExceptionVar):
            raise Break("`with` exit for an exception the trace did not raise")
        args: list[Var] = [ObjVar(exc.cls), exc, ConstVar(None)]
        tx.push(frame, calls.call(tx, exit_, args, {}))

    def concrete(f, ins, call_real):
        exit_fn, exc = f.stack[-4], f.stack[-1]
        f.stack.append(exit_fn(type(exc), exc, exc.__traceback__))
