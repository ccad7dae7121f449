"""Reduction rows in the C++ kernels (compiler/codegen/cpp_rows.py and the exp of the
prelude), through the whole CPU pipeline against eager: a softmax computes each exp once
(later passes read a row cache), a short contiguous row vectorises along itself, and masked
scores (-inf, -3.4e38) take the vector exp like any other."""

from __future__ import annotations

import pytest
import torch

import compiler
from compiler.ir.nodes import Op
from tests.codegen.test_cpp_kernels import pointwise

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(tmp_path))


def _tol(dtype: torch.dtype) -> dict:
    if dtype in (torch.float16, torch.bfloat16):
        return {"atol": 1e-2, "rtol": 1e-2}
    return {"atol": 1e-5, "rtol": 1.3e-6}  # a float32 softmax, also of float64 scores


def _run(fn, *inputs):
    """Compiled and eager results on `inputs` and on fresh inputs of the same kind, and the
    C++ sources of the one graph."""
    compiled = compiler.compile(fn)
    with torch.no_grad():
        pairs = [(compiled(*inputs), fn(*inputs))]
        fresh = [torch.randn_like(t) if t.is_floating_point() else t for t in inputs]
        pairs.append((compiled(*fresh), fn(*fresh)))
    (graph,) = compiler.inspect(compiled).graphs
    assert graph.fallback is None
    return pairs, [k.source for k in graph.kernels if k.language == "cpp"]


