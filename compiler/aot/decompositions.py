"""The decomposition table: which aten ops are rewritten into simpler aten ops before lowering.

We start from torch._decomp's core aten set (what every backend is expected to handle) and add
the composite ops that are better expressed through the lowerings we have: normalisations
(inference batch norm, layer norm, group norm) and softmax become reductions and pointwise
ops the scheduler can fuse; activations become pointwise math. Ops we lower directly
(max/avg pooling, embedding, mm, convolution) are removed from the table so they reach the
lowering intact.
"""

from __future__ import annotations

import functools
import struct

import torch
from torch._decomp import core_aten_decompositions, get_decompositions

from compiler.aot import batch_norm
from compiler.aot.inplace import out_of_place

aten = torch.ops.aten

EXTRA_DECOMPOSITIONS = [
    aten.native_batch_norm,
    aten._native_batch_norm_legit_no_training,
    aten._native_batch_norm_legit,
    aten._native_batch_norm_legit_functional,
    aten.native_layer_norm,
    aten.native_group_norm,
    aten._softmax,
    aten._log_softmax,
    aten.gelu,
    aten.hardtanh,
    aten.leaky_relu,
    aten.elu,
    aten.clamp_min,
    aten.clamp_max,
    aten.dropout,
    aten._to_copy,
    aten.mean,
    aten.var,
    aten.var_mean,
    aten.std,
    aten.flip,
    aten.index_select,
    aten.slice_scatter,
    aten.repeat,
]

# Lowered directly (compiler/lowering/*): keep them whole even if the core set decomposes them.
KEEP = [
    aten.max_pool2d_with_indices,
    aten.avg_pool2d,
    aten._adaptive_avg_pool2d,
    aten.embedding,
    aten.addmm,
    aten.mm,
    aten.bmm,
    aten.convolution,
    aten._scaled_dot_product_flash_attention,
    aten._scaled_dot_product_efficient_attention,
    # The CPU attention eager's scaled_dot_product_attention picked: one pass over each
    # block of keys (online softmax), where its decomposition writes the scores out, reads
    # them three times and recomputes every exp (wav2vec2 at 199 frames: 2.7 ms per layer
    # against 0.7 ms).
    aten._scaled_dot_product_flash_attention_for_cpu,
    # Random numbers are eager's (no rule draws them): dropout's own kernel keeps eager's
    # mask bit for bit where its decomposition, rand_like and a compare, draws another on
    # CUDA (eager's fused dropout kernel takes its Philox numbers in another order); it
    # also writes the mask once where the decomposition writes the floats it compares.
    aten.native_dropout,
    aten.amax,
    aten.amin,
    aten.any,
    aten.prod,
]


# Ours in place of torch's, falling back to them outside the cases they cover.
LEAN = {
    aten.native_batch_norm.default: batch_norm.native_batch_norm,
    aten.native_batch_norm_backward.default: batch_norm.native_batch_norm_backward,
}


@functools.lru_cache(maxsize=None)
def decomposition_table() -> dict:
    """OpOverload -> Python decomposition, built once (collecting torch's composite ops
    takes ~0.1-0.5 s)."""
    table = dict(core_aten_decompositions())
    table.update(get_decompositions(EXTRA_DECOMPOSITIONS))
    keep = {op for packet in KEEP for op in (getattr(packet, o) for o in packet.overloads())}
    table = {op: fn for op, fn in table.items() if op not in keep}
    table[aten.lerp.Scalar] = functools.partial(_lerp_scalar, table[aten.lerp.Scalar])
    for op, ours in LEAN.items():
        table[op] = functools.partial(ours, table[op])
    for packet, ours in ((aten.linspace, _integer_linspace), (aten.logspace, _integer_logspace)):
        for name in packet.overloads():
            op = getattr(packet, name)
            if op in table:
                table[op] = functools.partial(ours, table[op])
    for op in list(table):
        functional = out_of_place(op)
        if functional is not None:
            table[op] = functools.partial(_in_place, functional)
    return table


