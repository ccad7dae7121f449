"""Opcodes of control flow: iteration, jumps and generators.

How a loop ends differs by version: 3.11's FOR_ITER pops the exhausted iterator and jumps
past the loop; from 3.12 it jumps to END_FOR, modelled here as pushing a NULL that END_FOR
pops with the iterator (CPython skips END_FOR instead, to the same effect). In 3.13 END_FOR
pops one item and a POP_TOP after it the other.

From 3.13 a jump on a value's truth is preceded by TO_BOOL (or by a COMPARE_OP whose
argument asks for a bool). The jumps here take the truth of whatever they pop, so TO_BOOL
leaves a traced value as it is: a tensor's truth is then taken, or breaks the graph, at the
jump, as on 3.11 and 3.12.
"""

from __future__ import annotations

import types
from typing import Any, Callable

from compiler.tracer import generators
from compiler.tracer import operations as ops
from compiler.tracer.breaks import Break
from compiler.tracer.calls import REAL_NULL
from compiler.tracer.opcodes.registry import opcode
from compiler.tracer.variables import NULL, ConstVar, IteratorVar, Var


@opcode("GET_ITER")
class GetIter:
    def traced(tx, frame, ins):
        tx.push(frame, ops.get_iter(tx, tx.pop(frame)))

    def concrete(f, ins, call_real):
        f.stack.append(iter(f.stack.pop()))


def _traced_next(tx, frame) -> bool:
    """Push the next item of the iterator on top of the stack; False when it is exhausted."""
    it = tx.resolve(frame.stack[-1])
    frame.stack[-1] = it
    if not isinstance(it, IteratorVar):
        raise Break(f"iteration over {type(it).__name__} is not traced")
    generators.check_read(tx, it)
    if it.index < len(it.items):
        tx.push(frame, it.items[it.index])
        it.move(it.index + 1)
        return True
    it.move(it.index, exhausted=True)
    return False


def _real_next(f) -> bool:
    try:
        f.stack.append(next(f.stack[-1]))
    except StopIteration:
        return False
    return True


@opcode("FOR_ITER", until=(3, 12))
class ForIter311:
    def traced(tx, frame, ins):
        if not _traced_next(tx, frame):
            frame.stack.pop()
            tx.jump(frame, ins)

    def concrete(f, ins, call_real):
        if not _real_next(f):
            f.stack.pop()
            f.pc = ins.jump_index


@opcode("FOR_ITER", since=(3, 12))
class ForIter:
    def traced(tx, frame, ins):
        if not _traced_next(tx, frame):
            tx.push(frame, NULL)
            tx.jump(frame, ins)

    def concrete(f, ins, call_real):
        if not _real_next(f):
            f.stack.append(REAL_NULL)
            f.pc = ins.jump_index


@opcode("END_FOR", since=(3, 12), until=(3, 13))
class EndFor312:
    def traced(tx, frame, ins):
        del frame.stack[-2:]

    def concrete(f, ins, call_real):
        del f.stack[-2:]


@opcode("END_FOR", since=(3, 13))
class EndFor:
    def traced(tx, frame, ins):
        frame.stack.pop()

    def concrete(f, ins, call_real):
        f.stack.pop()


@opcode("TO_BOOL", since=(3, 13))
class ToBool:
    def traced(tx, frame, ins):
        pass  # the jump or UNARY_NOT that follows takes the truth

    def concrete(f, ins, call_real):
        f.stack.append(bool(f.stack.pop()))


# ---- jumps ----------------------------------------------------------------------------------


@opcode("JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT")
class Jump:
    def traced(tx, frame, ins):
        tx.jump(frame, ins)

    def concrete(f, ins, call_real):
        f.pc = ins.jump_index


def _pop_jump(traced_test: Callable, real_test: Callable[[Any], bool]):
    """A family that pops the top of the stack and jumps when the test holds of it."""

    class PopJump:
        def traced(tx, frame, ins):
            v = tx.resolve(frame.stack[-1])
            taken = traced_test(tx, v)
            frame.stack.pop()
            if taken:
                tx.jump(frame, ins)

        def concrete(f, ins, call_real):
            if real_test(f.stack.pop()):
                f.pc = ins.jump_index

    return PopJump


for _when, _traced, _real in (
    ("FALSE", lambda tx, v: not ops.truth(tx, v), lambda v: not v),
    ("TRUE", lambda tx, v: ops.truth(tx, v), bool),
    ("NONE", lambda tx, v: ops.is_none(v), lambda v: v is None),
    ("NOT_NONE", lambda tx, v: not ops.is_none(v), lambda v: v is not None),
):  # fmt: skip
    _family = _pop_jump(_traced, _real)
    opcode(f"POP_JUMP_IF_{_when}", since=(3, 12))(_family)
    opcode(f"POP_JUMP_FORWARD_IF_{_when}", f"POP_JUMP_BACKWARD_IF_{_when}", until=(3, 12))(_family)


