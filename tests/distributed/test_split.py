"""The bucket-split backend (compiler/distributed/split.py) in one process, without a process
group: the graph's parts trained equal to eager, each with its own backward, so the last
part's gradients are accumulated before the backward of the parts before it runs; and the
parts as the inspector shows them."""

from __future__ import annotations

import copy

import pytest
import torch

import compiler
from compiler.backends.registry import lookup_backend
from compiler.distributed.buckets import BucketCaps
from compiler.distributed.split import bucketed
from tests.distributed.models import MLP, OPTIMIZERS, TOLERANCE

CAPS = BucketCaps(first=1000, rest=1000)  # one Linear of the MLP per part


def _compiled(model: torch.nn.Module) -> torch.nn.Module:
    ids = {id(p) for p in model.parameters()}
    return compiler.compile(model, backend=bucketed(lookup_backend("inductor"), lambda: ids, CAPS))


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_parts_train_like_eager(optimizer: str) -> None:
    torch.manual_seed(0)
    eager = MLP()
    model = copy.deepcopy(eager)
    compiled = _compiled(model)
    opts = [OPTIMIZERS[optimizer](m.parameters()) for m in (eager, model)]
    for _ in range(3):
        x, y = torch.randn(8, 16), torch.randint(0, 8, (8,))
        for m, opt in zip((eager, compiled), opts):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(m(x), y).backward()
            opt.step()
        for p, q in zip(eager.parameters(), model.parameters()):
            torch.testing.assert_close(q.grad, p.grad, **TOLERANCE[optimizer])
            torch.testing.assert_close(q, p, **TOLERANCE[optimizer])
    graph = compiler.inspect(compiled).graphs[0]
    assert len(graph.buckets) == 3 and graph.fallback is None
    assert [len(b.graph.aot_graphs) for b in graph.buckets] == [3, 3, 3]  # joint, fwd, bwd


def _producers(out: torch.Tensor) -> dict[int, torch.autograd.graph.Node]:
    """The backward node that hands each parameter its gradient, by the parameter's id."""
    producers, todo, seen = {}, [out.grad_fn], set()
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for child, _ in node.next_functions:
            if child is not None and hasattr(child, "variable"):
                producers[id(child.variable)] = node
            todo.append(child)
    return producers


def test_each_part_hands_its_gradients_to_the_parameters() -> None:
    # A bucket's gradients go to their AccumulateGrad nodes (where DDP's hooks start the
    # all-reduce) from the bucket's own backward, not from one backward at the very end.
    model = MLP()
    out = _compiled(model)(torch.randn(4, 16))
    producers = _producers(out)
    layers = [model.fc1, model.fc2, model.fc3]
    nodes = [producers[id(layer.weight)] for layer in layers]
    assert len(set(nodes)) == 3
    assert all(producers[id(layer.bias)] is node for layer, node in zip(layers, nodes))
    assert nodes[2] is out.grad_fn or nodes[2] in {n for n, _ in out.grad_fn.next_functions}
    out.sum().backward()
    assert all(layer.weight.grad is not None for layer in layers)


def test_inspector_shows_the_parts() -> None:
    pytest.importorskip("ipywidgets")
    from jupyter_compile.inspector.graphs import bucket_details

    compiled = _compiled(MLP())
    compiled(torch.randn(4, 16)).sum().backward()
    html = bucket_details(compiler.inspect(compiled).graphs[0].buckets)
    assert "DDP gradient buckets (3 parts)" in html
    assert "L[&#x27;self&#x27;].fc2.weight" in html  # escaped
    assert "part 2: aten graph backward" in html


def test_a_dynamic_batch_size_is_split_too() -> None:
    # the last batch of an epoch is smaller: the recompiled graph has a symbolic batch size
    torch.manual_seed(0)
    eager = MLP()
    model = copy.deepcopy(eager)
    compiled = _compiled(model)
    for n in (8, 5, 3):
        x = torch.randn(n, 16)
        torch.testing.assert_close(compiled(x), eager(x))
        eager(x).sum().backward()
        compiled(x).sum().backward()
        for p, q in zip(eager.parameters(), model.parameters()):
            torch.testing.assert_close(q.grad, p.grad)
    graphs = compiler.inspect(compiled).graphs
    assert [len(g.buckets) for g in graphs] == [3, 3]
    assert all(g.fallback is None for g in graphs)


def test_a_part_whose_backend_fails_runs_eagerly_and_says_so(monkeypatch) -> None:
    monkeypatch.delenv("COMPILER_STRICT", raising=False)
    calls = []

    def flaky(gm, example_inputs):
        calls.append(gm)
        if len(calls) == 2:  # the middle part
            raise RuntimeError("no kernels today")
        return lookup_backend("inductor")(gm, example_inputs)

    torch.manual_seed(0)
    eager = MLP()
    model = copy.deepcopy(eager)
    ids = {id(p) for p in model.parameters()}
    compiled = compiler.compile(model, backend=bucketed(flaky, lambda: ids, CAPS))
    x = torch.randn(4, 16)
    with pytest.warns(compiler.CompilerWarning, match="no kernels today"):
        out = compiled(x)
    torch.testing.assert_close(out, eager(x))
    out.sum().backward()
    eager(x).sum().backward()
    for p, q in zip(eager.parameters(), model.parameters()):
        torch.testing.assert_close(q.grad, p.grad)
    parts = compiler.inspect(compiled).graphs[0].buckets
    assert [b.graph.fallback for b in parts] == [None, "RuntimeError: no kernels today", None]
