"""Two decisions the C++ emitter takes for a reduction kernel's loops over one row (the
reduction variables at one outer point), from the kernel's steps alone:

* the direction of vectorisation: along the row when its innermost variable is the
  unit-stride one of every address that moves with it (softmax or a norm over a short
  last dimension: contiguous vector loads and a horizontal combine), across output points
  otherwise (pooling windows: a row of 3 or 9 strided points gives no vector);
* row caches: values the row's first passes compute per point and a later pass needs
  again. Softmax makes three passes over a row (max, the sum of exp(x - max), then
  exp(x - max) / sum): the last pass would recompute every exp and everything below it, so
  the pass that first computes such a value also writes it to a row-sized local array
  that the later passes read back, which is what eager's kernel does with its output.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from compiler.ir.index import Index, Var
from compiler.ir.nodes import IndexValue, Layout, Load, Op, Ref, Value, children, iter_values
from compiler.scheduler.fusion import COSTLY_OPS
from compiler.scheduler.kernel import Step

# A row shorter than this is not worth vectorising along (a 3x3 window, even contiguous):
# one AVX-512 vector of floats.
ALONG_MIN = 16
# Rows up to this many elements get local caches (a float array of 16 KiB per cache, on the
# stack of each thread; OpenMP's worker threads have a few MiB of stack).
ROW_CACHE_MAX = 4096


@dataclass(frozen=True)
class RowCache:
    """A per-point value of a row kept in the local array `name`: written by loop segment
    `written` (an index into the kernel's loop segments), read by the segments after it."""

    value: Value
    name: str
    ctype: str
    written: int


def along_rows(steps: Sequence[Step], buffers: dict[str, Layout], rvars: Sequence[Var]) -> bool:
    """Whether the innermost reduction variable is long enough to vectorise along and has
    unit stride in every address that depends on it, loads and stores alike (a gather's
    computed coordinates count as strided)."""
    if not rvars or rvars[-1].size < ALONG_MIN:
        return False
    inner = rvars[-1]
    addresses: list[Index | None] = []
    for step in steps:
        if step.store is not None:
            addresses.append(buffers[step.name].index(step.store))
        for v in iter_values(step.value):
            if isinstance(v, Load):
                if all(isinstance(i, Index) for i in v.indices):
                    addresses.append(buffers[v.buf].index(v.indices))
                elif _depends(v, {inner.name}, {}):
                    addresses.append(None)
    moving = [a for a in addresses if a is None or inner.name in a.var_names]
    return bool(moving) and all(a is not None and a.coefficient(inner) == 1 for a in moving)


def row_caches(
    loops: Sequence[Sequence[Step]],
    steps: dict[str, Step],
    rvars: Sequence[Var],
    ctype_of,
) -> list[RowCache]:
    """The values to keep in row caches, for a kernel whose loop segments over the row are
    `loops` (in order): each costly value (`_costly`) that moves with the row and that a
    later segment computes again, at its topmost such point, kept by the first segment that
    computes it. `ctype_of(dtype)` names the C type of a value."""
    names = {v.name for v in rvars}
    first: dict[Value, int] = {}  # every row-dependent sub-value -> first segment computing it
    found: dict[Value, RowCache] = {}
    for k, loop in enumerate(loops):
        if k:
            for step in loop:
                _cached_in(step.value, k, first, found, steps, names, ctype_of)
        for step in loop:
            for v in _expanded(step.value, steps):
                if v not in first and _depends(v, names, steps):
                    first[v] = k
    return list(found.values())


def _cached_in(value, k, first, found, steps, names, ctype_of) -> None:
    """Walk `value` (in segment `k`) from the top; the first costly sub-values an earlier
    segment computed are cached, and nothing below them is looked at."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, Ref):
            step = steps.get(v.name)
            if step is not None and step.loop == "inner" and step.reduction_type is None:
                stack.append(step.value)  # an inner step of an earlier loop is recomputed
            continue
        earlier = first.get(v)
        if earlier is not None and earlier < k and _costly(v, steps, names):
            if v not in found:
                found[v] = RowCache(v, f"row{len(found)}", ctype_of(v.dtype), earlier)
            continue
        stack.extend(children(v))


def _costly(value: Value, steps: dict[str, Step], names: set[str]) -> bool:
    """Worth a row cache: an operation of COSTLY_OPS, or loads of several points of the row
    (a residual sum x + a + b re-added by each pass of the norm that reads it), where the
    cache costs one load."""
    below = _expanded(value, steps)
    if any(isinstance(v, Op) and v.op in COSTLY_OPS for v in below):
        return True
    moving = {v for v in below if isinstance(v, Load) and _depends(v, names, steps)}
    return len(moving) >= 2


def _expanded(value: Value, steps: dict[str, Step]) -> list[Value]:
    """Sub-values of `value`, through Refs to inner steps (which are recomputed in place)."""
    out: list[Value] = []
    stack = [value]
    seen: set[int] = set()
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        out.extend(iter_values(v))
        for r in iter_values(v):
            if isinstance(r, Ref):
                step = steps.get(r.name)
                if step is not None and step.loop == "inner" and step.reduction_type is None:
                    stack.append(step.value)
    return out


def _depends(value: Value, names: set[str], steps: dict[str, Step]) -> bool:
    """Whether `value` moves with any of the variables `names` (through its indices or
    those of the inner steps it reads)."""
    for v in _expanded(value, steps):
        if isinstance(v, Load) and any(
            isinstance(i, Index) and not i.var_names.isdisjoint(names) for i in v.indices
        ):
            return True
        if isinstance(v, IndexValue) and not v.index.var_names.isdisjoint(names):
            return True
    return False
