"""Checks eager makes on an op's inputs that fake tensors skip.

Fake kernels compute the output's metadata and check most of what eager checks (shapes,
dtypes, devices), but a few checks live only in eager's own kernels. Traced without them,
the compiled code computes something where eager raises: `base.expand(3, 4).add_(1)` wrote 3
into every element of `base`, and `torch.zeros(0).max()` returned -inf. Each check below
reads only sizes and strides (the guards pin both) and raises `EagerRaises`; the tracer then
breaks the graph at the op, which runs for real and raises eager's own error at the user's
line. A check that is wrong in the cautious direction costs a graph break, never a result.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch._prims_common import is_non_overlapping_and_dense_or_false
from torch.utils._pytree import tree_leaves

aten = torch.ops.aten


class EagerRaises(RuntimeError):
    """Eager raises for these inputs where the fake kernel computed a result."""


# ---- in-place writes into overlapping elements -------------------------------------------

# In-place ops whose eager kernels allow a destination whose elements share memory: they
# change only metadata, or write one value everywhere (fill), or only warn (index_put_,
# masked_fill_, index_fill_ on expanded tensors: "deprecated", still allowed).
_OVERLAP_ALLOWED = {
    "fill_", "zero_", "index_fill_", "masked_fill_", "index_put_", "_index_put_impl_",
    "set_", "resize_", "resize_as_", "as_strided_", "detach_", "squeeze_", "unsqueeze_",
    "transpose_", "t_", "swapdims_", "swapaxes_", "_coalesced_", "requires_grad_",
}  # fmt: skip

_written: dict[torch._ops.OpOverload, tuple[int, ...]] = {}


def _written_args(func: torch._ops.OpOverload) -> tuple[int, ...]:
    """Positions of the schema arguments `func` writes into (its in-place self, its out=)."""
    found = _written.get(func)
    if found is None:
        if func._schema.name.split("::")[-1] in _OVERLAP_ALLOWED:
            found = ()
        else:
            found = tuple(
                i
                for i, a in enumerate(func._schema.arguments)
                if a.alias_info is not None and a.alias_info.is_write
            )
        _written[func] = found
    return found


def _has_internal_overlap(t: torch.Tensor) -> bool:
    """What eager's `has_internal_overlap` answers Yes for: a dimension of more than one
    element with stride 0 (an expanded view). Overlaps it calls TooHard pass in eager too."""
    return any(st == 0 and sz > 1 for sz, st in zip(t.shape, t.stride()))


def _byte_range(t: torch.Tensor) -> tuple[int, int] | None:
    """[begin, end) of a dense tensor's bytes in its storage; None where eager's overlap
    check says TooHard (not dense, symbolic)."""
    values = [t.storage_offset(), *t.shape, *t.stride()]
    if not all(type(v) is int for v in values) or t.numel() == 0:
        return None
    if not is_non_overlapping_and_dense_or_false(t):
        return None
    extent = 1 + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    begin = t.storage_offset() * t.element_size()
    return begin, begin + extent * t.element_size()


def _partial_overlap(out: torch.Tensor, t: torch.Tensor) -> bool:
    """What eager's assert_no_partial_overlap raises for: an input sharing some, but not
    all, of the written tensor's memory (`x[1:].add_(x[:-1])`)."""
    if t is out or out.untyped_storage()._cdata != t.untyped_storage()._cdata:
        return False
    a, b = _byte_range(out), _byte_range(t)
    if a is None or b is None:
        return False
    if a == b:
        return tuple(out.stride()) != tuple(t.stride())
    return a[0] < b[1] and b[0] < a[1]


