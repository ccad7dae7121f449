"""Graphs that need autograd, as named stages:

    aot        FX graph -> the joint forward+backward aten graph (joint.py)
    partition  joint graph -> forward graph + backward graph (partition.py)

then each half goes to the backend's own compiler (compile_fx's lower, schedule, codegen and
compile stages for `inductor`; nothing for `aot_eager`, which runs the aten graphs with torch
ops), and the two halves are wrapped in a torch.autograd.Function (autograd.py), so
`loss.backward()` runs the compiled backward. The forward compiles at the first call, the
backward at the first backward (as torch.compile does: a forward with grad on that is never
differentiated does not pay for it).

A graph that cannot be compiled for training by design (an output aliasing an input, an
input that requires grad mutated in place, a backward that needs an input's value from
before the graph mutated it) runs eagerly with a note saying why; anything that fails
unexpectedly falls back the same way with a warning, as compile_fx does
(COMPILER_STRICT=1 and config.suppress_errors=False raise instead).
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Sequence

import torch

from compiler import config
from compiler.aot.autograd import TrainingGraph
from compiler.aot.joint import (
    JointError,
    JointGraph,
    NothingToDifferentiate,
    lift_attributes,
    trace_joint,
)
from compiler.aot.partition import Partition, PartitionError, partition
from compiler.aot.trace import AotGraph, needs_autograd, static_placeholders
from compiler.records import GraphRecord, PartitionRecord, SavedTensorRecord
from compiler.support.keys import SignatureKey, kept_key
from compiler.support.lazy_graphs import graph_code

# (graph half, its part name "forward"/"backward", the forward's example inputs or None for
# the backward, compiled at its first call) -> a callable returning the half's flat outputs
HalfCompiler = Callable[[AotGraph, str, "list | None"], Callable]
# example inputs -> a callable for the graph without autograd (grad mode off, ...)
InferenceCompiler = Callable[[list], Callable]

_warned: set[str] = set()


class CompiledTraining:
    """Compiled code per input signature: a TrainingGraph when the call records autograd
    history, the backend's inference compile when it does not (grad mode off, nothing
    requires grad)."""

    def __init__(
        self,
        gm: torch.fx.GraphModule,
        record: GraphRecord | None,
        compile_half: HalfCompiler,
        compile_inference: InferenceCompiler,
    ):
        self.static = static_placeholders(gm)  # before lifting adds placeholders of its own
        self.gm, self.lifted = lift_attributes(gm)
        self.record = (
            record if record is not None else GraphRecord(gm, gm.code, len(gm.graph.nodes))
        )
        self.compile_half, self.compile_inference = compile_half, compile_inference
        self.entries: dict[tuple, Callable] = {}

    def __call__(self, *args: Any) -> Any:
        full = [*args, *self.lifted]
        entry = self.entries.get(_key(full))
        if entry is None:
            entry = self.entry_for(list(args))
        return entry(*full)

    def for_guarded_inputs(self, example_inputs: Sequence[Any]) -> Callable:
        """As CompiledGraph.for_guarded_inputs: the tracer's guards pin the inputs' metadata,
        requires_grad and the grad mode, so the key of every call is the example's."""
        if not self.static:
            return self
        key = kept_key(_key([*example_inputs, *self.lifted]), self.entries)
        entries, lifted = self.entries, self.lifted

        def guarded(*args: Any) -> Any:
            entry = entries.get(key)
            if entry is None:
                entry = self.entry_for(list(args), key)
            return entry(*args, *lifted)

        return guarded

    def entry_for(self, args: list, key: SignatureKey | None = None) -> Callable:
        full = [*args, *self.lifted]
        key = _key(full) if key is None else key
        if not needs_autograd(self.gm, full):
            self.entries[key] = self.compile_inference(full)
            return self.entries[key]
        try:
            self.entries[key] = self._build(full)
        except NothingToDifferentiate:
            self.entries[key] = self.compile_inference(full)
        except (JointError, PartitionError) as exc:
            self._note(f"training graph runs eagerly: {exc}")
            self.entries[key] = self.gm.forward
        except Exception as exc:  # never break user code: run the graph eagerly
            if config.strict():
                raise
            self.entries[key] = self._fallback(exc)
        return self.entries[key]

    def _build(self, inputs: list) -> TrainingGraph:
        rec = self.record
        # each stage includes writing its graphs' text (the graph modules are lazy)
        with rec.stage("aot"):
            joint = trace_joint(self.gm, inputs)
            rec.aot_graphs["joint"] = graph_code(joint.aot.gm)
        with rec.stage("partition"):
            part = partition(joint)
            rec.aot_graphs["forward"] = graph_code(part.forward.gm)
            rec.aot_graphs["backward"] = graph_code(part.backward.gm)
        rec.partition = _partition_record(self.gm, joint, part)
        inputs_kept = sum(s.is_input for s in part.saved)
        rec.notes.append(
            f"the backward keeps {inputs_kept} graph inputs and "
            f"{len(part.saved) - inputs_kept} intermediate tensors "
            f"({rec.partition.saved_bytes / 2**20:.2f} MiB), and recomputes "
            f"{len(part.recomputed)} forward ops"
        )
        forward = self.compile_half(part.forward, "forward", inputs)
        backward = self.compile_half(part.backward, "backward", None)
        return TrainingGraph(joint, part, forward, backward)

    def _note(self, text: str) -> None:
        if text not in self.record.notes:
            self.record.notes.append(text)

    def _fallback(self, exc: BaseException) -> Callable:
        reason = f"{type(exc).__name__}: {exc}".strip()
        self.record.fallback = reason
        if reason not in _warned:
            _warned.add(reason)
            warnings.warn(
                f"compiler: training graph runs eagerly because compiling it failed ({reason})",
                stacklevel=4,
            )
        return self.gm.forward


def _key(args: list) -> SignatureKey:
    return SignatureKey(
        (
            tuple(
                (tuple(a.shape), tuple(a.stride()), a.dtype, a.device, a.requires_grad)
                if isinstance(a, torch.Tensor)
                else (type(a), a)
                for a in args
            ),
            torch.is_grad_enabled(),
        )
    )


def _partition_record(
    gm: torch.fx.GraphModule, joint: JointGraph, part: Partition
) -> PartitionRecord:
    names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    lines = joint.aot.source_lines
    saved = []
    for s in part.saved:
        seen = {(ln.filename, ln.lineno): ln for o in s.origins if (ln := lines.get(o))}
        saved.append(
            SavedTensorRecord(
                s.name,
                s.size,
                str(s.dtype).replace("torch.", ""),
                s.nbytes,
                list(s.origins),
                list(seen.values()),
                s.is_input,
            )
        )
    return PartitionRecord(saved, list(part.recomputed), [names[i] for i in part.mutated])
