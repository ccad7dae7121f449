"""compiler/scheduler/inplace.py: a graph that updates its inputs in place stores the new
values into them from the kernels that compute them, where that gives eager's answer, and
keeps the copy back otherwise (C++ kernels and interpreted Triton)."""

from __future__ import annotations

import pytest
import torch

from compiler.backends.inductor import compile_fx
from compiler.records import GraphRecord, compiling_graph


@pytest.fixture(autouse=True, params=["cpp", "triton"])
def emitter(request, monkeypatch, tmp_path):
    monkeypatch.setenv("COMPILER_CPU_EMITTER", request.param)
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("COMPILER_STRICT", "1")
    return request.param


def _run(fn, *inputs: torch.Tensor, **tol) -> GraphRecord:
    """Compiled `fn` against eager on copies of `inputs`: outputs and the inputs after."""
    gm = torch.fx.symbolic_trace(fn)
    eager_inputs = [t.clone() for t in inputs]
    expected = fn(*eager_inputs)
    record = GraphRecord(gm, gm.code, len(gm.graph.nodes))
    with compiling_graph(record):
        compiled = compile_fx(gm, [t.clone() for t in inputs])
    got = compiled(*inputs)
    torch.testing.assert_close(got, expected, **tol)
    torch.testing.assert_close(list(inputs), eager_inputs, **tol)
    return record


def _copies(record: GraphRecord) -> list[str]:
    return [k.name for k in record.kernels if k.name.startswith("extern_copy_")]


def test_updates_are_stored_into_the_inputs():
    def fn(x, y):
        x.add_(1)
        y.mul_(2)
        return (x * y,)

    record = _run(fn, torch.randn(5), torch.randn(5))
    assert not _copies(record)


def test_updates_reading_each_others_old_values_share_one_kernel():
    # like Adam: the new parameter reads the old moment, the new moment the old parameter
    def fn(a, b):
        new_a, new_b = a + b, b * a
        a.copy_(new_a)
        b.copy_(new_b)
        return ()

    record = _run(fn, torch.randn(4, 6), torch.randn(4, 6))
    assert not _copies(record)
    assert len(record.kernels) == 1


def test_an_update_read_transposed_keeps_its_copy():
    # another point of the same input: stores into it would race with the reads
    def fn(x):
        x.copy_(x.t() + 1)
        return ()

    record = _run(fn, torch.randn(6, 6))
    assert len(_copies(record)) == 1


def test_an_old_value_read_after_the_kernel_keeps_its_copy():
    def fn(x, w):
        new = x + 1  # computed by the first kernel: the extern call below reads it
        out = new @ w + x @ w  # and this one, after that kernel, reads the old x
        x.copy_(new)
        return (out,)

    record = _run(fn, torch.randn(4, 4), torch.randn(4, 3))
    assert len(_copies(record)) == 1


def test_an_updated_input_that_is_also_returned():
    def fn(x):
        x.mul_(3)
        return (x + 1, x)

    record = _run(fn, torch.randn(7))
    assert not _copies(record)


def test_a_scalar_count_and_a_tensor_updated_together(emitter):
    # the optimizer step's shape: a 0-d count read (new) by a larger update
    def fn(step, p, g):
        step.add_(1)
        p.sub_(g * 0.1 / step)
        return ()

    record = _run(fn, torch.tensor(3.0), torch.randn(8), torch.randn(8))
    assert not _copies(record)
    if emitter == "triton":  # the update reads the new count from the count itself
        assert "empty_strided(" not in record.wrapper_source.split("def call")[1]


@pytest.mark.parametrize("row", [300, 5000], ids=["persistent", "looped"])
def test_running_statistics_are_stored_by_the_reducing_kernel(row):
    # a training batch norm's running mean: updated from the batch's, in its kernel
    def fn(x, running):
        m = x.mean(1)
        running.copy_(running * 0.9 + m * 0.1)
        return (x - m[:, None],)

    record = _run(fn, torch.randn(6, row), torch.randn(6))
    assert not _copies(record)


@pytest.mark.parametrize("row", [300, 5000], ids=["persistent", "looped"])
def test_an_old_value_read_after_a_later_reduction_keeps_its_copy(row):
    # `out` reads the old `a` after the second reduction, which the new `a` does not need: a
    # looped Triton kernel computes it after that loop, past where the new `a` is computed
    def fn(x, a):
        m = x.sum(1)
        new_a = a + m
        v = ((x - m[:, None]) ** 2).sum(1)
        out = v * a
        a.copy_(new_a)
        return (out,)

    # (sums of 5000 squares in another order: 1e-5 apart; reading the new `a` is 1e0 off)
    record = _run(fn, torch.randn(4, row), torch.randn(4), rtol=1e-4, atol=1e-4)
    assert _copies(record)


def test_kernel_parameters_are_the_warm_up_arguments(emitter):
    """On CUDA each kernel is compiled ahead (in worker processes) for the dtypes of
    `warm_up_dtypes`; when those did not match its parameters, as for an input written in
    place, every warm-up failed and the kernel compiled at its first launch, one at a time
    (an Adam step's first call: 12 s on an H100)."""
    if emitter != "triton":
        pytest.skip("Triton kernels only")
    import re

    from compiler.aot.trace import trace_forward
    from compiler.backends.inductor import warm_up_dtypes
    from compiler.codegen.triton import kernel_source
    from compiler.lowering.graph import lower
    from compiler.scheduler.fusion import schedule

    def fn(p, g, m):
        m.mul_(0.9).add_(g)
        p.sub_(m * 0.1)
        return ()

    gm = torch.fx.symbolic_trace(fn)
    args = [torch.randn(8), torch.randn(8), torch.randn(8)]
    graph, _ = lower(trace_forward(gm, args), args)
    sched = schedule(graph)
    (group,) = sched.kernels
    assert set(group.reads) & set(group.writes)  # inputs written in place: the case that broke
    params = re.search(r"def \w+\((.*?)\):", kernel_source(group, sched).source).group(1)
    pointers = [p.strip() for p in params.split(",") if "constexpr" not in p]
    assert len(pointers) == len(warm_up_dtypes(group, sched))
