"""Tensors that keep their memory from call to call: parameters, and the module buffers the
tracer reads (BatchNorm's running statistics). A CUDA graph reads them where they are
instead of copying them into memory of its own before every replay."""

from __future__ import annotations

import weakref

import torch

# Keyed by id: a WeakSet would compare tensors with `==`, which is elementwise.
_STATIC: weakref.WeakValueDictionary[int, torch.Tensor] = weakref.WeakValueDictionary()


def mark_static_address(t: torch.Tensor) -> None:
    """Promise that `t` keeps its memory across calls (a CUDA graph may read it in place)."""
    _STATIC[id(t)] = t


def is_static_address(t: torch.Tensor) -> bool:
    return isinstance(t, torch.nn.Parameter) or _STATIC.get(id(t)) is t
