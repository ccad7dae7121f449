"""compiler/ir/ranges.py: conditions on loop variables decided over sub-ranges, and the
points where they change, checked against brute force over every value."""

from __future__ import annotations

import itertools
import operator

import pytest
import torch

from compiler.ir.index import Index, Var
from compiler.ir.nodes import Constant, IndexValue, Op
from compiler.ir.ranges import breakpoints, decide, intervals

I64 = torch.int64
CMP = {
    "ge": operator.ge,
    "gt": operator.gt,
    "le": operator.le,
    "lt": operator.lt,
    "eq": operator.eq,
    "ne": operator.ne,
}


def _cmp(kind: str, index: Index, k: int) -> Op:
    return Op(kind, (IndexValue(index, I64), Constant(k, I64)), torch.bool)


@pytest.mark.parametrize("kind", sorted(CMP))
@pytest.mark.parametrize("a", [1, 2, -1, -3])
def test_breakpoints_are_where_a_condition_changes(kind, a):
    x = Var("x0", 20)
    for b in range(-8, 9):
        cond = _cmp(kind, Index.of(x) * a + b, 3)
        truth = [CMP[kind](a * v + b, 3) for v in range(x.size)]
        changes = {v for v in range(1, x.size) if truth[v] != truth[v - 1]}
        points = breakpoints([cond], [x]).get("x0", [])
        assert changes <= set(points)
        for lo, hi in intervals(x.size, points):  # constant, and decided, on each piece
            assert decide(cond, {"x0": (lo, hi)}) == truth[lo]
            assert len({truth[v] for v in range(lo, hi)}) == 1


def test_unrolled_window_variables_are_enumerated():
    x, r = Var("x0", 16), Var("r0", 3)
    pad = _cmp("ge", Index.of(x) * 2 + Index.of(r) - 1, 0)  # max_pool2d(3, 2, padding=1)
    top = _cmp("lt", Index.of(x) * 2 + Index.of(r) - 1, 30)
    assert breakpoints([pad, top], [x], [r]) == {"x0": [1, 15]}
    assert breakpoints([pad], [x]) == {}  # r free: depends on two loops, not split
    assert decide(pad, {"x0": (1, 16)}) is True
    assert decide(pad, {"x0": (0, 1), "r0": (0, 1)}) is False
    assert decide(pad, {"x0": (0, 1)}) is None


def test_decide_logic_and_concatenation_piece():
    x, y = Var("x1", 12), Var("x2", 5)
    lo = _cmp("ge", Index.of(x), 4)
    hi = _cmp("lt", Index.of(x), 8)
    other = _cmp("lt", Index.of(y), 2)
    piece = Op("logical_and", (lo, hi), torch.bool)
    assert breakpoints([piece, other], [x, y]) == {"x1": [4, 8], "x2": [2]}
    for rx, ry in itertools.product([(0, 4), (4, 8), (8, 12)], [(0, 2), (2, 5)]):
        ranges = {"x1": rx, "x2": ry}
        assert decide(piece, ranges) == (rx == (4, 8))
        both = Op("logical_and", (piece, other), torch.bool)
        either = Op("logical_or", (piece, Op("logical_not", (other,), torch.bool)), torch.bool)
        assert decide(both, ranges) == (rx == (4, 8) and ry == (0, 2))
        assert decide(either, ranges) == (rx == (4, 8) or ry == (2, 5))
    assert decide(piece, {}) is None
    assert decide(Op("logical_and", (piece, Constant(False, torch.bool)), torch.bool), {}) is False


def test_conditions_it_cannot_read_stay_undecided():
    x = Var("x0", 10)
    floaty = Op(
        "lt", (IndexValue(Index.of(x), torch.float32), Constant(2.5, torch.float32)), torch.bool
    )
    two_vars = _cmp("lt", Index.of(x) + Index.of(Var("x1", 4)), 6)
    divided = _cmp("lt", Index.of(x) // 3, 2)
    assert breakpoints([floaty, two_vars, divided], [x, Var("x1", 4)]) == {}
    assert decide(floaty, {"x0": (0, 2)}) is None
    assert decide(two_vars, {"x0": (0, 2), "x1": (0, 4)}) is True
    assert decide(divided, {"x0": (0, 3)}) is True
    assert decide(divided, {"x0": (3, 9)}) is None
    modulo = _cmp("lt", Index.of(x) % 4, 3)  # bounds of a modulo: its whole range
    assert decide(modulo, {"x0": (0, 3)}) is None
