"""Torch-level FX graph -> the joint forward+backward aten graph of a training step.

Three passes, all on fake tensors:

1. `describe`: run the graph once to learn which inputs and outputs take part in autograd,
   the outputs' layouts, and which outputs are views of an input (`x.view(...)` of an input
   left in a local at a graph break) or of an earlier output (`out` and `out.flatten(1)`
   both live): those are not computed by the compiled graph but recreated from their base
   after it, so they stay views of it as in eager.
2. `make_fx` over `joint(primals, tangents)`, which runs the graph with grad on and then
   `torch.autograd.grad(outputs, inputs, tangents)`: the dispatcher records the forward ops
   and the ops autograd's engine runs for the backward (convolution_backward, ...), each
   decomposed with our table below autograd, as inference graphs are (trace.py).
   Hooks on the autograd nodes make each backward aten node name the FX node whose
   gradient it computes, so backward kernels point at the user line they differentiate.
3. `remove_mutations` (compiler/aot/inplace.py): the in-place ops the trace recorded
   (`relu_`, `out += identity`, batch norm's running statistics) become out-of-place ops
   read by everything after them, and inputs updated in place get trailing `copy_` nodes,
   as functionalize would leave them. When a mutation is more than a renaming (a view
   written in place, ...), pass 2 runs again without decompositions and `trace_forward`
   (compiler/aot/trace.py) functionalizes and decomposes that graph by re-tracing it
   (functionalize cannot take the prims ops some decompositions emit).

The result's placeholders are the graph's inputs followed by one tangent per
differentiable computed output; it returns the computed tensor outputs, then one gradient
(or None) per input that requires grad.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
import torch.fx
import torch.fx.traceback as fx_traceback
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._pytree import TreeSpec, tree_flatten

from compiler.aot.decompositions import decomposition_table
from compiler.aot.inplace import remove_mutations
from compiler.aot.outputs import OutputInfo, describe_outputs, run_fake
from compiler.aot.trace import AotGraph, origins_of, source_line_of, trace_forward
from compiler.support.autocast import preserved
from compiler.support.lazy_graphs import graph_module, lazy_graph_modules


class JointError(RuntimeError):
    """The graph cannot be compiled for training (the caller runs it eagerly, saying why)."""


class NothingToDifferentiate(JointError):
    """No output requires grad: the graph is an inference graph after all."""


@dataclass
class JointGraph:
    aot: AotGraph  # functional joint graph: (primals..., tangents...) -> (outputs..., grads...)
    spec: TreeSpec  # the user graph's output structure
    outputs: list[OutputInfo]  # its leaves
    requires_grad: list[bool]  # per input
    mutated: list[int] = field(default_factory=list)  # inputs written back (trailing copy_)

    @property
    def num_inputs(self) -> int:
        return len(self.requires_grad)

    @property
    def tensor_outputs(self) -> list[OutputInfo]:
        """The outputs the graph computes (not the views of inputs)."""
        return [o for o in self.outputs if o.computed]

    @property
    def tangents(self) -> list[OutputInfo]:
        return [o for o in self.outputs if o.differentiable]


def trace_joint(gm: torch.fx.GraphModule, inputs: Sequence[torch.Tensor]) -> JointGraph:
    """The functional joint graph of `gm` for `inputs` (which include its parameters)."""
    if not all(isinstance(t, torch.Tensor) for t in inputs):
        raise JointError("a graph input is not a tensor")
    for node in gm.graph.nodes:
        if node.op == "call_module" and _has_state(gm.get_submodule(node.target)):
            # its parameters would be constants of the trace: no gradients would reach them
            raise JointError(f"the graph calls submodule {node.target!r} with parameters")
    spec, outputs, requires_grad = describe(gm, inputs)
    if not any(o.differentiable for o in outputs):
        if any(o.alias_of is not None and requires_grad[o.alias_of] for o in outputs):
            raise JointError("the only outputs that need gradients are views of inputs")
        raise NothingToDifferentiate("no output requires grad")
    tangents = [
        torch.empty_strided(o.size, o.stride, dtype=o.dtype, device=_device(inputs))
        for o in outputs
        if o.differentiable
    ]
    lines = {n.name: line for n in gm.graph.nodes if (line := source_line_of(n)) is not None}
    table = decomposition_table()
    joint = _trace_autograd(gm, list(inputs), tangents, outputs, requires_grad, table)
    _name_placeholders(joint, gm, len(tangents))  # before remove_mutations regenerates code
    functional = remove_mutations(joint, table)
    if functional is not None:
        aot = AotGraph(functional, origins_of(functional, gm), lines)
    else:  # functionalize's re-trace, which cannot take the decompositions' prims ops
        joint = _trace_autograd(gm, list(inputs), tangents, outputs, requires_grad, None)
        retraced = trace_forward(joint, [*inputs, *tangents], training=True, rename_mutations=False)
        _name_placeholders(retraced.gm, gm, len(tangents))
        retraced.gm.recompile()
        aot = AotGraph(retraced.gm, _compose_origins(retraced.origins, joint), lines)
    mutated = mutated_inputs(aot.gm)
    if any(requires_grad[i] for i in mutated):
        raise JointError("the graph mutates an input that requires grad")
    return JointGraph(aot, spec, outputs, requires_grad, mutated)


def lift_attributes(gm: torch.fx.GraphModule) -> tuple[torch.fx.GraphModule, list[torch.Tensor]]:
    """`gm` with every tensor attribute it reads (a symbolically traced module's parameters
    and buffers) turned into an input after its own, and those tensors: gradients reach
    inputs only. Graphs from our tracer already take parameters as inputs."""
    attrs: dict[str, torch.Tensor] = {}
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            value = _attr(gm, node.target)
            if isinstance(value, torch.Tensor):
                attrs[node.target] = value
    if not attrs:
        return gm, []
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    nodes = list(gm.graph.nodes)
    for node in nodes:
        if node.op == "placeholder":
            env[node] = graph.node_copy(node)
    lifted = {target: graph.placeholder(target.replace(".", "_")) for target in attrs}
    for node in nodes:
        if node.op == "get_attr" and node.target in lifted:
            env[node] = lifted[node.target]
        elif node.op != "placeholder":
            env[node] = graph.node_copy(node, lambda a: env[a])
    return graph_module(gm, graph), list(attrs.values())


def describe(
    gm: torch.fx.GraphModule, inputs: Sequence[torch.Tensor]
) -> tuple[TreeSpec, list[OutputInfo], list[bool]]:
    """Run `gm` on fake copies of `inputs` with grad on (aot/outputs.py): its output leaves,
    and which inputs require grad. Raises JointError when two outputs share memory in a way
    the leaves cannot describe (a compiled graph returns fresh tensors, so eager's aliasing
    would be lost)."""
    outputs = describe_outputs(*run_fake(gm, inputs))
    if outputs.unshared is not None:
        raise JointError(outputs.unshared)
    return outputs.spec, outputs.leaves, [t.requires_grad for t in inputs]


def mutated_inputs(gm: torch.fx.GraphModule) -> list[int]:
    """Positions of the placeholders that functionalize writes back with a trailing copy_."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    out = []
    for node in gm.graph.nodes:
        if node.target is torch.ops.aten.copy_.default and node.args[0] in placeholders:
            out.append(placeholders.index(node.args[0]))
    return out


