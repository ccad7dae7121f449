"""The kernels the interpreter runs also compile for a real GPU (sm_90, no device needed)."""

import pytest
import torch
import torch.nn.functional as F

from tests.codegen.helpers import assert_compile_for_sm90, compile_and_run, rand

CASES = [
    lambda x: (torch.sin(x) + torch.cos(x),),
    lambda x: (x.softmax(-1), x.argmax(-1), x.amax(0), x.var(1)),
    lambda x: (
        torch.tanh(x).sum(),
        torch.erf(x) * torch.rsqrt(x.abs() + 1),
        x.sum(0, keepdim=True),
    ),
    lambda x: (torch.cat([x, x * 2], 1), F.pad(x, (1, 1)), x.t().contiguous(), x[0] + x[:, :1]),
    lambda x: (F.layer_norm(x, (x.shape[-1],)), (x > 0).any(1), x.to(torch.float16) * 2),
    # dtype semantics (issue 23): fmod-based float remainder and floor division, bool
    # arithmetic, wrapping small integers, half precision kept in float32 and rounded
    lambda x: (
        torch.remainder(x * 10, x + 3),
        torch.div(x, 0.1, rounding_mode="floor"),
        (x > 0) + (x < 1),
        (x * 100).to(torch.int8) + 100,
        ~(x * 100).to(torch.uint8),
        torch.sin(x.half() + 10),
        (x * 3).bfloat16().long(),
    ),
    # correctly rounded division and square root (triton_helpers.div_rn, sqrt_rn)
    lambda x: (
        torch.div(x, x + 2, rounding_mode="trunc"),
        (x.half() / 3).long(),
        torch.reciprocal(x),
        torch.sqrt(x.abs()).floor(),
        torch.sigmoid(x),
        torch.div(x.double(), 3.0),
    ),
]


@pytest.fixture(autouse=True)
def triton_on_cpu(monkeypatch, tmp_path):
    monkeypatch.setenv("COMPILER_CPU_EMITTER", "triton")
    monkeypatch.setenv("COMPILER_STRICT", "1")
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(tmp_path / "cache"))


def test_generated_kernels_compile_for_sm90(tmp_path):
    pytest.importorskip("triton.backends.nvidia")
    for fn in CASES:
        for shape in ((4, 6), (3, 2500)):  # persistent and looped reductions
            compile_and_run(torch.fx.symbolic_trace(fn), rand(*shape))
    x = rand(2, 4, 9, 9)
    compile_and_run(
        torch.fx.symbolic_trace(
            lambda x: (F.max_pool2d(x.relu(), 3, 2, 1), F.avg_pool2d(x, 2)),
        ),
        x,
    )
    compile_and_run(torch.fx.symbolic_trace(lambda x: (x.sum(1), x + 1)), rand(3, 0))
    # gathers, whose kernels assert their indices are inside (th.check_index)
    compile_and_run(
        torch.fx.symbolic_trace(
            lambda x, i: (x[i] * 2, torch.gather(x, 1, i[:, None] % 6).sum(1), F.embedding(i, x))
        ),
        rand(4, 6),
        torch.tensor([3, 0, 1, 2]),
    )
    # split reductions (compiler/scheduler/split.py): even chunks, then a masked last one
    split = torch.fx.symbolic_trace(
        lambda x: (
            x.sum(1),
            x.amax(1),
            (x > 0).any(1),
            (x > 0).all(1),
            x.to(torch.int64).sum(1),
            x.to(torch.float16).sum(1),
            x.var(1),  # Welford: partial means and m2s, then their combination
            torch.var_mean(x.to(torch.float16), 1, correction=0),
        )
    )
    for shape in ((2, 8192), (3, 5003)):
        compile_and_run(split, rand(*shape))
    kernels = tmp_path / "cache" / "kernels"
    assert_compile_for_sm90(kernels)
