"""make_fx once per kind of repeated computation: an optimizer step's graph traced in
a fraction of the time.

An optimizer step's FX graph is one small computation per parameter (Adam: 18 FX nodes,
31 aten ops), repeated for every parameter, each reading only its own tensors and inputs
every one only reads (the lr tensor). make_fx pays its per-op dispatch (fake tensors,
proxies, decompositions) for every copy, though parameters of one shape give the same
aten ops: resnet18's 62 parameters have 15 kinds. Here the graph's independent parts
(sharing nothing but inputs they only read) are grouped by their ops and their inputs'
metadata; make_fx traces the first part of each kind, and the others get a copy of its
aten nodes on their own inputs (trace_forward of resnet18's Adam graph: 0.76 -> 0.38 s of
CPU on a CI-class machine).

The result is the graph one make_fx trace of the whole graph gives: the same nodes in the
same order, with the same names (created in the same order from the same name bases), the
same `from_node` and `stack_trace` (those of each part's own FX nodes), and metadata
(`val`) objects shared by the copies of one node, which only the lowering reads (for their
shapes, strides and dtypes). Anything that could make a copy differ from its own trace
(aliased inputs, an input written by one part and read by another, non-tensor inputs,
a part reading no input, get_attr nodes, metadata make_fx would carry from FX nodes) makes
`trace_by_kind` return None, and the caller traces the whole graph.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
import torch.fx
from torch.fx.proxy import _COPY_META_FIELDS
from torch.fx.traceback import NodeSource
from torch.multiprocessing.reductions import StorageWeakRef

from compiler.aot.inplace import storage_node
from compiler.support.lazy_graphs import graph_module

# FX node metadata make_fx copies onto the aten nodes it records: a part whose nodes carry
# any (but those make_fx sets itself) could not share its aten nodes' metadata.
_CARRIED = frozenset(_COPY_META_FIELDS) - {"from_node", "original_aten"}
# Constants an FX node's arguments may hold for its part to be compared with others.
_PLAIN = (type(None), bool, int, str, torch.dtype, torch.device, torch.memory_format, torch.layout)


# Python's in-place operators, as the tracer records `x += y` and `x[i] = y`.
_OPERATOR_WRITES = frozenset(
    getattr(operator, name)
    for name in (
        "iadd", "iand", "iconcat", "ifloordiv", "ilshift", "imatmul", "imod", "imul", "ior",
        "ipow", "irshift", "isub", "itruediv", "ixor", "setitem", "delitem",
    )
)  # fmt: skip


class _Unlike(Exception):
    """This graph is not one the traces of its parts can be copied for."""


@dataclass(eq=False)  # parts are told apart by identity
class _Part:
    """One independent part of the FX graph: its nodes, in graph order, and the graph
    inputs it reads, in the order it first reads them."""

    nodes: list[torch.fx.Node] = field(default_factory=list)
    inputs: list[torch.fx.Node] = field(default_factory=list)
    kind: tuple = ()
    traced_as: _Part | None = None  # the part of its kind that make_fx traces; None: itself
    aten: list[torch.fx.Node] = field(default_factory=list)  # its trace's nodes, if traced
    shared: set[int] = field(default_factory=set)  # positions of inputs other parts read too


def trace_by_kind(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence,
    trace: Callable[[torch.fx.GraphModule], torch.fx.GraphModule],
) -> torch.fx.GraphModule | None:
    """What `trace(gm)` (make_fx of running `gm` on `example_inputs`) returns, made by
    tracing one part of each kind (`trace` of a graph holding only those); None where no
    two parts are alike or a copy could differ from a trace (module docstring)."""
    try:
        parts = _parts(gm, example_inputs)
        if all(p.traced_as is None for p in parts):
            return None
        traced = trace(_reduced(gm, parts))
        return _assembled(traced, gm, parts)
    except _Unlike:
        return None


def _parts(gm: torch.fx.GraphModule, example_inputs: Sequence) -> list[_Part]:
    nodes = list(gm.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        raise _Unlike
    if any(n.op not in ("placeholder", "call_function", "call_method", "output") for n in nodes):
        raise _Unlike
    input_keys = {p: _input_key(t) for p, t in zip(placeholders, example_inputs)}
    storages = [StorageWeakRef(t.untyped_storage()) for t in example_inputs]
    if len(set(storages)) != len(storages):
        raise _Unlike  # aliased inputs: one part's writes are another's reads

    # Parts: nodes joined by the values they pass, and by the inputs they write in place
    # (a later read of the input sees the write); inputs only read join nothing.
    compute = [n for n in nodes if n.op in ("call_function", "call_method")]
    written = {
        n.args[0]
        for n in compute
        if n.args and isinstance(n.args[0], torch.fx.Node) and _may_write_first(n)
    }
    root: dict[torch.fx.Node, torch.fx.Node] = {}

    def find(n: torch.fx.Node) -> torch.fx.Node:
        while root[n] is not n:
            root[n] = root[root[n]]
            n = root[n]
        return n

    for node in compute:
        if _CARRIED.intersection(node.meta):
            raise _Unlike
        root[node] = node
        for a in node.all_input_nodes:
            if a.op != "placeholder" or a in written:
                root.setdefault(a, a)
                root[find(a)] = find(node)
    part_of: dict[torch.fx.Node, _Part] = {}
    parts: list[_Part] = []
    by_root: dict[torch.fx.Node, _Part] = {}
    for node in compute:
        part = by_root.get(find(node))
        if part is None:
            part = by_root[find(node)] = _Part()
            parts.append(part)
        elif parts[-1] is not part:
            raise _Unlike  # interleaved with a later part: copies would change the order
        part.nodes.append(node)
        part_of[node] = part

    readers: dict[torch.fx.Node, int] = {}
    by_kind: dict[tuple, _Part] = {}
    returned = {part_of[a] for a in nodes[-1].all_input_nodes if a in part_of}
    for part in parts:
        part.kind = _kind(part, input_keys)
        if not part.inputs:
            # a factory or a switch of global state (autocast's enter and exit nodes): the
            # parts after it may trace differently from those before
            raise _Unlike
        for p in part.inputs:
            readers[p] = readers.get(p, 0) + 1
        first = by_kind.setdefault(part.kind, part)
        # a part whose results the graph returns is traced itself: the output reads them
        if first is not part and part not in returned:
            part.traced_as = first
    shared = {p for p, n in readers.items() if n > 1}
    for part in parts:
        part.shared = {i for i, p in enumerate(part.inputs) if p in shared}
    return parts


def _may_write_first(node: torch.fx.Node) -> bool:
    """Whether an FX node may write its first argument in place, by torch's naming of
    in-place methods and functions (`add_`, `operator.iadd`). Only decides which inputs
    join parts: what the traces write is checked (`_written`)."""
    name = node.target if node.op == "call_method" else getattr(node.target, "__name__", "")
    if not isinstance(name, str):
        return False
    if name.endswith("_") and not name.startswith("_"):
        return True
    return node.target in _OPERATOR_WRITES or "out" in node.kwargs or "inplace" in node.kwargs


def _input_key(t: object) -> tuple:
    if type(t) not in (torch.Tensor, torch.nn.Parameter) or t.layout != torch.strided:
        raise _Unlike  # a number, a subclass: traced as itself
    return (
        type(t), t.shape, t.stride(), t.storage_offset(), t.dtype, t.device, t.requires_grad,
        t.untyped_storage().nbytes(), t.is_conj(), t.is_neg(),
    )  # fmt: skip


def _kind(part: _Part, input_keys: dict) -> tuple:
    """What decides the part's trace: its ops with their arguments (nodes by position,
    constants with their types) and its inputs' metadata."""
    local_inputs: dict[torch.fx.Node, int] = {}
    local: dict[torch.fx.Node, int] = {}

    def arg(a: object) -> object:
        if isinstance(a, torch.fx.Node):
            if a.op == "placeholder":
                return ("input", local_inputs.setdefault(a, len(local_inputs)))
            return ("node", local[a])
        if isinstance(a, (tuple, list)):
            return (type(a), tuple(arg(x) for x in a))
        if isinstance(a, dict):
            return (dict, tuple((k, arg(v)) for k, v in a.items()))
        if isinstance(a, float):
            return (float, repr(a))  # -0.0 is not 0.0, and nan is nan
        if isinstance(a, slice):
            return (slice, arg((a.start, a.stop, a.step)))
        if type(a) in _PLAIN:
            return (type(a), a)
        raise _Unlike

    ops = []
    for node in part.nodes:
        ops.append((node.op, node.target, arg(node.args), arg(node.kwargs)))
        local[node] = len(local)
    part.inputs = list(local_inputs)
    return (tuple(ops), tuple(input_keys[p] for p in part.inputs))


