"""Opcodes of operators and subscripts."""

from __future__ import annotations

import dis
import operator

from compiler.tracer import operations as ops
from compiler.tracer.breaks import Break
from compiler.tracer.opcodes.registry import opcode
from compiler.tracer.operations import BINARY_OPS, COMPARE_OPS
from compiler.tracer.variables import ConstVar, ExceptionVar, SliceVar, TupleVar


@opcode("BINARY_OP")
class BinaryOp:
    def traced(tx, frame, ins):
        b = tx.pop(frame)
        a = tx.pop(frame)
        tx.push(frame, ops.binary(tx, BINARY_OPS[ins.argrepr], a, b))

    def concrete(f, ins, call_real):
        b = f.stack.pop()
        a = f.stack.pop()
        f.stack.append(BINARY_OPS[ins.argrepr](a, b))


def _comparison(ins):
    op = ins.argval if isinstance(ins.argval, str) else dis.cmp_op[ins.arg]
    return COMPARE_OPS[op.replace("bool(", "").rstrip(")")]


@opcode("COMPARE_OP")
class CompareOp:
    def traced(tx, frame, ins):
        b = tx.pop(frame)
        a = tx.pop(frame)
        tx.push(frame, ops.binary(tx, _comparison(ins), a, b))

    def concrete(f, ins, call_real):
        b = f.stack.pop()
        a = f.stack.pop()
        f.stack.append(_comparison(ins)(a, b))


@opcode("IS_OP")
class IsOp:
    def traced(tx, frame, ins):
        b = tx.pop(frame)
        a = tx.pop(frame)
        tx.push(frame, ConstVar(ops.is_same(a, b) != bool(ins.arg)))

    def concrete(f, ins, call_real):
        f.stack.append((f.stack.pop() is f.stack.pop()) != bool(ins.arg))


@opcode("CONTAINS_OP")
class ContainsOp:
    def traced(tx, frame, ins):
        container = tx.pop(frame)
        item = tx.pop(frame)
        tx.push(frame, ConstVar(ops.contains(tx, container, item) != bool(ins.arg)))

    def concrete(f, ins, call_real):
        f.stack.append((f.stack.pop(-2) in f.stack.pop()) != bool(ins.arg))


def _unary(fn):
    class Unary:
        def traced(tx, frame, ins):
            tx.push(frame, ops.unary(tx, fn, tx.pop(frame)))

        def concrete(f, ins, call_real):
            f.stack.append(fn(f.stack.pop()))

    return Unary


UnaryNegative = opcode("UNARY_NEGATIVE")(_unary(operator.neg))
UnaryInvert = opcode("UNARY_INVERT")(_unary(operator.invert))
UnaryPositive = opcode("UNARY_POSITIVE", until=(3, 12))(_unary(operator.pos))


@opcode("UNARY_NOT")
class UnaryNot:
    def traced(tx, frame, ins):
        tx.push(frame, ConstVar(not ops.truth(tx, tx.pop(frame))))

    def concrete(f, ins, call_real):
        f.stack.append(not f.stack.pop())


@opcode("CALL_INTRINSIC_1", since=(3, 12))
class CallIntrinsic1:
    def traced(tx, frame, ins):
        kind = ins.argrepr
        v = tx.pop(frame)
        if kind == "INTRINSIC_LIST_TO_TUPLE":
            tx.push(frame, TupleVar(list(v.items)))
        elif kind == "INTRINSIC_UNARY_POSITIVE":
            tx.push(frame, ops.unary(tx, operator.pos, v))
        elif kind == "INTRINSIC_STOPITERATION_ERROR" and isinstance(v, ExceptionVar):
            # generators: a StopIteration leaving the body becomes a RuntimeError (PEP 479)
            if issubclass(v.cls, StopIteration):
                message = "generator raised StopIteration"
                v = ExceptionVar(RuntimeError, [ConstVar(message)], cause=v)
            tx.push(frame, v)
        else:
            raise Break(f"CALL_INTRINSIC_1 {kind} is not supported")

    def concrete(f, ins, call_real):
        v = f.stack.pop()
        if ins.argrepr == "INTRINSIC_LIST_TO_TUPLE":
            f.stack.append(tuple(v))
        elif ins.argrepr == "INTRINSIC_UNARY_POSITIVE":
            f.stack.append(+v)
        else:
            raise RuntimeError(f"CALL_INTRINSIC_1 {ins.argrepr}")


# ---- subscripts -----------------------------------------------------------------------------


@opcode("BINARY_SUBSCR")
class BinarySubscr:
    def traced(tx, frame, ins):
        index = tx.pop(frame)
        obj = tx.pop(frame)
        tx.push(frame, ops.getitem(tx, obj, index))

    def concrete(f, ins, call_real):
        index = f.stack.pop()
        f.stack.append(operator.getitem(f.stack.pop(), index))


@opcode("BINARY_SLICE", since=(3, 12))
class BinarySlice:
    def traced(tx, frame, ins):
        stop = tx.pop(frame)
        start = tx.pop(frame)
        obj = tx.pop(frame)
        tx.push(frame, ops.getitem(tx, obj, SliceVar(start, stop, ConstVar(None))))

    def concrete(f, ins, call_real):
        stop, start, obj = f.stack.pop(), f.stack.pop(), f.stack.pop()
        f.stack.append(obj[start:stop])


@opcode("STORE_SUBSCR")
class StoreSubscr:
    def traced(tx, frame, ins):
        index = tx.resolve(frame.stack[-1])
        obj = tx.resolve(frame.stack[-2])
        value = tx.resolve(frame.stack[-3])
        ops.setitem(tx, obj, index, value)
        del frame.stack[-3:]

    def concrete(f, ins, call_real):
        index, obj, value = f.stack.pop(), f.stack.pop(), f.stack.pop()
        obj[index] = value


@opcode("STORE_SLICE", since=(3, 12))
class StoreSlice:
    def traced(tx, frame, ins):
        stop = tx.resolve(frame.stack[-1])
        start = tx.resolve(frame.stack[-2])
        obj = tx.resolve(frame.stack[-3])
        value = tx.resolve(frame.stack[-4])
        ops.setitem(tx, obj, SliceVar(start, stop, ConstVar(None)), value)
        del frame.stack[-4:]

    def concrete(f, ins, call_real):
        stop, start, obj, value = f.stack.pop(), f.stack.pop(), f.stack.pop(), f.stack.pop()
        obj[start:stop] = value


@opcode("DELETE_SUBSCR")
class DeleteSubscr:
    def traced(tx, frame, ins):
        index = tx.resolve(frame.stack[-1])
        obj = tx.resolve(frame.stack[-2])
        ops.delitem(tx, obj, index)
        del frame.stack[-2:]

    def concrete(f, ins, call_real):
        index, obj = f.stack.pop(), f.stack.pop()
        del obj[index]
