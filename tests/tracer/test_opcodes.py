"""Every opcode family on the running Python, both ways: traced into a graph, and run for real
by the frame evaluator (a function under compiler.disable(recursive=False) runs instruction
by instruction there), each compared with eager. Run on 3.11, 3.12 and 3.13, the same
program meets each version's opcodes (3.13: LOAD_FAST_LOAD_FAST, STORE_FAST_STORE_FAST,
CALL_KW, TO_BOOL, CONVERT_VALUE, FORMAT_WITH_SPEC, SET_FUNCTION_ATTRIBUTE, ...)."""

import dis

import pytest
import torch

import compiler
from compiler.tracer.opcodes.registry import known_opcodes

from .helpers import assert_same


def _kw(a, b=2, *, c=3, **rest):
    return a * b + c + len(rest)


class _Log:
    def __init__(self):
        self.events = []

    def __enter__(self):
        self.events.append("enter")
        return self

    def __exit__(self, *exc):
        self.events.append("exit")
        return False


def program(x, n):
    a, b = x, x + 1
    a, b = b, a
    z = a * b
    bump = lambda q, k=n: q + k + z.sum()  # noqa: E731  (a closure with a default)
    squares = [i * i for i in range(n) if i % 2]
    table = {"n": n, **{"m": n + 1}}
    keys = {f"k{i}": i for i in range(2)}
    text = f"{n!r:>4}|{n:03d}|{'s'!s}|{n}|{n * 2.5:.1f}"
    total = _kw(n, c=4, extra=1) + _kw(*(1, 2), **{"c": 0})
    first, *rest = squares or [0]
    log = _Log()
    with log:
        y = bump(x)
    try:
        table["missing"]
    except KeyError:
        y = y + 1
    if not squares or n > 100:
        y = y * 2
    for i in range(n):
        if i is None:
            break
        y = y + i
    count = n
    while count:
        count -= 1
    names = sorted(locals())
    return y, z, squares, table, keys, text, total, first, rest, log.events, names, count


def _run_for_real(fn):
    """`fn` run by the frame evaluator's concrete handlers, called from compiled code."""
    inner = compiler.disable(fn, recursive=False)
    return compiler.compile(lambda *args: inner(*args))


@pytest.mark.parametrize("how", ["traced", "concrete"])
def test_program_matches_eager(how):
    compiled = compiler.compile(program) if how == "traced" else _run_for_real(program)
    for n in (3, 4):
        x = torch.randn(3)
        assert_same(program(x, n), compiled(x, n))


def test_locals_reads_the_users_frame():
    """`locals()` at a graph break read the frame evaluator's own locals."""

    def f(x):
        y = x + 1
        return y * 2, sorted(locals()), vars() is locals()

    x = torch.randn(2)
    assert_same(f(x), compiler.compile(f)(x))
    assert_same(f(x), _run_for_real(f)(x))


def test_dict_display_runs_for_real():
    """The concrete BUILD_MAP took one item per key, not a key and a value."""

    def f(x, k):
        return {k: x, "b": 2}[k] + 1

    x = torch.randn(2)
    assert_same(f(x, "a"), _run_for_real(f)(x, "a"))


def test_known_opcodes_per_version():
    new_in_313 = {
        "LOAD_FAST_LOAD_FAST", "STORE_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST", "CALL_KW",
        "TO_BOOL", "CONVERT_VALUE", "FORMAT_SIMPLE", "FORMAT_WITH_SPEC", "SET_FUNCTION_ATTRIBUTE",
    }  # fmt: skip
    gone_in_313 = {"KW_NAMES", "FORMAT_VALUE", "PRECALL", "LOAD_METHOD", "UNARY_POSITIVE"}
    assert new_in_313 <= known_opcodes((3, 13))
    assert not gone_in_313 & known_opcodes((3, 13))
    assert not new_in_313 & known_opcodes((3, 12))
    assert "LOAD_FAST_CHECK" in known_opcodes((3, 12)) - known_opcodes((3, 11))
    assert known_opcodes() <= set(dis.opmap)
