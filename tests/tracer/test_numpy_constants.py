"""numpy scalars computed while tracing are constants of the graph, on every backend and
through explain: `x.sum() + np.sqrt(2.0)` raised `NameError: name 'np' is not defined` from
the generated graph code (FX wrote the scalar's repr, `np.float64(1.41...)`), and a numpy
call broke the graph."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import compiler

BACKENDS = ["eager", "aot_eager", "inductor"]
SCALE = np.float32(0.25)  # a global numpy scalar: guarded by type and value


def _sqrt(x):
    return x.sum() + np.sqrt(2.0)


def _pi(x):
    return torch.sin(x * np.pi)


def _float32(x):
    return x / np.float32(3.0)


def _float64_int64(x):
    return x + np.float64(1.5) * np.int64(2)


def _attention_scale(q, k):
    return (q @ k.transpose(-1, -2)) / np.sqrt(q.shape[-1])


def _tensor_of_scalar(x):
    # torch infers float64 from a numpy float64 (float32 from a Python float)
    return torch.tensor(np.float64(1.5)) + x.double().sum(), torch.tensor(np.int32(3)) + 1


def _global_scalar(x):
    return x * SCALE + np.exp(np.float32(1.0))


CASES = [
    (_sqrt, [(4,)]),
    (_pi, [(4,)]),
    (_float32, [(4,)]),
    (_float64_int64, [(3, 2)]),
    (_attention_scale, [(2, 3, 8), (2, 5, 8)]),
    (_tensor_of_scalar, [(4,)]),
    (_global_scalar, [(4,)]),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn,shapes", CASES, ids=[c[0].__name__ for c in CASES])
def test_numpy_scalars_are_graph_constants(fn, shapes, backend):
    compiled = compiler.compile(fn, backend=backend, fullgraph=True)
    for _ in range(2):
        args = [torch.randn(s) for s in shapes]
        expected, actual = fn(*args), compiled(*args)
        torch.testing.assert_close(actual, expected)
        for e, a in zip(
            expected if isinstance(expected, tuple) else [expected],
            actual if isinstance(actual, tuple) else [actual],
        ):
            assert a.dtype == e.dtype


@pytest.mark.parametrize("fn", [_sqrt, _float32, _global_scalar])
def test_explain_shows_one_graph(fn):
    report = compiler.explain(fn)(torch.randn(4))
    assert report.graph_count == 1 and report.graph_break_count == 0, report


def test_numpy_array_is_not_folded():
    """A numpy function of an array is not a constant: the array may change between calls."""
    table = np.arange(3.0)

    def f(x):
        return x * np.sum(table)

    compiled = compiler.compile(f, backend="eager")
    torch.testing.assert_close(compiled(torch.ones(2)), f(torch.ones(2)))
    table[0] = 10.0
    torch.testing.assert_close(compiled(torch.ones(2)), f(torch.ones(2)))
