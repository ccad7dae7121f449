"""Transformer blocks through the whole CPU pipeline, compared with eager on fresh random
inputs, and what the generated code does with them: attention runs as the CPU flash kernel
eager picked, and the values a decoder reads again and again (the rotary cos and sin, the
residual stream) are computed once rather than in every consumer."""

from __future__ import annotations

import math

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


def _rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def _rotary_decoder(x, positions, weights, inv_freq):
    """Llama-style layers: RMSNorm, rotary query and key (grouped: 2 key heads for 4
    query heads), attention, residual adds."""
    freqs = positions[:, :, None].float() * inv_freq[None, None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[:, None], emb.sin()[:, None]
    h = x
    for wq, wk, wo in weights:
        n = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        q = (n @ wq).view(2, 16, 4, 8).transpose(1, 2)
        k = (n @ wk).view(2, 16, 2, 8).transpose(1, 2)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        k = k.repeat_interleave(2, dim=1)
        a = F.scaled_dot_product_attention(q, k, k, is_causal=True)
        h = h + a.transpose(1, 2).reshape(2, 16, 32) @ wo
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)


def _decoder_inputs():
    weights = [tuple(torch.randn(32, n) / math.sqrt(32) for n in (32, 16, 32)) for _ in range(4)]
    positions = torch.arange(16).expand(2, 16)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, 8, 2).float() / 8))
    return torch.randn(2, 16, 32), positions, weights, inv_freq


def test_rotary_cos_and_sin_are_computed_once():
    """Each layer's query and key read the same cos and sin: they are computed into buffers
    once, where before every rotary kernel took the cos and sin of every element of every
    head of every layer again (8 kernels each with cosf and sinf, 4-layer decoder)."""
    x, positions, weights, inv_freq = _decoder_inputs()
    compiled = compiler.compile(_rotary_decoder)
    with torch.no_grad():
        torch.testing.assert_close(
            compiled(x, positions, weights, inv_freq),
            _rotary_decoder(x, positions, weights, inv_freq),
        )
    sources = _cpp_sources(_record(compiled))
    assert sum("cosf(" in s for s in sources) == 1
    assert sum("sinf(" in s for s in sources) == 1


def test_residual_stream_is_not_re_added_by_every_norm():
    """h = x + out1 + out2 + ...: a residual stream read by the next norm and the next add
    is materialised when its sum loads more than a few buffers, so the last norm reads one
    stream buffer (and its weights), not every layer's output again."""
    x, positions, weights, inv_freq = _decoder_inputs()
    compiled = compiler.compile(_rotary_decoder)
    with torch.no_grad():
        compiled(x, positions, weights, inv_freq)
    graph = _record(compiled)
    last = _cpp_sources(graph)[-1]
    (signature,) = [line for line in last.splitlines() if line.startswith('extern "C"')]
    assert signature.count("in_ptr") <= 3, last


def test_embedding_read_by_two_consumers_is_gathered_once():
    """A gather read by several consumers (a token embedding feeding the first norm and
    the first residual add) is materialised: each consumer would gather it again."""
    table = torch.randn(100, 32)

    def f(ids, w):
        e = F.embedding(ids, table)
        n = e * torch.rsqrt(e.pow(2).mean(-1, keepdim=True) + 1e-6)
        return e + n @ w

    ids, w = torch.randint(100, (2, 16)), torch.randn(32, 32)
    compiled = compiler.compile(f)
    with torch.no_grad():
        torch.testing.assert_close(compiled(ids, w), f(ids, w))
    sources = _cpp_sources(_record(compiled))
    assert sum("jc_index(" in s for s in sources) == 1
