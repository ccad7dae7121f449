"""The aot stage of a dynamic graph, traced once with symbolic sizes and bound per size.

make_fx bakes in the sizes it traces with, so a graph with symbolic sizes was traced again
for every new size (about three quarters of each new size's compile). Traced instead on the
tracer's own fake values (their sizes are the tracer's symbols, in its ShapeEnv), make_fx
gives one aten graph for every size: view sizes are expressions over size inputs, and every
node's fake value has symbolic sizes and strides. A new size then only *binds* that graph:
its size inputs become the call's numbers, operator nodes over sizes become constants, and
each node's fake value one of concrete sizes, so the stages after aot (lowering on) see the
graph the concrete trace would have given.

Guards: what the symbolic trace relied on (a decomposition's `if n > 16`) the ShapeEnv
records as guards; a size that fails one of them, or whose inputs do not have the sizes and
strides the traced fakes say (an expression of the symbols, not a symbol alone), is traced
as before, concretely. Sizes 0 and 1 never get here: the tracer specialises them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

import sympy
import torch
import torch.fx
from torch._dispatch.python import enable_python_dispatcher
from torch._guards import detect_fake_mode
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from compiler.aot.outputs import Outputs
from compiler.aot.trace import AotGraph, trace_forward
from compiler.support.lazy_graphs import graph_module
from compiler.tracer.shapes import SYM_TYPES


@dataclass
class SymbolicAot:
    """One symbolic trace of a graph: its aten graph, the symbols' sources among the inputs,
    and the guards the trace added."""

    aot: AotGraph
    # symbol -> (input position, dim or None for a size input): where a call's value is read
    sources: dict[sympy.Symbol, tuple[int, int | None]]
    fakes: list[Any]  # the inputs' traced fake values (sizes and strides to check)
    guards: list[sympy.Expr]  # what the trace relied on, over the symbols
    mode: FakeTensorMode  # concrete fake values of bound graphs are made in it

    def bind(self, args: Sequence[Any]) -> AotGraph | None:
        """The aten graph for the sizes of `args` (the graph's inputs, size inputs included,
        in order), or None where these sizes need a trace of their own."""
        values = self._values(args)
        if values is None:
            return None
        return AotGraph(
            _bound_graph(self.aot.gm, values, self.mode),
            self.aot.origins,
            self.aot.source_lines,
            outputs=_bound_outputs(self.aot.outputs, values),
        )

    def _values(self, args: Sequence[Any]) -> _Values | None:
        subs = {}
        for symbol, (i, dim) in self.sources.items():
            arg = args[i]
            subs[symbol] = int(arg if dim is None else arg.shape[dim])
        values = _Values(subs)
        try:
            if not all(bool(values.expr(g)) for g in self.guards):
                return None
            for fake, arg in zip(self.fakes, args):
                if isinstance(fake, torch.Tensor) and not _same_layout(values, fake, arg):
                    return None
        except _Unbound:
            return None
        return values


class _Unbound(Exception):
    """An expression over a symbol that no input gives."""


class _Values:
    """The symbols' values for one call, and expressions evaluated over them (memoised: a
    graph's fake values repeat a few expressions many times)."""

    def __init__(self, subs: dict[sympy.Symbol, int]) -> None:
        self.subs = {k: sympy.Integer(v) for k, v in subs.items()}
        self.memo: dict[sympy.Expr, Any] = {}

    def expr(self, e: sympy.Expr) -> Any:
        out = self.memo.get(e)
        if out is None:
            if not e.free_symbols <= self.subs.keys():
                raise _Unbound(e)
            value = e.xreplace(self.subs)
            out = self.memo[e] = bool(value) if value.is_Boolean else _number(value)
        return out

    def of(self, v: Any) -> Any:
        """`v` (an int, SymInt, SymFloat or SymBool, or a tuple of them) made concrete."""
        if isinstance(v, SYM_TYPES):
            return self.expr(v.node.expr)
        if isinstance(v, torch.Size):
            return tuple(self.of(x) for x in v)
        if isinstance(v, (tuple, list)):
            return type(v)(self.of(x) for x in v)
        return v


def _number(value: sympy.Expr) -> int | float:
    return int(value) if value.is_Integer else float(value)


