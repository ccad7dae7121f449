"""OpInfo-driven differential suite: torch's own OpInfo samples, compiled with the default
backend (C++ kernels on CPU, Triton on CUDA), against eager, for every OpInfo whose aten
graph reaches our lowering table and every dtype OpInfo lists for it.

One test per (OpInfo, dtype, device). The machinery, the selection, the way each sample is
judged and the skip list (`SKIPS`, every skip with its reason, in one list) are in
tests/codegen/opinfo_cases.py. CI runs the first sample of each case
(`opinfo_cases.CI_SAMPLES`); OPINFO_FULL=1 runs all of them, OPINFO_SHARD=i/n a slice of
the OpInfos (for n processes or machines). A case fails when any of its
samples gives a wrong value, dtype, shape or structure, or raises unlike eager; samples the
compiler ran eagerly (a fallback or a graph break) do not fail it but are counted apart
from the passes, in the table printed at the end of the session (by
tests/codegen/conftest.py; and by
`python -m tests.codegen.opinfo_cases`, which needs no pytest).

On a GPU machine, Triton on CUDA (the `gpu`-marked cases; CODEGEN_TEST_DEVICE=cuda keeps
tests/codegen/conftest.py from turning on Triton's interpreter):
    CODEGEN_TEST_DEVICE=cuda pytest tests/codegen/test_opinfo_differential.py -k cuda
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("expecttest")  # torch's OpInfo database imports it (a dev dependency)

from tests.codegen import opinfo_cases as oc

pytestmark = pytest.mark.filterwarnings("ignore")

# The cases of the op being tested: all its dtypes run together (one C++ build), on the
# first of its tests; the parametrization keeps an op's dtypes next to each other.
_CURRENT: dict[tuple[str, str], dict[torch.dtype, oc.CaseResult]] = {}


def _params() -> list:
    out = []
    for device, marks in (("cpu", ()), ("cuda", (pytest.mark.gpu,))):
        try:
            cases = oc.cases(device)
        except RuntimeError:  # no CUDA: the dtypes OpInfo lists for it are still known
            cases = []
        for name, dtype in cases:
            out.append(
                pytest.param(
                    name, dtype, device, marks=marks, id=f"{device}-{name}-{oc.dtype_name(dtype)}"
                )
            )
    return out


@pytest.mark.parametrize(("op_name", "dtype", "device"), _params())
def test_opinfo(op_name: str, dtype: torch.dtype, device: str) -> None:
    if (op_name, device) not in _CURRENT:
        _CURRENT.clear()
        _CURRENT[op_name, device] = {r.dtype: r for r in oc.op_results(op_name, device)}
    result = _CURRENT[op_name, device][dtype]
    oc.RESULTS.append(result)  # tests/codegen/conftest.py prints their table
    reason = oc.whole_case_skip(op_name, dtype)
    if reason is not None:
        pytest.skip(reason)
    failures = result.failures()
    assert not failures, "\n".join(f"[{o.sample}] {o.detail}" for o in failures)


def test_selection_reaches_the_lowering_table() -> None:
    """The suite covers the OpInfos of the ops we lower (a broken trace of the selection
    would silently leave the suite empty)."""
    names = set(oc.lowered_ops(sharded=False))
    for expected in ("add", "sin", "sum", "where", "cat", "mm", "amax", "gather"):
        assert expected in names
    assert "linalg.svd" not in names  # all extern calls


def test_judge_catches_wrong_values_dtypes_and_raises() -> None:
    """The comparison the suite relies on: each kind of difference is reported."""
    a = torch.tensor([1.0, 2.0])
    assert oc._compare((a,), (a.clone(),), None) is None
    assert "dtype" in oc._compare((a.double(),), (a,), None)
    assert "shape" in oc._compare((a[:1],), (a,), None)
    assert oc._compare((a + 1,), (a,), None) is not None
    raised = oc._Raised(IndexError("x"))
    assert oc._compare(raised, oc._Raised(IndexError("y")), None) is None
    assert oc._compare(oc._Raised(RuntimeError("y")), raised, None) is not None
    assert oc._compare((a,), raised, None) is not None
    # float16: closer to the float32 truth than eager passes, farther does not
    truth = torch.tensor([1.0004])
    eager = torch.tensor([1.0], dtype=torch.float16)
    assert oc._compare((truth.half(),), (eager,), lambda: (truth,)) is None
    assert oc._compare((torch.tensor([1.01], dtype=torch.float16),), (eager,), lambda: (truth,))
