"""Graphs with symbolic sizes, for backends that work on concrete ones.

The tracer hands a backend a graph whose sizes may be symbols (compiler/tracer/shapes.py): a
placeholder per symbol (`s42`), tensor inputs whose example values have symbolic shapes. The
code generator's loop IR uses integer sizes (compiler/ir/index.py), and the aot stage's
make_fx bakes in the sizes it traces with; rather than making them symbolic, the backend's
compiled callable specialises the graph to the concrete sizes of each call and compiles it
the first time it sees them, in a small cache keyed on the sizes. The tracer's entry stays
one entry (no recompile, nothing counted against `config.cache_size_limit`); the graph's
record says which sizes got code: "kernels specialised per size: generated for (8,16), (9,16)".

A backend that can start from an aten graph (ours: `compile_bound`) gets one traced once with
symbolic sizes and bound to each call's (compiler/aot/symbolic.py): a new size no longer runs
make_fx, only the stages after it.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Callable, Sequence

import torch
import torch.fx

from compiler import config
from compiler.aot.symbolic import SymbolicAot, trace_symbolic
from compiler.aot.trace import AotGraph, needs_autograd
from compiler.backends.options import backend_options, current_options
from compiler.records import CompilerWarning, compiling_graph, current_graph
from compiler.support.lazy_graphs import graph_code, graph_module
from compiler.tracer.shapes import SYM_TYPES, is_symbolic

CompileStatic = Callable[[torch.fx.GraphModule, list], Callable]
# (the graph specialised to a call's sizes, its aten graph bound to them, the tensor inputs)
CompileBound = Callable[[torch.fx.GraphModule, AotGraph, list], Callable]


def is_dynamic(gm: torch.fx.GraphModule) -> bool:
    """The graph has symbolic sizes: size inputs, or tensor inputs of symbolic shape."""
    return any(_is_size(n) or _symbolic_tensor(n) for n in gm.graph.nodes if n.op == "placeholder")


def _is_size(node: torch.fx.Node) -> bool:
    return isinstance(node.meta.get("example_value"), SYM_TYPES)


def _symbolic_tensor(node: torch.fx.Node) -> bool:
    value = node.meta.get("example_value")
    return isinstance(value, torch.Tensor) and is_symbolic(tuple(value.shape))


class PerSize:
    """Calls `gm` (with its size inputs) through code compiled for each call's sizes by
    `compile_static(specialised_gm, tensor_inputs)`, or where given and the symbolic aten
    graph binds to them, `compile_bound(specialised_gm, bound_aot, tensor_inputs)`; `what`
    names that code in the note."""

    def __init__(
        self,
        gm: torch.fx.GraphModule,
        example_inputs: Sequence[Any],
        compile_static: CompileStatic,
        what: str = "kernels",
        compile_bound: CompileBound | None = None,
    ) -> None:
        self.gm = gm
        self.compile_static = compile_static
        self.what = what
        self.compile_bound = compile_bound
        self.symbolic: SymbolicAot | None = None
        self.traced = False  # the symbolic trace was tried (it runs once)
        self.bound = 0  # sizes compiled from the symbolic aten graph
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.sizes = [i for i, n in enumerate(placeholders) if _is_size(n)]
        self.tensors = [i for i, n in enumerate(placeholders) if not _is_size(n)]
        self.dynamic_tensors = [i for i, n in enumerate(placeholders) if _symbolic_tensor(n)]
        self.names = [placeholders[i].name for i in self.sizes]
        # Compiles happen at call time, outside the backend call: keep what it saw.
        self.record = current_graph()
        self.options = current_options()
        self.compiled: dict[tuple, Callable] = {}
        self.entry_for(list(example_inputs))

    def __call__(self, *args: Any) -> Any:
        key = self._key(args)
        fn = self.compiled.get(key)
        if fn is None:
            fn = self.entry_for(list(args))
        return fn(*[args[i] for i in self.tensors])

    def _key(self, args: Sequence[Any]) -> tuple:
        return (
            *(args[i] for i in self.sizes),
            *(tuple(args[i].shape) for i in self.dynamic_tensors),
        )

    def entry_for(self, args: list) -> Callable:
        key = self._key(args)
        gm = specialise(self.gm, {i: args[i] for i in self.sizes})
        tensors = [args[i] for i in self.tensors]
        record_ctx = (
            compiling_graph(self.record) if self.record is not None else contextlib.nullcontext()
        )
        opts = self.options
        try:
            with record_ctx, backend_options(opts.mode, opts.options, opts.fullgraph):
                aot = self._bind(args, gm, tensors)
                if aot is not None:
                    fn = self.compile_bound(gm, aot, tensors)
                    self.bound += 1
                else:
                    fn = self.compile_static(gm, tensors)
        except Exception as e:
            if opts.fullgraph or config.strict():
                raise
            # the graph for these sizes runs eagerly, as a failed compile of a static one does
            reason = f"compiling for sizes {self._label(key)} failed ({type(e).__name__}: {e})"
            if self.record is not None:
                self.record.fallback = f"{reason}; those sizes run eagerly"
            warnings.warn(
                f"compiler: {reason}; those sizes run eagerly", CompilerWarning, stacklevel=3
            )
            fn = gm.forward
        self.compiled[key] = fn
        self._note(args)
        return fn

    def _bind(self, args: list, gm: torch.fx.GraphModule, tensors: list) -> AotGraph | None:
        """The symbolic aten graph bound to `args`' sizes (traced at the first size that
        can use it), or None: no compile_bound, a graph that needs autograd (its joint graph
        is traced per size), a failed trace, or sizes outside its guards."""
        if self.compile_bound is None or needs_autograd(gm, tensors):
            return None
        if not self.traced:
            self.traced = True
            self.symbolic = self._trace()
        return self.symbolic.bind(args) if self.symbolic is not None else None

    def _trace(self) -> SymbolicAot | None:
        record = self.record
        try:
            with record.stage("aot") if record is not None else contextlib.nullcontext():
                symbolic = trace_symbolic(self.gm)
        except Exception as e:  # traced per size, as before (correct, so never raised)
            why = f"{type(e).__name__}: {e}".strip()
            self._add_note(f"aten graph traced per size: the symbolic trace failed ({why})")
            return None
        if symbolic is not None and record is not None:
            record.aot_graphs["forward"] = graph_code(symbolic.aot.gm)
            self._add_note(
                "aten graph traced once with symbolic sizes; each new size binds it "
                "(the stages from lowering on run for each new size)"
            )
        return symbolic

    def _add_note(self, text: str) -> None:
        if self.record is not None and text not in self.record.notes:
            self.record.notes.append(text)

    def _note(self, args: list) -> None:
        if self.record is None:
            return
        done = ", ".join(self._label(k) for k in self.compiled)
        prefix = f"{self.what} specialised per size: generated for "
        notes = self.record.notes
        text = prefix + done
        for i, note in enumerate(notes):
            if note.startswith(prefix):
                notes[i] = text
                return
        notes.append(text)

    def _label(self, key: tuple) -> str:
        shapes = key[len(self.sizes) :]
        if shapes:
            parts = [
                "(" + ",".join(map(str, s)) + ("," if len(s) == 1 else "") + ")" for s in shapes
            ]
            return parts[0] if len(parts) == 1 else "[" + " ".join(parts) + "]"
        return " ".join(f"{n}={v}" for n, v in zip(self.names, key))


def specialise(gm: torch.fx.GraphModule, values: dict[int, Any]) -> torch.fx.GraphModule:
    """`gm` with the placeholders at positions `values` replaced by those constants. The
    example values the tracer left in node meta hold the symbols: dropped (passes such as
    split_module would look for the placeholders of those symbols)."""
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, Any] = {}
    index = 0
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            i, index = index, index + 1
            if i in values:
                env[node] = values[i]
                continue
        copy = env[node] = graph.node_copy(node, lambda n: env[n])
        copy.meta.pop("example_value", None)
        copy.meta.pop("val", None)
    # lazy: its Python code is made only where it runs (an eager fallback); compiled, it is
    # traced or bound, never run (a few ms of each new size)
    return graph_module(gm, graph, class_name="SpecialisedGraph")
