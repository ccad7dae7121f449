"""`with torch.autocast(...)` blocks traced into the graph (compiler/support/autocast.py): one
graph where eager would run one region, the same dtypes and values as eager, graph breaks
inside a block resumed under autocast without recompiling, and the autocast state after
the call (or an exception out of it) as eager leaves it."""

from __future__ import annotations

import warnings

import pytest
import torch

import compiler
from tests.tracer.helpers import RecordingBackend

lin = torch.nn.Linear(8, 8)
lin2 = torch.nn.Linear(8, 4)


def _state() -> tuple:
    return tuple(
        (torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in ("cpu", "cuda")
    ) + (torch.is_autocast_cache_enabled(),)


def in_one_graph(x):
    y = x * 2
    with torch.autocast("cpu", dtype=torch.bfloat16):
        z = lin(y)
        inside = torch.is_autocast_enabled("cpu")
        w = lin2(z.relu())
    return w.float() + 1, z.dtype, w.dtype, inside


def break_inside(x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        z = lin(x)
        print("a graph break inside the block")
        w = lin2(z)
    return w, torch.is_autocast_enabled("cpu")


def nested_off(x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        a = lin(x)
        with torch.autocast("cpu", enabled=False):
            b = lin(x)
        c = lin(x)
    return a, b, c


def legacy_class(x):
    with torch.cpu.amp.autocast(dtype=torch.bfloat16):
        return lin(x)


def _calls(fn, backend, n=3):
    """(eager's result, ours) for `n` calls on fresh inputs; each leaves autocast as it was."""
    compiled = compiler.compile(fn, backend=backend)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.cpu.amp.autocast's deprecation
        for _ in range(n):
            x = torch.randn(4, 8)
            before = _state()
            expected = fn(x)
            got = compiled(x)
            assert _state() == before
            yield expected, got


def _same(expected, got):
    if isinstance(expected, torch.Tensor):
        assert got.dtype == expected.dtype
        torch.testing.assert_close(got.float(), expected.float(), atol=2e-2, rtol=2e-2)
    elif isinstance(expected, (tuple, list)):
        assert len(got) == len(expected)
        for e, g in zip(expected, got):
            _same(e, g)
    else:
        assert got == expected


@pytest.mark.parametrize("backend", ["recording", "inductor"])
@pytest.mark.parametrize("fn", [in_one_graph, break_inside, nested_off, legacy_class])
def test_matches_eager(fn, backend, capsys):
    be = RecordingBackend() if backend == "recording" else backend
    for expected, got in _calls(fn, be):
        _same(expected, got)


def test_block_is_one_graph():
    backend = RecordingBackend()
    list(_calls(in_one_graph, backend))
    assert backend.count == 1


def test_break_inside_resumes_without_recompiling(capsys):
    backend = RecordingBackend()
    compiled = compiler.compile(break_inside, backend=backend)
    for _ in range(4):
        compiled(torch.randn(4, 8))
    entries = [e for f in compiler.inspect(compiled).functions for e in f.entries]
    assert [e.recompile_reason for e in entries] == [None, None]
    assert backend.count == 2
    assert not torch.is_autocast_enabled("cpu")


def test_exception_inside_block_restores_the_state():
    def fails(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = lin(x)
            print("break")
            y = y @ torch.randn(3, 3)  # shapes mismatch: eager raises here
        return y

    before = _state()
    for fn in (fails, compiler.compile(fails)):
        with pytest.raises(RuntimeError):
            fn(torch.randn(4, 8))
        assert _state() == before


def test_cast_cache_never_serves_a_stale_weight():
    """A weight updated between two calls is cast again: the block runs without autocast's
    weight-cast cache, which a block split by a break could not clear."""
    model = torch.nn.Linear(8, 8)

    def step(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            print("break")
            return model(x)

    compiled = compiler.compile(step, backend="eager")
    x = torch.randn(2, 8)
    compiled(x)
    with torch.no_grad():
        model.weight.add_(1.0)
    torch.testing.assert_close(compiled(x).float(), step(x).float())


def test_training_under_autocast_matches_eager_gradients():
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    ours = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    ours.load_state_dict(ref.state_dict())

    def loss_of(model, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(x)
        return out.float().pow(2).mean()

    compiled = compiler.compile(loss_of)
    x = torch.randn(32, 8)
    loss_of(ref, x).backward()
    compiled(ours, x).backward()
    for p, q in zip(ref.parameters(), ours.parameters()):
        torch.testing.assert_close(q.grad, p.grad, atol=2e-2, rtol=2e-2)


def test_as_name_runs_in_python():
    def named(x):
        with torch.autocast("cpu", dtype=torch.bfloat16) as ac:
            return lin(x), type(ac).__name__

    x = torch.randn(2, 8)
    out, name = compiler.compile(named)(x)
    assert name == "autocast" and out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), named(x)[0].float(), atol=2e-2, rtol=2e-2)
