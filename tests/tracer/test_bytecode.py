"""Decoding bytecode: the exception table against `dis`, and the opcode handlers."""

import dis
import json
import types

import pytest
import torch

from compiler.tracer.bytecode import decode
from compiler.tracer.opcodes import CONCRETE, KNOWN, TRACED
from compiler.tracer.opcodes.registry import REGISTRATIONS, registrations


def _functions_with_try_blocks() -> list[types.FunctionType]:
    """Functions of the standard library and torch whose code has exception tables."""
    found = []
    for module in (json.decoder, json.encoder, dis, torch.nn.modules.module, torch.serialization):
        for value in vars(module).values():
            members = vars(value).values() if isinstance(value, type) else [value]
            for fn in members:
                if isinstance(fn, types.FunctionType) and fn.__code__.co_exceptiontable:
                    found.append(fn)
    return found


def _nested_codes(code: types.CodeType) -> list[types.CodeType]:
    inner = [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return [code, *(n for c in inner for n in _nested_codes(c))]


def test_exception_table_matches_dis():
    functions = _functions_with_try_blocks()
    assert len(functions) > 20
    for fn in functions:
        for code in _nested_codes(fn.__code__):
            decoded = decode(code)
            index_of = decoded.by_offset
            expected: dict[int, tuple[int, int, bool]] = {}
            for entry in dis.Bytecode(code).exception_entries:
                for offset, index in index_of.items():
                    if entry.start <= offset < entry.end:
                        expected.setdefault(
                            index, (index_of[entry.target], entry.depth, entry.lasti)
                        )
            got = {
                i: (h.target, h.depth, h.lasti)
                for i, h in enumerate(decoded.handlers)
                if h is not None
            }
            assert got == expected, f"{fn.__qualname__} ({code.co_name})"


def test_try_blocks_are_traced_not_run_natively():
    def f(x):
        try:
            return x + 1
        except KeyError:
            return x

    assert decode(f.__code__).unsupported is None


def test_except_star_runs_natively():
    namespace: dict = {}
    exec(
        "def f(x):\n    try:\n        x = x + 1\n    except* ValueError:\n        x = 0\n    return x\n",
        namespace,
    )
    assert "not supported" in decode(namespace["f"].__code__).unsupported


# Opcodes the tracer knows that the frame evaluator never runs: generators are only inlined,
# run to completion in the trace.
_TRACE_ONLY = {"RETURN_GENERATOR", "YIELD_VALUE"}


@pytest.mark.parametrize("opname", sorted(KNOWN))
def test_known_opcode_has_handlers(opname):
    assert opname in dis.opmap, f"{opname} is registered for a Python without it"
    assert opname in TRACED, f"the tracer has no {opname} handler"
    if opname not in _TRACE_ONLY:
        assert opname in CONCRETE, f"the frame evaluator has no {opname} handler"


def test_each_version_registers_an_opcode_once():
    for version in ((3, 11), (3, 12), (3, 13)):
        names = [r.name for r in REGISTRATIONS if r.covers(version)]
        assert len(names) == len(set(names)) == len(registrations(version))


def test_module_level_code_keeps_its_reason():
    code = compile("x + 1", "<cell>", "eval")
    assert "module-level code" in decode(code).unsupported
