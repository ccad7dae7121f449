"""Gradients handed out in a CUDA graph's own memory (runtime/cudagraphs.py `_HandedOut`),
simulated on the CPU: a list of output tensors plays the graph's memory, and writing into
it in place plays the next replay. Autograd must take the aliases into `.grad` without a
copy, and whatever still holds one when the graph replays must keep its values."""

from __future__ import annotations

import gc

import pytest
import torch

from compiler.runtime import cpp_ext, cudagraphs

pytestmark = pytest.mark.skipif(cpp_ext.storage_moves() is None, reason="needs the C++ extension")


class _Backward(torch.autograd.Function):
    """Hands `grads()` to autograd as the gradients of its inputs, as run_backward does."""

    @staticmethod
    def forward(ctx, grads, *params):
        ctx.grads = grads
        return torch.zeros(())

    @staticmethod
    def backward(ctx, _):
        return (None, *ctx.grads())


class _FakeGraph:
    """Two outputs in 'graph memory', replayed by writing new values into them."""

    def __init__(self, shapes=((4, 3), (5,))):
        self.outputs = [torch.zeros(s) for s in shapes]
        self.handed = cudagraphs._HandedOut.of(self.outputs, [])
        self.step = 0

    def replay(self) -> list[torch.Tensor]:
        self.handed.move_held()
        self.step += 1
        for k, o in enumerate(self.outputs):
            o.fill_(10 * self.step + k)
        return list(self.handed.aliases)

    def backward(self, params) -> None:
        grads = self.replay()
        _Backward.apply(lambda: grads, *params).backward()


def _params(graph):
    return [torch.zeros(o.shape, requires_grad=True) for o in graph.outputs]


def test_grads_land_in_graph_memory_without_copies():
    graph, seen = _FakeGraph(), set()
    params = _params(graph)
    for step in range(1, 4):
        for p in params:
            p.grad = None  # zero_grad(set_to_none=True)
        graph.backward(params)
        for k, (p, o) in enumerate(zip(params, graph.outputs)):
            assert p.grad.data_ptr() == o.data_ptr()  # stolen, not cloned
            assert torch.all(p.grad == 10 * step + k)
            seen.add(p.grad.data_ptr())
    assert graph.handed.moved == 0
    assert len(seen) == 2


def test_accumulating_without_zero_grad_matches_eager():
    graph = _FakeGraph()
    params = _params(graph)
    for _ in range(3):
        graph.backward(params)
    # eager: .grad is the sum of the three steps' gradients
    for k, p in enumerate(params):
        assert torch.all(p.grad == (10 + k) + (20 + k) + (30 + k))
    assert graph.handed.moved == 2  # the first step's .grad moved out once, then kept its own


def test_gradients_kept_by_the_user_keep_their_values():
    graph = _FakeGraph()
    params = _params(graph)
    graph.backward(params)
    kept = [p.grad for p in params]
    view = params[0].grad.view(-1)[2:5]
    for p in params:
        p.grad = None
    graph.backward(params)
    assert torch.all(kept[0] == 10) and torch.all(kept[1] == 11)
    assert torch.all(view == 10)
    assert view.untyped_storage().data_ptr() == kept[0].untyped_storage().data_ptr()
    assert torch.all(params[0].grad == 20) and torch.all(params[1].grad == 21)
    assert kept[0].untyped_storage().resizable()  # as eager's gradients are
    view.add_(1)  # the moved memory is the kept gradient's own
    assert torch.all(kept[0].view(-1)[2:5] == 11) and torch.all(params[0].grad == 20)


def test_outputs_sharing_memory_are_not_handed_out():
    base = torch.zeros(8)
    inp = torch.zeros(3)
    handed = cudagraphs._HandedOut.of([base[:4], base[4:], inp, torch.zeros(2)], [inp])
    assert handed.positions == [3]


def test_nothing_to_hand_out():
    assert cudagraphs._HandedOut.of([torch.zeros(0), None, 3], []) is None


def test_release_unregisters_the_aliases():
    graph = _FakeGraph()
    aliases = list(graph.handed.aliases)
    assert all(torch._C._is_cached_tensor(a) for a in aliases)
    graph.handed.release()
    assert not any(torch._C._is_cached_tensor(a) for a in aliases)


def test_a_dropped_runner_unregisters_its_aliases():
    graph = _FakeGraph()
    aliases = list(graph.handed.aliases)
    del graph
    gc.collect()
    assert not any(torch._C._is_cached_tensor(a) for a in aliases)
