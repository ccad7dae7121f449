"""Opcodes that only move values: no-ops, the value stack, constants and returns."""

from __future__ import annotations

from compiler.tracer import calls
from compiler.tracer.calls import REAL_NULL
from compiler.tracer.opcodes.registry import Return, Returned, opcode
from compiler.tracer.variables import NULL


@opcode("NOP", "RESUME", "EXTENDED_ARG", "CACHE", "MAKE_CELL", "COPY_FREE_VARS")
@opcode("PRECALL", until=(3, 12))
class Nop:
    """Cells are made when the frame is (evaluator.py, translator.py); decoding has applied
    EXTENDED_ARG and skipped the inline caches."""

    def traced(tx, frame, ins):
        pass

    def concrete(f, ins, call_real):
        pass


@opcode("PUSH_NULL")
class PushNull:
    def traced(tx, frame, ins):
        tx.push(frame, NULL)

    def concrete(f, ins, call_real):
        f.stack.append(REAL_NULL)


@opcode("POP_TOP")
class PopTop:
    def traced(tx, frame, ins):
        frame.stack.pop()

    def concrete(f, ins, call_real):
        f.stack.pop()


@opcode("COPY")
class Copy:
    def traced(tx, frame, ins):
        tx.push(frame, frame.stack[-ins.arg])

    def concrete(f, ins, call_real):
        f.stack.append(f.stack[-ins.arg])


@opcode("SWAP")
class Swap:
    def traced(tx, frame, ins):
        i = ins.arg
        frame.stack[-1], frame.stack[-i] = frame.stack[-i], frame.stack[-1]

    def concrete(f, ins, call_real):
        s = f.stack
        s[-1], s[-ins.arg] = s[-ins.arg], s[-1]


@opcode("LOAD_CONST")
class LoadConst:
    def traced(tx, frame, ins):
        tx.push(frame, calls.constant(ins.argval))

    def concrete(f, ins, call_real):
        f.stack.append(ins.argval)


@opcode("RETURN_VALUE")
class ReturnValue:
    def traced(tx, frame, ins):
        return Return(tx.pop(frame))

    def concrete(f, ins, call_real):
        raise Returned(f.stack.pop())


@opcode("RETURN_CONST", since=(3, 12))
class ReturnConst:
    def traced(tx, frame, ins):
        return Return(calls.constant(ins.argval))

    def concrete(f, ins, call_real):
        raise Returned(ins.argval)
