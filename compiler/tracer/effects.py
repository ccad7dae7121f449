"""What an entry changes beyond returning its value, for the records (`EntryRecord.side_effects`).

Tools that would re-run a compiled call (the notebook's timing) read this to know whether a
re-run is invisible to the user. The list is conservative: whatever the trace cannot prove
harmless is listed, and an empty list means the call only reads and returns.
"""

from __future__ import annotations

import torch

from compiler.records import SideEffect
from compiler.tracer.context import AttrWrites, DeferredCall
from compiler.tracer.graph_builder import is_node_impure
from compiler.tracer.variables import CellVar, Var

# Ops whose written tensors are not their first argument: the argument positions written.
_WRITTEN_ARGS = {
    torch.nn.functional.batch_norm: (1, 2),  # running_mean, running_var in training mode
    torch.batch_norm: (3, 4),
}


def entry_side_effects(
    gm: torch.fx.GraphModule,
    mutated: list[Var],
    attr_writes: list[AttrWrites],
    cells: dict[str, CellVar],
    graph_break: str | None,
    deferred: list[DeferredCall] = (),
    before: list[DeferredCall] = (),
) -> list[SideEffect]:
    effects = _graph_writes(gm)
    for call in before:
        effects.append(SideEffect("deferred", "", f"{call.what} is made before the graph"))
    for call in deferred:
        effects.append(SideEffect("deferred", "", f"{call.what} is made after the graph"))
    for v in mutated:
        effects.append(SideEffect("container", v.source or "", f"{v.source} is changed in place"))
    for writes in attr_writes:
        source = writes.obj.source or ""
        for name in writes.values:
            effects.append(SideEffect("attribute", f"{source}.{name}", f"sets {source}.{name}"))
    for name, cell in cells.items():
        if cell.dirty and cell.cell is not None:
            effects.append(SideEffect("cell", name, f"assigns the closure variable {name!r}"))
    if graph_break is not None:
        effects.append(SideEffect("python", "", f"a graph break runs Python: {graph_break}"))
    return effects


def _graph_writes(gm: torch.fx.GraphModule) -> list[SideEffect]:
    effects: list[SideEffect] = []
    for node in gm.graph.nodes:
        if node.op not in ("call_function", "call_method") or not is_node_impure(node):
            continue
        if node.target is torch._C._set_grad_enabled:
            continue  # the rebuild restores the grad mode
        if node.meta.get("opaque"):
            what = getattr(node.target, "__name__", str(node.target))
            effects.append(SideEffect("opaque", "", f"{what} runs opaque and may write its inputs"))
            continue
        for written in _written(node):
            source = _root_source(written)
            where = source or "a tensor made in the graph"
            effects.append(SideEffect("tensor_write", source, f"{node.name} writes {where}"))
    return effects


def _written(node: torch.fx.Node) -> list[torch.fx.Node]:
    out = node.kwargs.get("out")
    if isinstance(out, torch.fx.Node):
        return [out]
    positions = _WRITTEN_ARGS.get(node.target)
    if positions is None and getattr(node.target, "__name__", "") in (
        "batch_norm",
        "instance_norm",
    ):
        positions = (1, 2)
    if positions is not None:
        args = node.args
        return [args[i] for i in positions if i < len(args) and isinstance(args[i], torch.fx.Node)]
    first = node.args[0] if node.args else None
    return [first] if isinstance(first, torch.fx.Node) else []


def _root_source(node: torch.fx.Node) -> str:
    """The graph input a written tensor may alias: views alias their first tensor argument, so
    the first-argument chain ends at it; "" when the chain ends in a tensor the graph made."""
    seen = 0
    while node.op != "placeholder" and seen < 10_000:
        seen += 1
        first = node.args[0] if node.args else None
        if isinstance(first, (list, tuple)):
            first = next((a for a in first if isinstance(a, torch.fx.Node)), None)
        if not isinstance(first, torch.fx.Node):
            return ""
        node = first
    if node.op != "placeholder":
        return ""
    return node.meta.get("source") or node.name
