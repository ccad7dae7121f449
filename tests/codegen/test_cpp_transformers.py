"""Transformer blocks through the whole CPU pipeline, compared with eager on fresh random
inputs, and what the generated code does with them: attention runs as the CPU flash kernel
eager picked."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import compiler

FLASH_CPU = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(tmp_path))


def _record(compiled):
    (graph,) = compiler.inspect(compiled).graphs
    assert graph.fallback is None
    return graph


def _cpp_sources(graph) -> list[str]:
    return [k.source for k in graph.kernels if k.language == "cpp"]


ATTENTION = {
    "plain": {},
    "causal": {"is_causal": True},
    "float_mask": {"mask": "float"},
    "bool_mask": {"mask": "bool"},
    "grouped_query": {"enable_gqa": True},
    "scale": {"scale": 0.3},
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("kind", sorted(ATTENTION))
def test_attention_runs_the_cpu_flash_kernel(kind, dtype):
    """F.scaled_dot_product_attention in an inference graph calls the kernel eager picked:
    its decomposition wrote the scores out and read them three times, recomputing each exp
    (wav2vec2's 199 frames: 0.56x of eager)."""
    opts = dict(ATTENTION[kind])
    mask_kind = opts.pop("mask", None)
    kv_heads = 2 if opts.get("enable_gqa") else 4
    w = torch.randn(32, 32, dtype=dtype) / 6

    def attend(x, mask):
        q = (x @ w).view(2, 12, 4, 8).transpose(1, 2)  # heads of a projection, permuted
        k = x[..., : kv_heads * 8].reshape(2, 12, kv_heads, 8).transpose(1, 2)
        v = (x * 2)[..., 32 - kv_heads * 8 :].reshape(2, 12, kv_heads, 8).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **opts)
        return out.transpose(1, 2).reshape(2, 12, 32)

    x = torch.randn(2, 12, 32, dtype=dtype)
    mask = None
    if mask_kind == "float":
        mask = torch.randn(2, 1, 12, 12, dtype=dtype)
    elif mask_kind == "bool":
        mask = torch.rand(2, 1, 12, 12) > 0.3
        mask[..., 0] = True  # no row fully masked
    compiled = compiler.compile(attend)
    with torch.no_grad():
        expected = attend(x, mask)
        actual = compiled(x, mask)
        again = torch.randn_like(x)
        torch.testing.assert_close(compiled(again, mask), attend(again, mask), **_tol(dtype))
    torch.testing.assert_close(actual, expected, **_tol(dtype))
    graph = _record(compiled)
    assert "scaled_dot_product_flash_attention_for_cpu" in graph.wrapper_source
    assert not any("exp" in s for s in _cpp_sources(graph))


def _tol(dtype: torch.dtype) -> dict:
    return {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {}


def test_attention_inputs_get_a_unit_stride_last_dimension():
    """The CPU flash kernel reads a query of strides (512, 128, 1, 16) wrongly (results 1.5
    off); eager picks it only for unit-stride last dimensions, and the op called on such a
    view gets a contiguous copy."""

    def f(x, k, v):
        return FLASH_CPU(x.transpose(-1, -2) * 2, k, v)[0]

    x, k, v = torch.randn(2, 4, 8, 16), torch.randn(2, 4, 16, 8), torch.randn(2, 4, 16, 8)
    expected = F.scaled_dot_product_attention((x.transpose(-1, -2) * 2).contiguous(), k, v)
    with torch.no_grad():
        torch.testing.assert_close(compiler.compile(f)(x, k, v), expected)
