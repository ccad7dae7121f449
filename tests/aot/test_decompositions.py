"""Our own entries of the decomposition table (compiler/aot/decompositions.py): the same
values as torch's reference decompositions they replace, in fewer aten ops."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch.func import functionalize
from torch.fx.experimental.proxy_tensor import make_fx

import compiler
from compiler.aot import decompositions
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


NATIVE_BN = torch.ops.aten.native_batch_norm.default
NATIVE_BN_BACKWARD = torch.ops.aten.native_batch_norm_backward.default


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("shape", [(4, 8, 5, 5), (3, 8), (2, 8, 7), (2, 1, 3, 3), (2, 3, 2, 3, 2)])
def test_batch_norm_matches_the_reference(shape, training, affine, dtype):
    """Ours (compiler/aot/batch_norm.py) against torch._decomp's, which it falls back to:
    the same values bit for bit, the same layouts, the same running statistics written."""
    forward, backward = (decomposition_table()[op] for op in (NATIVE_BN, NATIVE_BN_BACKWARD))
    channels = shape[1]
    x = torch.randn(shape, dtype=dtype).contiguous(
        memory_format=torch.channels_last if len(shape) == 4 else torch.contiguous_format
    )
    weight, bias = (torch.randn(channels, dtype=dtype) if affine else None for _ in range(2))
    stats = [torch.randn(channels, dtype=dtype), torch.rand(channels, dtype=dtype) + 0.5]
    stats_ref = [s.clone() for s in stats]
    # Ours follows the pinned torch's (2.14.1) arithmetic. Torch before 2.14 (the lent GPU
    # machine's 2.11) computes eval's 1/sqrt(var + eps) with a division instead of rsqrt:
    # against that reference, eval mode agrees to rounding only.
    exact = training or torch.__version__ >= (2, 14)
    actual = forward(x, weight, bias, *stats, training, 0.1, 1e-5)
    expected = forward.args[0](x, weight, bias, *stats_ref, training, 0.1, 1e-5)
    _assert_same(actual, expected, exact)
    _assert_same(stats, stats_ref, exact)
    grad = torch.randn(shape, dtype=dtype)
    saved = actual[1:] if training else stats
    mask = [True, affine, affine]
    actual = backward(grad, x, weight, *stats, *saved, training, 1e-5, mask)
    expected = backward.args[0](grad, x, weight, *stats, *saved, training, 1e-5, mask)
    _assert_same(actual, expected, exact)


def _assert_same(actual, expected, exact: bool = True) -> None:
    for a, e in zip(actual, expected, strict=True):
        assert (a is None) == (e is None)
        if a is not None:
            assert a.dtype == e.dtype and a.shape == e.shape and a.stride() == e.stride()
            if exact:
                assert torch.equal(a, e)
            else:
                torch.testing.assert_close(a, e)


def test_batch_norm_broadcasts_with_one_view_per_vector():
    """Each per-channel vector is one `view`, not a chain of unsqueezes, and eval mode does
    not copy the running statistics."""
    x, w, b, mean, var = torch.randn(2, 4, 3, 3), *(torch.rand(4) for _ in range(4))

    def eval_bn(x, w, b, mean, var):
        return torch.nn.functional.batch_norm(x, mean, var, w, b, False, 0.1, 1e-5)

    with torch.no_grad():
        ops = _aten_ops(eval_bn, x, w, b, mean, var)
    assert "aten.unsqueeze.default" not in ops and "prims.convert_element_type.default" not in ops
    assert ops.count("aten.view.default") == 4

    def backward(grad, x, w, mean, invstd):
        return NATIVE_BN_BACKWARD(grad, x, w, None, None, mean, invstd, True, 1e-5, [True] * 3)

    ops = _aten_ops(backward, torch.randn(2, 4, 3, 3), x, w, mean, var)
    assert "aten.unsqueeze.default" not in ops and ops.count("aten.view.default") == 4
    # float16 keeps the reference (it computes in float32)
    half = [t.half() for t in (x, w, b, mean, var)]
    with torch.no_grad():
        assert "aten.unsqueeze.default" in _aten_ops(eval_bn, *half)


FLASH_CPU = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("kind", ["plain", "causal", "float_mask", "grouped_query", "scale"])
def test_flash_attention_for_cpu_returns_the_log_sum_exp(kind, dtype):
    """The op's second output is the log-sum-exp of each row of scores, (N, H, L), float32
    for half precision: torch's decomposition returned the attention weights there
    (N, H, L, S), a wrong shape and values in inference graphs (found by the OpInfo suite)."""
    q = torch.randn(2, 4, 3, 8, dtype=dtype)
    kv_heads = 2 if kind == "grouped_query" else 4
    k, v = (torch.randn(2, kv_heads, 6, 8, dtype=dtype) for _ in range(2))
    kwargs = {"is_causal": kind == "causal"}
    if kind == "float_mask":
        kwargs["attn_mask"] = torch.randn(3, 6, dtype=dtype)
    if kind == "scale":
        kwargs["scale"] = 0.7

    def f(q, k, v):
        return FLASH_CPU(q, k, v, **kwargs)

    expected = f(q, k, v)
    actual = compiler.compile(f, fullgraph=True)(q, k, v)
    tol = {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {}
    for a, e in zip(actual, expected):
        assert a.dtype == e.dtype and a.shape == e.shape
        torch.testing.assert_close(a, e, **tol)


@pytest.mark.parametrize(
    "fn",
    [
        lambda a, b, c: torch.nn.functional.margin_ranking_loss(a, b, c, reduction="sum"),
        lambda a, b, c: torch.nn.functional.cosine_similarity(a, b) * c[:, 0],
        lambda a, b, c: torch.nn.functional.hinge_embedding_loss(a, c.sign()),
    ],
    ids=["margin_ranking_loss", "cosine_similarity", "hinge_embedding_loss"],
)
def test_in_place_ops_of_decompositions_are_made_functional(fn):
    """Python decompositions that update intermediates in place (clamp_min_) run below
    functionalize, so the aten graph kept them and the lowering refused it: the whole graph
    ran eagerly (found by the OpInfo suite). fullgraph=True raises on such a fallback."""
    a, b, c = torch.randn(5, 4), torch.randn(5, 4), torch.randn(5, 4)
    compiled = compiler.compile(fn, fullgraph=True)
    torch.testing.assert_close(compiled(a, b, c), fn(a, b, c))


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int32, torch.int64])
@pytest.mark.parametrize("ends", [(4.3, 0.0), (-3.7, 50.0), (0, 7), (4.3, 1.0)])
@pytest.mark.parametrize("steps", [2, 5, 50])
def test_integer_linspace_matches_eager(ends, steps, dtype):
    """The ends are converted to the integer dtype first and the values computed in float64,
    as eager does: torch's reference stepped from the unconverted ends in float32 (found by
    the OpInfo suite: up to 9 of 50 elements off by one)."""
    start, end = ends
    if dtype == torch.uint8 and min(start, end) < 0:
        pytest.skip("negative ends of an unsigned linspace")

    def f(x):
        return torch.linspace(start, end, steps, dtype=dtype) + x

    x = torch.zeros((), dtype=dtype)
    assert torch.equal(compiler.compile(f, fullgraph=True)(x), f(x))


def test_copy_into_a_clone_of_an_input_leaves_the_input_alone(monkeypatch):
    """linalg.matrix_power(x, 0) traces to `x.clone().copy_(eye)`: clone() lowers to the
    input's own buffer, and the copy_ was taken for the write-back of a mutated input, so
    the compiled code overwrote x with the identity (found by the OpInfo suite's full run).
    The graph now runs eagerly (the lowering refuses the copy into an intermediate)."""
    x = torch.randn(2, 2, 2)
    before = x.clone()

    def f(x):
        return torch.linalg.matrix_power(x, 0)

    monkeypatch.delenv("COMPILER_STRICT", raising=False)  # a fallback is the answer here
    with compiler.config.patch(suppress_errors=True):
        out = compiler.compile(f)(x)
    assert torch.equal(x, before)
    assert torch.equal(out, f(x))


@pytest.mark.parametrize("op", ["linspace", "logspace"])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int32, torch.int64])
@pytest.mark.parametrize("ends", [(0, 7), (4.3, -3), (1, 9.5)])
def test_integer_ranges_in_cuda_float_steps_are_eagers_kernels(monkeypatch, ends, dtype, op):
    """On CUDA an integer linspace or logspace stays aten.linspace/aten.logspace, eager's own
    kernel (an extern call): its values are float32 results truncated, one ulp is another
    integer, and a Triton kernel reproduces neither nvcc's contracted multiply-adds nor its
    powf bit for bit (on the H200: logspace(0, 7, 2, 10.0) into int32 was 10000001 against
    eager's 10000000; linspace(4.3, -3, 50) into int8 had 2 of 50 values one off)."""
    monkeypatch.setattr(decompositions, "_FLOAT32_RANGE_DEVICES", {"cuda", "cpu"})
    start, end = ends
    if dtype == torch.uint8 and end == -3:
        pytest.skip("negative ends of an unsigned range")

    def f(x):
        if op == "linspace":
            return torch.linspace(start, end, 50, dtype=dtype) + x
        return torch.logspace(start, end, 2, 10.0, dtype=dtype) + x

    x = torch.zeros((), dtype=dtype)
    assert any(o.startswith(f"aten.{op}.") for o in _aten_ops(f, x))
    assert torch.equal(compiler.compile(f, fullgraph=True)(x), f(x))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int32, torch.int64])
def test_integer_linspace_and_logspace_match_eager_on_cuda(dtype):
    """The CUDA formulas against eager's CUDA kernels."""
    ends = [(0, 7), (4.3, -3), (-2.0, 50), (50, 1), (0, 4), (0, 1.2), (0, -3), (1, 100)]
    for (start, end), steps in itertools.product(ends, (2, 4, 50, 1000)):
        if dtype == torch.uint8 and min(start, end) < 0:
            continue
        for base in (None, 2.0, 3.0, 10.0):

            def f(x, start=start, end=end, steps=steps, base=base):
                if base is None:
                    return torch.linspace(start, end, steps, dtype=dtype, device="cuda") + x
                return torch.logspace(start, end, steps, base, dtype=dtype, device="cuda") + x

            x = torch.zeros((), dtype=dtype, device="cuda")
            assert torch.equal(compiler.compile(f, fullgraph=True)(x), f(x)), (
                start,
                end,
                steps,
                base,
            )
