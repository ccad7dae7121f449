"""In-place updates removed as an FX pass (compiler/aot/inplace.py): the same values and
input write-backs as the graph with its mutations, the same ops as functionalize's re-trace,
and None (the re-trace) wherever a mutation is more than a renaming."""

from __future__ import annotations

from collections import Counter

import torch
from torch.func import functionalize
from torch.fx.experimental.proxy_tensor import make_fx

from compiler.aot import joint, trace
from compiler.aot.decompositions import decomposition_table
from compiler.aot.inplace import remove_mutations
from tests.aot.helpers import compile_graph

aten = torch.ops.aten


def _graph(fn, *args) -> torch.fx.GraphModule:
    return make_fx(fn, tracing_mode="fake")(*args)


def _mutable(gm: torch.fx.GraphModule) -> list[str]:
    return [
        str(n.target)
        for n in gm.graph.nodes
        if n.op == "call_function" and n.target._schema.is_mutable
    ]


def _ops(gm: torch.fx.GraphModule) -> Counter:
    return Counter(str(n.target) for n in gm.graph.nodes if n.op == "call_function")


def test_updates_of_intermediates_and_inputs_become_renamings():
    def fn(x, count, b):
        y = torch.mm(x, x)
        y.relu_()
        y.add_(b)  # a second write to the same tensor
        count.add_(1)  # an input: written back at the end
        z = y * count  # reads both new values
        return z, y

    args = (torch.randn(3, 3), torch.zeros(()), torch.randn(3))
    gm = remove_mutations(_graph(fn, *args))
    assert gm is not None
    assert _mutable(gm) == ["aten.copy_.default"]  # the trailing write-back of `count`
    assert list(gm.graph.nodes)[-2].target is aten.copy_.default
    # the ops functionalize's re-trace gives
    assert _ops(gm) == _ops(_graph(functionalize(fn), *args))
    mine, eager = [a.clone() for a in args], [a.clone() for a in args]
    for actual, expected in zip(gm(*mine), fn(*eager)):
        assert torch.equal(actual, expected)
    assert all(torch.equal(a, e) for a, e in zip(mine, eager))


def test_copy_into_an_input_is_written_back():
    def fn(stat, x):
        new = stat * 0.9 + x.mean(0) * 0.1
        stat.copy_(new)
        return x - stat

    args = (torch.randn(4), torch.randn(5, 4))
    gm = remove_mutations(_graph(fn, *args))
    assert gm is not None and _mutable(gm) == ["aten.copy_.default"]
    mine, eager = [a.clone() for a in args], [a.clone() for a in args]
    assert torch.equal(gm(*mine), fn(*eager))
    assert torch.equal(mine[0], eager[0])


def test_mutations_seen_through_views_are_left_to_functionalize():
    def view_read_after_write(x):
        y = x * 2
        v = y.view(-1)
        y.add_(1)  # v sees it
        return v * 3

    def written_view(x):
        y = x * 2
        y[0].mul_(2)
        return y

    def split_read_after_write(x):
        y = x * 2
        a, _ = y.split(2)
        y.mul_(2)
        return a + 0

    def promoting(x, d):
        y = x * 2
        y.add_(d)  # float32 stays float32 in place; add would give float64
        return y

    def written_split_part(x):
        y = x * 2
        a, _ = y.split(2)
        a.mul_(2)  # y sees it
        return y + 0

    def view_of_split_part_read_after_write(x):
        y = x * 2
        a, _ = y.split(2)
        flat = a.view(-1)
        y.mul_(2)
        return flat + 0

    x = torch.randn(4, 3)
    cases = (
        view_read_after_write,
        written_view,
        split_read_after_write,
        written_split_part,
        view_of_split_part_read_after_write,
    )
    for fn in cases:
        assert remove_mutations(_graph(fn, x)) is None, fn.__name__
    assert remove_mutations(_graph(promoting, x, torch.randn(3, dtype=torch.float64))) is None


def test_in_place_ops_whose_out_of_place_form_decomposes_are_left_to_functionalize():
    def fn(x):
        y = x * 2
        y.clamp_min_(0.5)  # recorded whole; the table decomposes clamp_min
        return y

    x = torch.randn(4, 3)
    table = decomposition_table()
    assert aten.clamp_min.default in table and aten.clamp_min_.default not in table
    assert remove_mutations(_graph(fn, x), table) is None
    assert remove_mutations(_graph(fn, x)) is not None  # without a table it is a renaming


