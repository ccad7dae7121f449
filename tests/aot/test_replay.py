"""One make_fx trace per kind of repeated part (compiler/aot/replay.py): the aten graph is
the one a trace of the whole graph gives (code, names, origins, metadata), and graphs whose
parts could trace differently are traced whole."""

from __future__ import annotations

import pytest
import torch

import compiler
from compiler.aot import replay, trace
from compiler.backends import inductor
from compiler.support.lazy_graphs import graph_code


def _optimizer_graph(monkeypatch, opt_class, **options):
    """The FX graph of a compiled optimizer step on a small CNN, with its inputs."""
    seen = []
    real = inductor.trace_forward

    def spy(gm, inputs, *args, **kwargs):
        seen.append((gm, list(inputs)))
        return real(gm, inputs, *args, **kwargs)

    monkeypatch.setattr(inductor, "trace_forward", spy)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.Conv2d(8, 8, 3),
        torch.nn.BatchNorm2d(8), torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 4),
    )  # fmt: skip
    model(torch.randn(2, 3, 10, 10)).sum().backward()
    opt = opt_class(model.parameters(), **options)
    compiler.compile(lambda: opt.step())()
    (graph,) = seen
    return graph


def _traced(gm, inputs, monkeypatch, by_kind: bool) -> trace.AotGraph:
    calls = []
    real = replay.trace_by_kind

    def counted(*args):
        out = real(*args) if by_kind else None
        calls.append(out is not None)
        return out

    monkeypatch.setattr(trace, "trace_by_kind", counted)
    aot = trace.trace_forward(gm, inputs)
    assert calls == [by_kind]
    return aot


def _assert_same(a: trace.AotGraph, b: trace.AotGraph) -> None:
    assert graph_code(a.gm) == graph_code(b.gm)
    assert a.origins == b.origins
    for x, y in zip(a.gm.graph.nodes, b.gm.graph.nodes):
        assert x.name == y.name
        assert set(x.meta) == set(y.meta), x.name
        assert x.meta.get("stack_trace") == y.meta.get("stack_trace"), x.name
        vx, vy = x.meta.get("val"), y.meta.get("val")
        if isinstance(vx, torch.Tensor):
            meta = lambda v: (v.shape, v.stride(), v.storage_offset(), v.dtype, v.device)  # noqa: E731
            assert meta(vx) == meta(vy), x.name


@pytest.mark.parametrize(
    "opt_class, options",
    [
        (torch.optim.Adam, {}),
        (torch.optim.AdamW, {"weight_decay": 0.1}),
        (torch.optim.Adam, {"amsgrad": True}),
        (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}),
    ],
)
def test_optimizer_step_traced_by_kind_is_the_whole_trace(monkeypatch, opt_class, options):
    gm, inputs = _optimizer_graph(monkeypatch, opt_class, **options)
    whole = _traced(gm, inputs, monkeypatch, by_kind=False)
    by_kind = _traced(gm, inputs, monkeypatch, by_kind=True)
    _assert_same(whole, by_kind)


def _fx(fn) -> torch.fx.GraphModule:
    return torch.fx.symbolic_trace(fn)


def test_parts_returning_results_are_traced_themselves(monkeypatch):
    def fn(a, b, c, d):
        b.mul_(2).add_(1)
        x = c.mul_(2).add_(1)
        d.mul_(2).add_(1)
        return a.mul_(2).add_(1), x

    inputs = [torch.randn(3, 4) for _ in range(4)]
    gm = _fx(fn)
    whole = _traced(gm, inputs, monkeypatch, by_kind=False)
    by_kind = _traced(gm, inputs, monkeypatch, by_kind=True)
    _assert_same(whole, by_kind)
    expected_inputs, got_inputs = [t.clone() for t in inputs], [t.clone() for t in inputs]
    expected = fn(*expected_inputs)
    got = by_kind.gm(*got_inputs)
    for e, g in zip([*expected, *expected_inputs], [*got, *got_inputs]):
        torch.testing.assert_close(g, e)


def _none(gm, inputs) -> bool:
    return replay.trace_by_kind(gm, inputs, lambda g: pytest.fail("traced")) is None


def test_graphs_whose_copies_could_differ_are_traced_whole():
    x, y = torch.randn(3), torch.randn(3)

    def shared_write(a, b, lr):  # each part writes the input the other reads
        a.add_(lr)
        b.add_(lr)
        lr.mul_(2)
        return ()

    # lr written: it joins every part into one; nothing is alike
    assert _none(_fx(shared_write), [x, y, torch.randn(3)])

    def pair(a, b):
        a.add_(1)
        b.add_(1)
        return ()

    assert _none(_fx(pair), [x, x])  # one tensor twice: aliased inputs
    assert _none(_fx(pair), [x, torch.randn(4)])  # shapes differ: two kinds
    assert _none(_fx(pair), [x, x.double()])  # dtypes differ

    def interleaved(a, b):
        s = a.sin()
        t = b.sin()
        a.add_(s)
        b.add_(t)
        return ()

    assert _none(_fx(interleaved), [x, y])

    def constants_differ(a, b):
        a.add_(1)
        b.add_(1.0)
        return ()

    assert _none(_fx(constants_differ), [x, y])

    # a part of no input (here a switch of grad mode, as the tracer records one) may
    # change how the parts after it trace
    graph = torch.fx.Graph()
    a, b = graph.placeholder("a"), graph.placeholder("b")
    graph.call_method("add_", (a, 1))
    graph.call_function(torch._C._set_grad_enabled, (True,))
    graph.call_method("add_", (b, 1))
    graph.output(())
    assert _none(torch.fx.GraphModule(torch.nn.Module(), graph), [x, y])


def test_a_copy_writing_an_input_another_part_reads_is_traced_whole():
    # an aten op called directly is not named in place: the trace shows its write of lr
    def fn(a, b, lr):
        torch.ops.aten.add_.Tensor(lr, a.sum())
        torch.ops.aten.add_.Tensor(lr, b.sum())
        return ()

    inputs = [torch.randn(3), torch.randn(3), torch.randn(3)]
    calls = []

    def trace_fn(g):
        calls.append(g)
        return trace._trace(lambda *args: torch.fx.Interpreter(g).run(*args), {}, inputs)

    assert replay.trace_by_kind(_fx(fn), inputs, trace_fn) is None
    assert len(calls) == 1  # the first part was traced; its write made the copy invalid