def _masked_scores(scores, slopes):
    """BLOOM-style attention probabilities: scaled scores, an ALiBi bias, a causal mask of
    the dtype's lowest value, softmax in float32 and back."""
    n = scores.shape[-1]
    alibi = slopes[:, None, None] * torch.arange(n, dtype=scores.dtype)
    causal = torch.arange(n)[None, :] <= torch.arange(n)[:, None]
    low = torch.finfo(scores.dtype).min
    s = scores * 0.125 + alibi[None] + torch.where(causal, torch.zeros((), dtype=scores.dtype), low)
    return torch.softmax(s, -1, dtype=torch.float32).to(scores.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("keys", [16, 32, 49, 200])
def test_masked_softmax_computes_each_exp_once(dtype, keys):
    """Three passes over each row (max, sum of exp, exp / sum): the last one reads the exp
    the second wrote into a row cache, where it recomputed the whole chain below it."""
    scores, slopes = torch.randn(2, 4, keys, keys, dtype=dtype) * 4, torch.rand(4, dtype=dtype)
    # Half precisions round after every op as eager does: scores near 16 are 1/8 apart in
    # bfloat16, and a kernel that kept them in float would be that far from eager.
    with compiler.config.patch(emulate_precision_casts=True):
        pairs, sources = _run(_masked_scores, scores, slopes)
    for actual, expected in pairs:
        torch.testing.assert_close(actual, expected, **_tol(dtype))
    (softmax,) = [s for s in sources if "amax" in s.splitlines()[0]]
    assert softmax.count("exp(") + softmax.count("jc_expf(") == 1, softmax
    assert "row0[" in softmax


def test_a_norm_of_a_residual_sum_adds_it_once():
    """A layer norm of x + a + b (Whisper's residual stream, x a transposed convolution
    output) made three passes that each loaded all three again, one of them 32 floats
    apart; the later passes read the sum from a row cache."""

    def f(x, a, b, w):
        return torch.nn.functional.layer_norm(x.transpose(1, 2) + a + b, (64,), w, None)

    pairs, sources = _run(
        f, torch.randn(2, 64, 32), torch.randn(2, 32, 64), torch.randn(2, 32, 64), torch.randn(64)
    )
    for actual, expected in pairs:
        torch.testing.assert_close(actual, expected)
    (norm,) = sources
    assert norm.count("for (int64_t r0") == 3 and "row" in norm
    moving = [line for line in norm.splitlines() if "in_ptr1[" in line and "r0" in line]
    assert len(moving) == 1, norm


def test_short_contiguous_rows_vectorise_along_the_row():
    """A softmax over 32 contiguous keys loops over each row: it was unrolled as a short
    window, vectorised across rows with loads 32 floats apart."""
    pairs, sources = _run(lambda x: torch.softmax(x, -1), torch.randn(2, 8, 32, 32))
    for actual, expected in pairs:
        torch.testing.assert_close(actual, expected)
    (softmax,) = sources
    assert "for (int64_t r0 = 0; r0 < 32; ++r0)" in softmax
    assert "const int64_t r0 = " not in softmax


def test_short_strided_rows_still_vectorise_across_outputs():
    """A sum over 20 points 64 apart keeps the unrolled row, vectorised across outputs."""
    pairs, sources = _run(lambda x: x.sum(1), torch.randn(4, 20, 64))
    for actual, expected in pairs:
        torch.testing.assert_close(actual, expected)
    (kernel,) = sources
    assert "const int64_t r0 = 19;" in kernel and "for (int64_t r0" not in kernel


def test_rows_with_nan_and_fully_masked_rows():
    """NaN in a row, and a row masked everywhere (-inf: NaN in eager), through the cache."""
    x = torch.randn(3, 40)
    x[0, 5] = float("nan")
    x[1] = float("-inf")
    x[2, ::2] = float("-inf")
    pairs, _ = _run(lambda t: torch.softmax(t * 2, -1), x)
    actual, expected = pairs[0]
    torch.testing.assert_close(actual, expected, equal_nan=True)


def test_log_softmax_and_a_norm_share_nothing_wrongly():
    """Two reductions of different rows in one graph (a log-softmax over the last dim and a
    layer norm), each with its own caches."""

    def f(x, w):
        y = torch.log_softmax(x.exp() * 0.5, -1)
        return torch.nn.functional.layer_norm(y * x, (64,), w, None), y.sigmoid().sum(-1)

    pairs, _ = _run(f, torch.randn(6, 64), torch.randn(64))
    for actual, expected in pairs:
        torch.testing.assert_close(actual, expected)


def test_sums_of_short_rows_accumulate_in_float_and_long_rows_in_double():
    """Up to 1024 values a row adds in float, as eager's own vector sums do: their error
    is of the order of eager's (a float's rounding per addition of each lane, on at most
    1024 / lanes values); longer rows add in double."""
    x = torch.randn(64, 1024)
    pairs, sources = _run(lambda t: t.sum(-1), x)
    exact = x.double().sum(-1)
    bound = 1024 * torch.finfo(torch.float32).eps * x.abs().sum(-1).double() / 16
    assert ((pairs[0][0].double() - exact).abs() <= bound).all()
    assert "double acc" not in sources[0] and "float acc" in sources[0]
    # summed in double and rounded once: the float nearest the exact sum, or next to it
    y = torch.randn(8, 4097) + 1000
    long_pairs, long_sources = _run(lambda t: t.sum(-1), y)
    torch.testing.assert_close(long_pairs[0][0].double(), y.double().sum(-1), atol=0, rtol=1e-7)
    assert "double acc" in long_sources[0]


def test_exp_is_exact_to_one_ulp_over_the_whole_float_range():
    """The prelude's vector exp: within 1 ulp of the float64 exp on a grid of float bit
    patterns, denormal results included; inf, -inf, NaN and the lowest float as eager."""
    bits = torch.arange(-(2**31), 2**31 - 1, 4099, dtype=torch.int64).to(torch.int32)
    x = bits.view(torch.float32)
    special = [float("nan"), float("inf"), float("-inf"), -3.4e38, 3.4e38, 0.0, -0.0]
    edges = [-103.97, -103.0, -87.34, -87.33, 88.72, 88.73, 104.5, -104.5]
    x = torch.cat([x, torch.tensor(special + edges)])
    source, out = pointwise(lambda a: Op("exp", (a,), torch.float32), x)
    assert "jc_expf(" in source.source
    exact = x.double().exp()
    representable = exact <= torch.finfo(torch.float32).max
    rounded = exact.float()
    ulp = (rounded.nextafter(torch.tensor(float("inf"))) - rounded).double()
    err = (out.double() - exact).abs() / ulp
    finite = representable & torch.isfinite(x)
    assert err[finite].max() <= 1.0
    assert torch.equal(out[~representable & ~x.isnan()], rounded[~representable & ~x.isnan()])
    assert torch.equal(out.isnan(), x.isnan())
    assert out[x == float("-inf")].eq(0).all() and out[x == -3.4e38].eq(0).all()
