"""Gradient buckets of a traced graph, as DistributedDataParallel's reducer forms them.

DDP all-reduces gradients bucket by bucket: parameters are grouped, in reverse order of their
use in the forward, into buckets of about `bucket_cap_mb` (the first one smaller, so that the
first all-reduce starts soon), and a bucket's all-reduce starts as soon as the last of its
gradients is accumulated. One compiled graph with one backward produces every gradient at its
very end, so nothing could overlap. The graph is therefore cut where a bucket fills: walking
the nodes backwards (the order the backward runs them), each node joins the current bucket,
with the parameters it reads the first time the walk meets them; once the bucket holds its
cap, the next node starts a new one. Each part is compiled on its own, with its own backward,
so a later part's backward finishes, and hands its gradients to DDP's hooks, before the
earlier parts' backward runs (torch's DDPOptimizer splits the same way).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch
import torch.fx


@dataclass
class Bucket:
    """The nodes of one part of the split graph, and the parameters whose gradients its
    backward produces."""

    nodes: list[torch.fx.Node] = field(default_factory=list)
    params: list[torch.fx.Node] = field(default_factory=list)  # placeholders, in walk order
    nbytes: int = 0


@dataclass(frozen=True)
class BucketCaps:
    """DDP's bucket sizes in bytes: the first bucket's and every later one's."""

    first: int
    rest: int

    def cap(self, index: int) -> int:
        return self.first if index == 0 else self.rest


def assign_buckets(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[object],
    param_ids: set[int],
    caps: BucketCaps,
) -> list[Bucket]:
    """The graph's nodes in buckets, in graph order. `param_ids` are the ids of the parameters
    DDP reduces; a placeholder is one of them when its example input is."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    reduced = {
        node: _nbytes(value)
        for node, value in zip(placeholders, example_inputs)
        if id(value) in param_ids
    }
    walk: list[Bucket] = [Bucket()]  # the walk's buckets, last part of the graph first
    seen: set[torch.fx.Node] = set()
    for node in reversed(gm.graph.nodes):
        if node.op in ("placeholder", "output"):
            continue
        current = walk[-1]
        if current.nbytes >= caps.cap(len(walk) - 1) and _feeds_later_part(current):
            current = Bucket()
            walk.append(current)
        current.nodes.append(node)
        for arg in node.all_input_nodes:
            if arg in reduced and arg not in seen:
                seen.add(arg)
                current.params.append(arg)
                current.nbytes += reduced[arg]
    if len(walk) > 1 and not walk[-1].params:
        # the graph's first nodes read no parameter: a part of their own would only add a call
        walk[-2].nodes.extend(walk.pop().nodes)
    buckets = list(reversed(walk))
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    for bucket in buckets:
        bucket.nodes.sort(key=order.__getitem__)
    return buckets


def _feeds_later_part(bucket: Bucket) -> bool:
    """A bucket may be closed only once one of its nodes is used outside it (by the graph's
    output or by the part after it): a part whose values nobody reads would be dead code."""
    inside = set(bucket.nodes)
    return any(user not in inside for node in bucket.nodes for user in node.users)


def _nbytes(value: object) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    return 0
