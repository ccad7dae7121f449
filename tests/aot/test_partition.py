"""The partitioner: which tensors the forward saves for the backward and which forward
work the backward recomputes; and the minimum cut under it."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from compiler.aot.joint import lift_attributes, trace_joint
from compiler.aot.mincut import CutError, FlowNetwork
from compiler.aot.partition import partition, recomputable


def _split(fn, *inputs):
    gm = torch.fx.symbolic_trace(fn)
    joint = trace_joint(gm, list(inputs))
    return joint, partition(joint)


def _saved(part) -> set[str]:
    return {s.name for s in part.saved}


def _ops(aot, names) -> set[str]:
    nodes = {n.name: n for n in aot.gm.graph.nodes}
    return {str(nodes[n].target) for n in names if n in nodes}


def _leaf(*shape):
    return torch.randn(*shape).requires_grad_()


def test_pointwise_chain_is_recomputed_from_the_inputs():
    def fn(x, w):
        return (x * w).sin().exp().sum()

    _, part = _split(fn, _leaf(64), _leaf(64))
    assert _saved(part) == {"x", "w"}  # inputs cost no memory to keep
    assert {"mul", "sin", "exp"} <= set(part.recomputed)


def test_matmul_output_is_saved_not_recomputed():
    def fn(x, w):
        return torch.tanh(x @ w).sum()

    joint, part = _split(fn, _leaf(8, 16), _leaf(16, 32))
    assert "aten.mm.default" not in _ops(joint.aot, part.recomputed)
    # tanh's backward reads tanh's output (as 1 - tanh^2): of the tensors of that size on the
    # way, the latest is kept, so the backward recomputes no tanh
    assert "aten.tanh.default" not in _ops(joint.aot, part.recomputed)
    assert [s.size for s in part.saved if not s.is_input] == [(8, 32)]


def test_random_numbers_are_saved_never_redrawn():
    def fn(x):
        return F.dropout(x, 0.5, training=True).square().sum()

    joint, part = _split(fn, _leaf(32))
    draws = [n for n in joint.aot.gm.graph.nodes if _random(n)]
    assert draws  # the dropout mask's random numbers
    assert not any(_random(n) for n in part.backward.gm.graph.nodes)


def _random(node: torch.fx.Node) -> bool:
    op = node.target
    return isinstance(op, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in op.tags


def test_batchnorm_keeps_the_convolution_output_and_recomputes_the_rest():
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = torch.nn.Parameter(torch.randn(8, 3, 3, 3))
            self.w2 = torch.nn.Parameter(torch.randn(4, 8, 3, 3))
            self.gamma = torch.nn.Parameter(torch.ones(8))
            self.beta = torch.nn.Parameter(torch.zeros(8))
            self.register_buffer("mean", torch.zeros(8))
            self.register_buffer("var", torch.ones(8))

        def forward(self, x):
            y = F.batch_norm(F.conv2d(x, self.w1), self.mean, self.var, self.gamma, self.beta, True)
            return F.conv2d(y.relu(), self.w2).sum()

    gm, lifted = lift_attributes(torch.fx.symbolic_trace(Block()))
    joint = trace_joint(gm, [torch.randn(2, 3, 10, 10), *lifted])
    part = partition(joint)
    assert "aten.convolution.default" in _ops(joint.aot, _saved(part))
    assert "aten.relu.default" in _ops(joint.aot, part.recomputed)
    activation = 2 * 8 * 8 * 8 * 4  # bytes of one (2, 8, 8, 8) float32 tensor
    assert len([s for s in part.saved if s.nbytes >= activation]) == 1  # not also the relu
    assert len(part.mutated) == 2  # the running statistics


def test_backward_reads_only_saved_tensors_and_tangents():
    def fn(x, w):
        return (torch.relu(x @ w) * x.sum()).mean()

    joint, part = _split(fn, _leaf(4, 5), _leaf(5, 6))
    placeholders = [n.name for n in part.backward.gm.graph.nodes if n.op == "placeholder"]
    assert placeholders == [*(s.name for s in part.saved), "tangent_0"]
    outputs = list(part.forward.gm.graph.nodes)[-1].args[0]
    # inputs the backward keeps come from the call's arguments, the rest from the forward
    intermediates = [s.name for s, i in zip(part.saved, part.saved_inputs) if i is None]
    assert [o.name for o in outputs[part.num_outputs :]] == intermediates
    assert [i for i in part.saved_inputs if i is not None] == [0, 1]  # x, w


def test_recomputable_rule():
    gm = torch.fx.symbolic_trace(lambda x: (x.sin() @ x.t()).sum(1).view(-1))
    joint = trace_joint(gm, [_leaf(3, 3)])
    kinds = {
        str(n.target): recomputable(n) for n in joint.aot.gm.graph.nodes if n.op == "call_function"
    }
    assert kinds["aten.sin.default"] and kinds["aten.permute.default"]
    assert not kinds["aten.mm.default"] and not kinds["aten.sum.dim_IntList"]


# ---- the minimum cut -------------------------------------------------------------------


def test_min_cut_picks_the_cheapest_edges():
    net = FlowNetwork()
    net.add_edge("source", "a", math.inf)
    net.add_edge("a", "b", 10)
    net.add_edge("b", "c", 3)
    net.add_edge("c", "sink", math.inf)
    net.add_edge("a", "d", 4)
    net.add_edge("d", "sink", math.inf)
    side = net.min_cut("source", "sink")
    assert side == {"source", "a", "b"}


def test_min_cut_long_chain_does_not_recurse():
    net = FlowNetwork()
    prev = "source"
    for i in range(5000):
        net.add_edge(prev, f"n{i}", 1.0 if i == 2500 else 5.0)
        prev = f"n{i}"
    net.add_edge(prev, "sink", math.inf)
    side = net.min_cut("source", "sink")
    assert "n2499" in side and "n2500" not in side


def test_min_cut_without_a_finite_cut_raises():
    net = FlowNetwork()
    net.add_edge("source", "a", math.inf)
    net.add_edge("a", "sink", math.inf)
    with pytest.raises(CutError):
        net.min_cut("source", "sink")
