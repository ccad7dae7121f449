"""The backend under DistributedDataParallel: the graph split at gradient-bucket boundaries
(buckets.py), each part compiled by the user's backend on its own, with its own backward.

Parts compile at their first call, with the tensors they get (the split graph passes each
part the values the parts before it computed). Each part's compile leaves its own record
(aot graphs, partition) in the graph's `buckets`; its kernels, notes and stage times go to
the graph's record with the others', so the inspector's kernel list stays complete.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Callable, Sequence

import torch
import torch.fx
from torch.fx.passes.split_module import split_module

from compiler import config
from compiler.backends.options import BackendOptions, backend_options, current_options
from compiler.distributed.buckets import Bucket, BucketCaps, assign_buckets
from compiler.records import (
    BucketRecord,
    CompilerWarning,
    GraphRecord,
    compiling_graph,
    current_graph,
)
from compiler.support.lazy_graphs import graph_code

Backend = Callable[[torch.fx.GraphModule, Sequence[Any]], Callable]


def bucketed(backend: Backend, param_ids: Callable[[], set[int]], caps: BucketCaps) -> Backend:
    """`backend`, compiling each gradient bucket's part of a graph separately. `param_ids`
    gives the ids of the parameters DDP reduces, read when a graph is compiled."""

    def compile_split(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable:
        buckets = assign_buckets(gm, example_inputs, param_ids(), caps)
        record = current_graph()
        if not any(b.params for b in buckets):
            return backend(gm, example_inputs)  # no gradient of DDP's comes from this graph
        if len(buckets) == 1:
            if record is not None:
                record.buckets = [_bucket_record(gm, buckets, 0, caps, None)]
                record.notes.append(
                    f"DDP: one gradient bucket ({_size(buckets[0].nbytes)} of parameters, "
                    f"cap {_size(caps.first)}): the graph is not split"
                )
            return backend(gm, example_inputs)
        part_of = {node: i for i, b in enumerate(buckets) for node in b.nodes}
        split = _split(gm, part_of)
        options = current_options()
        children = []
        for i in range(len(buckets)):
            name = f"submod_{i}"
            sub = getattr(split, name)
            child = _child_record(sub, record)
            children.append(child)
            setattr(split, name, _LazyPart(sub, backend, child, options))
        if record is not None:
            record.buckets = [
                _bucket_record(gm, buckets, i, caps, child) for i, child in enumerate(children)
            ]
            record.notes.append(
                f"DDP: split into {len(buckets)} graphs at gradient-bucket boundaries "
                f"(cap {_size(caps.rest)}, first bucket {_size(caps.first)}), so each bucket's "
                "all-reduce starts while the backward of the graphs before it runs"
            )
        return split.forward

    compile_split.__name__ = getattr(backend, "__name__", "backend")
    return compile_split


def _split(gm: torch.fx.GraphModule, part_of: dict[torch.fx.Node, int]) -> torch.fx.GraphModule:
    """torch's split_module (parts `submod_<i>`). It looks for a size placeholder binding
    each symbolic size it meets in an example value, which the tracer's dynamic graphs need
    not have (a symbolic size is read from the tensor input that has it,
    compiler/backends/per_size.py): it is handed the graph without example values, and the
    parts get them back by node name (split_module keeps the names)."""
    values = {
        n.name: n.meta.pop("example_value") for n in gm.graph.nodes if "example_value" in n.meta
    }
    try:
        split = split_module(gm, None, part_of.__getitem__, keep_original_order=True)
    finally:
        for node in gm.graph.nodes:
            if node.name in values:
                node.meta["example_value"] = values[node.name]
    for part in split.children():
        for node in part.graph.nodes:
            if node.name in values and node.op != "output":
                node.meta["example_value"] = values[node.name]
    return split


class _LazyPart(torch.nn.Module):
    """One bucket's part: compiled by the backend at its first call, into its own record."""

    def __init__(
        self,
        gm: torch.fx.GraphModule,
        backend: Backend,
        record: GraphRecord | None,
        options: BackendOptions,
    ) -> None:
        super().__init__()
        self.gm, self.backend, self.record, self.options = gm, backend, record, options
        self.compiled: Callable | None = None

    def forward(self, *args: Any) -> Any:
        if self.compiled is None:
            self.compiled = self._compile(list(args))
        return self.compiled(*args)

    def _compile(self, args: list) -> Callable:
        recording = (
            compiling_graph(self.record) if self.record is not None else contextlib.nullcontext()
        )
        opts = self.options
        try:
            with recording, backend_options(opts.mode, opts.options, opts.fullgraph):
                compiled = self.backend(self.gm, args)
        except Exception as exc:
            if opts.fullgraph or config.strict():
                raise
            # the part runs as captured: still a part of its own, so its bucket's gradients
            # still reach DDP before the backward of the parts before it
            reason = f"{type(exc).__name__}: {exc}".strip()
            if self.record is not None:
                self.record.fallback = reason
            warnings.warn(
                f"compiler: a DDP bucket's part of a graph runs eagerly because the backend "
                f"failed ({reason})",
                CompilerWarning,
                stacklevel=3,
            )
            return self.gm.forward
        # The tracer's guards pin the whole graph's inputs, and so every part's.
        guarded = getattr(compiled, "for_guarded_inputs", None)
        return guarded(args) if guarded is not None else compiled


def _child_record(gm: torch.fx.GraphModule, parent: GraphRecord | None) -> GraphRecord | None:
    if parent is None:
        return None
    child = GraphRecord(gm, graph_code(gm), len(gm.graph.nodes), backend=parent.backend)
    # one list of kernels, notes and stage times for the whole graph (see the module's doc)
    child.kernels, child.notes, child.stage_times = (
        parent.kernels,
        parent.notes,
        parent.stage_times,
    )
    return child


def _bucket_record(
    gm: torch.fx.GraphModule,
    buckets: list[Bucket],
    index: int,
    caps: BucketCaps,
    child: GraphRecord | None,
) -> BucketRecord:
    bucket = buckets[index]
    last = index == len(buckets) - 1
    end = bucket.nodes[-1] if bucket.nodes and not last else None
    return BucketRecord(
        index=index,
        params=[str(p.meta.get("source", p.name)) for p in bucket.params],
        param_bytes=bucket.nbytes,
        cap_bytes=caps.first if last else caps.rest,
        nodes=[n.name for n in bucket.nodes],
        split_after=end.name if end is not None else "",
        split_line=end.meta.get("source_line") if end is not None else None,
        graph=child,
    )


def _size(nbytes: int) -> str:
    for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} B"