def test_views_taken_before_or_after_but_not_across_a_write():
    def fn(x):
        y = x * 2
        before = y.view(-1).sum()  # read before the write
        y.add_(1)
        after = y.view(-1)  # taken after it
        return before, after * 3

    x = torch.randn(4, 3)
    gm = remove_mutations(_graph(fn, x))
    assert gm is not None and not _mutable(gm)
    for actual, expected in zip(gm(x), fn(x)):
        assert torch.equal(actual, expected)


def _grads(fn, inputs):
    copies = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
    out = fn(*copies)
    out.sum().backward()
    return out, [c.grad for c in copies]


def test_training_graph_with_a_view_written_in_place_matches_eager(monkeypatch):
    """The joint trace's fallback: functionalize's re-trace of the undecomposed joint."""
    calls = []
    monkeypatch.setattr(
        joint, "remove_mutations", lambda *a: calls.append(remove_mutations(*a)) or calls[-1]
    )

    def fn(x, w):
        h = x @ w
        h[:, 0].mul_(2)
        return h * w.sum()

    inputs = [torch.randn(4, 3), torch.randn(3, 5).requires_grad_()]
    compiled, record = compile_graph(fn, *inputs)
    got, got_grads = _grads(compiled, inputs)
    assert calls == [None] and record.partition is not None  # compiled, through the re-trace
    expected, grads = _grads(fn, inputs)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(got_grads[1], grads[1])


def test_training_graph_with_in_place_relu_skips_the_retrace(monkeypatch):
    retraces = []
    trace_forward = joint.trace_forward
    monkeypatch.setattr(
        joint, "trace_forward", lambda *a, **k: retraces.append(1) or trace_forward(*a, **k)
    )

    def fn(x, w):
        h = x @ w
        h += x.sum()
        h.relu_()
        return h * 2

    inputs = [torch.randn(4, 3), torch.randn(3, 5).requires_grad_()]
    compiled, record = compile_graph(fn, *inputs)
    got, got_grads = _grads(compiled, inputs)
    assert not retraces and record.partition is not None
    expected, grads = _grads(fn, inputs)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(got_grads[1], grads[1])


def test_trace_forward_renames_an_optimizer_update_without_functionalize(monkeypatch):
    """Inference and optimizer graphs: one trace, the in-place updates renamed; `lerp_`
    meets our lerp (three ops) as it does under functionalize."""

    def no_functionalize(fn):
        raise AssertionError("functionalize's re-trace ran")

    monkeypatch.setattr(trace, "functionalize", no_functionalize)

    def step(param, grad, exp_avg):
        exp_avg.lerp_(grad, 0.1)
        param.sub_(exp_avg * 0.01)

    args = [torch.randn(8), torch.randn(8), torch.randn(8)]
    gm = torch.fx.symbolic_trace(step)
    aot = trace.trace_forward(gm, args)
    ops = [str(n.target) for n in aot.gm.graph.nodes if n.op == "call_function"]
    assert ops == [
        "aten.sub.Tensor", "aten.mul.Tensor", "aten.add.Tensor",  # exp_avg.lerp_(grad, 0.1)
        "aten.mul.Tensor", "aten.sub.Tensor",  # param.sub_(exp_avg * 0.01)
        "aten.copy_.default", "aten.copy_.default",  # written back: param, exp_avg
    ]  # fmt: skip
    assert aot.origins[list(aot.gm.graph.nodes)[3].name] == ("lerp_",)
    mine, eager = [a.clone() for a in args], [a.clone() for a in args]
    aot.gm(*mine)
    step(*eager)
    for a, e in zip(mine, eager):
        torch.testing.assert_close(a, e, rtol=1e-6, atol=1e-7)  # lerp's kernel may fuse


def test_trace_forward_functionalizes_a_view_written_in_place(monkeypatch):
    traced = []
    functionalize = trace.functionalize
    monkeypatch.setattr(trace, "functionalize", lambda fn: traced.append(1) or functionalize(fn))

    def fn(x):
        y = x * 2
        y[0].fill_(1.0)  # a write through a view of y
        return y + 1

    x = torch.randn(3, 4)
    aot = trace.trace_forward(torch.fx.symbolic_trace(fn), [x])
    assert traced == [1] and not _mutable(aot.gm)
    assert torch.equal(aot.gm(x), fn(x))