def _same_layout(values: _Values, fake: torch.Tensor, arg: Any) -> bool:
    return (
        isinstance(arg, torch.Tensor)
        and tuple(arg.shape) == values.of(tuple(fake.shape))
        and tuple(arg.stride()) == values.of(tuple(fake.stride()))
        and arg.dtype == fake.dtype
    )


def trace_symbolic(gm: torch.fx.GraphModule) -> SymbolicAot | None:
    """`gm`'s aten graph traced on the tracer's fake values (an inference graph's), or None
    where the trace has none to give (a graph not from our tracer) or fails."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    fakes = [n.meta.get("example_value") for n in placeholders]
    if not all(isinstance(f, (torch.Tensor, *SYM_TYPES)) for f in fakes):
        return None
    mode = detect_fake_mode([f for f in fakes if isinstance(f, torch.Tensor)])
    shape_env = getattr(mode, "shape_env", None)
    if shape_env is None:
        return None
    sources: dict[sympy.Symbol, tuple[int, int | None]] = {}
    for i, f in enumerate(fakes):
        dims = [(None, f)] if isinstance(f, torch.SymInt) else list(enumerate(f.shape))
        for dim, size in dims:
            if isinstance(size, torch.SymInt) and isinstance(size.node.expr, sympy.Symbol):
                sources.setdefault(size.node.expr, (i, dim))
    before = len(shape_env.guards)
    # Under torch's Python dispatcher, as the tracer's own symbolic fake ops run
    # (graph_builder.py): torch 2.11's composite kernels (attention's) otherwise read a size
    # as an int, which pins its symbol to the traced size (Eq(s27, 7)) and no other size binds
    with torch.no_grad(), enable_python_dispatcher():
        aot = trace_forward(gm, fakes)
    guards = [g.expr for g in shape_env.guards[before:]]
    return SymbolicAot(aot, sources, fakes, guards, FakeTensorMode(allow_non_fake_inputs=True))


def _bound_graph(
    gm: torch.fx.GraphModule, values: _Values, mode: FakeTensorMode
) -> torch.fx.GraphModule:
    """`gm` with its size inputs and the operator nodes over sizes replaced by their values,
    and every node's fake value made for those sizes (what a concrete trace leaves)."""
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, Any] = {}
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if isinstance(val, SYM_TYPES):
            env[node] = values.of(val)
            continue
        copy = env[node] = graph.node_copy(node, lambda n: env[n])
        copy.meta = {k: v for k, v in node.meta.items() if k not in ("val", "tensor_meta")}
        if val is not None:
            copy.meta["val"] = _concrete(val, values, mode)
    return graph_module(gm, graph, class_name="BoundGraph")


def _concrete(val: Any, values: _Values, mode: FakeTensorMode) -> Any:
    if isinstance(val, torch.Tensor):
        return _fake(val, values, mode)
    if isinstance(val, (tuple, list)):
        return type(val)(_concrete(v, values, mode) for v in val)
    return values.of(val)


def _fake(val: torch.Tensor, values: _Values, mode: FakeTensorMode) -> FakeTensor:
    """A fake tensor of `val`'s dtype and device with its sizes, strides and storage offset
    evaluated (storage as long as a concrete trace's would need at least)."""
    size, stride = values.of(tuple(val.shape)), values.of(tuple(val.stride()))
    offset = values.of(val.storage_offset())
    extent = offset + 1 + sum((n - 1) * s for n, s in zip(size, stride) if n > 0)
    storage = values.of(val.untyped_storage().nbytes()) // val.element_size()
    meta = torch.empty(max(extent, storage), dtype=val.dtype, device="meta")
    meta = meta.as_strided(size, stride, offset)
    return FakeTensor(mode, meta, val.device)


def _bound_outputs(outputs: Outputs | None, values: _Values) -> Outputs | None:
    if outputs is None:
        return None
    leaves = [
        replace(
            o,
            size=values.of(tuple(o.size)),
            stride=values.of(tuple(o.stride)),
            offset=values.of(o.offset),
            value=values.of(o.value),
        )
        for o in outputs.leaves
    ]
    return replace(outputs, leaves=leaves)
