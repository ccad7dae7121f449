"""aten graph -> loop IR: the lowering driver, the `LOWERINGS` table and its helpers.

Each aten node becomes a `TensorValue`: a size, a dtype and a *loader* (logical coordinates
-> IR Value). Pointwise ops and reductions create IR nodes; views only wrap the loader with
index arithmetic (and, when the result is still a strided view of a buffer, keep that view
so an extern kernel can take it without a copy). Ops without a rule run as extern aten calls.

Rules live in one table filled by `@register_lowering(aten.op, ...)`, one module per op
family (pointwise.py, views.py, reductions.py, indexing.py, externs.py).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
import torch.fx
from torch.utils._pytree import tree_flatten, tree_map

from compiler.aot.trace import AotGraph
from compiler.ir.index import Index, make_vars
from compiler.ir.nodes import (
    ConstantBuffer,
    ExternKernel,
    Graph,
    InputBuffer,
    Layout,
    Load,
    Node,
    Op,
    Pointwise,
    Reduction,
    TensorArg,
    Value,
)
from compiler.runtime.support import flat_result

Loader = Callable[[tuple], Value]


class LoweringError(RuntimeError):
    """The graph cannot be lowered (the caller falls back to running it eagerly)."""


@dataclass(frozen=True)
class TensorValue:
    """A lowered tensor: element `idx` is `loader(idx)`. `view` is set when the tensor is a
    strided view of a materialised buffer (inputs, constants, node outputs)."""

    size: tuple[int, ...]
    dtype: torch.dtype
    loader: Loader
    view: TensorArg | None = None

    def load(self, indices: Sequence) -> Value:
        return self.loader(tuple(Index.of(i) if isinstance(i, int) else i for i in indices))


LOWERINGS: dict[Any, Callable[..., Any]] = {}


def register_lowering(*ops: Any) -> Callable:
    """Register `fn(ctx, node, *args, **kwargs)` for aten op packets or overloads.
    Tensor arguments arrive as TensorValues; the rule returns a TensorValue (or a tuple)."""

    def add(fn: Callable) -> Callable:
        for op in ops:
            overloads = (
                [getattr(op, o) for o in op.overloads()] if hasattr(op, "overloads") else [op]
            )
            for ov in overloads:
                LOWERINGS[ov] = fn
        return fn

    return add


class LoweringContext:
    """Collects the IR nodes while the aten graph is walked."""

    def __init__(self, aot: AotGraph):
        self.aot = aot
        self.nodes: list[Node] = []
        self.inputs: list[InputBuffer] = []
        self.constants: list[ConstantBuffer] = []
        self.notes: list[str] = []
        self.current: torch.fx.Node | None = None
        self.layouts: dict[str, Layout] = {}  # every buffer's own layout
        self.mutated_inputs: list[str] = []  # graph inputs written back (in-place user code)
        self._count = 0

    # ---- names and provenance -----------------------------------------------------------

    def new_name(self) -> str:
        name = f"buf{self._count}"
        self._count += 1
        return name

    @property
    def origins(self) -> tuple[str, ...]:
        if self.current is None:
            return ()
        return self.aot.origins.get(self.current.name, ()) or ()

    @property
    def aten_name(self) -> str:
        return self.current.name if self.current is not None else ""

    def meta(self, node: torch.fx.Node | None = None) -> Any:
        return (node or self.current).meta.get("val")

    # ---- building nodes -----------------------------------------------------------------

    def pointwise(
        self,
        size: Sequence[int],
        dtype: torch.dtype,
        body_fn: Callable[[tuple], Value],
        layout: Layout | None = None,
    ) -> TensorValue:
        """A new Pointwise node; `body_fn(i_vars)` gives the value at each point."""
        size = tuple(int(s) for s in size)
        ivars = make_vars("i", size)
        body = body_fn(tuple(Index.of(v) for v in ivars))
        body = cast(body, dtype)
        layout = layout or self.output_layout(size, dtype)
        node = Pointwise(self.new_name(), size, body, layout, self.origins, self.aten_name)
        self.nodes.append(node)
        return self.buffer_value(node.name, layout)

    def reduction(
        self,
        tv: TensorValue,
        axes: Sequence[int],
        reduction_type: str,
        out_dtype: torch.dtype,
        acc_dtype: torch.dtype,
        body_fn: Callable[[tuple], Value] | None = None,
    ) -> TensorValue:
        """Reduce `tv` over `axes` (no kept dims). `body_fn(full_indices)` overrides the value
        reduced (default: tv's element cast to `acc_dtype`)."""
        rank = len(tv.size)
        axes = tuple(sorted({a % rank for a in axes})) if rank else ()
        outer = tuple(s for k, s in enumerate(tv.size) if k not in axes)
        red = tuple(tv.size[a] for a in axes)
        ivars, rvars = make_vars("i", outer), make_vars("r", red)
        it_i, it_r = iter(ivars), iter(rvars)
        full = tuple(Index.of(next(it_r) if k in axes else next(it_i)) for k in range(rank))
        body = body_fn(full) if body_fn else cast(tv.load(full), acc_dtype)
        layout = Layout.contiguous(outer, out_dtype, self.device)
        node = Reduction(
            self.new_name(),
            outer,
            red,
            reduction_type,
            body,
            layout,
            tv.size,
            axes,
            self.origins,
            self.aten_name,
        )
        self.nodes.append(node)
        return self.buffer_value(node.name, layout)

    def window_reduction(
        self,
        size: Sequence[int],
        window: Sequence[int],
        reduction_type: str,
        out_dtype: torch.dtype,
        body_fn: Callable[[tuple, tuple], Value],
    ) -> TensorValue:
        """A reduction over a window per output point (pooling): `body_fn(i, r)`."""
        size, window = tuple(size), tuple(window)
        ivars, rvars = make_vars("i", size), make_vars("r", window)
        body = body_fn(tuple(Index.of(v) for v in ivars), tuple(Index.of(v) for v in rvars))
        layout = Layout.contiguous(size, out_dtype, self.device)
        node = Reduction(
            self.new_name(),
            size,
            window,
            reduction_type,
            body,
            layout,
            size + window,
            tuple(range(len(size), len(size) + len(window))),
            self.origins,
            self.aten_name,
        )
        self.nodes.append(node)
        return self.buffer_value(node.name, layout)

    def buffer_value(self, name: str, layout: Layout) -> TensorValue:
        self.layouts.setdefault(name, layout)

        def loader(idx: tuple) -> Value:
            return Load(name, idx, layout.dtype)

        return TensorValue(layout.size, layout.dtype, loader, TensorArg(name, layout))

    def output_layout(self, size: tuple[int, ...], dtype: torch.dtype) -> Layout:
        """Node outputs keep eager's strides (channels-last stays channels-last) when the
        aten node's fake value has this size; contiguous otherwise."""
        val = self.meta() if self.current is not None else None
        if isinstance(val, torch.Tensor) and tuple(val.shape) == size and _dense(val):
            return Layout(size, tuple(val.stride()), dtype, self.device)
        return Layout.contiguous(size, dtype, self.device)

    def realize(self, tv: TensorValue) -> TensorArg:
        """A strided view of a materialised buffer holding `tv` (copying if it has none)."""
        if tv.view is not None:
            return tv.view
        out = self.pointwise(tv.size, tv.dtype, tv.load)
        assert out.view is not None
        return out.view

    def direct(self, tv: TensorValue) -> TensorValue:
        """`tv` read straight from a buffer laid out as `tv` (copying a view or a computed
        value): what loads at shifted or run-time coordinates need."""
        if tv.view is not None and self.layouts.get(tv.view.buf) == tv.view.layout:
            return self.buffer_value(tv.view.buf, tv.view.layout)
        return self.pointwise(tv.size, tv.dtype, tv.load)

    def extern(self, op: Any, args: tuple, kwargs: dict, note: bool) -> Any:
        """Run `op` as an aten call on materialised tensors; outputs shaped like the meta."""

        def arg(a: Any) -> Any:
            return self.realize(a) if isinstance(a, TensorValue) else a

        args = tree_map(arg, args)
        kwargs = tree_map(arg, kwargs)
        val = self.meta()
        flat_vals, spec = tree_flatten(val)
        outputs, values = [], []
        for v in flat_vals:
            if isinstance(v, torch.Tensor):
                layout = Layout(tuple(v.shape), tuple(v.stride()), v.dtype, self.device)
                name = self.new_name()
                outputs.append((name, layout))
                values.append(self.buffer_value(name, layout))
            else:
                values.append(v)
        positions = tuple(i for i, v in enumerate(flat_result(val)) if isinstance(v, torch.Tensor))
        node = ExternKernel(
            self.new_name(),
            _op_name(op),
            tuple(args),
            tuple(sorted(kwargs.items())),
            tuple(outputs),
            self.origins,
            self.aten_name,
            positions,
        )
        self.nodes.append(node)
        if note:
            self.notes.append(f"{_op_name(op)} ran as an extern call")
        return spec.unflatten(values) if not isinstance(val, torch.Tensor) else values[0]

    @property
    def device(self) -> torch.device:
        return self._device

    # ---- the walk -----------------------------------------------------------------------

    def run(self, example_inputs: Sequence[torch.Tensor]) -> Graph:
        gm = self.aot.gm
        env: dict[str, Any] = {}
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        devices = {t.device for t in example_inputs if isinstance(t, torch.Tensor)}
        devices = devices or {t.device for t in _graph_constants(gm)}
        if len(devices) > 1:
            raise LoweringError(f"inputs on several devices: {sorted(map(str, devices))}")
        self._device = devices.pop() if devices else torch.device("cpu")
        for pos, (ph, t) in enumerate(zip(placeholders, example_inputs)):
            if not isinstance(t, torch.Tensor):
                raise LoweringError(f"non-tensor graph input {type(t).__name__}")
            layout = Layout(tuple(t.shape), tuple(t.stride()), t.dtype, t.device)
            self.inputs.append(InputBuffer(f"arg{pos}", pos, layout))
            env[ph.name] = self.buffer_value(f"arg{pos}", layout)
        outputs: tuple = ()
        for node in gm.graph.nodes:
            self.current = node
            if node.op == "placeholder":
                continue
            if node.op == "get_attr":
                t = _attr(gm, node.target)
                if not isinstance(t, torch.Tensor):
                    raise LoweringError(f"non-tensor constant {node.target}")
                if t.device != self.device:  # a lifted scalar such as torch.tensor(2.0)
                    if t.numel() > 1:
                        raise LoweringError(
                            f"constant {node.target} on {t.device}, inputs on {self.device}"
                        )
                    t = t.to(self.device)
                layout = Layout(tuple(t.shape), tuple(t.stride()), t.dtype, self.device)
                name = f"const{len(self.constants)}"
                self.constants.append(ConstantBuffer(name, layout, t))
                env[node.name] = self.buffer_value(name, layout)
            elif node.op == "call_function":
                env[node.name] = self.lower_node(node, env)
            elif node.op == "output":
                flat, _ = tree_flatten(node.args[0])
                outputs = tuple(
                    self.realize(env[a.name])
                    if isinstance(a, torch.fx.Node) and isinstance(env[a.name], TensorValue)
                    else (env[a.name] if isinstance(a, torch.fx.Node) else a)
                    for a in flat
                )
            else:
                raise LoweringError(f"unexpected node kind {node.op}")
        self.current = None
        lines = dict(self.aot.source_lines)
        return Graph(tuple(self.inputs), tuple(self.constants), tuple(self.nodes), outputs, lines)

    def lower_node(self, node: torch.fx.Node, env: dict[str, Any]) -> Any:
        def value(a: Any) -> Any:
            return env[a.name] if isinstance(a, torch.fx.Node) else a

        args = tree_map(value, node.args)
        kwargs = tree_map(value, dict(node.kwargs))
        if node.target is operator.getitem:
            return args[0][args[1]]
        rule = LOWERINGS.get(node.target)
        if rule is not None:
            out = rule(self, node, *args, **kwargs)
            if out is not NotImplemented:
                return out
        if not isinstance(node.target, torch._ops.OpOverload):
            raise LoweringError(f"cannot lower call to {node.target}")
        if node.target is torch.ops.aten.copy_.default and self._is_input(args[0]):
            # functionalize writes mutated graph inputs back at the end: an in-place aten copy
            self.mutated_inputs.append(args[0].view.buf)
            return self.extern(node.target, args, kwargs, note=False)
        if node.target._schema.is_mutable:
            raise LoweringError(f"mutating op {_op_name(node.target)} in a functional graph")
        return self.extern(node.target, args, kwargs, note=True)

    def _is_input(self, tv: Any) -> bool:
        names = {b.name: b.layout for b in self.inputs}
        return (
            isinstance(tv, TensorValue)
            and tv.view is not None
            and names.get(tv.view.buf) == tv.view.layout
        )


def lower(aot: AotGraph, example_inputs: Sequence[torch.Tensor]) -> tuple[Graph, list[str]]:
    """Lower the aten graph; returns the IR graph and notes (extern fallbacks)."""
    # The rule modules register themselves on import.
    from compiler.lowering import externs, indexing, pointwise, reductions, views  # noqa: F401

    ctx = LoweringContext(aot)
    graph = ctx.run(example_inputs)
    notes = list(dict.fromkeys(ctx.notes))
    if ctx.mutated_inputs:
        notes.append(f"inputs mutated in place: {', '.join(ctx.mutated_inputs)}")
    return graph, notes


# ---- small helpers shared by the rule modules -----------------------------------------------


def cast(value: Value, dtype: torch.dtype) -> Value:
    if value.dtype == dtype:
        return value
    return Op("to_dtype", (value,), dtype)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Half-precision math runs in float32 (rounded back when stored), as eager's CUDA kernels do."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def broadcast_loader(tv: TensorValue, out_size: tuple[int, ...]) -> Loader:
    """Read `tv` broadcast to `out_size` (numpy rules, aligned on the right)."""
    lead = len(out_size) - len(tv.size)

    def loader(idx: tuple) -> Value:
        own = tuple(
            Index() if s == 1 and out_size[lead + k] != 1 else idx[lead + k]
            for k, s in enumerate(tv.size)
        )
        return tv.load(own)

    return loader


def _dense(t: torch.Tensor) -> bool:
    """Strides that are a permutation of a contiguous layout (no gaps, no overlap)."""
    dims = sorted((st, s) for s, st in zip(t.shape, t.stride()) if s != 1)
    expected = 1
    for st, s in dims:
        if st != expected:
            return False
        expected *= s
    return True


def _op_name(op: Any) -> str:
    if isinstance(op, torch._ops.OpOverload):
        return f"{op.namespace}.{op._schema.name.split('::')[-1]}.{op._overloadname}"
    return str(op)


def _attr(gm: torch.nn.Module, target: str) -> Any:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _graph_constants(gm: torch.fx.GraphModule) -> list[torch.Tensor]:
    out = []
    for n in gm.graph.nodes:
        if n.op == "get_attr":
            t = _attr(gm, n.target)
            if isinstance(t, torch.Tensor):
                out.append(t)
    return out
