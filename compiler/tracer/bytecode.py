"""Decoded bytecode for CPython 3.11 to 3.13, and what a code object needs from the tracer.

Instructions are addressed by index into `Code.instructions` (caches skipped), never by
byte offset, so the rest of the tracer is independent of the inline-cache layout. The
exception table (3.11+: try blocks have no instructions of their own, only table entries)
is decoded to the same indices: `Code.handlers[i]` is where an exception raised by
instruction i goes.
"""

from __future__ import annotations

import bisect
import dis
import linecache
import types
from dataclasses import dataclass, field

from compiler.tracer.opcodes.registry import NEWEST, OLDEST, PYTHON, known_opcodes

if not OLDEST <= PYTHON <= NEWEST:
    raise ImportError(
        f"compiler.tracer supports CPython {OLDEST[0]}.{OLDEST[1]} to {NEWEST[0]}.{NEWEST[1]}"
    )


@dataclass(frozen=True)
class Instr:
    index: int
    opname: str
    arg: int | None
    argval: object
    argrepr: str
    offset: int
    lineno: int | None
    jump_index: int | None  # index of the jump target, for jumps and FOR_ITER


@dataclass(frozen=True)
class Handler:
    """One exception-table entry, as it applies to the instructions it covers.

    An exception raised by a covered instruction cuts the value stack down to `depth` items,
    pushes the raising instruction's index when `lasti` is set (RERAISE reads it back to
    report the original line), pushes the exception, and jumps to instruction `target`.
    """

    target: int
    depth: int
    lasti: bool


@dataclass
class Code:
    """A code object, decoded once and shared by the tracer and the frame evaluator."""

    code: types.CodeType
    instructions: list[Instr]
    start: int  # first instruction after the prologue (MAKE_CELL, COPY_FREE_VARS, RESUME)
    cellvars: tuple[str, ...]
    freevars: tuple[str, ...]
    unsupported: str | None = None  # why the whole frame must run natively
    is_generator: bool = False  # generators are only inlined, run to completion
    by_offset: dict[int, int] = field(default_factory=dict)
    handlers: list[Handler | None] = field(default_factory=list)  # per instruction

    @property
    def name(self) -> str:
        return self.code.co_name

    def line_text(self, lineno: int | None) -> str:
        if lineno is None:
            return ""
        return linecache.getline(self.code.co_filename, lineno).rstrip("\n")


_CACHE: dict[types.CodeType, Code] = {}

def decode(code: types.CodeType) -> Code:
    cached = _CACHE.get(code)
    if cached is not None:
        return cached
    raw = list(dis.get_instructions(code))
    by_offset = {ins.offset: i for i, ins in enumerate(raw)}
    instructions: list[Instr] = []
    lineno = None
    for i, ins in enumerate(raw):
        lineno = _line_started(ins) or lineno
        target = None
        if ins.opcode in dis.hasjrel or ins.opcode in dis.hasjabs:
            target = by_offset.get(ins.argval)
        positions = getattr(ins, "positions", None)
        line = positions.lineno if positions is not None and positions.lineno else lineno
        instructions.append(
            Instr(i, ins.opname, ins.arg, ins.argval, ins.argrepr, ins.offset, line, target)
        )
    start = 0
    while start < len(instructions) and instructions[start].opname in (
        "MAKE_CELL",
        "COPY_FREE_VARS",
        "RESUME",
        "NOP",
    ):
        start += 1
    decoded = Code(
        code=code,
        instructions=instructions,
        start=start,
        cellvars=code.co_cellvars,
        freevars=code.co_freevars,
        by_offset=by_offset,
    )
    decoded.handlers = _handlers(code, by_offset, len(instructions))
    decoded.unsupported = _unsupported_reason(code, instructions)
    decoded.is_generator = bool(code.co_flags & 0x20)
    _CACHE[code] = decoded
    return decoded


if PYTHON >= (3, 13):

    def _line_started(ins: dis.Instruction) -> int | None:
        return ins.line_number if ins.starts_line else None  # 3.13 made starts_line a flag

else:

    def _line_started(ins: dis.Instruction) -> int | None:
        return ins.starts_line


def _unsupported_reason(code: types.CodeType, instructions: list[Instr]) -> str | None:
    if code.co_flags & (0x80 | 0x100 | 0x200):  # coroutine, iterable coroutine, async generator
        return "coroutines are not traced; the function runs eagerly"
    ops = [i.opname for i in instructions]
    known = known_opcodes()  # registered by the opcode families, which the tracer imports
    # LOAD_NAME is refused below with its own reason
    unknown = sorted({op for op in ops if op not in known and op != "LOAD_NAME"})
    if unknown:
        return f"bytecode {', '.join(unknown)} is not supported by the tracer; the function runs eagerly"
    if "LOAD_NAME" in ops:
        return "module-level code (LOAD_NAME) is not traced; the function runs eagerly"
    return None


def is_jump(opname: str) -> bool:
    return "JUMP" in opname


# ---- the exception table --------------------------------------------------------------------


def _handlers(code: types.CodeType, by_offset: dict[int, int], count: int) -> list[Handler | None]:
    """The handler of each instruction, from `co_exceptiontable`.

    The table's format is the same in 3.11, 3.12 and 3.13 (CPython's InternalDocs on exception
    handling, Objects/exception_handling_notes.txt in 3.11): a sequence of entries of four
    varints each, `start`, `length`, `target` (in 2-byte code units) and `depth << 1 | lasti`.
    A varint is big-endian in 6-bit groups; bit 6 of a byte says another group follows, and
    bit 7 is set on the first byte of each entry only. Entries do not overlap: the compiler
    flattens nested try blocks, so the first entry that covers an instruction is its handler.
    """
    handlers: list[Handler | None] = [None] * count
    offsets = sorted(by_offset)
    for start, end, target, depth, lasti in _table_entries(code.co_exceptiontable):
        handler = Handler(by_offset[target], depth, lasti)
        for offset in offsets[
            bisect.bisect_left(offsets, start) : bisect.bisect_left(offsets, end)
        ]:
            if handlers[by_offset[offset]] is None:
                handlers[by_offset[offset]] = handler
    return handlers


def _table_entries(table: bytes) -> list[tuple[int, int, int, int, bool]]:
    """(start, end, target, depth, lasti) per entry, offsets in bytes."""
    entries = []
    pos = 0
    while pos < len(table):
        fields = []
        for _ in range(4):
            value, pos = _varint(table, pos)
            fields.append(value)
        start, length, target, depth_lasti = fields
        entries.append(
            (2 * start, 2 * (start + length), 2 * target, depth_lasti >> 1, bool(depth_lasti & 1))
        )
    return entries


def _varint(table: bytes, pos: int) -> tuple[int, int]:
    byte = table[pos]
    value = byte & 0x3F
    while byte & 0x40:
        pos += 1
        byte = table[pos]
        value = (value << 6) | (byte & 0x3F)
    return value, pos + 1
