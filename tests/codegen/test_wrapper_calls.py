"""compiler/runtime/wrapper_calls.py: the wrapper's helpers."""

from __future__ import annotations

import torch

from compiler.runtime import wrapper_calls as support


def test_large_buffers_are_ordinary_tensors_with_the_asked_layout():
    n = support.HUGE_PAGE_MIN_BYTES // 4 + 3  # past the huge-page advice threshold
    t = support.empty_strided((n,), (1,), dtype=torch.float32, device=torch.device("cpu"))
    assert t.shape == (n,) and t.stride() == (1,) and t.dtype == torch.float32
    t.fill_(2.5)
    assert bool((t == 2.5).all())
    u = support.empty_strided((3, 4), (1, 3), dtype=torch.int64, device=torch.device("cpu"))
    assert u.stride() == (1, 3)
