"""The partitioner: the joint graph -> a forward graph and a backward graph.

The forward graph computes the outputs, the new values of mutated inputs, and the tensors
it *saves* for the backward. The backward graph starts from those saved tensors and the
tangents; whatever else it needs of the forward it *recomputes*.

Which tensors to save is a minimum cut (the rule Inductor's partitioner also follows, in
our own small form). Every forward node the backward needs is split into `in -> out` with
the capacity of saving it; the source feeds the inputs and every node that must not be
recomputed; the sink takes the backward's own nodes (those reading a tangent). A cut must
then cross an `in -> out` edge on every path from the inputs to the backward: those nodes
are saved, and the nodes between a saved one and the backward are recomputed. The cut is
as small as possible in bytes, so the backward recomputes cheap pointwise and view chains
(a BatchNorm's normalisation and ReLU from the convolution output, two tiny statistics
and the weights) instead of keeping each of their big results alive.

The rules, in one place:
* recomputable: pointwise ops, views, dtype casts and copies, and constants (full, iota);
  never random ops (recomputing would draw different numbers), reductions, matmuls,
  convolutions or anything else that runs as a kernel of its own;
* the capacity of saving a tensor is its size in bytes, halved for the graph's inputs and
  outputs (the caller keeps them alive anyway, so saving them costs the backward a read,
  not memory), and raised by at most 0.1% the earlier the node is, so that of two equal
  sizes the later one is kept; an input the forward mutates cannot be saved (the backward
  would see the new value), nor can a non-tensor value.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field

import torch
import torch.fx

from compiler.aot.joint import JointGraph
from compiler.aot.mincut import CutError, FlowNetwork
from compiler.aot.trace import AotGraph
from compiler.support.lazy_graphs import graph_module

aten = torch.ops.aten
prims = torch.ops.prims

_CHEAP = {
    aten.full.default, aten.scalar_tensor.default, prims.iota.default, aten.arange.start_step,
    aten.zeros.default, aten.ones.default, aten._to_copy.default, aten.clone.default,
    prims.div.default, prims.convert_element_type.default,
}  # fmt: skip


class PartitionError(RuntimeError):
    """The joint graph cannot be split (the caller runs the graph eagerly, saying why)."""


@dataclass
class SavedTensor:
    """One tensor the forward keeps for the backward."""

    name: str  # its node in the joint (and forward) graph
    size: tuple[int, ...]
    dtype: torch.dtype
    nbytes: int
    origins: tuple[str, ...] = ()  # the user's FX nodes it came from
    is_input: bool = False


@dataclass
class Partition:
    # primals -> (outputs..., mutated inputs' new values..., saved intermediates...)
    forward: AotGraph
    # (saved..., tangents...) -> one gradient or None per input that requires grad
    backward: AotGraph
    saved: list[SavedTensor]
    recomputed: list[str] = field(default_factory=list)  # joint nodes the backward recomputes
    num_outputs: int = 0
    mutated: list[int] = field(default_factory=list)  # input positions, in output order
    # per saved tensor: the input position it is (taken from the call's arguments, not
    # returned by the forward), or None for an intermediate the forward returns
    saved_inputs: list[int | None] = field(default_factory=list)


def partition(joint: JointGraph) -> Partition:
    graph = joint.aot.gm.graph
    nodes = list(graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    primals, tangents = placeholders[: joint.num_inputs], placeholders[joint.num_inputs :]
    output = nodes[-1]
    results = list(output.args[0])
    num_outputs = len(joint.tensor_outputs)
    fw_outputs, grads = results[:num_outputs], results[num_outputs:]
    copies = [n for n in nodes if n.target is aten.copy_.default and n.args[0] in primals]
    mutation_values = [c.args[1] for c in copies]

    from_tangent = _descendants(tangents)
    bw_needed = _ancestors([g for g in grads if isinstance(g, torch.fx.Node)])
    required = {n for n in bw_needed if n in from_tangent}
    required |= {g for g in grads if isinstance(g, torch.fx.Node)}
    candidates = [n for n in nodes if n in bw_needed and n not in required]
    cheap_to_keep = set(primals) | {o for o in fw_outputs if isinstance(o, torch.fx.Node)}
    unsaveable = {c.args[0] for c in copies}

    saved_nodes = _cut(candidates, required, set(primals), cheap_to_keep, unsaveable)
    saved_nodes = [n for n in nodes if n in saved_nodes]  # graph order

    kept = [n for n in saved_nodes if n not in primals]
    fw_results = [*fw_outputs, *mutation_values, *kept]
    gm = joint.aot.gm
    forward = _subgraph(gm, primals, fw_results, stop=set())
    backward = _subgraph(gm, [*saved_nodes, *tangents], grads, stop={*saved_nodes, *tangents})
    recomputed = [
        n.name
        for n in backward[1]
        if n.op != "placeholder" and n not in from_tangent and n not in saved_nodes
    ]
    origins, lines = joint.aot.origins, joint.aot.source_lines
    saved = [
        SavedTensor(
            n.name,
            tuple(n.meta["val"].shape),
            n.meta["val"].dtype,
            int(_nbytes(n)),
            origins.get(n.name, ()),
            n in primals,
        )
        for n in saved_nodes
    ]
    mutated = [primals.index(c.args[0]) for c in copies]
    return Partition(
        AotGraph(forward[0], origins, lines, internal_from=num_outputs),
        AotGraph(backward[0], origins, lines, gradients_out=True),
        saved,
        recomputed,
        num_outputs,
        mutated,
        [primals.index(n) if n in primals else None for n in saved_nodes],
    )


def recomputable(node: torch.fx.Node) -> bool:
    if node.op == "get_attr":  # a constant: nothing to compute
        return True
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        return recomputable(node.args[0])
    op = node.target
    if not isinstance(op, torch._ops.OpOverload):
        return False
    if torch.Tag.nondeterministic_seeded in op.tags:
        return False
    if torch.Tag.pointwise in op.tags or op in _CHEAP:
        return True
    returns = op._schema.returns
    return len(returns) == 1 and returns[0].alias_info is not None  # a view


def _cut(
    candidates: list[torch.fx.Node],
    required: set[torch.fx.Node],
    primals: set[torch.fx.Node],
    cheap_to_keep: set[torch.fx.Node],
    unsaveable: set[torch.fx.Node],
) -> set[torch.fx.Node]:
    """The forward nodes to save: a minimum cut between the inputs and the backward."""
    if not candidates:
        return set()
    net = FlowNetwork()
    members = set(candidates)
    order = {n: k for k, n in enumerate(candidates)}
    for n in candidates:
        if n in primals or not recomputable(n):
            net.add_edge("source", f"{n.name}:in", math.inf)
        weight = _nbytes(n) if n not in unsaveable else math.inf
        if n in cheap_to_keep:
            weight /= 2
        # Between equal sizes keep the later tensor: the backward then recomputes less (and
        # what feeds its matmuls, say tanh's output, is already materialised).
        weight *= 1 + 1e-3 * (1 - order[n] / len(order))
        net.add_edge(f"{n.name}:in", f"{n.name}:out", weight)
        for user in n.users:
            if user in members:
                net.add_edge(f"{n.name}:out", f"{user.name}:in", math.inf)
            elif user in required:
                net.add_edge(f"{n.name}:out", "sink", math.inf)
    net.node("sink")
    try:
        source_side = net.min_cut("source", "sink")
    except CutError:
        raise PartitionError(
            "the backward needs an input's value from before the graph mutated it"
        ) from None
    return {
        n
        for n in candidates
        if f"{n.name}:in" in source_side and f"{n.name}:out" not in source_side
    }


def _nbytes(node: torch.fx.Node) -> float:
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return math.inf
    return float(val.numel() * val.element_size())


def _descendants(roots: list[torch.fx.Node]) -> set[torch.fx.Node]:
    seen: set[torch.fx.Node] = set()
    stack = list(roots)
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            stack.extend(n.users)
    return seen


def _ancestors(roots: list[torch.fx.Node], stop: set[torch.fx.Node] = frozenset()) -> set:
    seen: set[torch.fx.Node] = set()
    stack = list(roots)
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n not in stop:
            stack.extend(n.all_input_nodes)
    return seen


def _subgraph(
    root: torch.fx.GraphModule, inputs: list[torch.fx.Node], results: list, stop: set
) -> tuple[torch.fx.GraphModule, list[torch.fx.Node]]:
    """A graph with placeholders `inputs` computing `results` (nodes or None) from them:
    every needed node of the joint graph, in its order, copied with its name and meta."""
    wanted = _ancestors([r for r in results if isinstance(r, torch.fx.Node)], stop)
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in inputs:
        env[node] = graph.placeholder(node.name)
        env[node].meta = dict(node.meta)
    order = [n for n in root.graph.nodes if n in wanted]
    for node in order:
        if node in env:
            continue
        if node.op == "placeholder":
            raise PartitionError(f"{node.name} is needed but is not an input of this graph")
        env[node] = graph.node_copy(node, lambda a: env[a])
    graph.output(tuple(env[r] if isinstance(r, torch.fx.Node) else r for r in results))
    graph.lint()
    return graph_module(root, graph), order
