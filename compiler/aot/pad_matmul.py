"""Matmuls of unaligned sizes on zero-padded operands (a pass over functional aten graphs).

cuBLAS picks its fast kernels (Hopper's `nvjet_sm90`, the 16-byte-aligned CUTLASS ones) only
when every operand's leading dimension is a multiple of 16 bytes. A GPT-2 LM head (vocabulary
50257) has none: on the H200 its three matmuls of an 8x256-token training step ran in
`cutlass_75_tensorop_bf16_s1688gemm_..._align1` kernels, 1.68 + 1.14 + 1.11 ms, where the same
matmuls padded to 50264 take about 0.2 ms each (what TorchInductor's pad_mm does).

Each mm/addmm/bmm/baddbmm whose M, K or N is not a multiple of the alignment becomes the same
matmul on operands padded with zeros (`constant_pad_nd`, which the code generator computes in
the kernel that produces the operand where it can), its result sliced back:

    K: both operands padded along K; the added products are 0 * 0, so the sums are unchanged
    M, N: the one operand (and a bias) padded; the extra rows or columns are sliced away

Which of M, K, N is a leading dimension depends on which operands are transposed views and on
the layouts the lowering picks, so every unaligned one is padded. An operand that is a
permutation of a tensor is padded before the permutation, so the matmuls that read one tensor
both ways (a linear layer's backward: grad_output @ W and grad_output^T @ x) share one padded
copy; an operand computed in the graph is computed once, into its padded buffer, which its
other readers read through a slice. Nothing changes what a training forward saves: the pass
runs on each half after the partition. A graph output that the slicing left with other
strides than eager's is copied to eager's strides; a training forward's internal outputs stay
views (its backward is compiled for the tensors it gets). Tensors that as_strided reads keep
their dense layout.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensor

from compiler import config
from compiler.aot.trace import AotGraph
from compiler.records import GraphRecord
from compiler.support.lazy_graphs import graph_code, graph_module

aten = torch.ops.aten

# Elements per 16 bytes: the alignment of cuBLAS's vectorised kernels. Other dtypes (float64,
# integers) are left alone.
ALIGNMENT: dict[torch.dtype, int] = {torch.float16: 8, torch.bfloat16: 8, torch.float32: 4}

# Matmuls of fewer multiply-adds than this are left alone. The unaligned kernels run at about
# a tenth of the aligned ones' rate (~94 TFLOP/s against ~800 measured on the H200 for the LM
# head), so padding saves ~90% of the matmul's time, while each operand padded outside a
# producer's kernel costs a copy kernel (a launch, ~5 us, and a pass over the operand). At
# 2**28 multiply-adds the unaligned kernel takes ~6 us: below that the copies can cost more
# than they save.
MIN_MACS = 2**28


@dataclass(frozen=True)
class MatmulForm:
    """Where one matmul op keeps its operands: `lhs` [..., M, K] @ `rhs` [..., K, N], plus a
    `bias` broadcast to the result [..., M, N] (addmm, baddbmm)."""

    lhs: int
    rhs: int
    bias: int | None = None


MATMULS: dict[Any, MatmulForm] = {
    aten.mm.default: MatmulForm(0, 1),
    aten.bmm.default: MatmulForm(0, 1),
    aten.addmm.default: MatmulForm(1, 2, bias=0),
    aten.baddbmm.default: MatmulForm(1, 2, bias=0),
}

# Ops whose result is a view of their first argument, with the same elements: an output
# reached from a sliced matmul through them may have other strides than eager's.
VIEWS = frozenset(
    {
        aten.view.default,
        aten._unsafe_view.default,
        aten.reshape.default,
        aten.permute.default,
        aten.transpose.int,
        aten.t.default,
        aten.unsqueeze.default,
        aten.squeeze.dim,
        aten.squeeze.dims,
        aten.squeeze.default,
        aten.alias.default,
        aten.slice.Tensor,
        aten.select.int,
        aten.expand.default,
    }
)


# Ops that read their input's memory by explicit strides: a view of a padded buffer in place
# of a dense tensor would change what they read.
READS_STRIDES = frozenset({aten.as_strided.default, aten.as_strided_scatter.default})


@dataclass(frozen=True)
class Padded:
    """One matmul rewritten: its op, sizes (M, K, N, and the batch or None), dtype, and the
    padded sizes."""

    op: str
    sizes: tuple[int, int, int]
    batch: int | None
    dtype: torch.dtype
    padded: tuple[int, int, int]

    def __str__(self) -> str:
        m, k, n = self.sizes
        shapes = f"{m}x{k} @ {k}x{n}"
        if self.batch is not None:
            shapes = f"{self.batch} x ({shapes})"
        changed = ", ".join(
            f"{name} {a}->{b}" for name, a, b in zip("MKN", self.sizes, self.padded) if a != b
        )
        return f"{self.op} {shapes} {str(self.dtype).replace('torch.', '')}: {changed}"


def pad_matmuls(aot: AotGraph, record: GraphRecord | None = None, part: str = "") -> AotGraph:
    """`aot` with its unaligned matmuls on padded operands (a new graph; `aot` itself when
    there is none, or `config.pad_matmuls` is off: False, or "auto" and not on CUDA). Says
    in `record`'s notes which matmuls were padded and to what, and keeps the new graph as
    its aten graph of `part` ("forward" for an inference graph)."""
    setting = config.pad_matmuls
    if setting is False:
        return aot
    on_any_device = setting is True
    todo = [
        n
        for n in aot.gm.graph.nodes
        if n.op == "call_function"
        and n.target in MATMULS
        and _padding(n, on_any_device) is not None
    ]
    if not todo:
        return aot
    what = f"{part} graph: " if part else ""
    try:
        gm = _copy(aot.gm)
        rewriter = _Rewriter(gm.graph, dict(aot.origins))
        by_name = {n.name: n for n in gm.graph.nodes}
        done = [rewriter.rewrite(by_name[n.name], *_padding(n, on_any_device)) for n in todo]
        rewriter.restore_output_strides(aot.internal_from)
        gm.graph.eliminate_dead_code()  # the operands' views that only the matmuls read
        gm.graph.lint()
        gm.recompile()
    except Exception as exc:  # only a speed-up: the graph is compiled as it was
        if config.strict():
            raise
        _note(record, f"{what}matmuls not padded ({type(exc).__name__}: {exc})")
        return aot
    if record is not None:
        record.aot_graphs[part or "forward"] = graph_code(gm)  # the graph that is lowered
    _note(
        record,
        f"{what}{len(done)} matmul{'s' * (len(done) != 1)} of sizes that are not multiples "
        "of 16 bytes run on zero-padded operands, for cuBLAS's aligned kernels: "
        + "; ".join(map(str, done)),
    )
    return dataclasses.replace(aot, gm=gm, origins=rewriter.origins)


def _note(record: GraphRecord | None, text: str) -> None:
    if record is not None and text not in record.notes:
        record.notes.append(text)


def _padding(node: torch.fx.Node, on_any_device: bool) -> tuple[Padded, MatmulForm] | None:
    """What `node` (a matmul) is padded to, or None when it is left alone."""
    form = MATMULS[node.target]
    out, lhs, rhs = node.meta.get("val"), _val(node.args[form.lhs]), _val(node.args[form.rhs])
    if not all(isinstance(v, FakeTensor) for v in (out, lhs, rhs)):
        return None
    if not (on_any_device or out.device.type == "cuda"):
        return None
    align = ALIGNMENT.get(out.dtype)
    if align is None or lhs.dtype != out.dtype or rhs.dtype != out.dtype:
        return None
    dims = (*lhs.shape[-2:], rhs.shape[-1])
    if not all(type(d) is int for d in (*dims, *out.shape)):
        return None  # symbolic sizes: the padding would not be static
    m, k, n = dims
    padded = tuple(-(-d // align) * align for d in dims)
    if padded == dims or m * k * n * (out.shape[0] if out.dim() == 3 else 1) < MIN_MACS:
        return None
    batch = out.shape[0] if out.dim() == 3 else None
    restrides = padded[2] != n or (batch is not None and padded[0] != m)
    if restrides and _reads_strides(node):
        return None
    op = node.target.__name__.split(".")[0]
    return Padded(op, dims, batch, out.dtype, padded), form


def _reads_strides(node: torch.fx.Node) -> bool:
    """Whether an op of READS_STRIDES reads `node`, directly or through views."""
    return any(
        u.target in READS_STRIDES or (u.target in VIEWS and _reads_strides(u)) for u in node.users
    )


def _val(a: Any) -> Any:
    return a.meta.get("val") if isinstance(a, torch.fx.Node) else None


def _copy(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A new graph module with a copy of `gm`'s graph (node names and metadata kept)."""
    graph = torch.fx.Graph()
    graph._codegen = gm.graph._codegen
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    result, output = graph.graph_copy(gm.graph, env, return_output_node=True)
    graph.output(result).meta = dict(output.meta)
    return graph_module(gm, graph)


