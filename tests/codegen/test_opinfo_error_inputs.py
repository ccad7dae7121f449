"""torch's OpInfo `error_inputs` (inputs every op must reject, with the exception type eager
raises), run through compiler.compile with our code generator: the exception type must be
eager's. Before compiler/tracer/eager_checks.py, index_add with a source of the wrong shape
and multinomial into a float64 out= returned a result where eager raised.

Every OpInfo of op_db that has error inputs runs (a superset of the ops the lowering table
covers): about 700 inputs, each compiled fresh; almost all raise while tracing, so the run
takes about half a minute on two cores after op_db's import. `OPINFO_ERRORS_OPS=add,cat`
runs only the named OpInfos. On a CUDA machine the same inputs run on the GPU too (the
`gpu` test). Skips are in SKIPS, with the reason; the counts are written to
test-output/opinfo-error-inputs-<device>.txt.
"""

from __future__ import annotations

import fnmatch
import os
import warnings
from collections import Counter

import pytest

import compiler
from tests.conftest import REPO_ROOT

pytest.importorskip("expecttest")  # torch.testing._internal imports it

# (OpInfo name pattern, reason): error inputs not run.
SKIPS: list[tuple[str, str]] = [
    ("jiterator_*", "CUDA kernels built by torch from source strings at run time, not ops"),
]


def _skip_reason(name: str) -> str | None:
    return next((why for pat, why in SKIPS if fnmatch.fnmatch(name, pat)), None)


def _opinfos() -> list:
    from torch.testing._internal.common_methods_invocations import op_db

    only = os.environ.get("OPINFO_ERRORS_OPS")
    names = set(only.split(",")) if only else None
    return [
        op
        for op in op_db
        if op.error_inputs_func is not None and (names is None or op.name in names)
    ]


def _outcome(fn, args) -> type | None:
    try:
        fn(*args)
    except Exception as e:
        return type(e)
    return None


def _run(device: str) -> Counter:
    counts: Counter = Counter()
    failures: list[str] = []
    skipped: dict[str, str] = {}
    for op in _opinfos():
        reason = _skip_reason(op.name)
        if reason is not None:
            skipped[op.name] = reason
            continue
        try:
            error_inputs = list(op.error_inputs(device))
        except Exception as e:  # the sampler itself needs what this device lacks
            skipped[op.name] = f"error_inputs() raised {type(e).__name__}"
            continue
        for ei in error_inputs:
            sample = ei.sample_input

            def call(inp, *args, _op=op.op, _kwargs=sample.kwargs):
                return _op(inp, *args, **_kwargs)

            args = (sample.input, *sample.args)
            expected = _outcome(call, args)
            if expected is None:
                counts["eager does not raise"] += 1
                continue
            compiler.reset()
            actual = _outcome(compiler.compile(call), args)
            if actual is expected:
                counts["same type"] += 1
            else:
                counts["failed"] += 1
                failures.append(
                    f"{op.name}: eager raises {expected.__name__}, compiled "
                    f"{'returns' if actual is None else 'raises ' + actual.__name__} "
                    f"({ei.error_regex!r})"
                )
    counts["OpInfos"] = len(_opinfos()) - len(skipped)
    out = REPO_ROOT / "test-output" / f"opinfo-error-inputs-{device}.txt"
    out.parent.mkdir(exist_ok=True)
    out.write_text(
        "\n".join(
            [f"{k}: {v}" for k, v in sorted(counts.items())]
            + [f"skipped {k}: {v}" for k, v in skipped.items()]
            + failures
        )
        + "\n"
    )
    assert not failures, "\n".join(failures)
    return counts


@pytest.mark.timeout(600)
def test_error_inputs_raise_as_eager_on_cpu():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        counts = _run("cpu")
    assert counts["same type"] > 0


@pytest.mark.gpu
@pytest.mark.timeout(600)
def test_error_inputs_raise_as_eager_on_cuda():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        counts = _run("cuda")
    assert counts["same type"] > 0
