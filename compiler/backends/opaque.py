"""Graphs with opaque calls, for backends that compile what they trace.

A function passed to `compiler.allow_in_graph` is one `call_function` node of the tracer's
graph (its meta has `opaque`). Tracing through it at the aten level would run its Python once,
on fake tensors, and keep only the torch ops it happened to call: anything else it does (a
counter, a print, a branch on a global) would be lost. So the graph is split around each
opaque node: the runs of ordinary nodes between them are compiled by the backend at their
first call (with the inputs they get), and each opaque node runs as the Python call it is, on
the real tensors, like an extern kernel. The graph's record lists each opaque call among its
kernels (language "extern") with a note.
"""

from __future__ import annotations

import contextlib
import operator
from typing import Any, Callable, Sequence

import torch
import torch.fx
from torch.fx.passes.split_module import split_module

from compiler.aot.trace import source_line_of
from compiler.backends.options import BackendOptions, backend_options, current_options
from compiler.records import GraphRecord, KernelRecord, compiling_graph, current_graph

CompileStatic = Callable[[torch.fx.GraphModule, list], Callable]


def has_opaque(gm: torch.fx.GraphModule) -> bool:
    return any(n.meta.get("opaque") for n in gm.graph.nodes)


def split_at_opaque(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any], compile_static: CompileStatic
) -> Callable:
    """A callable running `gm`: its ordinary parts compiled by `compile_static(part, inputs)`
    at their first call, its opaque calls run on the real tensors."""
    parts, opaque = _partition(gm)
    split = split_module(gm, gm, lambda n: parts[n], keep_original_order=True)
    record = current_graph()
    options = current_options()
    for name, sub in list(split.named_children()):
        if int(name.rsplit("_", 1)[1]) not in opaque:
            setattr(split, name, _CompiledPart(sub, compile_static, record, options))
    if record is not None:
        _describe(gm, record)
    return split.forward


def _partition(gm: torch.fx.GraphModule) -> tuple[dict[torch.fx.Node, int], set[int]]:
    """A partition number per node, in graph order: each opaque node (with the getitems that
    unpack its result) alone, the nodes between them together."""
    parts: dict[torch.fx.Node, int] = {}
    opaque: set[int] = set()
    current = 0
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output"):
            continue
        if node.meta.get("opaque"):
            current += 1
            opaque.add(current)
            parts[node] = current
            current += 1
        elif (
            node.op == "call_function"
            and node.target is operator.getitem
            and parts.get(node.args[0]) in opaque
        ):
            parts[node] = parts[node.args[0]]
        else:
            parts[node] = current
    return parts, opaque


class _CompiledPart(torch.nn.Module):
    """One run of ordinary nodes: compiled at its first call, with the inputs it gets."""

    def __init__(
        self,
        gm: torch.fx.GraphModule,
        compile_static: CompileStatic,
        record: GraphRecord | None,
        options: BackendOptions,
    ) -> None:
        super().__init__()
        self.gm = gm
        self.compile_static = compile_static
        self.record = record
        self.options = options
        self.compiled: Callable | None = None

    def forward(self, *args: Any) -> Any:
        if self.compiled is None:
            record_ctx = (
                compiling_graph(self.record)
                if self.record is not None
                else contextlib.nullcontext()
            )
            opts = self.options
            with record_ctx, backend_options(opts.mode, opts.options, opts.fullgraph):
                self.compiled = self.compile_static(self.gm, list(args))
        return self.compiled(*args)


def _describe(gm: torch.fx.GraphModule, record: GraphRecord) -> None:
    known = {k.name for k in record.kernels}
    for node in gm.graph.nodes:
        if not node.meta.get("opaque") or f"extern_python_{node.name}" in known:
            continue
        name = getattr(node.target, "__qualname__", None) or str(node.target)
        args = ", ".join(map(str, node.args))
        line = source_line_of(node)
        record.kernels.append(
            KernelRecord(
                name=f"extern_python_{node.name}",
                language="extern",
                source=(
                    f"# compiler.allow_in_graph: {name} runs as a Python call on the real tensors\n"
                    f"{node.name} = {name}({args})\n"
                ),
                fused_nodes=[node.name],
                source_lines=[line] if line is not None else [],
            )
        )
        note = (
            f"allow_in_graph: {name} ({node.name}) runs as a Python call on the real tensors; "
            "the graph's other parts are compiled around it"
        )
        if note not in record.notes:
            record.notes.append(note)
