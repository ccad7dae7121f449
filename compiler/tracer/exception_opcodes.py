"""The opcode handlers of exceptions and `with` blocks (see exceptions.py for the model)."""

from __future__ import annotations

import types
from typing import TYPE_CHECKING

from compiler.tracer import calls
from compiler.tracer import operations as ops
from compiler.tracer.breaks import Break, Raised
from compiler.tracer.exceptions import is_simple_exception_class
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

if TYPE_CHECKING:
    from compiler.tracer.translator import SymFrame


class ExceptionOpcodes:
    """The opcode handlers of exceptions and `with` blocks, mixed into the Tracer."""

    # ---- unwinding ------------------------------------------------------------------------

    def unwind(self, frame: SymFrame, raised: Raised) -> None:
        """Send `raised` to the handler of the instruction at frame.pc, or re-raise it to the
        caller when no handler covers the instruction."""
        if raised.user_stack is None:
            raised.user_stack = list(self.builder.user_stack)
        handler = frame.code.handlers[frame.pc]
        if handler is None:
            raise raised
        if len(frame.stack) < handler.depth:
            raise Break("the exception table's stack depth is deeper than the traced stack")
        if self.unwound is None:
            self.unwound = self.root_pc
        del frame.stack[handler.depth :]
        if handler.lasti:
            frame.stack.append(ConstVar(frame.pc))
        frame.stack.append(raised.exc)
        frame.kw_names = None
        frame.pc_next = handler.target

    # ---- raising --------------------------------------------------------------------------

    def RAISE_VARARGS(self, frame, ins):
        if ins.arg == 0:
            if not isinstance(self.current_exc, ExceptionVar):
                raise Break("a bare `raise` re-raises an exception the trace did not raise")
            raise Raised(self.current_exc)
        cause = self.pop(frame) if ins.arg == 2 else None
        exc = self.exception_value(self.pop(frame))
        if cause is not None:
            if not (ops.is_none(cause) or isinstance(cause, ExceptionVar)):
                cause = self.exception_value(cause)
            exc.cause = cause
        raise Raised(exc)

    def exception_value(self, v: Var) -> ExceptionVar:
        """What `raise v` raises: v itself, or a new instance of the class v."""
        if isinstance(v, ExceptionVar):
            return v
        if isinstance(v, ObjVar) and is_simple_exception_class(v.value):
            return ExceptionVar(v.value, [])
        raise Break(f"raise of {ops.describe(v)} runs in Python")

    def RERAISE(self, frame, ins):
        exc = self.pop(frame)
        if not isinstance(exc, ExceptionVar):
            raise Break("re-raise of an exception the trace did not raise")
        raise Raised(exc)

    def LOAD_ASSERTION_ERROR(self, frame, ins):
        self.push(frame, ObjVar(AssertionError))

    # ---- handlers -------------------------------------------------------------------------

    def PUSH_EXC_INFO(self, frame, ins):
        exc = self.pop(frame)
        self.push(frame, self.current_exc)
        self.current_exc = exc
        self.handling += 1
        self.push(frame, exc)

    def POP_EXCEPT(self, frame, ins):
        self.current_exc = self.pop(frame)
        self.handling -= 1
        if self.handling == 0:
            self.unwound = None  # handled: the trace is again what the real frame would hold

    def CHECK_EXC_MATCH(self, frame, ins):
        match = self.pop(frame)
        exc = self.resolve(frame.stack[-1])
        if not isinstance(exc, ExceptionVar) or not is_python_constant(match):
            raise Break(f"`except` over {ops.describe(match)} is not traced")
        classes = as_python_constant(match)
        for cls in classes if isinstance(classes, tuple) else (classes,):
            if not (isinstance(cls, type) and issubclass(cls, BaseException)):
                raise Break("`except` over a class that is not an exception runs in Python")
        self.push(frame, ConstVar(issubclass(exc.cls, classes)))

    # ---- with blocks ----------------------------------------------------------------------

    def BEFORE_WITH(self, frame, ins):
        ctx = self.resolve(frame.stack[-1])
        if isinstance(ctx, GradModeVar):
            frame.stack.pop()
            prev = self.builder.grad_enabled if ctx.prev is None else ctx.prev
            if ctx.enabled is not None:
                self.builder.set_grad_enabled(ctx.enabled)
            self.push(frame, GradExitVar(prev))
            self.push(frame, ConstVar(None))
            return
        if isinstance(ctx, AutocastVar):
            if frame.code.instructions[frame.pc + 1].opname != "POP_TOP":
                raise Break("`with torch.autocast(...) as name` runs in Python")
            frame.stack.pop()
            before = self.builder.autocast[ctx.device_type]
            # the weight-cast cache stays off inside (compiler/runtime/autocast.py)
            self.builder.set_autocast(ctx.device_type, (ctx.enabled, ctx.dtype, False))
            self.push(frame, AutocastExitVar(ctx.device_type, before))
            self.push(frame, ConstVar(None))
            return
        enter, exit_ = self.python_context_methods(ctx)
        frame.stack.pop()
        self.push(frame, MethodVar(exit_, ctx))
        self.push(frame, calls.call(self, MethodVar(enter, ctx), [], {}))

    def python_context_methods(self, ctx: Var) -> tuple[FunctionVar, FunctionVar]:
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
            raise Break(f"`with` over {ops.describe(ctx)} runs in Python")
        return FunctionVar(fn=found[0]), FunctionVar(fn=found[1])

    def WITH_EXCEPT_START(self, frame, ins):
        # stack: __exit__, lasti, the previous exception, the exception
        exit_ = self.resolve(frame.stack[-4])
        exc = self.resolve(frame.stack[-1])
        if not isinstance(exc, ExceptionVar):
            raise Break("`with` exit for an exception the trace did not raise")
        args: list[Var] = [ObjVar(exc.cls), exc, ConstVar(None)]
        self.push(frame, calls.call(self, exit_, args, {}))
