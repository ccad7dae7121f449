"""Running bytecode for real, one instruction at a time.

At a graph break the evaluator holds the frame's real locals and stack and runs the breaking
instruction here; when a frame cannot be compiled any further it runs the rest of it here
too. Calls go through `call_real`, so user functions called from here are compiled again.
Each opcode's concrete handler is registered beside its traced one (opcodes/).

An exception raised by an instruction run here goes where CPython would send it: the
instruction's entry in the exception table (bytecode.Handler), else out of the frame. While
a handler runs (`RealFrame.unwinding`) the frame evaluator runs it here, instruction by
instruction, with the exception made the one `sys.exc_info()` reports, as in eager.
"""

from __future__ import annotations

import os
import types
from dataclasses import dataclass, field
from typing import Any, Callable

from compiler.tracer import opcodes
from compiler.tracer.bytecode import Code, Handler, Instr
from compiler.tracer.opcodes import CONCRETE
from compiler.tracer.opcodes.registry import PYTHON, Returned

LOCALS_ARE_SNAPSHOTS = PYTHON >= (3, 13)  # PEP 667


@dataclass
class RealFrame:
    code: Code
    globals: dict
    locals: dict[str, Any]
    cells: dict[str, Any]  # name -> real cell
    stack: list[Any] = field(default_factory=list)
    pc: int = 0
    kw_names: tuple | None = None
    fn_name: str = ""
    # Exception handling: the exception the running handler handles (None when none runs),
    # how many handlers run (PUSH_EXC_INFO not yet matched by POP_EXCEPT), and whether an
    # exception is being handled at all (from its dispatch until its last POP_EXCEPT).
    handled: BaseException | None = None
    handling: int = 0
    unwinding: bool = False
    locals_dict: dict | None = None  # what `locals()` returns before 3.13

    def values(self) -> dict[str, Any]:
        """`L` for guards and sources: locals, cell contents and stack slots by name."""
        if not self.cells and not self.stack:
            return self.locals
        values = dict(self.locals)
        for name, cell in self.cells.items():
            try:
                values[name] = cell.cell_contents
            except ValueError:
                pass
        for i, v in enumerate(self.stack):
            values[f"__stack{i}"] = v
        return values

    def local_values(self) -> dict[str, Any]:
        """What `locals()` returns in this frame: its bound locals and cells in the order of
        CPython's frame. From 3.13 a new dict at each call (PEP 667); before, one dict per
        frame, brought up to date at each call."""
        code = self.code.code
        names = (*code.co_varnames, *code.co_cellvars, *code.co_freevars)
        values = {}
        for name in names:
            if name in self.locals:
                values[name] = self.locals[name]
            elif name in self.cells:
                try:
                    values[name] = self.cells[name].cell_contents
                except ValueError:
                    pass
        if LOCALS_ARE_SNAPSHOTS:
            return values
        if self.locals_dict is None:
            self.locals_dict = {}
        for name in names:
            if name not in values:
                self.locals_dict.pop(name, None)
        self.locals_dict.update(values)
        return self.locals_dict


CallReal = Callable[[Any, list, dict], Any]


def step(frame: RealFrame, ins: Instr, call_real: CallReal) -> None:
    """Run `ins` for real; sets `frame.pc` to the next instruction, raises Returned at a return."""
    __tracebackhide__ = True  # IPython and pytest leave this frame out
    frame.pc = ins.index + 1
    handler = CONCRETE.get(ins.opname)
    if handler is None:
        raise RuntimeError(f"the frame evaluator cannot run {ins.opname}")
    try:
        if frame.handled is not None:
            _while_handling(frame.handled, handler, frame, ins, call_real)
        else:
            handler(frame, ins, call_real)
    except Returned:
        raise
    except BaseException as e:
        handler = frame.code.handlers[ins.index]
        if handler is None:
            _raise_at_user_line(e, frame, ins)
        _note_user_line(e, frame, ins)
        _unwind(frame, handler, ins, e)


def _unwind(frame: RealFrame, handler: Handler, ins: Instr, exc: BaseException) -> None:
    """Send `exc`, raised by `ins`, to its handler in the exception table."""
    del frame.stack[handler.depth :]
    if handler.lasti:
        frame.stack.append(ins.index)  # the stack layout the handler expects (CPython's lasti)
    frame.stack.append(exc)
    frame.pc = handler.target
    frame.kw_names = None
    frame.unwinding = True


def _while_handling(exc: BaseException, handler: Callable, *args: Any) -> None:
    """Run `handler` with `exc` as the exception being handled, as inside an `except` block:
    sys.exc_info() reports it, a bare `raise` re-raises it, and an exception raised meanwhile
    gets it as its __context__. Raising it here must not change it: its traceback and
    context are put back before the handler runs."""
    __tracebackhide__ = True  # IPython and pytest leave this frame out
    tb, context = exc.__traceback__, exc.__context__
    try:
        raise exc
    except BaseException:
        exc.__traceback__, exc.__context__ = tb, context
        handler(*args)


def _raise_at_user_line(exc: BaseException, frame: RealFrame, ins: Instr) -> None:
    """Re-raise `exc` from a frame that carries the user's file, line and function name, so the
    traceback points at the user's line as it does in eager: once per frame, at the line that
    raised it first (a `finally` or `except` that re-raises it adds no line, as in eager)."""
    __tracebackhide__ = True  # IPython and pytest leave this frame out
    marked = getattr(exc, "_compiler_user_frames", None)
    if marked is None:
        marked = []
        if hasattr(exc, "__dict__"):  # not an exception class with __slots__
            exc._compiler_user_frames = marked
    if not ins.lineno or not hasattr(exc, "__dict__") or any(f is frame for f in marked):
        raise exc
    marked.append(frame)
    exc.__traceback__ = _without_own_frames(exc.__traceback__)
    code = compile("\n" * (ins.lineno - 1) + "raise ___exc", frame.code.code.co_filename, "exec")
    code = code.replace(co_name=frame.fn_name or frame.code.code.co_name)
    exec(code, {"___exc": exc})


# The files of the frames that run an instruction for real: this module's and the opcode
# handlers' (their concrete halves), none of which the user wrote.
_OWN_FILES = (__file__, os.path.dirname(opcodes.__file__) + os.sep)


def _without_own_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    """`tb` without the frames that ran the instruction (`step`, the opcode's handler), so
    that the user's line stands where eager's traceback has it."""
    kept = []
    while tb is not None:
        if not tb.tb_frame.f_code.co_filename.startswith(_OWN_FILES):
            kept.append(tb)
        tb = tb.tb_next
    for a, b in zip(kept, [*kept[1:], None]):
        a.tb_next = b
    return kept[0] if kept else None


def _note_user_line(exc: BaseException, frame: RealFrame, ins: Instr) -> None:
    """Add this frame's line to the traceback of `exc`, which a handler of the frame catches."""
    try:
        _raise_at_user_line(exc, frame, ins)
    except BaseException as raised:
        if raised is not exc:
            raise