def _reduced(gm: torch.fx.GraphModule, parts: list[_Part]) -> torch.fx.GraphModule:
    """`gm` with only the parts that are traced (every input kept, in its order)."""
    skipped = {n for part in parts if part.traced_as is not None for n in part.nodes}
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in gm.graph.nodes:
        if node not in skipped:
            env[node] = graph.node_copy(node, lambda a: env[a])
            if env[node].name != node.name:
                raise _Unlike  # the trace names its FX nodes by these names
    return graph_module(gm, graph)


def _assembled(
    traced: torch.fx.GraphModule, gm: torch.fx.GraphModule, parts: list[_Part]
) -> torch.fx.GraphModule:
    """The whole graph's trace: `traced` with the aten nodes of every part not traced
    copied, at its place, from those of its kind's traced part."""
    fx_nodes = {n.name: n for part in parts for n in part.nodes}
    fx_inputs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    nodes = list(traced.graph.nodes)
    inputs = [n for n in nodes if n.op == "placeholder"]
    output = nodes[-1]
    if len(inputs) != len(fx_inputs) or output.op != "output":
        raise _Unlike
    part_of = {n: part for part in parts for n in part.nodes}
    for node in nodes[len(inputs) : -1]:
        sources = node.meta.get("from_node") or ()
        fx = fx_nodes.get(sources[0].name) if len(sources) == 1 else None
        if node.op != "call_function" or fx is None:
            raise _Unlike  # a constant (get_attr) or a node of no single FX node
        part_of[fx].aten.append(node)

    graph = torch.fx.Graph()
    graph._codegen = traced.graph._codegen  # the same inputs and outputs
    input_of = {fx: i for i, fx in enumerate(fx_inputs)}
    written = {p: _written(p, inputs, input_of) for p in parts if p.aten}
    new_inputs = [graph.node_copy(n) for n in inputs]
    env = dict(zip(inputs, new_inputs))
    for part in parts:
        first = part.traced_as
        if part.shared & written.get(first or part, set()):
            raise _Unlike  # it writes an input another part reads: order matters
        if first is None:
            for node in part.aten:
                env[node] = _copy(graph, node, env.__getitem__)
            continue
        # the traced part's inputs -> this part's, by their position in each part
        inputs_here = {
            inputs[input_of[a]]: new_inputs[input_of[b]] for a, b in zip(first.inputs, part.inputs)
        }
        fx_here = dict(zip(first.nodes, part.nodes))
        sources: dict[torch.fx.Node, list] = {}
        local = dict(inputs_here)  # the traced part's nodes -> this part's
        for node in first.aten:
            new = _copy(graph, node, local.__getitem__)
            fx = fx_here[fx_nodes[node.meta["from_node"][0].name]]
            if fx not in sources:
                old = node.meta["from_node"][0]
                sources[fx] = [NodeSource(fx, old.pass_name, old.action)]
            new.meta["from_node"] = sources[fx]
            new.meta.pop("stack_trace", None)
            if fx.meta.get("stack_trace"):
                new.meta["stack_trace"] = fx.meta["stack_trace"]
            local[node] = new
    graph.node_copy(output, lambda a: env[a])
    return graph_module(traced, graph)


def _copy(graph: torch.fx.Graph, node: torch.fx.Node, arg: Callable) -> torch.fx.Node:
    """`node` in `graph` with its arguments mapped by `arg`, named from the base make_fx
    names it from (so the names come out as one trace of the whole graph gives them)."""
    target = node.target
    name = (
        graph._target_to_str(target.overloadpacket.__name__)
        if isinstance(target, torch._ops.OpOverload)
        else None
    )
    new = graph.create_node(
        node.op,
        target,
        torch.fx.map_arg(node.args, arg),
        torch.fx.map_arg(node.kwargs, arg),
        name,
        node.type,
    )
    new.meta = dict(node.meta)
    return new


def _written(part: _Part, inputs: list[torch.fx.Node], input_of: dict) -> set[int]:
    """The positions, among the traced `part`'s inputs, of those its trace writes (through
    views too)."""
    positions = {inputs[input_of[p]]: i for i, p in enumerate(part.inputs)}
    out = set()
    for node in part.aten:
        target = node.target
        if isinstance(target, torch._ops.OpOverload) and target._schema.is_mutable and node.args:
            position = positions.get(storage_node(node.args[0]))
            if position is not None:
                out.add(position)
    return out
