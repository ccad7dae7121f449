"""Small functions the generated wrapper modules call."""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any, Sequence

import torch

# Buffers this large always come from a fresh mmap (glibc's largest mmap threshold), so the
# kernel that first writes them takes a page fault per 4 KiB page: for a 64 MiB output about
# 16k faults, most of the time of a sin+cos over 2^24 floats. Where transparent huge pages
# are enabled on request ("madvise" mode) such buffers ask for them: 32 faults of 2 MiB.
HUGE_PAGE_MIN_BYTES = 32 << 20
_HUGE_PAGE = 2 << 20
_MADV_HUGEPAGE = 14


def _madvise():
    """libc's madvise when THP is in "madvise" mode (in "always" mode it is not needed)."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            if "[madvise]" not in f.read():
                return None
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_MADVISE = _madvise()


def empty_strided(size: Sequence[int], stride: Sequence[int], **kwargs: Any) -> torch.Tensor:
    """torch.empty_strided; a large CPU buffer asks for huge pages before its first write
    (advice only: values are unaffected, and a refusal changes nothing)."""
    t = torch.empty_strided(size, stride, **kwargs)
    if _MADVISE is not None and t.device.type == "cpu":
        nbytes = t.untyped_storage().nbytes()
        if nbytes >= HUGE_PAGE_MIN_BYTES:
            start = -(-t.data_ptr() // _HUGE_PAGE) * _HUGE_PAGE
            end = (t.data_ptr() + nbytes) // _HUGE_PAGE * _HUGE_PAGE
            _MADVISE(start, end - start, _MADV_HUGEPAGE)
    return t


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
    if t.stride() == stride and t.shape == size:  # the common case, without a tuple built
        return t
    if tuple(t.shape) == tuple(size) and (t.numel() <= 1 or _same_strides(t, size, stride)):
        return t
    out = torch.empty_strided(size, stride, dtype=t.dtype, device=t.device)
    out.copy_(t)
    return out


def _same_strides(t: torch.Tensor, size: Sequence[int], stride: Sequence[int]) -> bool:
    return all(s == 1 or a == b for s, a, b in zip(size, t.stride(), stride))
