"""An aten op's result as a flat list, and a compiled graph's outputs put back in their
structure: shared by the IR interpreter, lowering, aot and the generated wrappers."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
from torch.utils._pytree import TreeSpec, tree_flatten


def flat_result(result: Any) -> list[Any]:
    """An aten op's result flattened in order, Nones kept (pytree would drop them)."""
    if isinstance(result, (tuple, list)):
        return [x for item in result for x in flat_result(item)]
    return [result]


def tensors(result: Any, positions: Sequence[int]) -> list[torch.Tensor | None]:
    """The outputs of an aten op's result at `positions` of `flat_result` (where its meta
    function returned tensors)."""
    flat = flat_result(result)
    return [flat[i] for i in positions]


def unflattener(spec: TreeSpec) -> Callable[[list], Any]:
    """`spec.unflatten`, or `tuple` / `list` where the structure is a flat tuple / list of
    leaves (a compiled graph's usual output): pytree's unflatten walks every leaf's spec in
    Python, ~50 calls per call of a training graph's halves."""
    for kind in (tuple, list):
        if spec == tree_flatten(kind([None] * spec.num_leaves))[1]:
            return kind
    return spec.unflatten
