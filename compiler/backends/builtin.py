"""The built-in backends: eager, aot_eager, inductor (ours) and cudagraphs.

Each leaves what it did in the record of the graph it compiles (`current_graph()`), also when
a user's backend calls it through `lookup_backend`, so the inspector shows the real work.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
from torch.utils._pytree import tree_flatten

from compiler.backends.options import current_options
from compiler.records import current_graph
from compiler.runtime.eager import forward_at_user_lines
from compiler.support.lazy_graphs import graph_code, runnable

Backend = Callable[[torch.fx.GraphModule, Sequence[torch.Tensor]], Callable]

# Name -> backend; compiler/backends/registry.py adds them to its table at the first lookup.
BUILTIN_BACKENDS: dict[str, Backend] = {}


def _builtin(name: str) -> Callable[[Backend], Backend]:
    def add(fn: Backend) -> Backend:
        BUILTIN_BACKENDS[name] = fn
        return fn

    return add


def _note(text: str) -> None:
    record = current_graph()
    if record is not None and text not in record.notes:
        record.notes.append(text)


def _static_graphs(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    compile_static: Callable[[torch.fx.GraphModule, list], Callable],
    what: str,
    compile_bound: Callable | None = None,
) -> Callable:
    """`compile_static` for a backend that works on concrete sizes and traces what it is
    given: a graph with symbolic sizes is compiled per size at call time (per_size.py), from
    its symbolic aten graph bound to each size where `compile_bound` takes one, and opaque
    calls (compiler.allow_in_graph) run between compiled parts (opaque.py)."""
    from compiler.backends.opaque import has_opaque, split_at_opaque
    from compiler.backends.per_size import PerSize, is_dynamic
    from compiler.backends.scalars import (
        float_placeholders,
        floats_as_tensors,
        scalar_device,
        tensor_args,
    )

    floats = float_placeholders(gm)
    if floats:
        converted, why = floats_as_tensors(gm)
        if converted is not None:
            _note(
                f"{what}: float inputs are 0-d tensors, read at each call (no value is compiled in)"
            )
            device = scalar_device(example_inputs)
            inner = _static_graphs(
                converted, tensor_args(example_inputs, floats, device), compile_static, what
            )
            return lambda *args: inner(*tensor_args(args, floats, device))
        # Specialised per value, every new value would generate code again, without the
        # bound the tracer's cache_size_limit puts on recompiles: the graph runs as captured.
        _note(
            f"the graph runs as captured, with no {what}: a float input changes per call and {why}"
        )
        return forward_at_user_lines(gm, gm.forward)

    def one(g: torch.fx.GraphModule, inputs: list) -> Callable:
        if has_opaque(g):
            return split_at_opaque(g, inputs, compile_static)
        return compile_static(g, inputs)

    if is_dynamic(gm):
        bound = None if has_opaque(gm) else compile_bound
        return PerSize(gm, example_inputs, one, what, bound)
    return one(gm, list(example_inputs))


@_builtin("eager")
def eager(gm: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor]) -> Callable:
    """Run the captured FX graph with torch ops: no code generation (a dynamic graph runs
    as it is, for every size; an opaque call runs as the Python call it is). An op's error
    is raised from the user's line, as eager raises it."""
    return forward_at_user_lines(gm, gm.forward)


@_builtin("aot_eager")
def aot_eager(gm: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor]) -> Callable:
    """Our aot stage (make_fx through our decomposition table, functionalized), then the aten
    graph run with torch ops: checks the graph-to-aten step without code generation. A graph
    that needs autograd gets its joint graph and partition, both halves run with torch ops.
    make_fx bakes in sizes, so a dynamic graph is traced per size."""
    return _static_graphs(gm, example_inputs, _aot_eager_static, "aten graphs")


