"""Welford variances (var, var_mean, std, batch norm's statistics) in interpreted Triton vs
eager: each dim, corrections, keepdim, half types, persistent, looped and split kernels,
accuracy on inputs with a large mean against float64, and the kernel count of a training
batch norm's statistics once split."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from compiler.aot.trace import trace_forward
from compiler.ir.interpret import run_graph
from compiler.ir.nodes import Reduction
from compiler.ir.printer import format_graph
from compiler.lowering.graph import lower
from compiler.scheduler import split
from compiler.scheduler.fusion import inline, required_buffers
from tests.codegen.helpers import DEVICE, check, compile_and_run, rand, to_graph, triton_kernels


@pytest.fixture(autouse=True)
def triton_on_cpu(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("COMPILER_CPU_EMITTER", "triton")
    monkeypatch.setenv("COMPILER_STRICT", "1")
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


def small_splits(monkeypatch, splits: bool = True) -> None:
    """Split these small shapes as an H100 splits batch norm's (see test_triton_split_reductions;
    a function, not a fixture: test_cpp_differential runs these tests with its own fixtures)."""
    monkeypatch.setattr(split, "SPLIT_MIN_ELEMENTS", 64 if splits else 1 << 62)
    monkeypatch.setattr(split, "MIN_CHUNK", 16)


VARIANCES = {
    "var": lambda x, d, c, k: x.var(d, correction=c, keepdim=k),
    "std": lambda x, d, c, k: x.std(d, correction=c, keepdim=k),
    "var_mean": lambda x, d, c, k: torch.var_mean(x, d, correction=c, keepdim=k),
}


def reductions(fn, *inputs: torch.Tensor, welford: bool = True) -> list[str]:
    gm = to_graph(fn)
    graph, _ = lower(trace_forward(gm, list(inputs)), list(inputs), welford=welford)
    return [n.reduction_type for n in graph.nodes if isinstance(n, Reduction)]


@pytest.mark.parametrize("name", VARIANCES)
@pytest.mark.parametrize("dim", [0, 1, -1, (0, 2), None])
@pytest.mark.parametrize("correction", [0, 1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_each_dim(name, dim, correction, keepdim):
    op = VARIANCES[name]
    check(lambda x: (op(x, dim, correction, keepdim),), rand(3, 4, 5), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", VARIANCES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n", [33, 3000])  # persistent and looped
def test_dtypes_in_persistent_and_looped_kernels(name, dtype, n):
    op = VARIANCES[name]
    tol = {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 2e-2}
    record = check(
        lambda x: (op(x, 1, 1, False), op(x, 0, 0, True)), rand(4, n, dtype=dtype), **tol
    )
    sources = "".join(k.source for k in triton_kernels(record))
    assert "welford_combine" in sources
    if n > 1024:
        assert "for roffset" in sources


@pytest.mark.parametrize("n", [300, 5000, 20011])  # persistent, looped, ragged chunks
@pytest.mark.parametrize("splits", [False, True])
@pytest.mark.parametrize("mean", [1e3, 1e4])
def test_large_mean_is_as_accurate_as_two_passes(n, splits, mean, monkeypatch):
    """mean + randn: a sum of squares in float32 cancels to noise; Welford, like two passes,
    stays within float32 rounding of the float64 variance, whatever the mean (the two-pass
    form measured at up to 1.3e-6 here; the interpreter's `tl.reduce` combines lanes one
    after another, where a GPU combines them as a tree)."""
    small_splits(monkeypatch, splits)
    torch.manual_seed(0)
    x = mean + rand(3, n)
    exact = x.double().var(1)
    (got,), record, _ = compile_and_run(lambda x: (x.var(1),), x)
    naive = ((x * x).sum(1) - x.sum(1) ** 2 / n) / (n - 1)
    relative = ((got.double() - exact).abs() / exact).max().item()
    assert relative < 5e-6, relative
    assert ((naive.double() - exact).abs() / exact).max().item() > 1e-3  # it would fail
    sources = "".join(k.source for k in triton_kernels(record))
    assert "welford_combine" in sources
    assert ("Split reduction" in sources) == splits


def test_lowering_is_one_welford_reduction_for_triton_and_two_passes_for_cpp():
    x = rand(4, 3, 8, 8, device="cpu")

    def stats(x):
        return torch.var_mean(x, (0, 2, 3), correction=0)

    assert reductions(stats, x) == ["welford_m2", "sum"]  # var's m2, and the mean's sum
    assert reductions(stats, x, welford=False) == ["sum", "sum", "sum"]


@pytest.mark.parametrize("n", [64 * 16, 1009])  # even chunks and a ragged last one
def test_split_welford_graph_in_the_ir_interpreter(n, monkeypatch):
    """The two stages as IR (partial means and m2s less the row's first element, then their
    combination), evaluated by the reference interpreter, and printed."""
    small_splits(monkeypatch)
    x = 1000 + rand(3, n, device="cpu")
    fn = lambda x: (x.var(1), x.var(1, correction=0))  # noqa: E731
    gm = to_graph(fn)
    graph, _ = lower(trace_forward(gm, [x]), [x], welford=True)
    nodes, names, origins = inline(graph)
    result = split.split_reductions(nodes, names, origins, required_buffers(graph), 132)
    assert len(result.layouts) == 4  # partial means and m2s of each variance
    split_graph = dataclasses.replace(graph, nodes=tuple(result.nodes))
    for got, expected in zip(run_graph(split_graph, [x]), fn(x.double())):
        torch.testing.assert_close(got, expected.float(), rtol=1e-6, atol=0)
    text = format_graph(split_graph)
    assert "welford_m2 over" in text and "welford(mean=" in text


def test_cpp_emitter_keeps_two_passes(monkeypatch):
    monkeypatch.setenv("COMPILER_CPU_EMITTER", "cpp")
    record = check(
        lambda x: (x.var(1), x.std(0)), rand(4, 3000, device="cpu"), atol=1e-5, rtol=1e-5
    )
    assert record.kernels and all("welford" not in (k.source or "") for k in record.kernels)


def test_empty_and_single_element_rows():
    x = rand(3, 0)
    check(lambda x: (x.var(1), x.var(1, correction=0), torch.var_mean(x, 0)), x)
    y = rand(3, 1, 4)
    check(lambda y: (y.var(1), y.var(1, correction=0), y.std(1, keepdim=True)), y)


def test_nan_and_inf_reach_the_variance(monkeypatch):
    """A NaN or an infinite element makes the row's variance NaN. (Eager's var_mean also
    gives a NaN mean for a row with inf, where torch.mean gives inf; ours, a sum divided by
    n, gives inf, as it did with two passes: var_mean is checked on NaN only.)"""
    small_splits(monkeypatch)
    for n in (40, 3000, 1009):  # persistent, looped, split
        x = rand(3, n)
        x[0, n // 2] = float("nan")
        x[1, n // 3] = float("inf")
        x[2, n // 4] = -float("inf")
        check(lambda x: (x.var(1), x.std(1, correction=0)), x, atol=1e-4, rtol=1e-5)
        check(lambda x: torch.var_mean(x[:1], 1), x, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_split_var_mean_over_outer_dims_is_two_kernels(channels_last, dtype, monkeypatch):
    small_splits(monkeypatch)
    x = rand(4, 3, 8, 8, dtype=dtype)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    tol = {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 1e-2, "rtol": 1e-2}
    record = check(lambda x: torch.var_mean(x, (0, 2, 3), correction=0, keepdim=True), x, **tol)
    kernels = triton_kernels(record)
    assert len(kernels) == 2, [k.name for k in kernels]
    first, second = kernels
    assert "stage 1 of 2: welford_m2" in first.source and "stage 1 of 2: sum" in first.source
    assert "stage 2 of 2: welford_m2" in second.source


def test_training_batch_norm_statistics_are_two_kernels_when_split(monkeypatch):
    """Forward: the batch counter, one stage-1 kernel (the mean's sum and the variance's
    Welford partials), one stage-2 kernel (mean, invstd and the running statistics'
    updates), the normalisation, the loss; 3 steps (losses, gradients, running stats)
    match eager."""
    small_splits(monkeypatch)
    import compiler
    from tests.aot.helpers import train_and_compare, training_graphs

    compiler.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(8 * 8 * 8, 4),
    ).to(DEVICE)  # fmt: skip
    report = train_and_compare(
        model,
        lambda: (rand(4, 3, 8, 8), torch.randint(4, (4,), device=DEVICE)),
        F.cross_entropy,
        atol=1e-4,
        rtol=1e-4,
    )
    (graph,) = training_graphs(report)
    forward = [k for k in triton_kernels(graph) if k.graph == "forward"]
    statistics = [k for k in forward if "var" in k.name.split("_")]
    assert len(statistics) == 2, [k.name for k in forward]
    first, second = statistics
    assert "stage 1 of 2: welford_m2" in first.source and "stage 1 of 2: sum" in first.source
    assert "stage 2 of 2" in second.source and "rsqrt" in second.name.split("_")