def _name_placeholders(
    joint: torch.fx.GraphModule, gm: torch.fx.GraphModule, tangents: int
) -> None:
    """The joint's inputs named as the user graph's, then tangent_0, tangent_1, ...
    (the caller regenerates its code)."""
    names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    names += [f"tangent_{i}" for i in range(tangents)]
    placeholders = [n for n in joint.graph.nodes if n.op == "placeholder"]
    for node, name in zip(placeholders, names):
        node._rename(name)
        node.target = node.name


def _device(inputs: Sequence[torch.Tensor]) -> torch.device:
    return inputs[0].device if inputs else torch.device("cpu")


# ---- pass 2: the autograd trace ---------------------------------------------------------


def _trace_autograd(
    gm: torch.fx.GraphModule,
    inputs: list[torch.Tensor],
    tangents: list[torch.Tensor],
    outputs: list[OutputInfo],
    requires_grad: list[bool],
    decompositions: dict | None,
) -> torch.fx.GraphModule:
    n = len(inputs)
    diff = [i for i, o in enumerate(outputs) if o.differentiable]
    tensor_leaves = [i for i, o in enumerate(outputs) if o.computed]
    wrt = [i for i, rg in enumerate(requires_grad) if rg]

    def joint(*args: torch.Tensor) -> tuple:
        primals, cotangents = args[:n], args[n:]
        origins = _BackwardOrigins()
        # the backward runs under the autocast state the forward started in, not one a
        # `with torch.autocast` block left open at a graph break
        with torch.enable_grad(), preserved():
            out = _OriginInterpreter(gm, origins).run(*primals)
        leaves, _ = tree_flatten(out)
        try:
            grads = torch.autograd.grad(
                [leaves[i] for i in diff],
                [primals[i] for i in wrt],
                list(cotangents),
                allow_unused=True,
            )
        except RuntimeError as exc:  # eager's backward would fail the same way
            raise JointError(f"autograd fails on this graph: {exc}") from None
        finally:
            origins.remove()
        return (*(leaves[i] for i in tensor_leaves), *grads)

    for node in gm.graph.nodes:  # make_fx records `from_node` only for nodes with meta
        node.meta.setdefault("compiler_origin", node.name)
    with fx_traceback.preserve_node_meta(), lazy_graph_modules():
        joint_gm = make_fx(
            joint,
            decomposition_table=decompositions,
            tracing_mode="fake",
            _allow_non_fake_inputs=True,
        )(*inputs, *tangents)
    return joint_gm


