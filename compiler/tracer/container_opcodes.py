"""The opcode handlers that build containers (tuples, lists, sets, dicts, slices, strings)
and unpack them, as a mixin of the Tracer (translator.py) like exception_opcodes.py."""

from __future__ import annotations

from compiler.tracer import calls
from compiler.tracer import operations as ops
from compiler.tracer.breaks import Break
from compiler.tracer.shapes import concrete
from compiler.tracer.values import sets
from compiler.tracer.variables import (
    ConstVar,
    DictVar,
    ListVar,
    ObjVar,
    SliceVar,
    TupleVar,
    as_python_constant,
    is_python_constant,
)


class ContainerOpcodes:
    """The opcode handlers that build and unpack containers, mixed into the Tracer."""

    def BUILD_TUPLE(self, frame, ins):
        self.push(frame, TupleVar(self.popn(frame, ins.arg)))

    def BUILD_LIST(self, frame, ins):
        self.push(frame, ListVar(self.popn(frame, ins.arg)))

    def BUILD_SET(self, frame, ins):
        self.push(frame, sets.make(self.popn(frame, ins.arg)))

    def BUILD_MAP(self, frame, ins):
        flat = self.popn(frame, 2 * ins.arg)
        items = {}
        for k, v in zip(flat[::2], flat[1::2]):
            items[ops.dict_key(k)] = v
        self.push(frame, DictVar(items))

    def BUILD_CONST_KEY_MAP(self, frame, ins):
        keys = as_python_constant(self.pop(frame))
        values = self.popn(frame, ins.arg)
        self.push(frame, DictVar(dict(zip(keys, values))))

    def BUILD_SLICE(self, frame, ins):
        parts = self.popn(frame, ins.arg)
        if len(parts) == 2:
            parts.append(ConstVar(None))
        self.push(frame, SliceVar(*parts))

    def BUILD_STRING(self, frame, ins):
        parts = self.popn(frame, ins.arg)
        self.push(frame, ConstVar("".join(as_python_constant(p) for p in parts)))

    def FORMAT_VALUE(self, frame, ins):
        flags = ins.arg or 0
        spec = as_python_constant(self.pop(frame)) if flags & 0x04 else ""
        value = self.pop(frame)
        if not is_python_constant(value) or isinstance(value, ObjVar):
            raise Break("an f-string formats a value that is not a Python constant")
        v = concrete(as_python_constant(value))  # a symbolic size formats as its value
        conv = flags & 0x03
        if conv == 1:
            v = str(v)
        elif conv == 2:
            v = repr(v)
        elif conv == 3:
            v = ascii(v)
        self.push(frame, ConstVar(format(v, spec)))

    def LIST_APPEND(self, frame, ins):
        v = self.pop(frame)
        target = self.resolve(frame.stack[-ins.arg])
        ops.mutable_list(self, target).items.append(v)

    def LIST_EXTEND(self, frame, ins):
        v = self.pop(frame)
        target = self.resolve(frame.stack[-ins.arg])
        ops.mutable_list(self, target).items.extend(ops.unpack_iterable(self, v))

    def LIST_TO_TUPLE(self, frame, ins):
        v = self.pop(frame)
        self.push(frame, TupleVar(list(v.items)))

    def SET_ADD(self, frame, ins):
        v = self.pop(frame)
        calls.call_method(self, frame.stack[-ins.arg], "add", [v], {})

    def SET_UPDATE(self, frame, ins):
        v = self.pop(frame)
        calls.call_method(self, frame.stack[-ins.arg], "update", [v], {})

    def MAP_ADD(self, frame, ins):
        value = self.pop(frame)
        key = self.pop(frame)
        target = self.resolve(frame.stack[-ins.arg])
        ops.mutable_dict(self, target).items[ops.dict_key(key)] = value

    def DICT_UPDATE(self, frame, ins):
        v = self.pop(frame)
        target = self.resolve(frame.stack[-ins.arg])
        ops.mutable_dict(self, target).items.update(ops.as_dict(self, v).items)

    DICT_MERGE = DICT_UPDATE

    def UNPACK_SEQUENCE(self, frame, ins):
        items = ops.unpack_iterable(self, self.pop(frame))
        if len(items) != ins.arg:
            raise Break(f"unpacking {len(items)} values into {ins.arg} names")
        for v in reversed(items):
            self.push(frame, v)

    def UNPACK_EX(self, frame, ins):
        items = ops.unpack_iterable(self, self.pop(frame))
        before, after = ins.arg & 0xFF, ins.arg >> 8
        if len(items) < before + after:
            raise Break("not enough values to unpack")
        rest = ListVar(items[before : len(items) - after])
        ordered = items[:before] + [rest] + items[len(items) - after :]
        for v in reversed(ordered):
            self.push(frame, v)
