"""The built-in backends: eager, aot_eager, inductor (ours) and cudagraphs."""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from compiler.backends.registry import _builtin


@_builtin("eager")
def eager(gm: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor]) -> Callable:
    """Run the captured FX graph with torch ops: no code generation."""
    return gm.forward


@_builtin("inductor")
def inductor(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[torch.Tensor],
    mode: str | None = None,
    options: dict | None = None,
) -> Callable:
    """Our code generator (compiler/codegen)."""
    from compiler.codegen.compile_fx import compile_fx

    return compile_fx(gm, example_inputs, mode=mode, options=options)
