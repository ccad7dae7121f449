"""aot/autograd.py's call of a training graph: only the inputs that require grad are the
autograd.Function's arguments, the mutated inputs' write-back learns its copies at the first
call, and only the forward's own saved tensors are checked for graph memory. Each against
eager where behaviour could differ."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from compiler.aot import autograd
from tests.aot.helpers import compile_graph


def _leaf(*size: int) -> torch.Tensor:
    return torch.randn(*size, requires_grad=True)


def _bn(x, w, running_mean, running_var):
    return F.batch_norm(x @ w, running_mean, running_var, training=True).tanh().sum()


def _bn_inputs() -> list[torch.Tensor]:
    return [torch.randn(6, 3), _leaf(3, 4), torch.zeros(4), torch.ones(4)]


def _graph(compiled) -> autograd.TrainingGraph:
    (graph,) = compiled.entries.values()
    assert isinstance(graph, autograd.TrainingGraph)
    return graph


def test_only_inputs_that_require_grad_are_function_arguments():
    x, w, b = torch.randn(4, 3), _leaf(3, 5), _leaf(5)
    compiled, _ = compile_graph(lambda x, w, b: (x @ w + b).sin().sum(), x, w, b)
    out = compiled(x, w, b)
    # one edge per tensor argument of the Function: w and b, not the batch x
    assert len(out.grad_fn.next_functions) == 2
    out.backward()
    w2, b2 = w.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    (x @ w2 + b2).sin().sum().backward()
    torch.testing.assert_close(w.grad, w2.grad)
    torch.testing.assert_close(b.grad, b2.grad)


def test_in_place_change_of_a_saved_input_that_is_no_argument_raises_as_in_eager():
    def fn(x, w):
        return (x @ w).sum()  # w's gradient needs x: x is saved, and x needs no grad

    x, w = torch.randn(4, 3), _leaf(3, 5)
    compiled, _ = compile_graph(fn, x, w)
    assert _graph(compiled).part.saved_inputs == [0]
    for run in (fn, compiled):
        xi = x.clone()
        out = run(xi, w)
        xi.add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.backward()


def test_batch_norm_statistics_written_back_as_in_eager():
    inputs = _bn_inputs()
    compiled, _ = compile_graph(_bn, *inputs)
    graph = _graph(compiled)
    assert len(graph.part.mutated) == 2
    x, w, rm, rv = inputs
    erm, erv = rm.clone(), rv.clone()
    for _ in range(3):
        x = torch.randn(6, 3)
        compiled(x, w, rm, rv).backward()
        _bn(x, w.detach(), erm, erv)
        torch.testing.assert_close(rm, erm)
        torch.testing.assert_close(rv, erv)
    assert graph.write_back is not None and graph.write_back.same == []


def _writing_in_place_at_first_call(graph: autograd.TrainingGraph) -> list[int]:
    """Make `graph.forward` write its new values into the inputs itself and return the inputs
    at its first call (as a forward mutating in place would), fresh tensors after; returns
    the calls' count."""
    real_forward = graph.forward
    n, mutated = graph.part.num_outputs, graph.part.mutated
    calls: list[int] = []

    def forward(*args):
        results = list(real_forward(*args))
        if not calls:
            for k, i in enumerate(mutated):
                results[n + k] = args[i].copy_(results[n + k])
        calls.append(1)
        return tuple(results)

    graph.forward = forward
    return calls


def test_write_back_skips_new_values_in_the_inputs_memory_and_rechecks_them():
    inputs = _bn_inputs()
    compiled, _ = compile_graph(_bn, *inputs)
    graph = _graph(compiled)
    _writing_in_place_at_first_call(graph)
    x, w, rm, rv = inputs
    erm, erv = rm.clone(), rv.clone()
    before = rm._version
    compiled(x, w, rm, rv).backward()
    assert rm._version == before + 1  # the forward's own write only
    assert [i for i, _ in graph.write_back.same] == graph.part.mutated
    _bn(x, w.detach(), erm, erv)
    for _ in range(2):  # new values arrive in memory of their own now: still copied
        x = torch.randn(6, 3)
        compiled(x, w, rm, rv).backward()
        _bn(x, w.detach(), erm, erv)
        torch.testing.assert_close(rm, erm)
        torch.testing.assert_close(rv, erv)


def test_only_the_forwards_own_saved_tensors_are_checked_for_graph_memory(monkeypatch):
    def fn(x, w):
        return (x @ w).tanh().square().sum()

    x, w = torch.randn(4, 3), _leaf(3, 5)
    compiled, _ = compile_graph(fn, x, w)
    graph = _graph(compiled)
    checked: list[torch.Tensor] = []
    monkeypatch.setattr(autograd, "is_handed_out", lambda t: checked.append(t) or False)
    compiled(x, w).backward()
    internal = [k for k, i in enumerate(graph.part.saved_inputs) if i is None]
    inputs = [k for k, i in enumerate(graph.part.saved_inputs) if i is not None]
    assert internal and inputs  # the test needs both kinds
    assert len(checked) == len(internal)
    assert not any(c is x or c is w for c in checked)


def test_compiled_graph_called_inside_another_backward():
    """A gradient hook that runs a compiled graph's forward and backward (reentrant
    backward): each call's inputs stay its own."""

    def fn(x, w):
        return (x @ w).sin().sum()

    x, w, v = torch.randn(4, 3), _leaf(3, 5), _leaf(3, 5)
    compiled, _ = compile_graph(fn, x, w)

    def run(f, w, v):
        inner_x = torch.randn(4, 3, generator=torch.Generator().manual_seed(1))

        def hook(grad):
            with torch.enable_grad():
                f(inner_x, v).backward()
            return grad * 2

        w.register_hook(hook)
        f(x, w).backward()
        return w.grad, v.grad

    got = run(compiled, w, v)
    expected = run(fn, *(t.detach().clone().requires_grad_() for t in (w, v)))
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)
