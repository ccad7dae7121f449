"""The address check before a CUDA graph's replay (compiler/runtime/cudagraphs.py), on CPU
tensors: the extension's `same_addresses` and the Python loop agree. The graphs themselves
are tested on the GPU (test_cuda_runtime.py)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from compiler.runtime import cpp_ext, cudagraphs


@pytest.mark.parametrize("with_extension", [True, False])
def test_moved_inputs(monkeypatch, extension, with_extension):
    monkeypatch.setattr(
        cpp_ext,
        "same_addresses_function",
        lambda: extension.same_addresses if with_extension else None,
    )
    w, b, x = nn.Parameter(torch.randn(3)), torch.randn(3), torch.randn(2)
    args = [x, w, b]
    where = cudagraphs._split([(1, w.data_ptr()), (2, b.data_ptr())])
    assert not cudagraphs._moved(args, where)
    assert not cudagraphs._moved([torch.randn(2), w, b], where)  # position 0 is not checked
    with torch.no_grad():
        w.data = torch.randn(3)  # the same Parameter, new memory
    assert cudagraphs._moved(args, where)
    assert cudagraphs._moved([x, w, b[1:]], where)
    assert not cudagraphs._moved(args, cudagraphs._split([]))


def test_same_addresses_leaves_subclasses_to_python(extension):
    sub = torch.randn(3).as_subclass(type("Sub", (torch.Tensor,), {}))
    assert extension.same_addresses([sub], (0,), (sub.data_ptr(),)) is None
    with pytest.raises(IndexError):
        extension.same_addresses([sub], (1,), (0,))