def _jump_or_pop(want: bool):
    """3.11's JUMP_IF_*_OR_POP: jump keeping the value when its truth is `want`, else pop it."""

    class JumpOrPop:
        def traced(tx, frame, ins):
            if bool(ops.truth(tx, tx.resolve(frame.stack[-1]))) is want:
                tx.jump(frame, ins)
            else:
                frame.stack.pop()

        def concrete(f, ins, call_real):
            if bool(f.stack[-1]) is want:
                f.pc = ins.jump_index
            else:
                f.stack.pop()

    return JumpOrPop


JumpIfFalseOrPop = opcode("JUMP_IF_FALSE_OR_POP", until=(3, 12))(_jump_or_pop(False))
JumpIfTrueOrPop = opcode("JUMP_IF_TRUE_OR_POP", until=(3, 12))(_jump_or_pop(True))


# ---- generators: only inlined, run to completion in the trace (generators.py) or a step at
# a time (a @contextmanager's generator, values/context_managers.py) ----------------------------


@opcode("RETURN_GENERATOR")
class ReturnGenerator:
    def traced(tx, frame, ins):
        if not frame.code.is_generator:
            raise Break("RETURN_GENERATOR outside a generator")
        tx.push(frame, ConstVar(None))  # popped by the POP_TOP that follows


@opcode("YIELD_VALUE")
class YieldValue:
    def traced(tx, frame, ins):
        if frame.suspend:  # paused here until the trace resumes it (Tracer.resume)
            frame.yielded = tx.pop(frame)
            frame.yield_pc = frame.pc
        elif frame.yields is None:
            raise Break("yield outside an inlined generator")
        else:
            frame.yields.append(tx.pop(frame))
        tx.push(frame, ConstVar(None))  # the value sent back in


# ---- `yield from`: a generator delegating to another, both run ahead ---------------------------


@opcode("GET_YIELD_FROM_ITER")
class GetYieldFromIter:
    def traced(tx, frame, ins):
        if not isinstance(tx.resolve(frame.stack[-1]), IteratorVar):
            tx.push(frame, ops.get_iter(tx, tx.pop(frame)))

    def concrete(f, ins, call_real):
        if not isinstance(f.stack[-1], (types.GeneratorType, types.CoroutineType)):
            f.stack.append(iter(f.stack.pop()))


def _traced_send(tx, frame) -> Var | None:
    """SEND's step in a generator run ahead: None sent, the delegate's next value pushed;
    its return value (None pushed) once it is exhausted."""
    if not ops.is_none(tx.resolve(tx.pop(frame))):
        raise Break("a value sent into a generator the trace ran ahead")
    if _traced_next(tx, frame):
        return None
    inlined = frame.stack[-1].generator
    returned = getattr(inlined, "returned", None)
    return returned if returned is not None else ConstVar(None)


def _real_send(f) -> Any:
    """SEND's step for real: the delegate's next value pushed, or its return value."""
    sent = f.stack.pop()
    try:
        f.stack.append(next(f.stack[-1]) if sent is None else f.stack[-1].send(sent))
    except StopIteration as e:
        return e.value
    return _SENT


_SENT = object()


@opcode("SEND", until=(3, 12))
class Send311:
    # done: the delegate is replaced by its return value, and SEND jumps past the loop
    def traced(tx, frame, ins):
        returned = _traced_send(tx, frame)
        if returned is not None:
            frame.stack[-1] = returned
            tx.jump(frame, ins)

    def concrete(f, ins, call_real):
        returned = _real_send(f)
        if returned is not _SENT:
            f.stack[-1] = returned
            f.pc = ins.jump_index


@opcode("SEND", since=(3, 12))
class Send:
    # done: the return value goes over the delegate, which END_SEND then removes
    def traced(tx, frame, ins):
        returned = _traced_send(tx, frame)
        if returned is not None:
            tx.push(frame, returned)
            tx.jump(frame, ins)

    def concrete(f, ins, call_real):
        returned = _real_send(f)
        if returned is not _SENT:
            f.stack.append(returned)
            f.pc = ins.jump_index


@opcode("END_SEND", since=(3, 12))
class EndSend:
    def traced(tx, frame, ins):
        del frame.stack[-2]

    def concrete(f, ins, call_real):
        del f.stack[-2]
