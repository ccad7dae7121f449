"""compiler/aot/pad_matmul.py on CUDA under the default setting ("auto"): a GPT-2-like LM head
(vocabulary 50257) under bf16 autocast, forward and backward against eager, in default and
reduce-overhead modes; its three matmuls padded and none run by cuBLAS's unaligned (align1)
kernels."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import compiler
from tests.aot.helpers import training_graphs

pytestmark = pytest.mark.gpu

VOCAB, WIDTH, TOKENS = 50257, 768, 512


class LMHead(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mix = torch.nn.Linear(WIDTH, WIDTH)
        self.head = torch.nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, x, labels):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = self.head(torch.relu(self.mix(x)))
            return F.cross_entropy(logits.float(), labels)


def _step(model, x, labels):
    loss = model(x, labels)
    loss.backward()
    return loss.detach()


def _gemm_kernels(fn, *args) -> list[str]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(*args)
        torch.cuda.synchronize()
    return [e.key for e in prof.key_averages() if "gemm" in e.key or "nvjet" in e.key]


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_lm_head_on_cuda(mode):
    model = LMHead().cuda()
    comp_model = copy.deepcopy(model)
    compiled = compiler.compile(_step, mode=mode)
    for _ in range(3):
        x = torch.randn(TOKENS, WIDTH, device="cuda")
        labels = torch.randint(0, VOCAB, (TOKENS,), device="cuda")
        for p in (*model.parameters(), *comp_model.parameters()):
            p.grad = None
        got, expected = compiled(comp_model, x, labels), _step(model, x, labels)
        torch.testing.assert_close(got, expected, atol=2e-3, rtol=2e-3)
        for (name, p), q in zip(model.named_parameters(), comp_model.parameters()):
            scale = float(p.grad.abs().max())  # bfloat16 matmuls: 1% of the largest gradient
            torch.testing.assert_close(q.grad, p.grad, atol=1e-2 * scale, rtol=2e-2, msg=name)
    report = compiler.inspect(compiled)
    (graph,) = training_graphs(report)
    notes = " ".join(n for n in graph.notes if "zero-padded" in n)
    assert f"N {VOCAB}->50264" in notes and f"M {VOCAB}->50264" in notes
    assert f"K {VOCAB}->50264" in notes
    kernels = _gemm_kernels(compiled, comp_model, x, labels)
    assert kernels and not [k for k in kernels if "align1" in k], kernels
