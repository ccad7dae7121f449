"""The compiler's settings: one module, read at the moment each setting matters.

Set one for the rest of the program with `compiler.config.cache_size_limit = 16`, or for a
block or a function with `compiler.config.patch(...)`, a context manager and a decorator:

    with compiler.config.patch(cache_size_limit=2, verbose=True):
        f(x)

    @compiler.config.patch(suppress_errors=False)
    def test_f(): ...

The settings, as torch._dynamo.config names them:

- `cache_size_limit` (default 8): how many entries one entry point of a function (its start,
  or the instruction after a graph break) may compile. The call that would compile one more
  runs the rest of the function eagerly instead, with one `CompilerWarning` that names the
  guard that failed; the function itself runs eagerly from then on when the limit is hit at
  its start.
- `suppress_errors` (default True): a failure of the compiler itself (an internal error, a
  backend that raises, a missing C++ compiler) makes the frame or graph run eagerly, with a
  `CompilerWarning` and the reason in the records. False raises it instead, as
  `COMPILER_STRICT=1` and `fullgraph=True` do. (torch.compile's default is False; this
  project's rule is that compiled code never breaks a program that runs eagerly.) Errors of
  the user's own code are raised as eager raises them either way.
- `verbose` (default False): print to stderr what the compiler does as it does it: every
  entry compiled (function, line, graph size, the guard that caused a recompile, the graph
  break), and the full traceback of every compiler failure it recovers from.
- `automatic_dynamic_shapes` (default True): with `compile(..., dynamic=None)`, a recompile
  caused by a changed tensor size traces that dimension with a symbolic size, so one entry
  serves the sizes that follow (see compiler/tracer/shapes.py).
- `emulate_precision_casts` (default False; torch._inductor.config's name): inside a fused
  kernel, float16 and bfloat16 values are computed in float32 and rounded once, where they
  are stored, as TorchInductor does: closer to the exact result than eager, which rounds
  after every op (sin(x + 10) in float16: 0.5 ulp off where eager is 8 ulp off, ulps of
  [0.5, 1)). A half value converted to an integer or bool is rounded first, as eager sees it.
  True rounds after every op as eager does, for results equal to eager's. A compiled graph
  compiles again for calls made under the other value.
- `pad_matmuls` (default "auto"; TorchInductor calls its pass pad_mm): matmuls whose sizes
  are not multiples of 16 bytes (a vocabulary of 50257) run on zero-padded operands, for
  cuBLAS's aligned kernels (compiler/aot/pad_matmul.py). "auto": on CUDA only; True: on any
  device (the CPU tests use it); False: never. Read when a graph is compiled.
- `combo_kernels` (default "auto"; torch._inductor.config's name): independent pointwise
  kernels of a graph launch as one combined Triton kernel (compiler/scheduler/horizontal.py),
  those whose every load and store is at their flat index (streaming kernels: updates,
  fills, scaling). "auto": in compiled optimizer steps only (their per-parameter updates;
  compiler/optim), where torch.compile also combines them (its foreach kernels) and where
  they were checked against eager on the H200; True: in every Triton graph (torch.compile's
  combo_kernels is off by default too); False: never. Kernels that address by coordinates
  (padding, transposes) are never combined: Triton miscompiled 32 padding parts in one
  kernel on the H200 (horizontal.py says how). Read when a graph is compiled.
- `cudagraph_size_limit` (default 512): under mode="reduce-overhead", how many sizes of one
  dynamic graph get a CUDA graph of their own (recorded at the size's first call, replayed
  at its later ones, all in one memory pool). Later sizes run their kernels without a graph,
  which the graph's record says, with one `CompilerWarning`. torch.compile also records a
  graph per distinct size (cudagraph trees), warning past 8 and re-recording a function at
  most 128 times (cudagraph_unexpected_rerecord_limit); a generation loop of 256 new tokens
  after its prompt needs 257 sizes, hence the larger default.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

cache_size_limit: int = 8
suppress_errors: bool = True
verbose: bool = False
automatic_dynamic_shapes: bool = True
emulate_precision_casts: bool = False
pad_matmuls: bool | str = "auto"
combo_kernels: bool | str = "auto"
cudagraph_size_limit: int = 512

_SETTINGS = (
    "cache_size_limit",
    "suppress_errors",
    "verbose",
    "automatic_dynamic_shapes",
    "emulate_precision_casts",
    "pad_matmuls",
    "combo_kernels",
    "cudagraph_size_limit",
)


class _Patch(contextlib.ContextDecorator):
    """`patch(...)`: the settings changed inside a `with` block or a decorated function's
    calls, and restored after, also when it raises."""

    def __init__(self, changes: dict[str, Any]) -> None:
        unknown = sorted(set(changes) - set(_SETTINGS))
        if unknown:
            raise AttributeError(
                f"compiler.config has no setting {', '.join(map(repr, unknown))}; "
                f"settings: {', '.join(_SETTINGS)}"
            )
        self.changes = changes
        self.saved: list[dict[str, Any]] = []  # a stack: the same patch may be entered twice

    def __enter__(self) -> _Patch:
        module = sys.modules[__name__]
        self.saved.append({name: getattr(module, name) for name in self.changes})
        for name, value in self.changes.items():
            setattr(module, name, value)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        module = sys.modules[__name__]
        for name, value in self.saved.pop().items():
            setattr(module, name, value)


def patch(changes: dict[str, Any] | None = None, **kwargs: Any) -> _Patch:
    """Change settings for a `with` block or a decorated function: `patch(verbose=True)` or
    `patch({"cache_size_limit": 2})`."""
    return _Patch({**(changes or {}), **kwargs})


def settings() -> dict[str, Any]:
    """The current value of every setting, by name."""
    module = sys.modules[__name__]
    return {name: getattr(module, name) for name in _SETTINGS}


def strict() -> bool:
    """Compiler failures raise instead of running eagerly: `suppress_errors=False` or
    `COMPILER_STRICT=1`."""
    return not suppress_errors or os.environ.get("COMPILER_STRICT", "") not in ("", "0")


def log(message: str) -> None:
    """One line of `verbose` output."""
    if verbose:
        print(f"[compiler] {message}", file=sys.stderr)