class _BackwardOrigins:
    """Prehooks on the autograd nodes each FX node created: while autograd's engine runs
    one, the ops it dispatches are recorded as coming from that FX node."""

    def __init__(self) -> None:
        self.seen: set[torch.autograd.graph.Node] = set()
        self.handles: list[Any] = []
        self.active: list[Any] = []

    def claim(self, value: Any, node: torch.fx.Node) -> None:
        leaves, _ = tree_flatten(value)
        stack = [t.grad_fn for t in leaves if isinstance(t, torch.Tensor) and t.grad_fn]
        while stack:
            fn = stack.pop()
            if fn is None or fn in self.seen:
                continue
            self.seen.add(fn)
            self.handles.append(fn.register_prehook(self._enter(node)))
            self.handles.append(fn.register_hook(self._exit))
            stack.extend(f for f, _ in fn.next_functions)

    def _enter(self, node: torch.fx.Node):
        def prehook(grad_outputs: Any) -> None:
            ctx = fx_traceback.set_current_meta(node)
            ctx.__enter__()
            self.active.append(ctx)

        return prehook

    def _exit(self, grad_inputs: Any, grad_outputs: Any) -> None:
        if self.active:
            self.active.pop().__exit__(None, None, None)

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        while self.active:
            self.active.pop().__exit__(None, None, None)


class _OriginInterpreter(torch.fx.Interpreter):
    def __init__(self, gm: torch.fx.GraphModule, origins: _BackwardOrigins):
        super().__init__(gm)
        self.origins = origins

    def run_node(self, n: torch.fx.Node) -> Any:
        result = super().run_node(n)
        if n.op != "placeholder":
            self.origins.claim(result, n)
        return result


def _compose_origins(
    functional: dict[str, tuple[str, ...]], joint: torch.fx.GraphModule
) -> dict[str, tuple[str, ...]]:
    """aten node -> user FX nodes, through the autograd trace's nodes."""
    to_user: dict[str, tuple[str, ...]] = {}
    for node in joint.graph.nodes:
        names = dict.fromkeys(
            getattr(src, "name", str(src)) for src in node.meta.get("from_node", ())
        )
        to_user[node.name] = tuple(names)
    return {
        name: tuple(dict.fromkeys(u for j in joint_names for u in to_user.get(j, ())))
        for name, joint_names in functional.items()
    }


def _attr(module: torch.nn.Module, target: str) -> Any:
    obj: Any = module
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _has_state(module: torch.nn.Module) -> bool:
    return any(True for _ in module.parameters()) or any(True for _ in module.buffers())
