"""tests/codegen: Triton kernels run in Triton's interpreter on CPU tensors here.

TRITON_INTERPRET must be set before triton is first imported, hence at conftest import.
(The C++ emitter's tests in this folder are unaffected: on CPU the C++ emitter is chosen
unless COMPILER_CPU_EMITTER=triton, which the Triton tests set for themselves.)
"""

import os

if os.environ.get("CODEGEN_TEST_DEVICE", "cpu") == "cpu":  # on a GPU, real Triton
    os.environ.setdefault("TRITON_INTERPRET", "1")
