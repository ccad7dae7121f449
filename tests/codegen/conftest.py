"""tests/codegen: Triton kernels run in Triton's interpreter on CPU tensors here.

TRITON_INTERPRET must be set before triton is first imported, hence at conftest import.
(The C++ emitter's tests in this folder are unaffected: on CPU the C++ emitter is chosen
unless COMPILER_CPU_EMITTER=triton, which the Triton tests set for themselves.)
"""

import os
import sys

import pytest

if os.environ.get("CODEGEN_TEST_DEVICE", "cpu") == "cpu":  # on a GPU, real Triton
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The OpInfo suite's counts per device and dtype, when its cases ran (in a hook: what a
    test or fixture writes is captured)."""
    cases = sys.modules.get("tests.codegen.opinfo_cases")
    if cases is not None and cases.RESULTS:
        terminalreporter.write_line("OpInfo differential suite, samples per device and dtype:")
        terminalreporter.write_line(cases.summary_table(cases.RESULTS))
