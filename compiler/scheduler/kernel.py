"""What the scheduler hands to the kernel emitters (Triton, C++) and the wrapper emitter.

A `Schedule` is the lowered graph cut into launches, in order:

* `KernelGroup` — one generated kernel. It loops over `outer` variables (`x0, x1, ...`, the
  "x" dimension of a Triton grid, the outer loop nest of a C++ kernel) and, for a reduction
  kernel, over `reduction` variables (`r0, r1, ...`) inside. Its `steps` run in order at each
  outer point:
    - `Step(loop="outer")`: a value per outer point (pointwise kernels have only these; in a
      reduction kernel they come after the reductions they read, e.g. `mean = sum / n`).
    - `Step(loop="inner", reduction_type=None)`: a value per (outer, reduction) point — a
      pointwise node of the reduced input's shape fused into the kernel (e.g. softmax's
      `exp(x - max) / sum` stored in the same kernel as its reductions).
    - `Step(loop="inner", reduction_type="sum"|...)`: a reduction: `value` is evaluated per
      (outer, reduction) point and combined over the reduction variables; the result is an
      outer-level value. argmax/argmin combine positions: the flat index over `reduction`.
  Values are in terms of the kernel's own variables. A `Ref(name)` reads the value of an
  earlier step at the same point (an inner step may read outer steps and reduction results;
  an outer step may read reductions and outer steps). `Load`s read materialised buffers only
  (graph inputs, constants, or buffers written by earlier launches).
  A step with `store` writes its value to buffer `name` at logical coordinates `store`
  (one Index per buffer dimension; the buffer's Layout gives the address).
* `KernelGroup(kind="combo")` — several independent pointwise kernels launched as one
  (compiler/scheduler/horizontal.py): `parts` holds them, each with its own variables, steps
  and buffers; the combined group's reads, writes and origins are the parts' together, and
  its own `outer` and `steps` are empty. Each program of the combined kernel runs one block
  of one part, picked from its program id.
* `ExternCall` — one aten call on materialised buffers (an `ExternKernel` IR node).

`buffers` gives the Layout of every materialised buffer; `frees[k]` the buffers whose last use
is launch `k` (the wrapper drops them right after it, unless they are graph outputs).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

import torch

from compiler.ir.index import Index, Var
from compiler.ir.nodes import ConstantBuffer, ExternKernel, InputBuffer, Layout, Value


@dataclass(frozen=True)
class Step:
    name: str  # the IR node (buffer) this step computes
    loop: str  # "outer" or "inner"
    value: Value
    dtype: torch.dtype
    reduction_type: str | None = None
    store: tuple[Index, ...] | None = None  # logical coordinates in buffer `name`, if stored


@dataclass(frozen=True)
class KernelGroup:
    name: str  # e.g. "triton_poi_fused_add_cos_sin_0"; emitters may swap the "triton" prefix
    kind: str  # "pointwise", "reduction" or "combo"
    outer: tuple[Var, ...]
    reduction: tuple[Var, ...]
    steps: tuple[Step, ...]
    reads: tuple[str, ...]  # materialised buffers loaded, in first-use order
    writes: tuple[str, ...]  # buffers stored
    origins: tuple[str, ...]  # FX node names fused into this kernel
    ir_nodes: tuple[str, ...]  # IR node names fused into this kernel
    notes: tuple[str, ...] = ()  # lines for the kernel's header (a split reduction's stage)
    parts: tuple["KernelGroup", ...] = ()  # a combo kernel's pointwise kernels, in order

    @property
    def outer_numel(self) -> int:
        return _prod(v.size for v in self.outer)

    @property
    def reduction_numel(self) -> int:
        return _prod(v.size for v in self.reduction)


@dataclass(frozen=True)
class ExternCall:
    node: ExternKernel

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def writes(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.node.outputs)


Launch = Union[KernelGroup, ExternCall]


@dataclass(frozen=True)
class Schedule:
    inputs: tuple[InputBuffer, ...]
    constants: tuple[ConstantBuffer, ...]
    launches: tuple[Launch, ...]
    buffers: dict[str, Layout] = field(hash=False)  # every materialised buffer (inputs too)
    frees: tuple[tuple[str, ...], ...] = ()  # per launch: buffers dead after it
    outputs: tuple[Any, ...] = ()  # TensorArg views of buffers, or Python constants
    source_lines: dict[str, Any] = field(default_factory=dict, hash=False)  # FX node -> SourceLine

    @property
    def kernels(self) -> list[KernelGroup]:
        return [k for k in self.launches if isinstance(k, KernelGroup)]


def _prod(xs) -> int:
    n = 1
    for x in xs:
        n *= x
    return n
