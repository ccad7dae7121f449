"""A dynamic graph's aot stage traced once with symbolic sizes and bound per size
(compiler/aot/symbolic.py). Each sweep compares the compiled function with eager at sizes
odd, prime and of two rows, on C++ and on Triton (the interpreter here; CUDA in the `gpu`
variants), and counts make_fx traces: the first size's static graph, one symbolic trace of
the dynamic graph, and none per later size."""

from __future__ import annotations

import copy
import os

import pytest
import sympy
import torch
import torch.nn.functional as F

import compiler
from compiler.aot import symbolic
from compiler.backends import inductor
from compiler.tracer.shapes import is_symbolic
from tests.codegen.test_size_generic import Attention, MatmulEpilogue, pointwise, reductions

SIZES = (6, 7, 13, 2, 31, 9, 37, 7)
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
TARGETS = [
    "cpp",
    pytest.param(
        "triton", marks=pytest.mark.skipif(not INTERPRETED, reason="needs Triton's interpreter")
    ),
    pytest.param(
        "cuda",
        marks=[pytest.mark.gpu, pytest.mark.skipif(INTERPRETED, reason="runs real Triton")],
    ),
]


@pytest.fixture
def traces(monkeypatch):
    """make_fx traces of the aot stage, in order: "concrete" (one size's) or "symbolic"."""
    seen: list[str] = []
    concrete, sym = inductor.trace_forward, symbolic.trace_forward

    def counting(kind, real):
        def trace(*args, **kwargs):
            seen.append(kind)
            return real(*args, **kwargs)

        return trace

    monkeypatch.setattr(inductor, "trace_forward", counting("concrete", concrete))
    monkeypatch.setattr(symbolic, "trace_forward", counting("symbolic", sym))
    return seen


def _target(target: str, monkeypatch) -> str:
    if target == "triton":
        monkeypatch.setenv("COMPILER_CPU_EMITTER", "triton")
    return "cuda" if target == "cuda" else "cpu"


def sweep(fn, make_args, device, sizes=SIZES, atol=1e-5, rtol=1e-5):
    compiled = compiler.compile(fn)
    for n in sizes:
        args = [a.to(device) for a in make_args(n)]
        with torch.no_grad():
            expected = fn(*args)
            actual = compiled(*args)
        torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol, msg=f"size {n}")
    return compiled


def views(x):
    n = x.shape[0]
    a = x.reshape(n, 4, 4).permute(2, 0, 1).contiguous()
    b = torch.cat([x[:, :5], x[1:, :3].sum(0, keepdim=True).expand(n, 3), x[:, 8:]], dim=1)
    return a * 2, b.t() + 1, x.reshape(2 * n, -1)[n - 1 :] - x[n - 2, :8], x.new_ones(n, n).tril()


