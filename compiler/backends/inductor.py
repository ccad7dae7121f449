"""`backend="inductor"`, the backend's driver: FX graph -> fused kernels + a Python wrapper,
as named stages, each a package below this one (`_Compiled.build` calls them in order).

    aot       FX graph -> functional aten graph (compiler/aot: make_fx, our decompositions)
    lower     aten graph -> loop IR (compiler/lowering)
    schedule  loop IR -> kernels and extern calls (compiler/scheduler: fusion, buffers)
    codegen   kernel sources (compiler/codegen: Triton or C++) and the wrapper source
    compile   load kernels from the disk cache (compiling what is new) and the wrapper,
              run by compiler/runtime

Each stage's time goes to the GraphRecord being compiled (compiler.records.current_graph()),
with every kernel, the wrapper source, the aten graph and notes. Anything that fails inside
runs the graph eagerly instead, with a warning and `GraphRecord.fallback` saying why
(fullgraph=True, COMPILER_STRICT=1 and config.suppress_errors=False raise instead). Graphs
that need autograd go to compiler/aot/training.py: a joint forward+backward graph,
partitioned, each half compiled by the stages here.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from torch.utils._pytree import tree_flatten

from compiler import config
from compiler.aot.outputs import plain_containers, returning_as_eager
from compiler.aot.pad_matmul import pad_matmuls
from compiler.aot.trace import AotGraph, needs_autograd, static_placeholders, trace_forward
from compiler.codegen.combo import programs as combo_programs
from compiler.codegen.common import KernelEmitter, KernelSource, kernel_arguments, shared_kernels
from compiler.codegen.emitters import emitter_for
from compiler.codegen.size_args import generic_kernels, size_generic
from compiler.codegen.wrapper import extern_lines, wrapper_source
from compiler.ir.nodes import Graph
from compiler.ir.printer import format_graph, format_schedule
from compiler.lowering.core import graph_device
from compiler.lowering.graph import lower
from compiler.records import (
    CompilerWarning,
    GraphRecord,
    KernelPart,
    KernelRecord,
    current_graph,
)
from compiler.runtime.aliasing import alias_safe, mutated_inputs
from compiler.runtime.cache import load_module
from compiler.runtime.cpp_build import CppCompileError
from compiler.runtime.eager import run_eagerly
from compiler.scheduler.fusion import schedule as fuse
from compiler.scheduler.kernel import ExternCall, KernelGroup, Schedule
from compiler.support import autocast
from compiler.support.gc_pause import gc_paused
from compiler.support.keys import SignatureKey, kept_key
from compiler.support.lazy_graphs import graph_code, runnable

# Devices whose training graphs run convolutions channels-last. On the H100, eager's NCHW
# resnet18 step spends ~0.5 ms of its ~4.5 ms of GPU time in cuDNN's NCHW<->NHWC transposes.
# On CPU, oneDNN's weight layouts cost each step a copy of every weight and of every weight
# gradient back to NCHW, unmeasured against what NHWC saves there, so CPU training keeps
# eager's layouts (tests add "cpu" here to run the NHWC training path on CPU).
TRAINING_CHANNELS_LAST: frozenset[str] = frozenset({"cuda"})

_warned: set[str] = set()


def compile_fx(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    mode: str | None = None,
    options: dict | None = None,
    strict: bool = False,
    aot: AotGraph | None = None,
) -> Callable:
    """Compile `gm` for inputs like `example_inputs`; returns a callable taking the same
    positional tensors and returning what `gm` returns. `mode`: None/"default",
    "reduce-overhead" (CUDA graphs) or "max-autotune" (Triton configs timed on the first
    call; "max-autotune-no-cudagraphs" is the same here); `compile(options=...)` arrives as
    the mode it names (backends/options.py), so `options` is a user backend's own. A failure of the code generator runs the graph eagerly unless
    `strict` (fullgraph=True), COMPILER_STRICT=1 or config.suppress_errors=False, which
    raise it. `aot`: `gm`'s aten graph for these inputs, traced already (a dynamic graph's,
    bound to their sizes: compiler/aot/symbolic.py); a graph that needs autograd traces its
    joint graph instead."""
    record = current_graph()
    if needs_autograd(gm, example_inputs):
        training = _training(gm, mode, record, strict)
        training.entry_for(list(example_inputs))
        return training
    compiled = CompiledGraph(gm, mode, record, strict=strict)
    if aot is not None:
        compiled.aot, compiled.aot_for = aot, _signature(example_inputs)
    compiled.entry_for(list(example_inputs))
    return compiled


def _training(
    gm: torch.fx.GraphModule, mode: str | None, record: GraphRecord | None, strict: bool = False
):
    """compiler/aot/training.py's joint graph and partition, each half compiled here."""
    from compiler.aot.training import CompiledTraining

    record = record if record is not None else GraphRecord(gm, gm.code, len(gm.graph.nodes))
    inference: list[CompiledGraph] = []

    def compile_half(aot: AotGraph, part: str, inputs: list | None) -> Callable:
        compiled = CompiledGraph(aot.gm, mode, record, aot, part, strict)
        if inputs is None:  # the backward: compiled at its first call
            return _guarded_after_first_call(compiled)
        # This half only ever sees inputs of this signature: call its entry directly
        # rather than computing the signature a second time per call.
        entries, key = compiled.entries, _signature(inputs)
        compiled.entry_for(inputs, key)
        return lambda *args: entries[key](*args)

    def compile_inference(inputs: list) -> Callable:
        if not inference:
            inference.append(CompiledGraph(gm, mode, record, strict=strict))
        inference[0].entry_for(inputs)
        return inference[0]

    return CompiledTraining(gm, record, compile_half, compile_inference)


