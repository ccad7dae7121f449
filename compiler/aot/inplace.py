"""In-place updates out of an aten graph, as an FX pass: what functionalize does for the
graphs training steps give, without tracing the graph again.

The joint trace (joint.py) records a training step's in-place ops as they ran: `relu_` and
`out += identity` on intermediates, `num_batches_tracked.add_(1)` and batch norm's
running-statistics `copy_` on inputs. When every such op writes a tensor that no view
shares, removing them is a renaming: the op becomes its out-of-place form (`relu`, `add`),
every later reader of the tensor reads that result instead, and an input's last value is
written back by a trailing `copy_`, as functionalize leaves it. The graph then holds the
same ops functionalize's re-trace would give, and the joint trace needs no third pass.

A mutation this pass does not cover (a view written in place, or a tensor written while a
view of it is still read; a `copy_` that broadcasts or casts into an intermediate; an op
with no out-of-place form) makes it return None, and the caller functionalizes by
re-tracing with torch.func.functionalize.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Mapping

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import FakeTensor

aten = torch.ops.aten


def remove_mutations(
    gm: torch.fx.GraphModule, decompositions: Mapping | None = None
) -> torch.fx.GraphModule | None:
    """`gm` (an aten graph from make_fx with `decompositions`) rewritten without in-place
    ops, or None when one of its mutations is not a renaming (see the module docstring) or
    its out-of-place form is an op the table decomposes (`clamp_min_` recorded whole, where
    functionalize's re-trace decomposes `clamp_min`). Rewrites `gm` in place only when it
    returns it."""
    graph = gm.graph
    nodes = list(graph.nodes)
    plan = _plan(nodes, decompositions or {})
    if plan is None:
        return None
    latest: dict[torch.fx.Node, torch.fx.Node] = {}  # mutated tensor -> its current value
    root_of: dict[torch.fx.Node, torch.fx.Node] = {}  # a new value -> the tensor it updates
    for node in nodes:
        # setting args is costly (use lists are rebuilt): only where one is renamed
        if latest and any(a in latest for a in node.all_input_nodes):
            node.args = torch.fx.map_arg(node.args, lambda a: latest.get(a, a))
            node.kwargs = torch.fx.map_arg(node.kwargs, lambda a: latest.get(a, a))
        if node not in plan:
            continue
        target = node.args[0]
        root = root_of.get(target, target)
        rewrite = plan[node]
        if rewrite.op is None:  # copy_(dst, src): dst's value is now src's
            value = node.args[1]
        else:
            with graph.inserting_before(node):
                value = graph.call_function(rewrite.op, node.args, node.kwargs)
            value.meta = dict(node.meta)
            value.meta["val"] = rewrite.val
            value.meta.pop("tensor_meta", None)
        node.replace_all_uses_with(value)
        graph.erase_node(node)
        latest[root] = value
        root_of[value] = root
    output = next(n for n in reversed(graph.nodes) if n.op == "output")
    for node in nodes:
        if node.op == "placeholder" and node in latest:
            with graph.inserting_before(output):
                copy = graph.call_function(aten.copy_.default, (node, latest[node]))
            copy.meta["val"] = node.meta.get("val")
    graph.eliminate_dead_code()
    gm.recompile()
    return gm


def _plan(
    nodes: list[torch.fx.Node], decompositions: Mapping
) -> dict[torch.fx.Node, _Rewrite] | None:
    """Each mutating node -> how it is removed, or None when some mutation is not a
    renaming."""
    position = {n: i for i, n in enumerate(nodes)}
    plan: dict[torch.fx.Node, _Rewrite] = {}
    written: dict[torch.fx.Node, list[int]] = {}  # tensor (not a view) -> its write positions
    views: list[torch.fx.Node] = []
    for node in nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        schema = node.target._schema
        if _is_view_node(node):
            views.append(node)
        if not schema.is_mutable:
            continue
        target = node.args[0] if node.args else None
        if not isinstance(target, torch.fx.Node) or _writes_beyond_self(schema):
            return None
        if node.target is aten.copy_.default:
            if not _copy_is_renaming(node, target, position):
                return None
            plan[node] = _Rewrite(None, None)
        else:
            functional = out_of_place(node.target)
            if functional is None or functional in decompositions:
                return None
            val = _run(functional, node.args, node.kwargs)
            before = node.meta.get("val")
            if not isinstance(val, torch.Tensor) or not isinstance(before, torch.Tensor):
                return None
            if (val.shape, val.dtype, val.stride()) != (
                before.shape,
                before.dtype,
                before.stride(),
            ):
                # the in-place op kept the tensor's dtype where this promotes, or its
                # layout: the later ops' recorded metadata would not hold
                return None
            plan[node] = _Rewrite(functional, val)
        written_tensor = _tensor(target)
        if storage_node(written_tensor) is not written_tensor:
            return None  # a view written in place: its base changes too
        written.setdefault(written_tensor, []).append(position[node])
    # no tensor is written while a view of it is still read
    for view in views:
        last_read = _last_read(view, position)
        if any(position[view] < p <= last_read for p in written.get(storage_node(view), ())):
            return None
    return plan


@dataclass
class _Rewrite:
    op: torch._ops.OpOverload | None  # the out-of-place op, None: copy_(dst, src) -> src
    val: torch.Tensor | None  # its fake result


def _tensor(node: torch.fx.Node) -> torch.fx.Node:
    """The tensor an in-place op's result is (chains of in-place ops return their input)."""
    while (
        node.op == "call_function"
        and isinstance(node.target, torch._ops.OpOverload)
        and node.target._schema.is_mutable
        and node.args
        and isinstance(node.args[0], torch.fx.Node)
    ):
        node = node.args[0]
    return node


def storage_node(node: torch.fx.Node) -> torch.fx.Node:
    """The tensor whose memory `node` reads: through views (of views ...), the getitems of
    a list of views and in-place ops' results."""
    while True:
        if _tensor(node) is not node:
            node = _tensor(node)
        elif _is_view_node(node):
            node = node.args[0]
        elif node.target is operator.getitem and _is_view_node(node.args[0]):
            node = node.args[0]
        else:
            return node


def _last_read(node: torch.fx.Node, position: dict[torch.fx.Node, int]) -> int:
    """The position of the last node reading `node`, through the getitems of a list of views
    (split, unbind)."""
    last = position[node]
    for user in node.users:
        if user.target is operator.getitem:
            last = max(last, _last_read(user, position))
        else:
            last = max(last, position[user])
    return last


def _is_view_node(node: torch.fx.Node) -> bool:
    return (
        node.op == "call_function"
        and isinstance(node.target, torch._ops.OpOverload)
        and (_is_view(node.target._schema) or node.target is aten._unsafe_view.default)
        and bool(node.args)
        and isinstance(node.args[0], torch.fx.Node)
    )


def _is_view(schema: torch._C.FunctionSchema) -> bool:
    """Returns an alias of an input without writing it (view, alias, t, expand, split, ...;
    `_unsafe_view` aliases its input without saying so)."""
    return any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)


