"""Float inputs of a graph as 0-d tensors, for backends that generate code.

The tracer makes a Python float that changed between calls (a `.item()` handed on by a graph
break, a scale passed as an argument) a symbolic input of the graph (tracer/shapes.py,
float_input), so a new value does not recompile it. The aot stage's make_fx would bake a
float input in as a constant, and per_size.py would then generate kernels for every value.
Here each such input becomes a 0-d float64 tensor input: the scalar arithmetic on it runs
as tensor ops (in float64, as Python computes it), and where it meets a tensor it is that
operand as a 0-d tensor, which torch treats as it treats the Python scalar: a 0-d tensor
does not change the dtype of a floating tensor, and its value is read in the op's own
precision. Where the other operand is an integer or bool tensor, eager computes in the
default dtype, so the 0-d tensor is first cast to the op's result dtype. A use outside the
tables below (a float that sizes a tensor, an argument of another op) leaves the graph as
it is, specialised per value by per_size.py, and says so in the record.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx

# Scalar arithmetic on floats, and the tensor op computing the same on a 0-d float64 tensor.
_SCALAR_OPS: dict[Any, Callable] = {
    operator.add: operator.add,
    operator.sub: operator.sub,
    operator.mul: operator.mul,
    operator.truediv: operator.truediv,
    operator.pow: operator.pow,
    operator.neg: operator.neg,
    torch.sym_float: torch.clone,
    math.sqrt: torch.sqrt,
    math.exp: torch.exp,
    math.log: torch.log,
}
# Binary tensor ops that take a Python scalar operand as they take a 0-d tensor.
_BINARY_FUNCTIONS = {
    operator.add, operator.sub, operator.mul, operator.truediv, operator.pow,
    torch.add, torch.sub, torch.mul, torch.div, torch.pow, torch.true_divide,
}  # fmt: skip
_BINARY_METHODS = {
    "add", "sub", "mul", "div", "pow", "true_divide",
    "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
    "__truediv__", "__rtruediv__", "__pow__", "__rpow__",
}  # fmt: skip


def float_placeholders(gm: torch.fx.GraphModule) -> list[int]:
    """Positions of the placeholders that are symbolic floats."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return [
        i
        for i, n in enumerate(placeholders)
        if isinstance(n.meta.get("example_value"), torch.SymFloat)
    ]


def floats_as_tensors(gm: torch.fx.GraphModule) -> tuple[torch.fx.GraphModule | None, str]:
    """`gm` with its float inputs taken as 0-d float64 tensors, or (None, why not)."""
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    floats: set[torch.fx.Node] = set()  # new nodes holding a float as a 0-d float64 tensor
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            new = graph.placeholder(node.name)
            new.meta = dict(node.meta)
            if isinstance(node.meta.get("example_value"), torch.SymFloat):
                new.meta.pop("example_value", None)
                new.meta.pop("val", None)
                floats.add(new)
            env[node] = new
            continue
        args = torch.fx.map_arg(node.args, env.__getitem__)
        kwargs = torch.fx.map_arg(node.kwargs, env.__getitem__)
        used = [
            a for a in (*args, *kwargs.values()) if isinstance(a, torch.fx.Node) and a in floats
        ]
        if used and node.op != "output":
            converted = _convert(graph, node, args, kwargs, floats)
            if converted is None:
                return None, f"the float input is used by {node.format_node()}"
            env[node] = converted
            continue
        new = graph.node_copy(node, env.__getitem__)
        env[node] = new
    if any(isinstance(a, torch.fx.Node) and a in floats for a in _outputs(graph)):
        return None, "the graph returns a float input"
    return torch.fx.GraphModule(gm, graph), ""


def _outputs(graph: torch.fx.Graph) -> list:
    out = next(n for n in reversed(graph.nodes) if n.op == "output")
    flat: list = []
    torch.fx.map_arg(out.args, flat.append)
    return flat


def _convert(
    graph: torch.fx.Graph,
    node: torch.fx.Node,
    args: tuple,
    kwargs: dict,
    floats: set[torch.fx.Node],
) -> torch.fx.Node | None:
    value = node.meta.get("example_value")
    if isinstance(value, torch.SymFloat):  # arithmetic on floats, giving a float
        if node.op != "call_function" or node.target not in _SCALAR_OPS or kwargs:
            return None
        if not all(
            (isinstance(a, torch.fx.Node) and a in floats) or type(a) in (int, float) for a in args
        ):
            return None
        new = graph.call_function(_SCALAR_OPS[node.target], args)
        floats.add(new)
        return new
    binary = (node.op == "call_function" and node.target in _BINARY_FUNCTIONS) or (
        node.op == "call_method" and node.target in _BINARY_METHODS
    )
    if not binary or kwargs or len(args) != 2 or not isinstance(value, torch.Tensor):
        return None
    others = [a for a in args if not (isinstance(a, torch.fx.Node) and a in floats)]
    if len(others) != 1:
        return None  # float with float: a scalar op not in _SCALAR_OPS
    other = others[0]
    other_value = other.meta.get("example_value") if isinstance(other, torch.fx.Node) else None
    if not isinstance(other_value, torch.Tensor):
        return None
    exact = other_value.dtype.is_floating_point or other_value.dtype.is_complex
    new_args = []
    for a in args:
        if a is other:
            new_args.append(a)
        elif exact:
            new_args.append(a)
        else:  # eager computes an integer tensor with a float in the default dtype
            new_args.append(graph.call_method("to", (a, value.dtype)))
    if node.op == "call_method":
        new = graph.call_method(node.target, tuple(new_args))
    else:
        new = graph.call_function(node.target, tuple(new_args))
    new.meta = dict(node.meta)
    return new


def scalar_device(example_inputs: Sequence[Any]) -> torch.device:
    """Where the 0-d tensors go: on the device of the graph's tensors, so that a kernel
    never reads a host pointer (a CPU scalar beside CUDA tensors is eager's special case,
    not the code generator's)."""
    devices = {a.device for a in example_inputs if isinstance(a, torch.Tensor)}
    return devices.pop() if len(devices) == 1 else torch.device("cpu")


def tensor_args(args: Sequence[Any], positions: Sequence[int], device: torch.device) -> list:
    """The call's arguments with the floats at `positions` as 0-d float64 tensors."""
    out = list(args)
    for i in positions:
        out[i] = torch.tensor(float(out[i]), dtype=torch.float64, device=device)
    return out