def _in_place(functional, self: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    """An in-place op (`lerp_`) as its out-of-place op written back, what functionalize
    makes of it: the out-of-place op is dispatched, so it meets its own entry here (ours
    for lerp, none for an op kept whole) where torch's in-place entries call their
    references directly. Graphs traced without functionalize (compiler/aot/inplace.py)
    then hold the ops functionalize's trace gives."""
    return aten.copy_.default(self, functional(self, *args, **kwargs))


def _rounded(x: float, dtype: torch.dtype) -> float:
    return struct.unpack("f", struct.pack("f", x))[0] if dtype == torch.float32 else x


def _lerp_scalar(general, start: torch.Tensor, end: torch.Tensor, weight: float) -> torch.Tensor:
    """torch._refs.lerp with a number weight (Adam's `exp_avg.lerp_(grad, 1 - beta1)`, once per
    parameter): its branch on `|weight| >= 0.5` is taken here, so the graph gets 3 ops where
    the reference emits 9 (a 0-d weight tensor, abs, compare, two wheres), with the same
    values: the weight and `weight - 1` are computed in the tensors' dtype as there."""
    if (
        isinstance(weight, bool)
        or not isinstance(weight, (int, float))
        or start.dtype != end.dtype
        or start.dtype not in (torch.float32, torch.float64)  # the reference upcasts others
        or start.shape != end.shape
        or start.stride() != end.stride()
    ):
        return general(start, end, weight)
    # In Python (a tensor made here would be traced). `w - 1` for |w| >= 0.5 is exact in a
    # double, so rounding it to float32 gives float32's own subtraction.
    w = _rounded(float(weight), start.dtype)
    far = abs(w) >= 0.5
    coeff = _rounded(w - 1, start.dtype) if far else w
    diff = aten.sub.Tensor(end, start)
    return aten.add.Tensor(aten.mul.Tensor(diff, coeff), end if far else start)


# Device types whose integer linspace and logspace kernels step in float32 (RangeFactories.cu,
# with a float32 `powf` for logspace), where the CPU's step in double (RangeFactoriesKernel.cpp):
# one element of linspace(0, 7, 50) is 4 on the CPU, 3 on CUDA. Their results stay eager's own
# kernels (`_integer_linspace`, `_integer_logspace` say why).
_FLOAT32_RANGE_DEVICES = {"cuda"}


def _ranges_step_in_float32(device) -> bool:
    kind = torch.device(device).type if device is not None else torch.get_default_device().type
    return kind in _FLOAT32_RANGE_DEVICES


def _integer_linspace(general, start, end, steps, *, dtype=None, **kwargs) -> torch.Tensor:
    """linspace into an integer dtype as eager's CPU kernel computes it: the ends converted to
    that dtype first, the step and each value in double, then truncated, the first half
    counted from `start` and the rest back from `end`. torch's reference steps in the default
    float dtype from the unconverted ends (int8 from 4.3 to 0 in 50 steps: 4, 4, 4, 4, 3, ...
    where eager gives 4, 3, 3, 3, 3, ...).

    On a device whose kernel steps in float32 (CUDA) it stays aten.linspace, eager's own
    kernel, run as an extern call: that kernel is nvcc's float32 arithmetic, whose
    contractions (fma) a Triton kernel does not reproduce bit for bit, and each ulp truncates
    to another integer (linspace(4.3, -3, 50) into int8: 2 of 50 values one off on the H200)."""
    if dtype is None or dtype.is_floating_point or dtype.is_complex or steps < 2:
        return general(start, end, steps, dtype=dtype, **kwargs)
    device = kwargs.get("device")
    if _ranges_step_in_float32(device):
        return NotImplemented

    def converted(v):  # to the integer type (a C++ cast: towards zero), then to double
        if isinstance(v, torch.Tensor):
            return v.to(dtype).to(torch.float64)
        return float(int(v))

    first, last = converted(start), converted(end)
    step = (last - first) / (steps - 1)
    index = torch.arange(steps, device=device, dtype=torch.int64)
    low = first + step * index.to(torch.float64)
    high = last - step * (steps - 1 - index).to(torch.float64)
    return torch.where(index < steps // 2, low, high).to(dtype)


def _integer_logspace(general, start, end, steps, base=10.0, *, dtype=None, **kwargs):
    """logspace into an integer dtype on a device whose kernel steps in float32 (CUDA) stays
    aten.logspace, eager's own kernel, run as an extern call: its values are float32 `powf`
    results truncated, and every value from 2^24 up is an integer in float32, so one ulp
    of `powf` is an integer off. libdevice's powf in a Triton kernel is not nvcc's bit for
    bit (logspace(0, 7, 2, 10.0) into int32: 10000001 against eager's 10000000 on the
    H200). Other devices and dtypes: the reference (eager's CPU formula, in float64)."""
    if (
        dtype is not None
        and not dtype.is_floating_point
        and not dtype.is_complex
        and _ranges_step_in_float32(kwargs.get("device"))
    ):
        return NotImplemented
    return general(start, end, steps, base, dtype=dtype, **kwargs)
