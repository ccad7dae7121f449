"""`lower`: an aten graph to loop IR, by the rules of the `LOWERINGS` table
(compiler/lowering/core.py), which the rule modules imported here fill."""

from __future__ import annotations

from typing import Sequence

import torch

from compiler.aot.trace import AotGraph
from compiler.ir.nodes import Graph

# The rule modules register themselves on import.
from compiler.lowering import externs, indexing, pointwise, reductions, views  # noqa: F401
from compiler.lowering.core import LoweringContext


def lower(
    aot: AotGraph,
    example_inputs: Sequence[torch.Tensor],
    channels_last: bool = True,
    welford: bool = False,
    device: torch.device | None = None,
) -> tuple[Graph, list[str]]:
    """Lower the aten graph; returns the IR graph and notes (extern fallbacks).
    `channels_last`: a graph with 2-d convolutions may lay its 4-d tensors out NHWC.
    `welford`: variances become Welford reductions (the emitter must implement them).
    `device`: the device its kernels run on (default: `graph_device` of the inputs)."""
    ctx = LoweringContext(aot)
    ctx.allow_channels_last = channels_last
    ctx.welford = welford
    graph = ctx.run(example_inputs, device)
    notes = list(dict.fromkeys(ctx.notes))
    if ctx.mutated_inputs:
        notes.append(f"inputs mutated in place: {', '.join(ctx.mutated_inputs)}")
    return graph, notes