def aliases(x):
    # outputs that are views of the input, at offsets that grow with the size
    n = x.shape[0]
    return x[1:], x.view(-1)[n:], x.t(), x[n // 2].exp()


FAMILIES = [
    (pointwise, lambda n: (torch.randn(n, 24), torch.randn(n, 24))),
    (reductions, lambda n: (torch.randn(n, 24),)),
    (lambda x: reductions(x.t())[:5], lambda n: (torch.randn(24, n),)),
    (views, lambda n: (torch.randn(n, 16),)),
    (aliases, lambda n: (torch.randn(n, 16),)),
    (lambda x, y: (x @ y).relu() + x.sum(), lambda n: (torch.randn(n, n), torch.randn(n, 5))),
    (MatmulEpilogue().eval(), lambda n: (torch.randn(n, 32),)),
    (Attention().eval(), lambda n: (torch.randn(2, n, 32),)),
]
IDS = ["pointwise", "reductions", "reductions_over_n", "views", "aliases", "square_matmul",
       "addmm_gelu_residual", "causal_attention"]  # fmt: skip


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fn, make_args", FAMILIES, ids=IDS)
def test_one_symbolic_trace_serves_every_size(traces, monkeypatch, target, fn, make_args):
    device = _target(target, monkeypatch)
    if isinstance(fn, torch.nn.Module):
        fn = copy.deepcopy(fn).to(device)
    # x[n - 2] and the views of x[1:] need 3 rows to be what the other sizes have
    sizes = SIZES if fn not in (views, aliases) else tuple(n for n in SIZES if n != 2)
    compiled = sweep(fn, make_args, device, sizes, atol=1e-4, rtol=1e-4)
    # the first size's static graph, then the dynamic graph's one trace for every size
    assert traces == ["concrete", "symbolic"], traces
    notes = " ".join(n for g in compiler.inspect(compiled).graphs for n in g.notes)
    assert "aten graph traced once with symbolic sizes" in notes


def test_a_single_row_and_empty_sizes_stay_specialised(traces):
    compiled = sweep(
        lambda x: F.softmax(x * 2, -1).sum(0), lambda n: (torch.randn(n, 9),), "cpu",
        (5, 8, 1, 0, 11, 1),
    )  # fmt: skip
    # 1 and 0 get graphs of their own (the tracer's), traced concretely
    assert traces.count("symbolic") == 1
    assert traces.count("concrete") == 3
    assert len(compiler.inspect(compiled).graphs) == 4


def test_a_graph_that_needs_autograd_traces_its_joint_graph_per_size(traces):
    lin = torch.nn.Linear(8, 8)
    compiled = compiler.compile(lin)
    for n in (3, 5, 7):
        x = torch.randn(n, 8)
        compiled(x).sum().backward()
        expected = lin.weight.grad.clone()
        lin.weight.grad = None
        lin(x).sum().backward()
        torch.testing.assert_close(expected, lin.weight.grad)
        lin.weight.grad = None
    assert "symbolic" not in traces


# ---- bind: the guards that decide which sizes a symbolic trace serves -------------------


def _symbolic_of(fn, *sizes) -> symbolic.SymbolicAot:
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    compiled = compiler.compile(fn, backend=backend)
    for n in sizes:
        compiled(torch.randn(n, 4))
    out = symbolic.trace_symbolic(graphs[-1])
    assert out is not None
    return out


def test_bind_gives_the_graph_of_the_calls_sizes():
    sym = _symbolic_of(lambda x: x.view(-1, 2) * x.shape[0], 3, 5)
    bound = sym.bind([torch.randn(9, 4)] + [9] * (len(sym.fakes) - 1))
    vals = [n.meta["val"] for n in bound.gm.graph.nodes if n.op != "output"]
    assert all(not is_symbolic(tuple(v.shape)) for v in vals)
    assert tuple(vals[-1].shape) == (18, 2)
    assert bound.outputs.leaves[0].size == (18, 2)


def test_bind_refuses_sizes_outside_the_traces_guards_and_other_layouts():
    sym = _symbolic_of(lambda x: x * 2, 3, 5)
    (symbol,) = sym.sources
    assert sym.bind([torch.randn(9, 4)]) is not None
    sym.guards.append(sympy.Gt(symbol, 10))  # as a decomposition's `if n > 10` would leave
    assert sym.bind([torch.randn(9, 4)]) is None
    assert sym.bind([torch.randn(12, 4)]) is not None
    # the traced input is contiguous: a transposed one of the same sizes is traced itself
    assert sym.bind([torch.randn(4, 12).t()]) is None


def test_a_failing_bound_size_is_traced_concretely_and_right(traces, monkeypatch):
    real = symbolic.SymbolicAot.bind
    refused = []

    def bind(self, args):
        if args[0].shape[0] == 13:  # as a size outside the trace's guards is
            refused.append(13)
            return None
        return real(self, args)

    monkeypatch.setattr(symbolic.SymbolicAot, "bind", bind)
    sweep(pointwise, lambda n: (torch.randn(n, 24), torch.randn(n, 24)), "cpu")
    assert refused == [13]
    assert traces == ["concrete", "symbolic", "concrete"]


@pytest.mark.parametrize("target", TARGETS)
def test_inputs_written_in_place_across_sizes(traces, monkeypatch, target):
    device = _target(target, monkeypatch)

    def fn(x, y):
        x.mul_(2).add_(y[: x.shape[0]])
        y[1:].sub_(1)
        return x, x.sum(1), y.t()

    compiled = compiler.compile(fn)
    for n in SIZES:
        x, y = torch.randn(n, 6, device=device), torch.randn(n + 1, 6, device=device)
        ex, ey = x.clone(), y.clone()
        with torch.no_grad():
            expected = fn(ex, ey)
            actual = compiled(x, y)
        torch.testing.assert_close(actual, expected, msg=f"size {n}")
        torch.testing.assert_close((x, y), (ex, ey), msg=f"inputs at size {n}")
        assert actual[0] is x  # the input itself, as eager returns it
    assert traces == ["concrete", "symbolic"], traces