def warm_up_dtypes(group: KernelGroup, sched: Schedule) -> list[torch.dtype]:
    """The dtypes a kernel is compiled ahead for, one per pointer parameter. A list of
    another length, as inputs written in place once gave, made the warm-up fail: those
    kernels then compiled one by one at their first launch (12 s of resnet18's first Adam
    step on an H100)."""
    return [sched.buffers[b].dtype for b in kernel_arguments(group)]


def _guarded_after_first_call(compiled: CompiledGraph) -> Callable:
    """A training backward's graph: its inputs have the same metadata at every call (the
    saved tensors as its forward lays them out, the gradients put in the layout it expects
    by aot/autograd.py), so after the first call only the global state is looked up, not
    each input's (about 200 µs a resnet18 step on a CI-class CPU)."""
    runner: Callable | None = None
    # A dynamic graph's backward is compiled outside its forward's compile: its kernels are
    # size-generic too (codegen/size_args.py).
    sized = size_generic if generic_kernels() else contextlib.nullcontext

    def run(*args: Any) -> Any:
        nonlocal runner
        if runner is not None:
            return runner(*args)
        with sized():
            out = compiled(*args)
        runner = compiled.for_guarded_inputs(args)
        return out

    return run


def _signature(args: Sequence[Any]) -> SignatureKey:
    return SignatureKey(
        (
            _global_state(),
            *(
                (tuple(a.shape), tuple(a.stride()), a.dtype, a.device)
                if isinstance(a, torch.Tensor)
                else (type(a), a)
                for a in args
            ),
        )
    )


