"""The tracer's FakeTensorMode: torch's, with the checks eager makes that fake kernels skip
(eager_checks.py), and a direct fake kernel for batch norm.

Under FakeTensorMode, aten.native_batch_norm runs torch's Python decomposition (about twenty
fake ops), and the fake dispatch cache misses on every new channel count: a densenet121
trace spent half its time there. The outputs' metadata only depends on the input's, so in
the plain cases below it is built directly; anything else takes torch's path unchanged.
Autograd sits above this mode, so the output's requires_grad and grad_fn are untouched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch._prims_common import make_channels_last_strides_for, make_contiguous_strides_for
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from compiler.tracer.eager_checks import check_inputs

aten = torch.ops.aten


class TracerFakeMode(FakeTensorMode):
    def dispatch(
        self,
        func: torch._ops.OpOverload,
        types: Sequence[type],
        args: Sequence[object] = (),
        kwargs: Mapping[str, object] | None = None,
    ) -> object:
        check_inputs(func, args, kwargs or {})
        if func is aten.native_batch_norm.default and not kwargs:
            out = self._batch_norm(types, *args)
            if out is not None:
                return out
        return super().dispatch(func, types, args, kwargs)

    def _batch_norm(
        self,
        types: Sequence[type],
        input: Any,
        weight: Any,
        bias: Any,
        running_mean: Any,
        running_var: Any,
        training: bool,
        momentum: float,
        eps: float,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """(output, save_mean, save_invstd) as torch's decomposition gives them, or None
        when the case is not one whose metadata is checked against it (tests/tracer/
        test_fake_mode.py): then torch's own path runs, and raises what eager would."""
        if not (isinstance(input, FakeTensor) and input.fake_mode is self):
            return None
        shape = tuple(input.shape)
        # Float32/64 only: there the computation dtype is the input's, so no output is
        # upcast (half inputs keep float32 statistics on CUDA).
        if input.dtype not in (torch.float32, torch.float64) or len(shape) < 2:
            return None
        if not all(type(s) is int and s > 0 for s in shape):
            return None
        channels = shape[1]
        for t in (weight, bias, running_mean, running_var):
            if t is None:
                continue
            if not (isinstance(t, FakeTensor) and t.fake_mode is self):
                return None
            if t.dtype != input.dtype or t.device != input.device or t.shape != (channels,):
                return None
        if (running_mean is None) != (running_var is None):
            return None
        if not training and running_mean is None:
            return None
        # A dense input in either standard layout: the elementwise math keeps its strides.
        stride = tuple(input.stride())
        dense = [make_contiguous_strides_for(shape)]
        if len(shape) in (4, 5):
            dense.append(make_channels_last_strides_for(shape))
        if stride not in [tuple(s) for s in dense]:
            return None
        # CPU returns empty statistics in eval mode; other devices return the running ones.
        stats = (channels,) if training or input.device.type != "cpu" else (0,)
        return (
            self._empty(types, shape, stride, input),
            self._empty(types, stats, (1,), input),
            self._empty(types, stats, (1,), input),
        )

    def _empty(
        self, types: Sequence[type], shape: tuple[int, ...], stride: tuple[int, ...], like: Any
    ) -> torch.Tensor:
        # A fresh fake tensor through the mode's own (cached) constructor path.
        return super().dispatch(
            aten.empty_strided.default,
            types,
            (shape, stride),
            {"dtype": like.dtype, "device": like.device},
        )
