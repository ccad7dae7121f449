"""Our own entries of the decomposition table (compiler/aot/decompositions.py): the same
values as torch's reference decompositions they replace, in fewer aten ops."""

from __future__ import annotations

import pytest
import torch
from torch.func import functionalize
from torch.fx.experimental.proxy_tensor import make_fx

import compiler
from compiler.aot.decompositions import decomposition_table

LERP = torch.ops.aten.lerp.Scalar


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("weight", [0.1, 1 - 0.9, 1 - 0.999, 0.5, 0.49999, 0.9, 2.0, -0.7, 1, 0])
def test_lerp_with_a_number_weight_matches_the_reference(weight, dtype):
    ours = decomposition_table()[LERP]
    reference = ours.args[0]  # torch._refs.lerp, which ours falls back to
    start, end = torch.randn(257, dtype=dtype), torch.randn(257, dtype=dtype)
    expected = reference(start, end, weight)
    actual = ours(start, end, weight)
    assert actual.dtype == expected.dtype and actual.stride() == expected.stride()
    assert torch.equal(actual, expected)


def _aten_ops(fn, *args) -> list[str]:
    gm = make_fx(functionalize(fn), decomposition_table=decomposition_table(), tracing_mode="fake")(
        *args
    )
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


def test_lerp_with_a_number_weight_is_three_ops_in_float32():
    ops = _aten_ops(lambda a, b: a.lerp_(b, 0.1), torch.randn(4), torch.randn(4))
    assert ops == ["aten.sub.Tensor", "aten.mul.Tensor", "aten.add.Tensor", "aten.copy_.default"]
    # other dtypes, broadcasting and tensor weights keep the reference's decomposition
    assert "aten.where.self" in _aten_ops(
        lambda a, b: a.lerp(b, 0.1), torch.randn(4, dtype=torch.bfloat16),
        torch.randn(4, dtype=torch.bfloat16),
    )  # fmt: skip
    assert "aten.where.self" in _aten_ops(
        lambda a, b: a.lerp(b, 0.1), torch.randn(4), torch.randn(3, 4)
    )
    assert "aten.where.self" in _aten_ops(
        lambda a, b, w: a.lerp(b, w), torch.randn(4), torch.randn(4), torch.tensor(0.3)
    )


@pytest.mark.parametrize("weight", [0.1, 0.75])
def test_compiled_lerp_matches_eager(weight):
    fn = compiler.compile(lambda a, b: (a.lerp(b, weight), b.clone().lerp_(a, weight)))
    a, b = torch.randn(64, 33), torch.randn(64, 33)
    for actual, expected in zip(fn(a, b), (a.lerp(b, weight), b.clone().lerp_(a, weight))):
        torch.testing.assert_close(actual, expected, rtol=1e-6, atol=1e-7)
