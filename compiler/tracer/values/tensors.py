"""Tensors (`TensorVar`): graph values. Their metadata is constant under the tensor's guards;
everything else they take part in becomes a graph node."""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Callable

import torch

from compiler.tracer.breaks import Break, Restart
from compiler.tracer.hints import tensor_method_kind
from compiler.tracer.values.table import VALUE_OPS, ValueOps, describe
from compiler.tracer.variables import (
    AttrCallVar,
    ConstVar,
    ObjVar,
    SliceVar,
    TensorVar,
    TupleVar,
    Var,
    is_python_constant,
)
from compiler.tracer.wrap import wrap

if TYPE_CHECKING:
    from compiler.tracer.context import Emitter, Tracer

# Tensor attributes that are metadata: constants, since the tensor's guards pin them.
TENSOR_META = {
    "shape", "dtype", "device", "ndim", "requires_grad", "is_cuda", "is_leaf", "layout",
    "is_sparse", "is_quantized", "is_meta", "is_mkldnn", "is_nested", "itemsize",
}  # fmt: skip
TENSOR_VIEW_ATTRS = {"T", "mT", "H", "mH", "real", "imag"}

BACKWARD_REASON = (
    "loss.backward() runs autograd's engine in Python: the graph before it is compiled with "
    "its backward, whose kernels the engine runs; tracing resumes after the call"
)
_BREAK_TENSOR_METHODS = {
    "item": "Tensor.item() reads a tensor's value into Python",
    "tolist": "Tensor.tolist() reads a tensor's values into Python",
    "numpy": "Tensor.numpy() leaves torch for NumPy",
    "__array__": "Tensor.__array__ leaves torch for NumPy",
    "backward": BACKWARD_REASON,
    "register_hook": "Tensor.register_hook changes autograd state",
    "retain_grad": "Tensor.retain_grad changes autograd state",
    "requires_grad_": "Tensor.requires_grad_ changes autograd state",
    "data_ptr": "Tensor.data_ptr reads a memory address",
    "storage": "Tensor.storage is not traced",
    "untyped_storage": "Tensor.untyped_storage is not traced",
    "record_stream": "Tensor.record_stream is not traced",
    "share_memory_": "Tensor.share_memory_ is not traced",
    "__bool__": "bool() of a tensor reads its value into Python",
    "__float__": "float() of a tensor reads its value into Python",
    "__int__": "int() of a tensor reads its value into Python",
    "__index__": "a tensor used as an index reads its value into Python",
}


def _attr(tx: Tracer, t: TensorVar, name: str) -> Var:
    if name in TENSOR_META:
        return ConstVar(getattr(t.fake, name))
    if name in TENSOR_VIEW_ATTRS:
        return tx.builder.call("call_function", getattr, [t, ConstVar(name)], {})
    if name == "data":
        return tx.builder.call("call_method", "detach", [t], {})
    if name == "grad":
        if t.source is None:
            raise Break("reading .grad of a tensor computed in the graph")
        real = eval(t.source, tx.guards.namespace, {"L": tx.frame_values, "G": tx.G})
        return wrap(tx, real.grad, f"{t.source}.grad")
    if callable(getattr(torch.Tensor, name, None)):
        return AttrCallVar(t, name)
    raise Break(f"tensor attribute {name!r} is not traced")


def _is_inference(tx: Tracer, t: TensorVar) -> Var:
    """`t.is_inference()`: a tensor the graph computes in a torch.inference_mode() region is
    no inference tensor (the graph computes it as no_grad would), so such a region runs in
    Python; one computed while inference mode was on at the entry's start is."""
    if tx.builder.inference_at is not None:
        raise Restart(
            tx.builder.inference_at,
            "Tensor.is_inference() after a torch.inference_mode() region: the region runs in "
            "Python",
        )
    real = tx.builder.real_input(t)
    return ConstVar(real.is_inference() if real is not None else torch.is_inference_mode_enabled())


