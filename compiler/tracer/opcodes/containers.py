"""Opcodes that build containers (tuples, lists, sets, dicts, slices) and unpack them."""

from __future__ import annotations

from typing import Any, Callable

from compiler.tracer import calls
from compiler.tracer import operations as ops
from compiler.tracer.breaks import Break
from compiler.tracer.opcodes.registry import opcode
from compiler.tracer.values import sets
from compiler.tracer.variables import (
    ConstVar,
    DictVar,
    ListVar,
    SliceVar,
    TupleVar,
    as_python_constant,
)


def _pop_real(f, n: int) -> list:
    items = f.stack[len(f.stack) - n :] if n else []
    del f.stack[len(f.stack) - n :]
    return items


@opcode("BUILD_TUPLE")
class BuildTuple:
    def traced(tx, frame, ins):
        tx.push(frame, TupleVar(tx.popn(frame, ins.arg)))

    def concrete(f, ins, call_real):
        f.stack.append(tuple(_pop_real(f, ins.arg)))


@opcode("BUILD_LIST")
class BuildList:
    def traced(tx, frame, ins):
        tx.push(frame, ListVar(tx.popn(frame, ins.arg)))

    def concrete(f, ins, call_real):
        f.stack.append(list(_pop_real(f, ins.arg)))


@opcode("BUILD_SET")
class BuildSet:
    def traced(tx, frame, ins):
        tx.push(frame, sets.make(tx.popn(frame, ins.arg)))

    def concrete(f, ins, call_real):
        f.stack.append(set(_pop_real(f, ins.arg)))


@opcode("BUILD_MAP")
class BuildMap:
    def traced(tx, frame, ins):
        flat = tx.popn(frame, 2 * ins.arg)
        items = {}
        for k, v in zip(flat[::2], flat[1::2]):
            items[ops.dict_key(k)] = v
        tx.push(frame, DictVar(items))

    def concrete(f, ins, call_real):
        items = _pop_real(f, 2 * ins.arg)
        f.stack.append(dict(zip(items[::2], items[1::2])))


@opcode("BUILD_CONST_KEY_MAP")
class BuildConstKeyMap:
    def traced(tx, frame, ins):
        keys = as_python_constant(tx.pop(frame))
        values = tx.popn(frame, ins.arg)
        tx.push(frame, DictVar(dict(zip(keys, values))))

    def concrete(f, ins, call_real):
        keys = f.stack.pop()
        f.stack.append(dict(zip(keys, _pop_real(f, ins.arg))))


@opcode("BUILD_SLICE")
class BuildSlice:
    def traced(tx, frame, ins):
        parts = tx.popn(frame, ins.arg)
        if len(parts) == 2:
            parts.append(ConstVar(None))
        tx.push(frame, SliceVar(*parts))

    def concrete(f, ins, call_real):
        f.stack.append(slice(*_pop_real(f, ins.arg)))


@opcode("LIST_TO_TUPLE", until=(3, 12))
class ListToTuple:
    def traced(tx, frame, ins):
        tx.push(frame, TupleVar(list(tx.pop(frame).items)))

    def concrete(f, ins, call_real):
        f.stack.append(tuple(f.stack.pop()))


# ---- adding to the container `arg` items down (comprehensions, displays with *) ------------


def _add_to(fn: Callable[[Any, Any], None]):
    """The concrete side: CPython finds the target after popping the value (PEEK(oparg))."""

    def concrete(f, ins, call_real):
        value = f.stack.pop()
        fn(f.stack[-ins.arg], value)

    return concrete


def _function_str(fn: Any) -> str:
    """How CPython names the function in a call's TypeError (`mod.f()`)."""
    qualname = getattr(fn, "__qualname__", None)
    if qualname is None:
        return f"{type(fn).__name__} object"
    module = getattr(fn, "__module__", None)
    return f"{module}.{qualname}()" if module and module != "builtins" else f"{qualname}()"


def _dict_merge_concrete(f, ins, call_real):
    """`f(**a, **b)` for real: a value that is no mapping, or a key given twice, is CPython's
    TypeError naming the function called (PEEK(oparg + 2) once the value is popped, or the
    one below it from 3.13)."""
    other = f.stack.pop()
    target = f.stack[-ins.arg]
    fn = f.stack[-(ins.arg + 2)]  # 3.13 puts the NULL after the function, not before it
    name = _function_str(f.stack[-(ins.arg + 3)] if fn is calls.REAL_NULL else fn)
    if not hasattr(other, "keys"):
        raise TypeError(f"{name} argument after ** must be a mapping, not {type(other).__name__}")
    for k in other.keys():
        if k in target:
            raise TypeError(f"{name} got multiple values for keyword argument '{k}'")
    target.update(other)


