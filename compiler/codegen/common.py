"""The interface between the wrapper emitter and the kernel emitters (Triton, C++).

A kernel emitter turns one `KernelGroup` of a `Schedule` into a `KernelSource`: a
self-contained module text that defines the kernel, plus the wrapper line that launches it.
The wrapper emitter (compiler/codegen/wrapper.py) only pastes `call` lines; the runtime loads
every kernel through its emitter's `load`, and binds the result to `KernelSource.name` in the
wrapper's namespace. So a new backend language is one module exposing an object that follows
`KernelEmitter`, registered for a device type with `register_emitter`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, Sequence

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


class KernelEmitter(Protocol):
    language: str

    def emit_kernel(self, group: KernelGroup, schedule: Schedule) -> KernelSource:
        """Generate the kernel of one fused group."""

    def load(self, kernel: KernelSource, mode: str | None) -> Any:
        """Compile (or find in the disk cache) and return the object `kernel.call` uses."""


_EMITTERS: dict[str, Callable[[], KernelEmitter | None]] = {}


def register_emitter(device_type: str, factory: Callable[[], KernelEmitter | None]) -> None:
    """`factory()` returns the emitter for tensors on `device_type`, or None if unavailable."""
    _EMITTERS[device_type] = factory


def emitter_for(device: torch.device) -> tuple[KernelEmitter | None, str]:
    """The kernel emitter for `device` and a readable reason when there is none.

    CUDA: Triton. CPU: the C++ emitter (compiler.codegen.cpp, exposing `EMITTER`) when it
    imports, else Triton in its interpreter when TRITON_INTERPRET=1. COMPILER_CPU_EMITTER=triton
    picks the interpreted Triton path on CPU even when C++ is available (how the Triton
    kernels are tested on machines without a GPU).
    """
    if device.type in _EMITTERS:
        emitter = _EMITTERS[device.type]()
        if emitter is not None:
            return emitter, ""
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    if device.type == "cuda":
        from compiler.codegen.triton import TritonEmitter

        return TritonEmitter(), ""
    if device.type != "cpu":
        return None, f"no kernel emitter for device type {device.type!r}"
    if os.environ.get("COMPILER_CPU_EMITTER") == "triton" and interpret:
        from compiler.codegen.triton import TritonEmitter

        return TritonEmitter(), ""
    try:
        from compiler.codegen import cpp

        emitter = getattr(cpp, "EMITTER", None)
    except ImportError:
        emitter = None
    if emitter is not None:
        return emitter, ""
    if interpret:
        from compiler.codegen.triton import TritonEmitter

        return TritonEmitter(), ""
    return None, "no CPU kernel emitter is available (compiler.codegen.cpp did not load)"


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