class _Rewriter:
    """Rewrites matmuls of one graph, sharing the padded copy of each tensor between them."""

    def __init__(self, graph: torch.fx.Graph, origins: dict[str, tuple[str, ...]]):
        self.graph = graph
        self.origins = origins
        self.padded: dict[tuple[torch.fx.Node, tuple[int, ...]], torch.fx.Node] = {}
        self.restrided: set[torch.fx.Node] = set()  # slices with other strides than eager's
        self.unpadded: dict[torch.fx.Node, torch.fx.Node] = {}  # a padded copy's view -> x

    def rewrite(self, node: torch.fx.Node, spec: Padded, form: MatmulForm) -> Padded:
        (m, k, n), (mp, kp, np_) = spec.sizes, spec.padded
        rank = node.meta["val"].dim()
        origin = self.origins.get(node.name, ())
        args = list(node.args)
        with self.graph.inserting_before(node):
            args[form.lhs] = self._pad(
                node.args[form.lhs], {rank - 2: mp - m, rank - 1: kp - k}, origin
            )
            args[form.rhs] = self._pad(
                node.args[form.rhs], {rank - 2: kp - k, rank - 1: np_ - n}, origin
            )
            if form.bias is not None:
                args[form.bias] = self._pad_bias(
                    node.args[form.bias], rank, (m, n), (mp, np_), origin
                )
            result = self._call(node.target, tuple(args), dict(node.kwargs), node, origin)
            for dim, (size, full) in enumerate(zip((m, n), (mp, np_)), start=rank - 2):
                if size != full:
                    result = self._call(aten.slice.Tensor, (result, dim, 0, size), {}, node, origin)
        if tuple(result.meta["val"].stride()) != tuple(node.meta["val"].stride()):
            self.restrided.add(result)
        node.replace_all_uses_with(result)
        self.graph.erase_node(node)
        return spec

    def _pad_bias(
        self, bias: Any, rank: int, sizes: tuple[int, int], full: tuple[int, int], origin: tuple
    ) -> Any:
        """A bias broadcast to the result, padded where it has the result's M or N."""
        val = _val(bias)
        if not isinstance(val, torch.Tensor):
            return bias  # a number
        extra = {}
        for dim, size, target in zip((rank - 2, rank - 1), sizes, full):
            own = dim - (rank - val.dim())
            if own >= 0 and val.shape[own] == size and size != 1:
                extra[own] = target - size
        return self._pad(bias, extra, origin)

    def _pad(self, x: torch.fx.Node, extra: dict[int, int], origin: tuple) -> torch.fx.Node:
        """`x` with `extra[d]` zeros after its end along each dim d; one node per tensor and
        padding, a permutation padded before it is applied."""
        extra = {d: e for d, e in extra.items() if e}
        if not extra:
            return x
        x = self.unpadded.get(x, x)
        rank = x.meta["val"].dim()
        key = (x, tuple(extra.get(d, 0) for d in range(rank)))
        if key in self.padded:
            return self.padded[key]
        if x.target is aten.permute.default:
            source, perm = x.args
            perm = [p % rank for p in perm]
            inner = self._pad(source, {perm[d]: e for d, e in extra.items()}, origin)
            out = self._call(aten.permute.default, (inner, perm), {}, x, origin)
        else:
            widths: list[int] = []
            for d in range(rank - 1, min(extra) - 1, -1):  # constant_pad_nd: last dim first
                widths += [0, extra.get(d, 0)]
            computed = x.op == "call_function" and x.target not in VIEWS
            # a computed tensor's copy right after it, where all its readers can read it
            where = self.graph.inserting_before(x.next) if computed else contextlib.nullcontext()
            with where:
                out = self._call(aten.constant_pad_nd.default, (x, widths, 0.0), {}, x, origin)
            if computed:
                self._read_padded(x, out, extra, origin)
        self.padded[key] = out
        return out

    def _read_padded(
        self, x: torch.fx.Node, padded: torch.fx.Node, extra: dict[int, int], origin: tuple
    ) -> None:
        """The other readers of `x`, a computed tensor, read it from its padded copy: then it
        is computed once, into the padded buffer (an autocast's bfloat16 copy of an LM-head
        weight is saved for the backward as well as multiplied)."""
        readers = [u for u in x.users if u is not padded]
        if not readers or _reads_strides(x):
            return
        view = padded
        with self.graph.inserting_before(padded.next):
            for d in sorted(extra):
                view = self._call(
                    aten.slice.Tensor, (view, d, 0, x.meta["val"].shape[d]), {}, x, origin
                )
        for u in readers:
            u.replace_input_with(x, view)
        self.unpadded[view] = x
        if tuple(view.meta["val"].stride()) != tuple(x.meta["val"].stride()):
            self.restrided.add(view)

    def restore_output_strides(self, internal_from: int | None) -> None:
        """Graph outputs that are views of a sliced matmul with other strides than eager's
        become copies with eager's strides (`clone` keeps the order of the strides it is
        given; the values' metadata still holds eager's), except a training forward's
        internal outputs."""
        output = next(n for n in self.graph.nodes if n.op == "output")
        flat, spec = torch.utils._pytree.tree_flatten(output.args[0])
        end = len(flat) if internal_from is None else internal_from
        copies: dict[torch.fx.Node, torch.fx.Node] = {}
        for i, a in enumerate(flat[:end]):
            if isinstance(a, torch.fx.Node) and self._restrided(a):
                if a not in copies:
                    with self.graph.inserting_before(output):
                        copies[a] = self._call(aten.clone.default, (a,), {}, a, ())
                flat[i] = copies[a]
        output.args = (torch.utils._pytree.tree_unflatten(flat, spec),)

    def _restrided(self, node: torch.fx.Node) -> bool:
        while node not in self.restrided:
            if node.op != "call_function" or node.target not in VIEWS:
                return False
            node = node.args[0]
        return True

    def _call(
        self, op: Callable, args: tuple, kwargs: dict, like: torch.fx.Node, origin: tuple
    ) -> torch.fx.Node:
        """A new node `op(*args)` with its fake value, the metadata of `like` (its source
        line), and the FX origins of the matmul it serves (`origin`, or `like`'s own)."""
        node = self.graph.call_function(op, args, kwargs)
        node.meta = {k: v for k, v in like.meta.items() if k != "val"}
        node.meta["val"] = self._fake(op, args, kwargs)
        self.origins[node.name] = origin or self.origins.get(like.name, ())
        return node

    def _fake(self, op: Callable, args: tuple, kwargs: dict) -> Any:
        vals = torch.fx.node.map_arg((args, kwargs), lambda n: n.meta["val"])
        mode = next(
            v.fake_mode for v in torch.utils._pytree.tree_leaves(vals) if isinstance(v, FakeTensor)
        )
        with mode:
            return op(*vals[0], **vals[1])
