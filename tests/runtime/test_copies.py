"""runtime/copies.py: many copies in one foreach call per dtype, equal to one copy each."""

import torch

from compiler.runtime.copies import clone_many, copy_many, same_memory


def _mixed():
    return [
        torch.randn(3, 4),
        torch.randn(2, 3, 5, 5).to(memory_format=torch.channels_last),
        torch.arange(6, dtype=torch.int64).reshape(2, 3),
        torch.randn(4, 6)[:, ::2],  # not dense
        torch.tensor(True),
        torch.randn(5, dtype=torch.float64),
    ]


def test_copy_many_equals_one_copy_each():
    srcs = _mixed()
    dsts = [torch.zeros_like(t) for t in srcs]
    copy_many(dsts, srcs)
    for d, s in zip(dsts, srcs):
        assert torch.equal(d, s)


def test_copy_many_converts_like_copy_():
    dsts = [torch.zeros(3, dtype=torch.float16), torch.zeros(3, dtype=torch.float16)]
    srcs = [torch.randn(3), torch.arange(3)]
    copy_many(dsts, srcs)
    assert torch.equal(dsts[0], srcs[0].half()) and torch.equal(dsts[1], srcs[1].half())


def test_same_memory_means_one_memory_laid_out_alike():
    t = torch.randn(4, 4)
    assert same_memory(t, t) and same_memory(t, t.view(4, 4))
    assert not same_memory(t, t.clone())
    assert not same_memory(t, t.t())  # same start, other strides
    assert not same_memory(t, t.view(16))
    assert not same_memory(t, t.view(torch.int32))


def test_clone_many_is_clone():
    srcs = _mixed()
    clones = clone_many(srcs)
    for c, s in zip(clones, srcs):
        ref = s.clone()
        assert torch.equal(c, ref) and c.stride() == ref.stride() and c.dtype == ref.dtype
        assert c.data_ptr() != s.data_ptr()
