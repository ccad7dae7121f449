"""Torch-level FX graph -> functional aten graph.

`make_fx` re-traces the graph through the dispatcher under FakeTensorMode, applying our
decomposition table; in-place ops (`relu_`) become their functional forms (remove_mutations,
or `functionalize` where that cannot).
Every aten node remembers the user-graph node it came from (`from_node`), so kernels can name
the FX nodes and source lines fused into them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

import torch
import torch.fx
import torch.fx.traceback as fx_traceback
from torch.func import functionalize
from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing, make_fx

from compiler.aot.decompositions import decomposition_table
from compiler.aot.inplace import remove_mutations
from compiler.aot.outputs import Outputs, describe_outputs, run_fake
from compiler.aot.replay import trace_by_kind
from compiler.records import SourceLine
from compiler.support.autocast import preserved
from compiler.support.lazy_graphs import lazy_graph_modules


@dataclass
class AotGraph:
    gm: torch.fx.GraphModule  # the functional aten graph; placeholders are the inputs, in order
    origins: dict[str, tuple[str, ...]] = field(default_factory=dict)  # aten node -> FX nodes
    source_lines: dict[str, SourceLine] = field(default_factory=dict)  # FX node -> user line
    # A training forward: its outputs from this position on are read by nothing but the
    # backward and this call's own write-back, so a CUDA graph may return its own memory.
    internal_from: int | None = None
    # A training backward: its outputs are gradients for autograd's engine, which a CUDA
    # graph hands out in its own memory (runtime/cudagraphs.py moves any still held out of
    # it before the next replay).
    gradients_out: bool = False
    # An inference graph's outputs as eager returns them (structure, views of inputs):
    # what its compiled code's flat outputs are turned back into (aot/outputs.py).
    outputs: Outputs | None = None


def needs_autograd(gm: torch.fx.GraphModule, example_inputs: Sequence) -> bool:
    """True when eager would record autograd history for this graph's outputs."""
    if not torch.is_grad_enabled():
        return False
    tensors = [t for t in example_inputs if isinstance(t, torch.Tensor)]
    tensors += list(gm.parameters())
    return any(t.requires_grad for t in tensors)


def trace_forward(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[torch.Tensor],
    training: bool = False,
    rename_mutations: bool = True,
) -> AotGraph:
    """The functional aten graph of `gm` for inputs shaped like `example_inputs`
    (`training`: `gm` is a joint forward+backward graph; see decomposition_table).

    One trace records the ops with their in-place updates, which remove_mutations
    (compiler/aot/inplace.py) turns into out-of-place ops and trailing write-backs of the
    inputs: the ops functionalize gives, without its per-op work (an optimizer step updates
    hundreds of inputs). Where a mutation is more than a renaming (a view written in place,
    ...), or with `rename_mutations` off, the graph is traced through functionalize."""

    described: list[Outputs] = []

    def run(*args):
        return torch.fx.Interpreter(gm).run(*args)

    def run_described(*args):
        # The trace's fake values say which outputs alias inputs (not functionalize's
        # wrappers: their views of a strided input have other strides and offsets).
        out = run(*args)
        # Outside the trace: with symbolic sizes, the description's size arithmetic would
        # be recorded as graph nodes (and make_fx fails on some of them)
        with disable_proxy_modes_tracing():
            described.append(describe_outputs(args, out))
        return out

    def trace(g: torch.fx.GraphModule) -> torch.fx.GraphModule:
        if g is gm and not training:
            return _trace(run_described, table, example_inputs)
        return _trace(lambda *args: torch.fx.Interpreter(g).run(*args), table, example_inputs)

    # make_fx records `from_node` only for nodes whose meta is non-empty
    for node in gm.graph.nodes:
        node.meta.setdefault("compiler_origin", node.name)

    table = decomposition_table()
    aten_gm = None
    if rename_mutations:
        # an optimizer step: one trace per kind of parameter (compiler/aot/replay.py)
        traced = None if training else trace_by_kind(gm, example_inputs, trace)
        aten_gm = remove_mutations(traced if traced is not None else trace(gm), table)
    if aten_gm is None:
        aten_gm = _trace(functionalize(run), table, example_inputs)
        # functional: unused results (batch norm's stats) go; the code is regenerated only then
        if aten_gm.graph.eliminate_dead_code():
            aten_gm.recompile()
    if _writes_intermediates(aten_gm):
        # In-place ops of Python decompositions (margin_ranking_loss's clamp_min_), which run
        # below functionalize and which remove_mutations leaves when the table decomposes
        # their out-of-place forms: renamed to those forms, then traced again to decompose
        # them. Where that fails the graph keeps them, and the lowering refuses it.
        renamed = remove_mutations(aten_gm, {})
        if renamed is not None:
            retraced = trace(renamed)
            aten_gm = remove_mutations(retraced, table) or renamed

    lines = {n.name: line for n in gm.graph.nodes if (line := source_line_of(n)) is not None}
    outputs = None
    if not training:  # not traced whole: the tracer's values, or a fake run of the graph
        outputs = described[0] if described else describe_outputs(*run_fake(gm, example_inputs))
    return AotGraph(aten_gm, origins_of(aten_gm, gm), lines, outputs=outputs)


def _writes_intermediates(gm: torch.fx.GraphModule) -> bool:
    """An in-place op other than the write-back of a graph input (`copy_` into it)."""
    for node in gm.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        if not node.target._schema.is_mutable:
            continue
        into_input = isinstance(node.args[0], torch.fx.Node) and node.args[0].op == "placeholder"
        if not (node.target is torch.ops.aten.copy_.default and into_input):
            return True
    return False


def origins_of(aten_gm: torch.fx.GraphModule, gm: torch.fx.GraphModule) -> dict[str, tuple]:
    """aten node -> the user FX nodes of `gm` it came from (their names in `from_node`)."""
    user_nodes = {n.name for n in gm.graph.nodes}
    origins = {}
    for node in aten_gm.graph.nodes:
        names = dict.fromkeys(
            getattr(src, "name", str(src)) for src in node.meta.get("from_node", ())
        )
        origins[node.name] = tuple(n for n in names if n in user_nodes)
    return origins


def _trace(fn, table: dict, example_inputs: Sequence[torch.Tensor]) -> torch.fx.GraphModule:
    with fx_traceback.preserve_node_meta(), torch.no_grad(), lazy_graph_modules(), preserved():
        return make_fx(
            fn,
            decomposition_table=table,
            tracing_mode="fake",
            _allow_non_fake_inputs=True,  # parameters stay real: they become constants
        )(*example_inputs)


_FRAME = re.compile(
    r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>[^\n]+)\n\s*(?P<text>[^\n]*)'
)


def source_line_of(node: torch.fx.Node) -> SourceLine | None:
    """The user line an FX node came from: the tracer's SourceLine, or the last frame of a
    `stack_trace` (what torch.fx.symbolic_trace and make_fx record)."""
    line = node.meta.get("source_line")
    if isinstance(line, SourceLine):
        return line
    trace = node.meta.get("stack_trace")
    if isinstance(trace, str):
        frames = list(_FRAME.finditer(trace))
        if frames:
            m = frames[-1]
            return SourceLine(m["file"], int(m["line"]), m["text"], m["fn"].strip())
    return None


def static_placeholders(gm: torch.fx.GraphModule) -> bool:
    """Whether every input of `gm` was traced with a known, static shape."""
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) or not all(type(d) is int for d in val.shape):
            return False
    return True
