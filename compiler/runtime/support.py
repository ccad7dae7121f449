"""Small functions the generated wrapper modules call."""

from __future__ import annotations

from typing import Any, Sequence

import torch

empty_strided = torch.empty_strided


def reinterpret(
    t: torch.Tensor, size: Sequence[int], stride: Sequence[int], offset: int
) -> torch.Tensor:
    """A strided view of buffer `t`, `offset` elements past its start."""
    return t.as_strided(size, stride, t.storage_offset() + offset)


def ensure_layout(
    t: torch.Tensor | None, size: Sequence[int], stride: Sequence[int]
) -> torch.Tensor | None:
    """An extern kernel's result in the layout our kernels were generated for (aten may pick
    another memory format than its meta function promised; then copy once). None stays None:
    an output eager leaves undefined, which nothing after it reads."""
    if t is None:
        return None
    if tuple(t.shape) == tuple(size) and (t.numel() <= 1 or _same_strides(t, size, stride)):
        return t
    out = torch.empty_strided(size, stride, dtype=t.dtype, device=t.device)
    out.copy_(t)
    return out


def _same_strides(t: torch.Tensor, size: Sequence[int], stride: Sequence[int]) -> bool:
    return all(s == 1 or a == b for s, a, b in zip(size, t.stride(), stride))


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
