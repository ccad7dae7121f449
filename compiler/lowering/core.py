"""aten graph -> loop IR: the lowering context, the `LOWERINGS` table and its helpers (the
driver that fills the table and runs it is compiler/lowering/graph.py).

Each aten node becomes a `TensorValue`: a size, a dtype and a *loader* (logical coordinates
-> IR Value). Pointwise ops and reductions create IR nodes; views only wrap the loader with
index arithmetic (and, when the result is still a strided view of a buffer, keep that view
so an extern kernel can take it without a copy). Ops without a rule run as extern aten calls.

Rules live in one table filled by `@register_lowering(aten.op, ...)`, one module per op
family (pointwise.py, views.py, reductions.py, indexing.py, externs.py).

Devices: a graph's kernels run on one device, the graph's (`graph_device`: its inputs').
Every buffer carries its own device, and no kernel is ever handed a buffer of another
device: a node whose result lies on another device (`.cpu()` of a CUDA tensor, a factory on
the CPU) or that reads a buffer of another device (anything after that `.cpu()`, a constant
made on the CPU) runs as an extern aten call, which works on any device, so transfers are
explicit `_to_copy` calls between kernels and nothing fuses across devices. The scheduler
checks the same of every kernel it forms (compiler/scheduler/fusion.py).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
import torch.fx
from torch.utils._pytree import tree_flatten, tree_map

from compiler.aot.trace import AotGraph
from compiler.ir.index import Index, contiguous_strides, make_vars
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
    loads,
)
from compiler.ir.transform import bool_arithmetic
from compiler.support.results import flat_result

Loader = Callable[[tuple], Value]


class LoweringError(RuntimeError):
    """The graph cannot be lowered (the caller falls back to running it eagerly)."""


class OffDevice(LoweringError):
    """A kernel body read a buffer of another device than the graph's: the node being
    lowered runs as an extern call instead (an extern outside any node: the graph runs
    eagerly)."""


def graph_device(inputs: Sequence[Any], constants: Sequence[torch.Tensor] = ()) -> torch.device:
    """The device a graph's kernels run on: its tensor inputs' (CPU scalars, which go with
    tensors of any device as in eager, count only when there is nothing else; then its
    constants'; then the CPU). Inputs on the CPU and on one accelerator: the accelerator,
    whose kernels get the inputs of its own; the CPU ones are read by extern calls."""
    tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
    devices = {t.device for t in tensors if not _is_cpu_scalar(t)}
    devices = devices or {t.device for t in tensors} or {t.device for t in constants}
    if len(devices) > 1:
        devices -= {torch.device("cpu")}
    if len(devices) > 1:
        raise LoweringError(f"inputs on several devices: {sorted(map(str, devices))}")
    return devices.pop() if devices else torch.device("cpu")


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
        self._input_layouts: dict[str, Layout] = {}  # _is_input's view of `inputs`
        self.constants: list[ConstantBuffer] = []
        self.off_device: list[str] = []  # aten nodes run as externs for their devices
        self.notes: list[str] = []
        self.current: torch.fx.Node | None = None
        self.layouts: dict[str, Layout] = {}  # every buffer's own layout
        self.mutated_inputs: list[str] = []  # graph inputs written back (in-place user code)
        # 4-d buffers are laid out channels-last (NHWC) around 2-d convolutions, which oneDNN
        # and cuDNN run fastest so, and pooling and concatenation along channels then read
        # contiguous channels (decided in `run`, as Inductor's layout optimisation).
        self.channels_last = False
        self.allow_channels_last = True
        # Variances as one-pass Welford reductions (for emitters that implement them), else
        # as two passes: the mean, then the sum of squared deviations.
        self.welford = False
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
        body = bool_arithmetic(cast(body_fn(tuple(Index.of(v) for v in ivars)), dtype))
        layout = layout or self.output_layout(size, dtype, body)
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
        body = bool_arithmetic(body_fn(full) if body_fn else cast(tv.load(full), acc_dtype))
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
        body = bool_arithmetic(
            body_fn(tuple(Index.of(v) for v in ivars), tuple(Index.of(v) for v in rvars))
        )
        layout = self.natural_layout(size, out_dtype)
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
        elsewhere = layout.device != self.device

        def loader(idx: tuple) -> Value:
            if elsewhere:
                # a kernel cannot read another device's memory; extern calls take it
                raise OffDevice(f"{name} on {layout.device} read by a {self.device} kernel")
            return Load(name, idx, layout.dtype)

        return TensorValue(layout.size, layout.dtype, loader, TensorArg(name, layout))

    def output_layout(
        self, size: tuple[int, ...], dtype: torch.dtype, body: Value | None = None
    ) -> Layout:
        """Node outputs keep eager's strides (channels-last stays channels-last) when the
        aten node's fake value has this size; contiguous otherwise. In a channels-last graph
        a 4-d node takes the strides of a buffer of its size that it reads element for
        element (a convolution's output, NHWC or not), else channels-last if it reads a
        channels-last activation (graph outputs are copied back to eager's strides). A 4-d
        value computed from none (Swin's attention masks and its windows of a (B, H, W, C)
        sequence) keeps eager's strides: channels-last put its heads or its H innermost,
        so its kernels vectorised over 3 heads and the attention copied its mask back."""
        if self.channels_last and len(size) == 4:
            followed = self._followed_layout(size, dtype, body)
            if followed is not None:
                return followed
            if body is None or self._reads_channels_last(body):
                return self.natural_layout(size, dtype)
        val = self.meta() if self.current is not None else None
        if isinstance(val, torch.Tensor) and tuple(val.shape) == size and _dense(val):
            return Layout(size, tuple(val.stride()), dtype, self.device)
        return Layout.contiguous(size, dtype, self.device)

    def _followed_layout(
        self, size: tuple[int, ...], dtype: torch.dtype, body: Value | None
    ) -> Layout | None:
        if body is None:
            return None
        own = tuple(Index.of(v) for v in make_vars("i", size))
        for ld in loads(body):
            lay = self.layouts.get(ld.buf)
            if lay is not None and lay.size == size and tuple(ld.indices) == own:
                return Layout(size, lay.stride, dtype, self.device)
        return None

    def _reads_channels_last(self, body: Value) -> bool:
        for ld in loads(body):
            lay = self.layouts.get(ld.buf)
            if (
                lay is not None
                and len(lay.size) == 4
                and same_strides(lay.size, lay.stride, channels_last_strides(lay.size))
                and not same_strides(lay.size, lay.stride, contiguous_strides(lay.size))
            ):
                return True
        return False

    def natural_layout(self, size: Sequence[int], dtype: torch.dtype) -> Layout:
        """The layout of a new buffer whose strides eager does not fix: channels-last for 4-d
        buffers of a channels-last graph, contiguous otherwise."""
        size = tuple(size)
        if self.channels_last and len(size) == 4:
            return Layout(size, channels_last_strides(size), dtype, self.device)
        return Layout.contiguous(size, dtype, self.device)

    def require_strides(self, tv: TensorValue, stride: Sequence[int]) -> TensorValue:
        """`tv` as a strided view with these strides (size-1 dims aside), copying it into a
        new buffer of that layout unless it already is one."""
        if tv.view is not None and same_strides(tv.size, tv.view.layout.stride, stride):
            return tv
        layout = Layout(tv.size, tuple(stride), tv.dtype, self.device)
        return self.pointwise(tv.size, tv.dtype, tv.load, layout=layout)

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

    def extern(
        self, op: Any, args: tuple, kwargs: dict, note: bool, layouts: Sequence[Layout] = ()
    ) -> Any:
        """Run `op` as an aten call on materialised tensors; outputs shaped like the meta, in
        `layouts` where given (what the op returns for these inputs when the meta, traced
        with other strides, says otherwise; the wrapper copies if aten disagrees)."""

        def arg(a: Any) -> Any:
            return self.realize(a) if isinstance(a, TensorValue) else a

        args = tree_map(arg, args)
        kwargs = tree_map(arg, kwargs)
        val = self.meta()
        flat_vals, spec = tree_flatten(val)
        outputs, values = [], []
        given = iter(layouts)
        for v in flat_vals:
            if isinstance(v, torch.Tensor):
                layout = next(given, None) or Layout(
                    tuple(v.shape), tuple(v.stride()), v.dtype, v.device
                )
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

    def run(
        self, example_inputs: Sequence[torch.Tensor], device: torch.device | None = None
    ) -> Graph:
        gm = self.aot.gm
        env: dict[str, Any] = {}
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        if device is None:
            device = graph_device(example_inputs, _graph_constants(gm))
        self._device = device
        if self.allow_channels_last and _runs_convolutions_channels_last(gm, self._device):
            self.channels_last = True
            self.notes.append(
                "4-d tensors are laid out channels-last (NHWC) around the 2-d convolutions, "
                + (
                    "which oneDNN runs fastest so on CPU (except where weights outweigh "
                    "activations)"
                    if self._device.type == "cpu"
                    else "which cuDNN runs fastest so"
                )
                + "; outputs keep eager's strides"
            )
        self._placeholder_vals = [ph.meta.get("val") for ph in placeholders]
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
                if t.device != self.device and t.numel() <= 1:
                    t = t.to(self.device)  # a lifted scalar such as torch.tensor(2.0)
                # others stay on their device: what reads them there runs as extern calls
                layout = Layout(tuple(t.shape), tuple(t.stride()), t.dtype, t.device)
                name = f"const{len(self.constants)}"
                self.constants.append(ConstantBuffer(name, layout, t))
                env[node.name] = self.buffer_value(name, layout)
            elif node.op == "call_function":
                env[node.name] = self.lower_node(node, env)
            elif node.op == "output":
                flat, _ = tree_flatten(node.args[0])
                internal = self.aot.internal_from
                outputs = tuple(
                    self._output(a, env[a.name], internal is not None and k >= internal)
                    if isinstance(a, torch.fx.Node) and isinstance(env[a.name], TensorValue)
                    else (env[a.name] if isinstance(a, torch.fx.Node) else a)
                    for k, a in enumerate(flat)
                )
            else:
                raise LoweringError(f"unexpected node kind {node.op}")
        self.current = None
        lines = dict(self.aot.source_lines)
        return Graph(
            tuple(self.inputs),
            tuple(self.constants),
            tuple(self.nodes),
            outputs,
            lines,
            tuple(self.off_device),
        )

    def _output(self, node: torch.fx.Node, tv: TensorValue, internal: bool) -> TensorArg:
        """A graph output, with eager's strides where a channels-last graph chose others;
        a training forward's `internal` outputs (read by its backward only) stay as laid
        out, and the backward, compiled for the tensors it gets, reads them so."""
        val = node.meta.get("val")
        arg = self.realize(tv)
        if not internal and self._returns_held_memory(arg, val):
            # a clone (or contiguous copy) of an input or a constant lowers to that buffer
            # itself: returned so, the caller would get the input tensor (writes to the
            # result would change it) or the graph's constant, where eager gives new memory
            self.current = node
            layout = Layout(tv.size, tuple(val.stride()), tv.dtype, self.device) if _dense(
                val
            ) else None
            arg = self.realize(self.pointwise(tv.size, tv.dtype, tv.load, layout=layout))
        if (
            not internal
            and arg.layout.device == self.device
            and self.channels_last
            and isinstance(val, torch.Tensor)
            and tuple(val.shape) == tv.size
            and _dense(val)
            and not same_strides(tv.size, arg.layout.stride, val.stride())
        ):
            self.current = node
            layout = Layout(tv.size, tuple(val.stride()), tv.dtype, self.device)
            arg = self.realize(self.pointwise(tv.size, tv.dtype, tv.load, layout=layout))
        return arg

    def _returns_held_memory(self, arg: TensorArg, val: Any) -> bool:
        """A user-visible output `arg` lies in an input's or a constant's buffer while eager's
        result (`val`) is new memory, not a view of that input. A backward's gradients may
        be its inputs, as eager's autograd passes a gradient on unchanged."""
        if self.aot.gradients_out or not isinstance(val, torch.Tensor):
            return False
        if any(c.name == arg.buf for c in self.constants):
            return True
        held = next((b for b in self.inputs if b.name == arg.buf), None)
        if held is None:
            return False
        placeholder = self._placeholder_vals[held.position]
        return not (
            isinstance(placeholder, torch.Tensor)
            and placeholder.untyped_storage()._cdata == val.untyped_storage()._cdata
        )

    def lower_node(self, node: torch.fx.Node, env: dict[str, Any]) -> Any:
        def value(a: Any) -> Any:
            return env[a.name] if isinstance(a, torch.fx.Node) else a

        args = tree_map(value, node.args)
        kwargs = tree_map(value, dict(node.kwargs))
        if node.target is operator.getitem:
            return args[0][args[1]]
        rule = LOWERINGS.get(node.target)
        if not self._on_device(node, args, kwargs):
            # an extern call; host work unless it only takes or gives CPU scalars, as device
            # ops without a rule (CUDA attention's random seed and offset) always did
            if rule is not None or self._moves(node, args, kwargs):
                self.off_device.append(node.name)
            rule = None
        if rule is not None:
            built = len(self.nodes)
            try:
                out = rule(self, node, *args, **kwargs)
            except OffDevice:
                del self.nodes[built:]  # the rule's nodes read it: the extern call replaces them
                self.off_device.append(node.name)
                out = NotImplemented
            if out is not NotImplemented:
                return out
        if not isinstance(node.target, torch._ops.OpOverload):
            raise LoweringError(f"cannot lower call to {node.target}")
        into = node.args[0] if node.args else None
        if (
            node.target is torch.ops.aten.copy_.default
            and self._is_input(args[0])
            # a clone() lowers to its input's buffer: a copy into the clone is no write-back
            and not (isinstance(into, torch.fx.Node) and into.target in _CLONES)
        ):
            # functionalize writes mutated graph inputs back at the end: an in-place aten copy
            self.mutated_inputs.append(args[0].view.buf)
            return self.extern(node.target, args, kwargs, note=False)
        if node.target._schema.is_mutable:
            raise LoweringError(f"mutating op {_op_name(node.target)} in a functional graph")
        return self.extern(node.target, args, kwargs, note=True)

    def _on_device(self, node: torch.fx.Node, args: Any, kwargs: Any) -> bool:
        """Whether a kernel may compute `node`: its results and the buffers of its tensor
        arguments are on the graph's device (a rule's body reading another buffer of
        another device raises OffDevice)."""
        results = [v for v in tree_flatten(self.meta(node))[0] if isinstance(v, torch.Tensor)]
        if any(v.device != self.device for v in results):
            return False
        operands = tree_flatten((args, kwargs))[0]
        return all(
            a.view.layout.device == self.device
            for a in operands
            if isinstance(a, TensorValue) and a.view is not None
        )

    def _moves(self, node: torch.fx.Node, args: Any, kwargs: Any) -> bool:
        """A result or tensor argument of `node` lies on another device and is more than a
        CPU scalar."""
        results = [
            (v.device, v.dim())
            for v in tree_flatten(self.meta(node))[0]
            if isinstance(v, torch.Tensor)
        ]
        operands = [
            (a.view.layout.device, len(a.view.layout.size))
            for a in tree_flatten((args, kwargs))[0]
            if isinstance(a, TensorValue) and a.view is not None
        ]
        return any(
            device != self.device and not (device.type == "cpu" and dims == 0)
            for device, dims in (*results, *operands)
        )

    def _is_input(self, tv: Any) -> bool:
        if len(self._input_layouts) != len(self.inputs):  # built once all inputs are known
            self._input_layouts = {b.name: b.layout for b in self.inputs}
        return (
            isinstance(tv, TensorValue)
            and tv.view is not None
            and self._input_layouts.get(tv.view.buf) == tv.view.layout
        )


_CLONES = (torch.ops.aten.clone.default, torch.ops.aten.contiguous.default)


# ---- small helpers shared by the rule modules -----------------------------------------------


def cast(value: Value, dtype: torch.dtype) -> Value:
    if value.dtype == dtype:
        return value
    return Op("to_dtype", (value,), dtype)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Half-precision math runs in float32: each op's result is converted back to its half
    dtype, which the emitters round only at stores unless `emulate_precision_casts` (see
    compiler/codegen/common.py `rounds_to`)."""
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


def channels_last_strides(size: Sequence[int]) -> tuple[int, ...]:
    """NHWC strides of an (N, C, H, W) tensor."""
    n, c, h, w = (max(int(s), 1) for s in size)
    return (h * w * c, 1, w * c, c)


def same_strides(size: Sequence[int], a: Sequence[int], b: Sequence[int]) -> bool:
    """Strides that address the same elements (a size-1 dim's stride never matters)."""
    return all(s == 1 or x == y for s, x, y in zip(size, a, b))


# Convolution input dtypes oneDNN and cuDNN run in channels-last (float64 goes to slow paths).
_CHANNELS_LAST_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _runs_convolutions_channels_last(gm: torch.fx.GraphModule, device: torch.device) -> bool:
    """A graph with a 2-d convolution that oneDNN (CPU) or cuDNN (CUDA) runs: both are
    fastest on NHWC activations (cuDNN's NCHW path transposes to NHWC and back around each
    convolution on tensor-core GPUs), as Inductor's layout optimisation also assumes."""
    if device.type == "cpu":
        if not (torch.backends.mkldnn.enabled and torch.backends.mkldnn.is_available()):
            return False
    elif device.type == "cuda":
        if not (torch.backends.cudnn.enabled and torch.backends.cudnn.is_available()):
            return False
    else:
        return False
    convolutions = (torch.ops.aten.convolution.default, torch.ops.aten.convolution_backward.default)
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target in convolutions:
            arg = n.args[1] if n.target is convolutions[1] else n.args[0]  # the input
            val = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
            if (
                isinstance(val, torch.Tensor)
                and val.dim() == 4
                and val.dtype in _CHANNELS_LAST_DTYPES
            ):
                return True
    return False


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


def _is_cpu_scalar(t: torch.Tensor) -> bool:
    return t.device.type == "cpu" and t.dim() == 0


def _graph_constants(gm: torch.fx.GraphModule) -> list[torch.Tensor]:
    out = []
    for n in gm.graph.nodes:
        if n.op == "get_attr":
            t = _attr(gm, n.target)
            if isinstance(t, torch.Tensor):
                out.append(t)
    return out
