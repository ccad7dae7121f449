"""Saved tensors that live in a CUDA graph's own memory (reduce-overhead training): the
forward's next replay overwrites them, so aot/autograd.py copies them out first whenever
their backward may still run. Simulated on the CPU: the forward below returns its saved
tensors in the same buffers every call, as a replayed CUDA graph does."""

from __future__ import annotations

import pytest
import torch

from compiler.aot import autograd
from compiler.backends.inductor import compile_fx


def f(x, w1, w2):
    return (torch.tanh(x @ w1).sin() @ w2).square().sum()


def _weights():
    return torch.randn(8, 16, requires_grad=True), torch.randn(16, 4, requires_grad=True)


@pytest.fixture
def reusing(monkeypatch):
    """f compiled for training, its forward returning saved tensors in reused buffers;
    yields (compiled f, the list of copy-outs made)."""
    w1, w2 = _weights()
    x = torch.randn(5, 8)
    training = compile_fx(torch.fx.symbolic_trace(f), [x, w1, w2])
    (graph,) = training.entries.values()
    buffers: dict[int, torch.Tensor] = {}
    real_forward = graph.forward

    def forward(*args):
        results = list(real_forward(*args))
        for k in range(graph.part.num_outputs, len(results)):
            buf = buffers.setdefault(k, torch.empty_like(results[k]))
            results[k] = buf.copy_(results[k])
        return tuple(results)

    graph.forward = forward
    monkeypatch.setattr(autograd, "is_handed_out", lambda t: any(t is b for b in buffers.values()))
    copies: list[int] = []
    real_copy = autograd._GraphMemory.copy_out_of_graph_memory

    def counting(self):
        copies.append(len(self.tensors))
        real_copy(self)

    monkeypatch.setattr(autograd._GraphMemory, "copy_out_of_graph_memory", counting)
    assert graph.part.num_outputs < len(graph.part.saved) + graph.part.num_outputs
    return training, copies


def _grads(fn, batches, w1, w2, combine):
    losses = [fn(x, w1, w2) for x in batches]
    combine(losses)
    return w1.grad.clone(), w2.grad.clone()


def test_steps_in_turn_copy_nothing(reusing):
    compiled, copies = reusing
    w1, w2 = _weights()
    e1, e2 = (w.detach().clone().requires_grad_() for w in (w1, w2))
    for _ in range(3):
        x = torch.randn(5, 8)
        for w in (w1, w2, e1, e2):
            w.grad = None
        compiled(x, w1, w2).backward()
        f(x, e1, e2).backward()
        torch.testing.assert_close(w1.grad, e1.grad)
        torch.testing.assert_close(w2.grad, e2.grad)
    assert copies == []


def test_two_forwards_before_one_backward(reusing):
    compiled, copies = reusing
    w1, w2 = _weights()
    e1, e2 = (w.detach().clone().requires_grad_() for w in (w1, w2))
    batches = [torch.randn(5, 8), torch.randn(5, 8)]
    got = _grads(compiled, batches, w1, w2, lambda ls: (ls[0] + ls[1]).backward())
    want = _grads(f, batches, e1, e2, lambda ls: (ls[0] + ls[1]).backward())
    torch.testing.assert_close(got, want)
    assert len(copies) == 1 and copies[0] > 0


def test_retained_graph_survives_a_later_forward(reusing):
    compiled, copies = reusing
    w1, w2 = _weights()
    x1, x2 = torch.randn(5, 8), torch.randn(5, 8)
    loss1 = compiled(x1, w1, w2)
    loss1.backward(retain_graph=True)
    compiled(x2, w1, w2).backward()
    w1.grad = w2.grad = None
    loss1.backward()  # the first call's saved tensors, copied out before the second forward
    e1, e2 = (w.detach().clone().requires_grad_() for w in (w1, w2))
    f(x1, e1, e2).backward()
    torch.testing.assert_close((w1.grad, w2.grad), (e1.grad, e2.grad))
    assert len(copies) == 1


def test_second_backward_without_retain_graph_raises_as_in_eager(reusing):
    compiled, _ = reusing
    w1, w2 = _weights()
    loss = compiled(torch.randn(5, 8), w1, w2)
    loss.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss.backward()