def _global_state() -> tuple:
    """The state outside the arguments that changes the compiled code: the default dtype (of
    factories given none), autocast (casts before matmuls, and the dtype an extern call
    returns) and `config.emulate_precision_casts` (the kernels' half-precision roundings).
    Compiled under one and run under another, a kernel would read bfloat16 results as float32
    (garbage), return a stale dtype or round as the setting no longer says."""
    emulate = config.emulate_precision_casts
    if not torch._C._is_any_autocast_enabled():
        return (torch.get_default_dtype(), emulate)
    autocast = tuple(
        (d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in ("cpu", "cuda")
    )
    return (torch.get_default_dtype(), emulate, *autocast)


class CompiledGraph:
    """Runs the compiled code for each input signature (shapes, strides, dtypes, devices) it
    has seen, compiling on the first call with a new one.

    Given `aot`, the graph is already a functional aten graph (a training graph's forward or
    backward half, named by `part`): the aot stage is skipped and the kernels are recorded
    as that part's. With `aot_for` too, `aot` is the graph for inputs of that signature only
    (a dynamic graph's, bound to one call's sizes): others are traced.

    When compiled code raises, the graph runs again eagerly and eager decides: if it raises
    too, that is the user's error (a division by zero, an index out of range), raised as
    eager raises it, and the compiled code stays; otherwise the compiled code is at fault
    (Triton compiles a kernel at its first launch) and this kind of call runs eagerly from
    then on, with one warning and `GraphRecord.fallback`."""

    def __init__(
        self,
        gm: torch.fx.GraphModule,
        mode: str | None,
        record: GraphRecord | None,
        aot: AotGraph | None = None,
        part: str = "",
        strict: bool = False,
    ):
        self.gm = gm
        self.eager = gm.forward  # one bound method, so entries can be compared with it
        self.mode = mode
        self.record = record
        self.aot = aot
        self.part = part
        self.strict = strict
        self.entries: dict[tuple, Callable] = {}
        self.aot_for: SignatureKey | None = None

    def __call__(self, *args: Any) -> Any:
        return self._call(_signature(args), args)

    def for_guarded_inputs(self, example_inputs: Sequence[Any]) -> Callable:
        """This graph for a caller whose guards already pin each input's shape, strides,
        dtype and device to those of `example_inputs` (the tracer's guards do, for graphs
        of static shapes): per call only the global state is read, not every input's
        metadata (607 tensors for densenet121, about a millisecond a call)."""
        if not static_placeholders(self.gm):
            return self
        tail = _signature(example_inputs)[1:]
        keys: dict[tuple, tuple] = {}

        def guarded(*args: Any) -> Any:
            state = _global_state()
            key = keys.get(state)
            if key is None:
                key = keys[state] = kept_key(SignatureKey((state, *tail)), self.entries)
            return self._call(key, args)

        return guarded

    def _call(self, key: tuple, args: Sequence[Any]) -> Any:
        entry = self.entries.get(key)
        if entry is None:
            entry = self.entry_for(list(args), key)
        if entry is self.eager:
            return entry(*args)
        try:
            return entry(*args)
        except Exception as exc:
            if getattr(entry, "first_call", False) or getattr(entry, "mutated_inputs", ()):
                raise  # judged by the first call already, or inputs may be half-written
            return self._judge(key, exc, args, [])

    def entry_for(self, args: list, key: SignatureKey | None = None) -> Callable:
        """The entry for inputs like `args`, built, under `key` (their signature; a caller
        that keeps the key passes it, so its lookups find the entry by identity)."""
        key = _signature(args) if key is None else key
        aot = self.aot if self.aot_for is None or self.aot_for == key else None
        try:
            with gc_paused():  # all its stages in one pause (a backward compiles at its call)
                built = _Compiled(self.gm, args, self.mode, self.record, aot, self.part).build()
        except Exception as exc:  # never break user code: run the graph eagerly
            self.entries[key] = self._fallback(exc)
            return self.entries[key]

        def first_call(*call_args: Any) -> Any:
            saved = _save_mutated(built, call_args)
            try:
                out = built(*call_args)
            except Exception as exc:
                return self._judge(key, exc, call_args, saved)
            self.entries[key] = built
            return out

        first_call.first_call = True
        self.entries[key] = first_call
        return first_call

    def _judge(self, key: tuple, failure: Exception, args: Sequence[Any], saved: list) -> Any:
        """Eager's answer after the compiled code raised `failure` (the first call's partial
        writes to inputs undone first); eager's own error if it raises too."""
        for i, memory in saved:
            args[i].untyped_storage().copy_(memory)
        expected = run_eagerly(self.gm, args)
        self.entries[key] = self._fallback(failure)
        return expected

    def _fallback(self, exc: BaseException) -> Callable:
        if self.strict or config.strict():
            raise exc
        reason = f"{type(exc).__name__}: {exc}".strip()
        if self.record is not None:
            self.record.fallback = reason
        if isinstance(exc, CppCompileError):
            return self.eager  # the C++ build warned once already, with the compiler's output
        if reason not in _warned:
            _warned.add(reason)
            warnings.warn(
                f"compiler: graph runs eagerly because code generation failed ({reason})",
                CompilerWarning,
                stacklevel=3,
            )
        return self.eager


def _save_mutated(built: Callable, args: Sequence[Any]) -> list[tuple[int, Any]]:
    """Copies of the memory of the inputs the compiled graph writes to, so that a failed
    first call's partial writes can be undone before the graph runs eagerly (the whole
    storage: an input may be a view that cannot be written as a whole, e.g. expanded)."""
    return [
        (i, args[i].untyped_storage().clone())
        for i in getattr(built, "mutated_inputs", ())
        if isinstance(args[i], torch.Tensor)
    ]


class _Compiled:
    """One compilation for one input signature."""

    def __init__(
        self,
        gm: torch.fx.GraphModule,
        inputs: list,
        mode: str | None,
        record: GraphRecord | None,
        aot: AotGraph | None = None,
        part: str = "",
    ):
        self.gm, self.inputs, self.mode = gm, inputs, mode
        self.record = (
            record if record is not None else GraphRecord(gm, gm.code, len(gm.graph.nodes))
        )
        self.aot, self.part = aot, part
        self.debug_dir = os.environ.get("COMPILER_DEBUG_DIR")
        self.shared: dict[str, str] = {}  # kernel -> the kernel whose compiled code it runs
        self.generic: dict[str, Any] = {}  # kernel -> the size-generic kernel that runs it

    def stage(self, name: str):
        return self.record.stage(name)

    def build(self) -> Callable:
        """The stages in order, each timed into the record under its name."""
        if not all(isinstance(t, torch.Tensor) for t in self.inputs):
            raise TypeError("non-tensor graph inputs are not supported by the code generator")
        device = graph_device(self.inputs)  # its kernels' (other devices' ops: extern calls)
        emitter, why = emitter_for(device)
        if emitter is None:
            self.record.notes.append(f"ran eagerly: {why}")
            return runnable(self.gm)
        aot = self.aot
        if aot is None:
            with self.stage("aot"):
                aot = self._aot()
        with self.stage("lower"):
            aot = pad_matmuls(aot, self.record, self.part)  # inference graphs and both halves
            graph = self._lower(aot, emitter, device)
        with self.stage("schedule"):
            sched = self._schedule(graph, emitter, device)
        with self.stage("codegen"):
            kernels, source = self._codegen(sched, emitter)
        self._dump(aot, graph, sched, kernels, source)
        with self.stage("compile"):
            call = autocast.outside(self._load(emitter, sched, kernels, source, device))
        self._records(sched, kernels, source)
        return self._wrap(call, aot, graph, device)

    def _aot(self) -> AotGraph:
        """FX graph -> functional aten graph; its text too, as part of the stage's work."""
        aot = trace_forward(self.gm, self.inputs)
        self.record.aot_graphs["forward"] = graph_code(aot.gm)
        return aot

    def _lower(self, aot: AotGraph, emitter: KernelEmitter, device: torch.device) -> Graph:
        """Aten graph -> loop IR."""
        # Channels-last suits oneDNN's and cuDNN's convolutions. Training halves only on
        # the devices in TRAINING_CHANNELS_LAST: the forward's saved activations then stay
        # NHWC for the backward (lowering keeps a forward's internal outputs as laid out).
        channels_last = not self.part or device.type in TRAINING_CHANNELS_LAST
        graph, notes = lower(
            aot, self.inputs, channels_last=channels_last, welford=emitter.welford, device=device
        )
        self.record.notes.extend(n for n in notes if n not in self.record.notes)
        return graph

    def _schedule(self, graph: Graph, emitter: KernelEmitter, device: torch.device) -> Schedule:
        """Loop IR -> kernels and extern calls (fusion, buffer planning)."""
        # Emitters for parallel devices say how many processors to fill (Triton: the
        # SMs), which splits long reductions with few outputs; C++ never splits.
        return fuse(
            graph,
            materialise_recomputed=emitter.materialise_recomputed,
            processors=emitter.processors(device),
            device=device,
            # Not in a dynamic graph: a combined kernel's program table is written for each
            # size's blocks, so it would compile per size; its parts run size-generic code
            # (config.combo_kernels: compiler/optim sets it to True for its steps under "auto")
            horizontal=emitter.horizontal
            and config.combo_kernels is True
            and not generic_kernels(),
        )

    def _codegen(
        self, sched: Schedule, emitter: KernelEmitter
    ) -> tuple[dict[str, KernelSource], str]:
        """Kernel sources and the wrapper's source."""
        kernels = {k.name: emitter.emit_kernel(k, sched) for k in sched.kernels}
        what = f"the {self.part} graph" if self.part else "a graph"
        source = wrapper_source(
            sched, kernels, f"wrapper for {what} of {len(self.gm.graph.nodes)} FX nodes"
        )
        return kernels, source

    def _wrap(self, call: Callable, aot: AotGraph, graph: Graph, device: torch.device) -> Callable:
        """The compiled call as the graph is called: its outputs structured as eager's, CUDA
        graphs in reduce-overhead mode, and inputs that alias each other run eagerly."""
        mutated = mutated_inputs(aot.gm)
        mode = self.mode
        if graph.off_device:
            note = (
                f"{', '.join(graph.off_device)} ran as extern calls: they make or read tensors "
                f"of another device than the kernels' ({device})"
            )
            if mode == "reduce-overhead":  # a CUDA graph replays no host work
                note += "; no CUDA graph for this graph"
                mode = None
            if note not in self.record.notes:
                self.record.notes.append(note)
        run = _runner(call, aot, mode, device, mutated, self.record, self.part)
        run = alias_safe(run, self.gm.forward, mutated, self.record, self.inputs)
        run.mutated_inputs = mutated
        return run

    def _load(
        self,
        emitter: KernelEmitter,
        sched: Schedule,
        kernels: dict[str, KernelSource],
        source: str,
        device: torch.device,
    ) -> Callable:
        # Kernels with the same code as an earlier one are compiled once and bound to it.
        signatures = {kernels[g.name].name: warm_up_dtypes(g, sched) for g in sched.kernels}
        shared = shared_kernels(list(kernels.values()), signatures)
        self.shared = {n: first for n, first in shared.items() if n != first}  # for records
        unique = {name: k for name, k in kernels.items() if shared[k.name] == k.name}
        if len(unique) < len(kernels):
            note = (
                f"{len(kernels) - len(unique)} of {len(kernels)} kernels have the code of an "
                "earlier kernel (names and comments aside) and share its compiled code"
            )
            note = f"{self.part} graph: {note}" if self.part else note
            if note not in self.record.notes:  # a recompile for new shapes may say it again
                self.record.notes.append(note)
        loaded = dict(zip(unique, emitter.load_many(list(unique.values()), self.mode)))
        by_kernel_name = {k.name: name for name, k in kernels.items()}
        warm = [
            (loaded[g.name], signatures[kernels[g.name].name])
            for g in sched.kernels
            if g.name in unique
        ]
        for note in emitter.warm_up(warm, device):
            if note not in self.record.notes:
                self.record.notes.append(note)
        for name, k in kernels.items():
            if name not in loaded:
                loaded[name] = emitter.alias(loaded[by_kernel_name[shared[k.name]]], k)
        self._note_generic(kernels, loaded)
        module, _ = load_module(source, str(device.type), kind="wrappers", shared=False)
        # Bound under each KernelSource's own name, which its `call` line uses (the C++
        # emitter names kernels cpp_* where the scheduler's group name says triton_*).
        module.__dict__.update({kernels[name].name: fn for name, fn in loaded.items()})
        module.__dict__.update({c.name: c.value for c in sched.constants})
        module.device = device
        return module.call

    def _note_generic(self, kernels: dict[str, KernelSource], loaded: dict[str, Any]) -> None:
        """Which kernels run size-generic code (a dynamic graph's: compiled once for every
        size), for the kernel records and one note of the graph's record."""
        self.generic = {
            kernels[n].name: fn for n, fn in loaded.items() if getattr(fn, "generic", None)
        }
        if not self.generic:
            return
        prefix = f"{self.part} graph: " * bool(self.part) + "size-generic kernels: "
        note = (
            f"{prefix}{len(self.generic)} of {len(kernels)} kernels run code compiled once "
            "for every size (sizes passed as arguments)"
        )
        notes = self.record.notes
        notes[:] = [n for n in notes if not n.startswith(prefix)] + [note]

    def _records(self, sched: Schedule, kernels: dict[str, KernelSource], source: str) -> None:
        rec = self.record
        if self.part and rec.wrapper_source:  # a training graph's halves: both wrappers
            rec.wrapper_source = f"{rec.wrapper_source}\n\n{source}"
        else:
            rec.wrapper_source = source
        for launch in sched.launches:
            if isinstance(launch, KernelGroup):
                k = kernels[launch.name]
                config = dict(k.config)
                if k.name in self.shared:
                    config["compiled_as"] = self.shared[k.name]  # the same code, compiled once
                sized = self.generic.get(k.name)
                if sized is not None and sized.generic.configs:  # Triton: its range's blocks
                    config.update(sized.config)
                rec.kernels.append(
                    KernelRecord(
                        k.name,
                        k.language,
                        k.source,
                        list(launch.origins),
                        _lines(sched, launch.origins),
                        k.grid,
                        config,
                        k.bytes_accessed,
                        graph=self.part,
                        size_generic=sized.generic.name if sized else "",
                        generic_source=sized.generic.source if sized else "",
                        size_args=dict(sized.sizes) if sized else {},
                        # the generic kernel's own list: it grows as later sizes call it
                        sizes_served=sized.generic.served if sized else [],
                        parts=_parts(launch, k, sched),
                    )
                )
            else:
                assert isinstance(launch, ExternCall)
                node = launch.node
                lay = sched.buffers
                nbytes = sum(lay[n].storage_size() * lay[n].dtype.itemsize for n in launch.writes)
                rec.kernels.append(
                    KernelRecord(
                        f"extern_{node.op.split('.')[1]}_{node.name}",
                        "extern",
                        extern_lines(launch, lay),
                        list(node.origins),
                        _lines(sched, node.origins),
                        "",
                        {"op": node.op},
                        nbytes,
                        graph=self.part,
                    )
                )

    def _dump(
        self, aot: AotGraph, graph, sched: Schedule, kernels: dict[str, KernelSource], source: str
    ) -> None:
        if not self.debug_dir:
            return
        root = Path(self.debug_dir)
        root.mkdir(parents=True, exist_ok=True)
        n = len(list(root.glob("graph_*")))
        d = root / f"graph_{n}"
        d.mkdir()
        (d / "fx_graph.py").write_text(self.gm.code)
        (d / "aten_graph.py").write_text(graph_code(aot.gm))
        (d / "ir_before_fusion.txt").write_text(format_graph(graph))
        (d / "ir_after_fusion.txt").write_text(format_schedule(sched))
        code = [source] + [f"\n# ---- {k.name} ----\n{k.source}" for k in kernels.values()]
        (d / "output_code.py").write_text("\n".join(code))


def _parts(group: KernelGroup, kernel: KernelSource, sched: Schedule) -> list[KernelPart]:
    """A combined kernel's parts, with the program ids each runs on."""
    if not group.parts:
        return []
    ranges = combo_programs(group, sched, kernel.config["XBLOCK"])
    return [
        KernelPart(p.name, p.outer_numel, first, end - 1, list(p.origins))
        for p, (first, end) in zip(group.parts, ranges)
    ]


def _lines(sched: Schedule, origins: Sequence[str]) -> list:
    out, seen = [], set()
    for o in origins:
        line = sched.source_lines.get(o)
        if line is not None and id(line) not in seen:
            seen.add(id(line))
            out.append(line)
    return out


def _runner(
    call: Callable,
    aot: AotGraph,
    mode: str | None,
    device: torch.device,
    mutated: list[int],
    record: GraphRecord,
    part: str,
) -> Callable:
    """Turn `call(list) -> flat tuple` into `fn(*args) -> gm's output`, as eager returns it
    (its structure, and the outputs that are inputs or views of them: aot/outputs.py)."""
    output = next(n for n in aot.gm.graph.nodes if n.op == "output")
    _, spec = tree_flatten(plain_containers(output.args[0]))
    if mode == "reduce-overhead" and device.type == "cuda":
        from compiler.runtime.cudagraphs import CudaGraphRunner, SizeGraphs

        label = f"{part} graph: " * bool(part)
        call = CudaGraphRunner(
            call,
            mutated,
            aot.internal_from,
            aot.gradients_out,
            record.notes,
            label,
            SizeGraphs.of(record, label, record.notes),  # one record for all its sizes
        )
    return returning_as_eager(call, aot.outputs, spec)
