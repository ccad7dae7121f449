"""Which kernel emitter generates a device's kernels (compiler/codegen/common.py's
`KernelEmitter`): Triton for CUDA, C++ for CPU."""

from __future__ import annotations

import os

import torch

from compiler.codegen.common import KernelEmitter


def emitter_for(device: torch.device) -> tuple[KernelEmitter | None, str]:
    """The kernel emitter for `device` and a readable reason when there is none.

    CUDA: Triton. CPU: the C++ emitter (compiler.codegen.cpp, exposing `EMITTER`) when it
    imports, else Triton in its interpreter when TRITON_INTERPRET=1. COMPILER_CPU_EMITTER=triton
    picks the interpreted Triton path on CPU even when C++ is available (how the Triton
    kernels are tested on machines without a GPU).
    """
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