def _writes_beyond_self(schema: torch._C.FunctionSchema) -> bool:
    """Writes any argument but the first (out= variants, multi-output in-place ops)."""
    written = [a.alias_info is not None and a.alias_info.is_write for a in schema.arguments]
    return not written or not written[0] or any(written[1:])


def out_of_place(op: torch._ops.OpOverload) -> torch._ops.OpOverload | None:
    """`aten.add_.Tensor` -> `aten.add.Tensor`: the same schema, not writing self."""
    name = op._schema.name.split("::")[-1]
    if not name.endswith("_") or name.startswith("_"):
        return None
    packet = getattr(aten, name[:-1], None)
    overload = op._overloadname
    functional = getattr(packet, overload, None) if packet is not None else None
    if functional is None or functional._schema.is_mutable:
        return None
    return functional


def _copy_is_renaming(
    copy: torch.fx.Node, dst: torch.fx.Node, position: dict[torch.fx.Node, int]
) -> bool:
    """copy_(dst, src) whose later readers may read src instead: the same shape, dtype and
    device, and the same strides unless nothing reads dst after it (an input's running
    statistics: only the write-back does)."""
    src = copy.args[1] if len(copy.args) > 1 else None
    if not isinstance(src, torch.fx.Node):
        return False
    d, s = dst.meta.get("val"), src.meta.get("val")
    if not isinstance(d, torch.Tensor) or not isinstance(s, torch.Tensor):
        return False
    if d.shape != s.shape or d.dtype != s.dtype or d.device != s.device:
        return False
    if d.stride() == s.stride():
        return True
    root = _tensor(dst)
    readers = [u for n in (root, *_results(root)) for u in n.users]
    return not any(position[u] > position[copy] for u in readers if u is not copy)


def _results(tensor: torch.fx.Node) -> list[torch.fx.Node]:
    """The in-place ops' results that are `tensor` (their readers read it)."""
    out = []
    for user in tensor.users:
        if _tensor(user) is tensor and user is not tensor:
            out += [user, *_results(user)]
    return out


def _run(op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> object:
    """The out-of-place op's fake result (its layout may differ from the in-place op's)."""
    vals = torch.fx.map_arg((args, kwargs), lambda n: n.meta.get("val"))
    fakes = [v for v in pytree.tree_leaves(vals) if isinstance(v, FakeTensor)]
    if not fakes:
        return None
    with fakes[0].fake_mode:
        return op(*vals[0], **vals[1])
