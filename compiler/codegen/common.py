"""The interface between the wrapper emitter and the kernel emitters (Triton, C++).

A kernel emitter turns one `KernelGroup` of a `Schedule` into a `KernelSource`: a
self-contained module text that defines the kernel, plus the wrapper line that launches it.
The wrapper emitter (compiler/codegen/wrapper.py) only pastes `call` lines; the runtime loads
every kernel through its emitter's `load`, and binds the result to `KernelSource.name` in the
wrapper's namespace. So a new backend language is one module with a `KernelEmitter` subclass,
picked for a device by compiler/codegen/emitters.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import torch

from compiler import config
from compiler.ir.index import Var
from compiler.ir.nodes import Layout
from compiler.scheduler.kernel import KernelGroup, Schedule


@dataclass(frozen=True)
class KernelSource:
    name: str  # bound in the wrapper's namespace to whatever `load` returns
    language: str  # "triton" or "cpp"
    source: str  # module text; the runtime writes it to the kernel cache and loads it
    call: str  # one wrapper line launching it, e.g. "triton_poi_fused_sin_0.run(arg0, buf0)"
    grid: str = ""  # readable launch grid, for the inspector
    config: dict[str, Any] = field(default_factory=dict)  # block sizes, warps, ...
    bytes_accessed: int = 0  # minimal bytes read + written


# Whole-line comments per language: kernels name their FX nodes, user lines and buffers there.
_COMMENT = {"cpp": "//", "triton": "#"}


def shared_kernels(
    kernels: Sequence[KernelSource], signatures: Mapping[str, Sequence[torch.dtype]]
) -> dict[str, str]:
    """Kernel name -> the name of the first kernel with the same code and signature (itself
    when none).

    Kernels that differ only in their name and comments compile to the same code: repeated
    blocks of a network (resnet's batch norms of one shape) and an optimizer step's updates
    of same-sized parameters. The runtime compiles the first of each set and binds the others
    to it. Only whole comment lines are ignored, so kernels whose code differs in anything,
    launch grid and configuration included, stay apart. `signatures` holds each kernel's
    pointer dtypes: a Triton kernel's text names no dtype (its loads take their pointers'
    types), so one text is a different program for other dtypes: a copy of int32 and one of
    float64 must never share the binary compiled for the first."""
    first: dict[tuple, str] = {}
    out: dict[str, str] = {}
    for k in kernels:
        comment = _COMMENT.get(k.language)
        lines = k.source.splitlines()
        if comment is not None:
            lines = [line for line in lines if not line.lstrip().startswith(comment)]
        code = re.sub(rf"\b{re.escape(k.name)}\b", "@kernel@", "\n".join(lines))
        signature = tuple(signatures[k.name])
        key = (k.language, code, signature, k.grid, repr(sorted(k.config.items(), key=repr)))
        out[k.name] = first.setdefault(key, k.name)
    return out


class KernelEmitter:
    """What the driver (compiler/backends/inductor.py) asks of a kernel language. A subclass
    gives `language`, `emit_kernel` and `load`; the other methods have the defaults of a
    language that compiles kernels one by one and needs no warm-up."""

    language: str = ""
    # Variances in one Welford pass (Triton); C++ keeps two passes in one kernel, whose
    # loops vectorise with OpenMP `simd reduction(+)` clauses a Welford state cannot use.
    welford: bool = True
    # Values that consumers would recompute many times over written out as buffers before
    # the kernels that read them (C++; compiler/scheduler/fusion.py's inline).
    materialise_recomputed: bool = False
    # Independent pointwise kernels launched as one combined kernel (compiler/scheduler/
    # horizontal.py; the emitter then writes KernelGroups of kind "combo").
    horizontal: bool = False

    def emit_kernel(self, group: KernelGroup, schedule: Schedule) -> KernelSource:
        """Generate the kernel of one fused group."""
        raise NotImplementedError

    def load(self, kernel: KernelSource, mode: str | None) -> Any:
        """Compile (or find in the disk cache) and return the object `kernel.call` uses."""
        raise NotImplementedError

    def load_many(self, kernels: Sequence[KernelSource], mode: str | None) -> list[Any]:
        """`load` of each kernel; a language that compiles several together overrides it."""
        return [self.load(k, mode) for k in kernels]

    def alias(self, loaded: Any, kernel: KernelSource) -> Any:
        """`kernel` run by `loaded`, the compiled code of an earlier kernel with its code."""
        return loaded

    def processors(self, device: torch.device) -> int | None:
        """How many programs `device` runs at once, for the scheduler's split of long
        reductions with few outputs; None: never split."""
        return None

    def warm_up(
        self, kernels: Sequence[tuple[Any, list[torch.dtype]]], device: torch.device
    ) -> list[str]:
        """Compile loaded kernels ahead of their first launch, each for the dtypes of its
        pointer parameters; returns notes for the graph's record."""
        return []


LOW_PRECISION = (torch.float16, torch.bfloat16)


def keeps_float32(src: torch.dtype, dst: torch.dtype) -> bool:
    """Whether a kernel converting a floating `src` value to half-precision `dst` keeps it
    in float32 instead (the value is rounded once, where it is stored). Lowering converts each
    op's result to its dtype, as eager rounds it; inside a fused kernel that rounding is
    skipped, as in TorchInductor, unless `config.emulate_precision_casts`."""
    return dst in LOW_PRECISION and src.is_floating_point and not config.emulate_precision_casts


def rounds_source(src: torch.dtype, dst: torch.dtype) -> bool:
    """Whether a half-precision `src` value converted to an integer or bool `dst` is first
    rounded to `src` (it may be a float32 value `keeps_float32` kept): truncation and `!= 0`
    then see the value eager sees (`(x * 3).half().long()`)."""
    return src in LOW_PRECISION and not dst.is_floating_point and not config.emulate_precision_casts


def kernel_arguments(group: KernelGroup) -> list[str]:
    """The buffers a kernel takes, in its parameters' order: those it reads, then those it
    writes, each once (an input written in place is read and written through one pointer)."""
    return list(dict.fromkeys((*group.reads, *group.writes)))


def store_order(group: KernelGroup, buffers: dict[str, Layout]) -> list[Var]:
    """The kernel's outer variables, outermost first, ordered so the smallest stride of its
    first store varies fastest: channels-last and transposed outputs are then written
    contiguously (C++: the innermost loop vectorises; Triton: neighbouring lanes of a block
    store to neighbouring addresses)."""
    outer = list(group.outer)
    stored = next((s for s in group.steps if s.store is not None), None)
    if stored is None or len(outer) < 2:
        return outer
    addr = buffers[stored.name].index(stored.store)
    strides = {}
    for v in outer:
        c = addr.coefficient(v)
        if not c:
            return outer
        strides[v] = abs(c)
    return sorted(outer, key=lambda v: -strides[v])