def _method(tx: Tracer, t: TensorVar, name: str, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if name == "is_inference" and not args and not kwargs:
        return _is_inference(tx, t)
    if name == "type" and not kwargs and len(args) <= 1:
        return _type(tx, t, args)
    if name == "requires_grad_" and _requires_grad_unchanged(t, args, kwargs):
        return t  # `.detach().requires_grad_(False)`: no change to autograd state
    reason = _BREAK_TENSOR_METHODS.get(name)
    if reason:
        raise Break(reason, tensor_method_kind(name))
    return tx.builder.call("call_method", name, [t, *args], kwargs)


def _type(tx: Tracer, t: TensorVar, args: list[Var]) -> Var:
    """`t.type()`: its legacy type's name, a constant; `t.type(dtype or legacy type or its
    name)` on that legacy type's device: the tensor in that dtype, as `t.to(dtype)`."""
    if not args:
        return ConstVar(t.fake.type())
    wanted = args[0].value if isinstance(args[0], (ConstVar, ObjVar)) else None
    if isinstance(wanted, type):
        wanted = f"{wanted.__module__}.{wanted.__name__}"
    legacy = _LEGACY_TYPES.get(wanted) if isinstance(wanted, str) else None
    if legacy is not None and legacy.is_cuda == (t.fake.device.type == "cuda"):
        wanted = legacy.dtype
    if not isinstance(wanted, torch.dtype):
        raise Break("Tensor.type() of that argument runs in Python")
    return tx.builder.call("call_method", "to", [t, ConstVar(wanted)], {})


# the legacy tensor types (torch.HalfTensor, torch.cuda.FloatTensor) by their names
_LEGACY_TYPES = {
    f"{cls.__module__}.{cls.__name__}": cls for cls in torch._tensor_classes if not cls.is_sparse
}


def _requires_grad_unchanged(t: TensorVar, args: list[Var], kwargs: dict[str, Var]) -> bool:
    values = [*args, *kwargs.values()]
    if len(values) > 1 or (kwargs and "requires_grad" not in kwargs):
        return False
    wanted = values[0] if values else ConstVar(True)
    return isinstance(wanted, ConstVar) and wanted.value is t.fake.requires_grad


def _operators(tx: Tracer, op: Callable, a: Var, b: Var) -> Var:
    if not all(isinstance(x, TensorVar) or is_python_constant(x) for x in (a, b)):
        other = b if isinstance(a, TensorVar) else a
        raise Break(f"operator {op.__name__} between a tensor and {describe(other)}")
    return tx.builder.call("call_function", op, [a, b], {})


def _setitem(tx: Tracer, t: TensorVar, index: Var, value: Var) -> None:
    tx.builder.call("call_function", operator.setitem, [t, index, value], {})


def _truth(tx: Tracer, t: TensorVar) -> bool:
    raise Break(
        "data-dependent control flow: the branch depends on the value of a tensor "
        "(Python has to look at the data, so the graph ends here and the condition runs eagerly)",
        "data_dependent_branch",
    )


def _same(a: TensorVar, b: Var) -> bool | None:
    # one tensor where fake mode gives the same fake: `x.add_(1) is x`, as in eager
    return a.fake is b.fake if isinstance(b, TensorVar) else None


def _iterate(tx: Tracer, t: TensorVar) -> list[Var]:
    if t.fake.dim() == 0:
        raise Break("iteration over a 0-d tensor")
    return [
        tx.builder.call("call_function", operator.getitem, [t, ConstVar(i)], {})
        for i in range(t.fake.shape[0])
    ]


def _getitem(tx: Tracer, t: TensorVar, index: Var) -> Var:
    parts = index.items if isinstance(index, TupleVar) and index.cls is tuple else [index]
    if any(_is_symint(p) for p in parts) and all(
        _is_symint(p) or isinstance(p, (ConstVar, SliceVar)) and _int_or_slice(p) for p in parts
    ):
        # `x[i]`, `x[i, 1:]` by a Python int that became a graph input (shapes.py): tensor
        # indexing reads a symbolic int as a concrete one (a guard per value, a recompile per
        # call); select, dim by dim, keeps it symbolic
        out, dim = t, 0
        for p in parts:
            if isinstance(p, SliceVar):
                whole = [SliceVar(ConstVar(None), ConstVar(None), ConstVar(None))] * dim
                key = TupleVar([*whole, p])
                out = tx.builder.call("call_function", operator.getitem, [out, key], {})
                dim += 1
            else:
                out = tx.builder.call("call_function", torch.select, [out, ConstVar(dim), p], {})
        return out
    return tx.builder.call("call_function", operator.getitem, [t, index], {})


def _is_symint(v: Var) -> bool:
    return isinstance(v, ConstVar) and isinstance(v.value, torch.SymInt)


def _int_or_slice(v: Var) -> bool:
    return isinstance(v, SliceVar) or type(v.value) is int


def _rebuild(em: Emitter, t: TensorVar) -> str:
    if t.node.op == "placeholder" and t.source:
        return t.source
    return f"O[{em.outputs[id(t.node)]}]"


VALUE_OPS[TensorVar] = ValueOps(
    describe=lambda t: "a tensor",
    attr=_attr,
    method=_method,
    getitem=_getitem,
    setitem=_setitem,
    operators=_operators,
    unary=lambda tx, op, t: tx.builder.call("call_function", op, [t], {}),
    truth=_truth,
    same=_same,
    identity=lambda t: t.fake,  # a tensor hashes by its address
    iterate=_iterate,
    rebuild=_rebuild,
    source_first=False,
)