def _check_written(func: torch._ops.OpOverload, args: Sequence, kwargs: Mapping) -> None:
    positions = _written_args(func)
    if not positions:
        return
    names = [a.name for a in func._schema.arguments]
    written = [args[i] if i < len(args) else kwargs.get(names[i]) for i in positions]
    written = [t for t in written if isinstance(t, torch.Tensor)]
    for t in written:
        if _has_internal_overlap(t):
            raise EagerRaises(
                f"{func}: more than one element of the written-to tensor refers to a single "
                "memory location (an expanded view)"
            )
    inputs = [a for a in tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
    for out in written:
        if any(_partial_overlap(out, t) for t in inputs if t is not out):
            raise EagerRaises(
                f"{func}: some elements of an input and of the written-to tensor refer to a "
                "single memory location"
            )


# ---- reductions without an identity over empty dimensions ---------------------------------


def _dims(t: torch.Tensor, dim: Any) -> list[int]:
    if dim is None:
        return list(range(t.dim()))
    dims = [dim] if isinstance(dim, int) else list(dim)
    return [d % max(t.dim(), 1) for d in dims] if dims else list(range(t.dim()))


def _empty_over(t: torch.Tensor, dim: Any) -> bool:
    if t.dim() == 0:
        return False
    if dim is None:
        return t.numel() == 0
    return any(t.shape[d] == 0 for d in _dims(t, dim))


def _no_identity(func: torch._ops.OpOverload, args: Sequence, kwargs: Mapping) -> None:
    t = args[0]
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    if isinstance(t, torch.Tensor) and _empty_over(t, dim):
        raise EagerRaises(f"{func}: a reduction without identity over an empty dimension")


# ---- other input checks of eager kernels that the fake kernels lack -----------------------


def _index_add(func: torch._ops.OpOverload, args: Sequence, kwargs: Mapping) -> None:
    """index_add's source is shaped as self, but for `index.numel()` along dim (the fake
    kernel, a decomposition, broadcasts a source of another shape instead)."""
    names = [a.name for a in func._schema.arguments]
    given = dict(zip(names, args)) | dict(kwargs)
    self, dim, index, source = (given.get(n) for n in ("self", "dim", "index", "source"))
    if not all(isinstance(t, torch.Tensor) for t in (self, index, source)):
        return
    if self.dim() == 0 and source.dim() == 0:
        return
    d = dim % max(self.dim(), 1)
    expected = list(self.shape)
    if expected:
        expected[d] = index.numel()
    if list(source.shape) != expected and not (self.dim() <= 1 and source.numel() == index.numel()):
        raise EagerRaises(f"{func}: source of shape {list(source.shape)}, expected {expected}")


def _long_out(func: torch._ops.OpOverload, args: Sequence, kwargs: Mapping) -> None:
    out = kwargs.get("out")
    if isinstance(out, torch.Tensor) and out.dtype != torch.long:
        raise EagerRaises(f"{func}: an out= tensor of dtype {out.dtype}, eager wants int64")


def _outs_of_self_dtype(func: torch._ops.OpOverload, args: Sequence, kwargs: Mapping) -> None:
    """aminmax's CUDA kernel wants its out= tensors in the input's dtype (its fake kernel on
    CUDA inputs does not check; found by the error inputs run on the device)."""
    dtype = args[0].dtype
    for name in ("min", "max"):
        out = kwargs.get(name)
        if isinstance(out, torch.Tensor) and out.dtype != dtype:
            raise EagerRaises(f"{func}: an out= tensor of dtype {out.dtype}, eager wants {dtype}")


def _softmax_backward_dtypes(func: torch._ops.OpOverload, args: Sequence, kwargs: Mapping) -> None:
    """The softmax backward kernels read grad_output and output through one element type,
    but for a half-to-float backward on CUDA (float32 grad and output of a float16 input):
    a float32 grad with a float16 output raises "expected scalar type Float but found Half"
    on either device, where the decomposition computes (the OpInfo run on the H200 found
    it). Any pair but the same dtype throughout runs eagerly, which also keeps the
    devices' other differences (the CPU's float16 result of a float32 grad)."""
    names = [a.name for a in func._schema.arguments]
    given = dict(zip(names, args)) | dict(kwargs)
    grad, output = given.get("grad_output"), given.get("output")
    input_dtype = given.get("input_dtype")
    if not (isinstance(grad, torch.Tensor) and isinstance(output, torch.Tensor)):
        return
    if not grad.dtype == output.dtype == input_dtype:
        raise EagerRaises(
            f"{func}: grad_output {grad.dtype}, output {output.dtype}, input_dtype "
            f"{input_dtype}: eager's kernels take one dtype"
        )


# Reductions whose fake kernels return a result for an empty reduced dimension where eager
# raises (found by comparing both on zero-size inputs; the others' fake kernels raise too),
# and the ops the OpInfo error inputs found (tests/codegen/test_opinfo_error_inputs.py).
_CHECKS: dict[torch._ops.OpOverload, Callable[[Any, Sequence, Mapping], None]] = {
    aten.max.default: _no_identity,
    aten.min.default: _no_identity,
    aten.max.dim: _no_identity,
    aten.min.dim: _no_identity,
    aten.median.dim: _no_identity,
    aten.nanmedian.dim: _no_identity,
    aten.mode.default: _no_identity,
    aten.index_add.default: _index_add,
    aten.index_add_.default: _index_add,
    aten.index_add.out: _index_add,
    aten.multinomial.out: _long_out,
    aten.aminmax.out: _outs_of_self_dtype,
    aten._softmax_backward_data.default: _softmax_backward_dtypes,
    aten._log_softmax_backward_data.default: _softmax_backward_dtypes,
}


def check_inputs(func: torch._ops.OpOverload, args: Sequence, kwargs: Mapping) -> None:
    """Raise EagerRaises where eager's kernel for `func` would raise on these inputs'
    metadata and the fake kernel does not."""
    _check_written(func, args, kwargs)
    check = _CHECKS.get(func)
    if check is not None:
        check(func, args, kwargs)
