"""A reference interpreter for the loop IR: evaluates a Graph with torch ops, whole tensors at a
time. Slow and simple on purpose: the tests compare generated kernels against it as well as
against eager, so a wrong lowering and a wrong emitter fail differently.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch
from torch.utils._pytree import tree_map

from compiler.ir.index import FloorDiv, Index, Mod, Var
from compiler.ir.nodes import (
    Constant,
    ExternKernel,
    Graph,
    IndexValue,
    Layout,
    Load,
    Op,
    Pointwise,
    Reduction,
    TensorArg,
    Value,
    Welford,
    address,
    iter_values,
)
from compiler.support.results import tensors

OP_IMPLS = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "truediv": torch.true_divide,
    "floordiv": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "truncdiv": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "remainder": torch.remainder,
    "fmod": torch.fmod,
    "neg": torch.neg,
    "abs": torch.abs,
    "sign": torch.sign,
    "reciprocal": torch.reciprocal,
    "pow": torch.pow,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "exp": torch.exp,
    "exp2": torch.exp2,
    "expm1": torch.expm1,
    "log": torch.log,
    "log2": torch.log2,
    "log1p": torch.log1p,
    "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt,
    "sin": torch.sin,
    "cos": torch.cos,
    "tan": torch.tan,
    "asin": torch.asin,
    "acos": torch.acos,
    "atan": torch.atan,
    "sinh": torch.sinh,
    "cosh": torch.cosh,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "erf": torch.erf,
    "atan2": torch.atan2,
    "floor": torch.floor,
    "ceil": torch.ceil,
    "trunc": torch.trunc,
    "round": torch.round,
    "eq": torch.eq,
    "ne": torch.ne,
    "lt": torch.lt,
    "le": torch.le,
    "gt": torch.gt,
    "ge": torch.ge,
    "logical_and": torch.logical_and,
    "logical_or": torch.logical_or,
    "logical_xor": torch.logical_xor,
    "logical_not": torch.logical_not,
    "isnan": torch.isnan,
    "isinf": torch.isinf,
    "bitwise_and": torch.bitwise_and,
    "bitwise_or": torch.bitwise_or,
    "bitwise_xor": torch.bitwise_xor,
    "bitwise_not": torch.bitwise_not,
    "where": torch.where,
}


def eval_index(index: Index, env: dict[str, torch.Tensor]) -> torch.Tensor:
    out: Any = torch.tensor(index.const, dtype=torch.int64)
    for atom, c in index.terms:
        out = out + _eval_atom(atom, env) * c
    return out


def _eval_atom(atom, env: dict[str, torch.Tensor]) -> torch.Tensor:
    if isinstance(atom, Var):
        return env[atom.name]
    base = eval_index(atom.base, env)
    if isinstance(atom, FloorDiv):
        return torch.div(base, atom.divisor, rounding_mode="floor")
    assert isinstance(atom, Mod)
    return torch.remainder(base, atom.modulus)


def eval_value(
    value: Value,
    env: dict[str, torch.Tensor],
    buffers: dict[str, torch.Tensor],
    layouts: dict[str, Layout],
    shape: tuple[int, ...],
) -> torch.Tensor:
    """`value` at every point of the variables in `env` (broadcastable grids) -> a tensor."""
    results: dict[int, torch.Tensor] = {}
    for v in iter_values(value):
        if isinstance(v, Constant):
            r = torch.tensor(v.value, dtype=v.dtype)
        elif isinstance(v, IndexValue):
            r = eval_index(v.index, env).to(v.dtype)
        elif isinstance(v, Op):
            args = [results[id(a)] for a in v.args]
            r = (
                torch.as_tensor(args[0]).to(v.dtype)
                if v.op == "to_dtype"
                else OP_IMPLS[v.op](*args)
            )
            if v.op != "to_dtype" and r.dtype != v.dtype:
                r = r.to(v.dtype)
        elif isinstance(v, Load):
            r = _load(v, env, results, buffers[v.buf], layouts[v.buf])
        else:
            raise TypeError(f"cannot interpret {type(v).__name__}")
        results[id(v)] = r
    return torch.broadcast_to(results[id(value)], shape)


def _load(v: Load, env, results, buf: torch.Tensor, layout: Layout) -> torch.Tensor:
    static, dynamic = address(
        layout, tuple(i if isinstance(i, Index) else results[id(i)] for i in v.indices)
    )
    addr = eval_index(static, env)
    for value, stride in dynamic:
        addr = addr + value * stride
    if not buf.numel():  # read only in an empty iteration space: no value is observed
        shape = addr.shape if v.mask is None else results[id(v.mask)].shape
        return torch.zeros(torch.broadcast_shapes(addr.shape, shape), dtype=buf.dtype)
    n = max(layout.storage_size(), 1)
    flat = buf.as_strided((n,), (1,), buf.storage_offset())
    if v.mask is not None:
        mask = results[id(v.mask)]
        addr = torch.where(mask, addr, torch.zeros_like(addr))
        return torch.where(mask, flat[addr.clamp(0, n - 1)], torch.zeros((), dtype=buf.dtype))
    return flat[addr]


def _grids(vars_: Sequence[Var]) -> dict[str, torch.Tensor]:
    n = len(vars_)
    env = {}
    for k, var in enumerate(vars_):
        shape = [1] * n
        shape[k] = var.size
        env[var.name] = torch.arange(var.size).reshape(shape)
    return env


_COMBINE = {
    "sum": lambda t: t.sum(-1),
    "prod": lambda t: t.prod(-1),
    "max": lambda t: t.amax(-1),
    "min": lambda t: t.amin(-1),
    "argmax": lambda t: t.argmax(-1),
    "argmin": lambda t: t.argmin(-1),
    "any": lambda t: t.any(-1),
    "all": lambda t: t.all(-1),
}


def _welford(node: Reduction, env, buffers, layouts) -> torch.Tensor:
    """A Welford reduction as the exact combination of all its states at once, in float64:
    mean = sum(w * mean_i) / W, m2 = sum(m2_i) + sum(w * (mean_i - mean)^2)."""
    shape = node.size + node.reduction_size
    mean, m2, weight = (
        eval_value(c, env, buffers, layouts, shape)
        .reshape(node.size + (math.prod(node.reduction_size),))
        .double()
        for c in (node.body.mean, node.body.m2, node.body.weight)
    )
    total = weight.sum(-1)
    mean = torch.where(weight != 0, mean, 0)
    combined = (weight * mean).sum(-1) / torch.where(total != 0, total, 1)  # empty: 0
    if node.reduction_type == "welford_mean":
        return combined
    deviation = torch.where(weight != 0, mean - combined[..., None], 0)
    return m2.sum(-1) + (weight * deviation * deviation).sum(-1)


def run_graph(graph: Graph, inputs: Sequence[torch.Tensor]) -> list[Any]:
    """Evaluate `graph` on `inputs`; returns the flat outputs."""
    layouts = graph.buffer_layouts()
    buffers: dict[str, torch.Tensor] = {b.name: inputs[b.position] for b in graph.inputs}
    buffers.update({c.name: c.value for c in graph.constants})
    for node in graph.nodes:
        if isinstance(node, ExternKernel):

            def arg(a):
                return _view(buffers, a) if isinstance(a, TensorArg) else a

            op = _resolve(node.op)
            out = op(*tree_map(arg, node.args), **{k: tree_map(arg, v) for k, v in node.kwargs})
            for (name, _), t in zip(node.outputs, tensors(out, node.positions)):
                buffers[name] = t
            continue
        lay = node.layout
        if isinstance(node, Pointwise):
            env = _grids(node.vars)
            value = eval_value(node.body, env, buffers, layouts, node.size)
        else:
            assert isinstance(node, Reduction)
            env = _grids(node.vars + node.reduction_vars)
            if isinstance(node.body, Welford):
                value = _welford(node, env, buffers, layouts)
            else:
                full = eval_value(node.body, env, buffers, layouts, node.size + node.reduction_size)
                full = full.reshape(node.size + (math.prod(node.reduction_size),))
                value = (
                    _COMBINE[node.reduction_type](full)
                    if full.shape[-1] or node.reduction_type not in ("max", "min")
                    else full.sum(-1)
                )
        out = torch.empty_strided(lay.size, lay.stride, dtype=lay.dtype)
        out.copy_(value.to(lay.dtype))
        buffers[node.name] = out
    return [_view(buffers, o) if isinstance(o, TensorArg) else o for o in graph.outputs]


def _view(buffers: dict[str, torch.Tensor], arg: TensorArg) -> torch.Tensor:
    buf, lay = buffers[arg.buf], arg.layout
    return buf.as_strided(lay.size, lay.stride, buf.storage_offset() + lay.offset)


def _resolve(name: str):
    ns, op, overload = name.split(".")
    return getattr(getattr(getattr(torch.ops, ns), op), overload)
