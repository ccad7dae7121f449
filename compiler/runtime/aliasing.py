"""Graphs that write to their inputs, called with inputs that share memory.

The aot stage functionalizes a graph: an in-place update of input `a` becomes a new value
copied back into `a` at the end, and every other input is read as it was at the start. That
is eager's answer only when the inputs are distinct memory. Called with `f(x, x[::2])` or
`f(x, x.t())`, eager's later reads see the update and the functional graph's do not, so such
a call runs the captured graph with torch ops instead (the guards do not tell these calls
apart: shapes, strides and dtypes are the same).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx

from compiler.records import GraphRecord

NOTE = "a call whose inputs share memory with an input the graph writes to runs eagerly"
OVERLAP_NOTE = (
    "the graph writes to an input whose elements share memory (an expanded tensor): it runs "
    "eagerly, where each write lands in the shared memory as eager's does"
)


def mutated_inputs(aten_gm: torch.fx.GraphModule) -> list[int]:
    """Positions of the inputs a functional aten graph writes back to (`copy_` into a
    placeholder)."""
    placeholders = [n for n in aten_gm.graph.nodes if n.op == "placeholder"]
    written = {
        n.args[0]
        for n in aten_gm.graph.nodes
        if n.op == "call_function" and n.target is torch.ops.aten.copy_.default
    }
    return [i for i, p in enumerate(placeholders) if p in written]


def shares_memory(args: Sequence[Any], mutated: Sequence[int]) -> bool:
    """Whether a mutated input shares its storage with another tensor input. Paid on every
    call (an optimizer step has hundreds of inputs): one pass, and a second only when some
    storage is shared at all."""
    ptrs = [
        a.untyped_storage().data_ptr() if isinstance(a, torch.Tensor) and a.numel() else None
        for a in args
    ]
    present = [p for p in ptrs if p is not None]
    if len(set(present)) == len(present):
        return False
    counts = Counter(present)
    return any(ptrs[i] is not None and counts[ptrs[i]] > 1 for i in mutated)


def overlaps_itself(t: torch.Tensor) -> bool:
    """Whether some memory location may hold several of `t`'s elements (a stride-0 dimension
    of an expanded tensor). Sorted by stride, each dimension must step past everything the
    smaller ones reach; strides that interleave are answered True, which is only cautious."""
    dims = sorted((st, sz) for st, sz in zip(t.stride(), t.shape) if sz > 1)
    reach = 0
    for stride, size in dims:
        if stride <= reach:
            return True
        reach += stride * (size - 1)
    return False


def alias_safe(
    compiled: Callable,
    eager: Callable,
    mutated: Sequence[int],
    record: GraphRecord | None,
    inputs: Sequence[Any] = (),
) -> Callable:
    """`compiled`, except for calls where a mutated input shares memory with another input:
    those run `eager` (the captured graph), with a note in the record. Where one of
    `inputs` (the signature's example inputs) that the graph writes overlaps itself, every
    call runs `eager`.

    `compiled` is traced for one input signature (shapes, strides, dtypes), which every call
    has. So a call whose inputs start at the addresses of the last call found safe covers the
    same memory, tensor by tensor, and that memory did not overlap then: it is not checked
    again. An optimizer step's ~300 inputs cost 20 µs so instead of 400 (CI-class CPU).

    With the C++ extension (cpp_ext.py) an `AliasGuard` gives the same answers in one call
    (~5x faster when the addresses changed, as gradients' do every step)."""
    if not mutated:
        return compiled
    if any(
        isinstance(inputs[i], torch.Tensor) and overlaps_itself(inputs[i])
        for i in mutated
        if i < len(inputs)
    ):
        # The functional graph computes each element of a written input on its own and
        # copies all of them back; elements that share memory then see each other's writes
        # in an order eager never makes (a fused kernel read an element already overwritten
        # through another). The signature pins the strides: every call of it runs eagerly.
        if record is not None and OVERLAP_NOTE not in record.notes:
            record.notes.append(OVERLAP_NOTE)

        def overlapping(*args: Any) -> Any:
            return eager(*args)

        return overlapping
    from compiler.runtime import cpp_ext

    alias_guard = cpp_ext.alias_guard_class()
    check = alias_guard(tuple(mutated)) if alias_guard is not None else None
    safe: list[list[int] | None] = [None]

    def run(*args: Any) -> Any:
        if check is not None:  # the same answers in C++, None where it cannot tell
            answer = check(*args)
            if answer is True:
                return compiled(*args)
            if answer is False:
                return run_eagerly(args)
        try:
            ptrs = [a.data_ptr() for a in args]
        except AttributeError:  # an input that is not a tensor
            ptrs = None
        if ptrs is not None and ptrs == safe[0]:
            return compiled(*args)
        if shares_memory(args, mutated):
            return run_eagerly(args)
        safe[0] = ptrs
        return compiled(*args)

    def run_eagerly(args: tuple) -> Any:
        if record is not None and NOTE not in record.notes:
            record.notes.append(NOTE)
        return eager(*args)

    return run