def _aot_eager_static(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
    from compiler.aot.trace import needs_autograd

    if needs_autograd(gm, example_inputs):
        # the joint graph, partitioned; both halves run as torch ops
        from compiler.aot.training import CompiledTraining

        training = CompiledTraining(
            gm,
            current_graph(),
            lambda aot, part, inputs: runnable(aot.gm),
            lambda inputs: _aot_forward(gm, inputs),
        )
        training.entry_for(list(example_inputs))
        return training
    return _aot_forward(gm, list(example_inputs))


def _aot_forward(gm: torch.fx.GraphModule, inputs: list) -> Callable:
    from compiler.aot.outputs import plain_containers, returning_as_eager
    from compiler.aot.trace import trace_forward
    from compiler.runtime.aliasing import alias_safe, mutated_inputs

    record = current_graph()
    if record is not None:
        with record.stage("aot"):
            aot = trace_forward(gm, inputs)
            record.aot_graphs["forward"] = graph_code(aot.gm)
    else:
        aot = trace_forward(gm, inputs)
    lines = {
        a: aot.source_lines[o[-1]]
        for a, o in aot.origins.items()
        if o and o[-1] in aot.source_lines
    }
    forward = forward_at_user_lines(aot.gm, runnable(aot.gm), lines)
    output = next(n for n in aot.gm.graph.nodes if n.op == "output")
    _, spec = tree_flatten(plain_containers(output.args[0]))
    run = returning_as_eager(lambda args: tree_flatten(forward(*args))[0], aot.outputs, spec)
    return alias_safe(run, gm.forward, mutated_inputs(aot.gm), record, inputs)


@_builtin("inductor")
def inductor(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[torch.Tensor],
    mode: str | None = None,
    options: dict | None = None,
) -> Callable:
    """Our code generator (compiler/codegen). Without explicit `mode`/`options` it takes those
    of the compile call being served, so a user backend wrapping it keeps the user's mode."""
    from compiler.backends.inductor import compile_fx
    from compiler.backends.per_size import is_dynamic

    served = current_options()
    if mode is None and options is None:
        mode, options = served.mode, served.options or None

    def compile_static(g: torch.fx.GraphModule, inputs: list) -> Callable:
        return compile_fx(g, inputs, mode=mode, options=options, strict=served.fullgraph)

    if is_dynamic(gm):
        # Specialised per size, its C++ kernels still compile once for every size.
        from compiler.codegen.size_args import size_generic

        def compile_sized(g: torch.fx.GraphModule, inputs: list) -> Callable:
            with size_generic():
                return compile_static(g, inputs)

        def compile_bound(g: torch.fx.GraphModule, aot: Any, inputs: list) -> Callable:
            with size_generic():
                return compile_fx(
                    g, inputs, mode=mode, options=options, strict=served.fullgraph, aot=aot
                )

        return _static_graphs(gm, example_inputs, compile_sized, "kernels", compile_bound)
    return _static_graphs(gm, example_inputs, compile_static, "kernels")


@_builtin("cudagraphs")
def cudagraphs(gm: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor]) -> Callable:
    """The captured graph, run with torch ops, replayed as a CUDA graph: launch overhead
    removed without generating kernels (seed 001's `cudagraphs` backend). A CUDA graph
    replays fixed sizes: a dynamic graph is captured per size."""
    return _static_graphs(gm, example_inputs, _cudagraphs_static, "CUDA graphs")


def _cudagraphs_static(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
    from compiler.aot.trace import needs_autograd, trace_forward

    tensors = [t for t in example_inputs if isinstance(t, torch.Tensor)]
    if not tensors or any(t.device.type != "cuda" for t in tensors):
        _note("cudagraphs: inputs are not all CUDA tensors; the graph runs as captured")
        return gm.forward
    if needs_autograd(gm, example_inputs):
        _note("cudagraphs: this graph needs autograd; it runs as captured")
        return gm.forward
    aot = trace_forward(gm, list(example_inputs))
    if any(_writes_input(n) for n in aot.gm.graph.nodes):
        # a replay would write the mutation into its static copy of the input, not the user's
        _note("cudagraphs: the graph mutates its inputs; it runs as captured")
        return gm.forward
    from compiler.runtime.cudagraphs import CudaGraphRunner

    spec: list[Any] = []

    def flat(args: list) -> tuple:
        out, out_spec = tree_flatten(gm(*args))
        spec[:] = [out_spec]
        return tuple(out)

    runner = CudaGraphRunner(flat)

    def run(*args: Any) -> Any:
        outs = runner(list(args))
        return spec[0].unflatten(list(outs))

    return run


def _writes_input(node: torch.fx.Node) -> bool:
    return (
        node.op == "call_function"
        and node.target is torch.ops.aten.copy_.default
        and node.args[0].op == "placeholder"
    )
