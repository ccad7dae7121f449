"""Dropout in compiled graphs draws eager's mask: the same seed gives eager's masks bit for bit
(and outputs and gradients up to the order of sums), and leaves the generator where eager leaves it (the next draw outside
the graph is eager's). native_dropout is eager's kernel inside the graph (compiler/aot/
decompositions.py says why); CUDA's fused dropout kernel draws its Philox numbers in another
order than rand_like, so a decomposition would give other masks there."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import compiler


def _step(x, w, p: float):
    h = F.dropout(x @ w, p, training=True)
    out = F.dropout(torch.relu(h) + x.sum(-1, keepdim=True), p / 2, training=True)
    out.square().mean().backward()
    return out.detach()


def _run(fn, device: str, seed: int):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(16, 24, generator=g).to(device)
    w = torch.randn(24, 40, generator=g).to(device).requires_grad_()
    torch.manual_seed(seed)
    out = fn(x, w, 0.4)
    return out, w.grad, torch.rand(5, device=device)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_dropout_masks_gradients_and_generator_state_are_eagers(device):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    compiled = compiler.compile(_step, backend="inductor")
    for seed in (3, 4):  # the second call runs the compiled code again
        expected = _run(_step, device, seed)
        actual = _run(compiled, device, seed)
        (out, grad, draw), (c_out, c_grad, c_draw) = expected, actual
        # the masks bit for bit; the values up to the kernels' order of summation
        assert torch.equal(out == 0, c_out == 0), f"seed {seed}: another dropout mask"
        assert torch.equal(grad == 0, c_grad == 0), f"seed {seed}: another mask in backward"
        torch.testing.assert_close(c_out, out)
        torch.testing.assert_close(c_grad, grad)
        assert torch.equal(draw, c_draw), f"seed {seed}: the generator is not where eager's is"
