"""tests/aot: without a GPU, Triton kernels run in Triton's interpreter on CPU tensors (the
C++ emitter stays the CPU default unless a test sets COMPILER_CPU_EMITTER=triton).
TRITON_INTERPRET must be set before triton is first imported, hence at conftest import."""

import os

import torch

if not torch.cuda.is_available():  # on a GPU machine the gpu tests use real Triton
    os.environ.setdefault("TRITON_INTERPRET", "1")