@opcode("LIST_APPEND")
class ListAppend:
    def traced(tx, frame, ins):
        v = tx.pop(frame)
        target = tx.resolve(frame.stack[-ins.arg])
        ops.mutable_list(tx, target).items.append(v)

    concrete = _add_to(list.append)


@opcode("LIST_EXTEND")
class ListExtend:
    def traced(tx, frame, ins):
        v = tx.pop(frame)
        target = tx.resolve(frame.stack[-ins.arg])
        ops.mutable_list(tx, target).items.extend(ops.unpack_iterable(tx, v))

    concrete = _add_to(list.extend)


@opcode("SET_ADD")
class SetAdd:
    def traced(tx, frame, ins):
        v = tx.pop(frame)
        calls.call_method(tx, frame.stack[-ins.arg], "add", [v], {})

    concrete = _add_to(set.add)


@opcode("SET_UPDATE")
class SetUpdate:
    def traced(tx, frame, ins):
        v = tx.pop(frame)
        calls.call_method(tx, frame.stack[-ins.arg], "update", [v], {})

    concrete = _add_to(set.update)


@opcode("MAP_ADD")
class MapAdd:
    def traced(tx, frame, ins):
        value = tx.pop(frame)
        key = tx.pop(frame)
        target = tx.resolve(frame.stack[-ins.arg])
        ops.mutable_dict(tx, target).items[ops.dict_key(key)] = value

    def concrete(f, ins, call_real):
        value = f.stack.pop()
        key = f.stack.pop()
        f.stack[-ins.arg][key] = value


def _dict_update_traced(tx, frame, ins):
    v = tx.pop(frame)
    target = tx.resolve(frame.stack[-ins.arg])
    ops.mutable_dict(tx, target).items.update(ops.as_dict(tx, v).items)


@opcode("DICT_UPDATE")
class DictUpdate:
    traced = _dict_update_traced
    concrete = _add_to(dict.update)


@opcode("DICT_MERGE")
class DictMerge:
    """`f(**a, **b)`: as DICT_UPDATE, but a key given twice is a TypeError."""

    traced = _dict_update_traced
    concrete = _dict_merge_concrete


# ---- unpacking ------------------------------------------------------------------------------


@opcode("UNPACK_SEQUENCE")
class UnpackSequence:
    def traced(tx, frame, ins):
        items = ops.unpack_iterable(tx, tx.pop(frame))
        if len(items) != ins.arg:
            raise Break(f"unpacking {len(items)} values into {ins.arg} names")
        for v in reversed(items):
            tx.push(frame, v)

    def concrete(f, ins, call_real):
        items = list(f.stack.pop())
        if len(items) != ins.arg:
            raise ValueError(
                f"too many values to unpack (expected {ins.arg})"
                if len(items) > ins.arg
                else f"not enough values to unpack (expected {ins.arg}, got {len(items)})"
            )
        f.stack.extend(reversed(items))


@opcode("UNPACK_EX")
class UnpackEx:
    """`a, *rest, b = ...`: the argument counts the names before (low byte) and after the
    starred one."""

    def traced(tx, frame, ins):
        items = ops.unpack_iterable(tx, tx.pop(frame))
        before, after = ins.arg & 0xFF, ins.arg >> 8
        if len(items) < before + after:
            raise Break("not enough values to unpack")
        rest = ListVar(items[before : len(items) - after])
        ordered = items[:before] + [rest] + items[len(items) - after :]
        for v in reversed(ordered):
            tx.push(frame, v)

    def concrete(f, ins, call_real):
        items = list(f.stack.pop())
        before, after = ins.arg & 0xFF, ins.arg >> 8
        if len(items) < before + after:
            raise ValueError(
                f"not enough values to unpack (expected at least {before + after}, got {len(items)})"
            )
        rest = items[before : len(items) - after]
        ordered = items[:before] + [rest] + items[len(items) - after :]
        f.stack.extend(reversed(ordered))
