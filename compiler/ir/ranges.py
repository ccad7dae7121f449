"""Conditions on loop variables decided over sub-ranges of the loops.

Lowering expresses padding and concatenation as comparisons of indices with constants
(`2*x2 + r0 - 1 >= 0`, `x1 < 128`) that mask loads and pick `where` branches. Inside one
loop iteration such a condition costs little, but a C++ compiler cannot vectorise a masked
load whose mask does not change along the vectorised loop, and a concatenation of k pieces
evaluates all k masked loads per element. Over a sub-range of a loop (`x2 >= 1`, or
`128 <= x1 < 160`) most of these conditions have one value, so an emitter can split the loop
at the points where some condition changes (`breakpoints`) and emit each piece with the
conditions decided (`decide`): no masks and one concatenation piece per loop.

`Ranges` maps a variable name to the half-open range `(lo, hi)` it takes in the code being
emitted; a variable not in it takes its whole range `0 .. size - 1`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping

import torch

from compiler.ir.index import FloorDiv, Index, Var
from compiler.ir.nodes import Constant, IndexValue, Op, Value, iter_values

Ranges = Mapping[str, tuple[int, int]]

_COMPARISONS = ("ge", "gt", "le", "lt", "eq", "ne")
# Enumerating unrolled variables (a pooling window) to find breakpoints stops past this.
_MAX_POINTS = 64


def _as_index(v: Value) -> Index | None:
    """The integer index a comparison operand stands for, or None."""
    if isinstance(v, IndexValue) and not v.dtype.is_floating_point and v.dtype != torch.bool:
        return v.index
    if isinstance(v, Constant) and isinstance(v.value, int) and not isinstance(v.value, bool):
        return Index.of(v.value)
    return None


def _difference(op: Op) -> Index | None:
    """`a - b` for a comparison `a <op> b` of integer indices (else None). Kept on the op:
    emitters decide the same conditions in every specialised copy of a loop body."""
    if op.op not in _COMPARISONS:
        return None
    if "_difference" not in op.__dict__:
        a, b = (_as_index(x) for x in op.args)
        d = None if a is None or b is None else a - b
        object.__setattr__(op, "_difference", d)
    return op.__dict__["_difference"]


def _atom_range(atom, ranges: Ranges) -> tuple[int, int]:
    if isinstance(atom, Var) and atom.name in ranges:
        lo, hi = ranges[atom.name]
        return lo, hi - 1
    if isinstance(atom, FloorDiv):  # monotonic in its (non-negative) base
        lo, hi = bounds(atom.base, ranges)
        return lo // atom.divisor, hi // atom.divisor
    return Index.of(atom).bounds()


def bounds(index: Index, ranges: Ranges) -> tuple[int, int]:
    """Inclusive bounds of `index` with its variables in `ranges` (a modulo keeps its
    bounds over the whole ranges: wider, still true)."""
    lo = hi = index.const
    for atom, c in index.terms:
        a_lo, a_hi = _atom_range(atom, ranges)
        lo += min(c * a_lo, c * a_hi)
        hi += max(c * a_lo, c * a_hi)
    return lo, hi


def _compare(kind: str, lo: int, hi: int) -> bool | None:
    """The value of `d <kind> 0` for every d in lo..hi, or None when it varies."""
    if kind == "ge":
        return True if lo >= 0 else (False if hi < 0 else None)
    if kind == "gt":
        return True if lo > 0 else (False if hi <= 0 else None)
    if kind == "le":
        return True if hi <= 0 else (False if lo > 0 else None)
    if kind == "lt":
        return True if hi < 0 else (False if lo >= 0 else None)
    if kind == "eq":
        return True if lo == hi == 0 else (False if lo > 0 or hi < 0 else None)
    if kind == "ne":
        return False if lo == hi == 0 else (True if lo > 0 or hi < 0 else None)
    raise ValueError(kind)


def decide(value: Value, ranges: Ranges) -> bool | None:
    """The truth of a bool `value` everywhere in `ranges`, or None if it is not constant
    there (or not a condition this module understands)."""
    if isinstance(value, Constant) and value.dtype == torch.bool:
        return bool(value.value)
    if not isinstance(value, Op):
        return None
    if value.op in _COMPARISONS:
        d = _difference(value)
        return None if d is None else _compare(value.op, *bounds(d, ranges))
    if value.op == "logical_not":
        inner = decide(value.args[0], ranges)
        return None if inner is None else not inner
    if value.op in ("logical_and", "logical_or"):
        parts = [decide(a, ranges) for a in value.args]
        absorbing = value.op == "logical_or"  # True absorbs an `or`, False an `and`
        if absorbing in parts:
            return absorbing
        if all(p is not None for p in parts):
            return not absorbing
    return None


def _thresholds(d: Index, var: Var, kind: str) -> list[int]:
    """Points t where `d <kind> 0`, d affine in `var` alone, changes between t-1 and t."""
    a = d.coefficient(var)
    if not a or len(d.terms) != 1:
        return []
    b = d.const
    out = []
    # d >= 0 changes at ceil(-b/a) when a > 0, after floor(b/-a) when a < 0; d > 0 is
    # d - 1 >= 0; the other comparisons negate or combine these two.
    for shift in {"ge": (0,), "lt": (0,), "gt": (1,), "le": (1,)}.get(kind, (0, 1)):
        bb = b - shift
        out.append(-(bb // a) if a > 0 else bb // -a + 1)
    return out


def breakpoints(
    values: Iterable[Value], loop_vars: Iterable[Var], unrolled: Iterable[Var] = ()
) -> dict[str, list[int]]:
    """For each of `loop_vars`, the sorted points strictly inside its range where some
    comparison in `values` that depends on it alone changes value. A comparison may also
    depend on `unrolled` variables (emitted as constants, e.g. a pooling window): each of
    their values is tried."""
    loops = {v.name: v for v in loop_vars}
    points = {v.name: v for v in unrolled}
    found: dict[str, set[int]] = {name: set() for name in loops}
    seen: set[int] = set()
    for root in values:
        for v in iter_values(root):
            if id(v) in seen or not isinstance(v, Op):
                continue
            seen.add(id(v))
            d = _difference(v)
            if d is None:
                continue
            names = {x.name for x in d.vars()}
            loop = names & loops.keys()
            if len(loop) != 1 or not names - loop <= points.keys():
                continue
            var = loops[loop.pop()]
            fixed = sorted(names - {var.name})
            sizes = [points[n].size for n in fixed]
            if math.prod(sizes) > _MAX_POINTS:
                continue
            for combo in itertools.product(*(range(s) for s in sizes)):
                shifted = d.subs(dict(zip(fixed, combo)))
                for t in _thresholds(shifted, var, v.op):
                    if 0 < t < var.size:
                        found[var.name].add(t)
    return {name: sorted(ts) for name, ts in found.items() if ts}


def intervals(size: int, points: list[int]) -> list[tuple[int, int]]:
    """`0 .. size` cut at `points` into half-open ranges."""
    edges = [0, *points, size]
    return list(zip(edges[:-1], edges[1:]))
