"""Split reductions (compiler/scheduler/split.py) vs eager: sums, max/min, mean and var over
the outer dims of NCHW and channels-last tensors in every dtype, ragged chunks, keepdim,
fused prologues and epilogues, and batch norm training graphs. The thresholds are lowered so
these small shapes split; the kernel headers say which kernels are the two stages."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from compiler.aot.trace import trace_forward
from compiler.ir.interpret import run_graph
from compiler.lowering.graph import lower
from compiler.scheduler import split
from compiler.scheduler.fusion import inline, required_buffers, schedule
from tests.codegen.helpers import DEVICE, check, rand, to_graph, triton_kernels

H100_SMS = 132


@pytest.fixture(autouse=True)
def small_splits(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("COMPILER_CPU_EMITTER", "triton")
    monkeypatch.setenv("COMPILER_STRICT", "1")
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
    monkeypatch.setattr(split, "SPLIT_MIN_ELEMENTS", 64)
    monkeypatch.setattr(split, "MIN_CHUNK", 16)


def stages(record) -> tuple[list, list]:
    """(stage-1 kernels, stage-2 kernels) of a compiled graph's record."""
    kernels = triton_kernels(record)
    first = [k for k in kernels if "Split reduction, stage 1 of 2" in k.source]
    second = [k for k in kernels if "Split reduction, stage 2 of 2" in k.source]
    return first, second


def split_count(record) -> int:
    """How many reductions were split (one stage-1 header line each)."""
    return sum(k.source.count("Split reduction, stage 1 of 2") for k in triton_kernels(record))


def nchw(*shape: int, dtype: torch.dtype = torch.float32, channels_last: bool = False):
    x = rand(*shape, dtype=dtype)
    return x.to(memory_format=torch.channels_last) if channels_last else x


# ---- the plan ---------------------------------------------------------------------------


def test_plan_for_batch_norm_shapes_on_an_h100(monkeypatch):
    monkeypatch.setattr(split, "SPLIT_MIN_ELEMENTS", 4096)
    monkeypatch.setattr(split, "MIN_CHUNK", 1024)
    # [16, 64, 64, 64] over (0, 2, 3): 64 rows of 65536 -> 16 * 4 chunks of 16 * 64 = 1024
    assert split.plan_split(64, (16, 64, 64), H100_SMS) == split.SplitPlan(1, 4, 16)
    # [16, 128, 16, 16]: 4 chunks of 1024 (no more: chunks stay >= MIN_CHUNK)
    assert split.plan_split(128, (16, 16, 16), H100_SMS) == split.SplitPlan(0, 4, 4)
    assert split.plan_split(512, (16, 4, 4), H100_SMS) is None  # rows of 256: short
    assert split.plan_split(8192, (16, 64, 64), H100_SMS) is None  # enough outputs
    # a prime length cannot be cut evenly: the last piece is masked
    plan = split.plan_split(1, (100003,), H100_SMS)
    assert plan.masked((100003,)) and plan.parts * plan.piece >= 100003
    assert (plan.parts - 1) * plan.piece < 100003


def test_cpu_schedule_without_processors_does_not_split():
    x = rand(4, 3, 8, 8, device="cpu")
    gm = to_graph(lambda x: (x.sum((0, 2, 3)),))
    graph, _ = lower(trace_forward(gm, [x]), [x])
    assert not any(k.notes for k in schedule(graph, processors=None).kernels)
    assert any(k.notes for k in schedule(graph, processors=H100_SMS).kernels)


@pytest.mark.parametrize("n", [64 * 16, 1009])  # even chunks and a ragged last one
def test_split_graph_runs_in_the_ir_interpreter(n):
    """The two stages as IR, evaluated by the reference interpreter (no kernels)."""
    x = rand(3, n, device="cpu")
    fn = lambda x: (x.sum(1), x.amax(1), x.amin(1), (x > 0).any(1), (x > -3).all(1))  # noqa: E731
    gm = to_graph(fn)
    graph, _ = lower(trace_forward(gm, [x]), [x])
    nodes, names, origins = inline(graph)
    result = split.split_reductions(nodes, names, origins, required_buffers(graph), H100_SMS)
    assert len(result.layouts) == 5
    flat = run_graph(dataclasses.replace(graph, nodes=tuple(result.nodes)), [x])
    for got, expected in zip(flat, fn(x)):
        torch.testing.assert_close(got, expected)


# ---- compiled vs eager ------------------------------------------------------------------


OUTER_DIM_REDUCTIONS = {
    "sum": lambda x, k: x.sum((0, 2, 3), keepdim=k),
    "amax": lambda x, k: x.amax((0, 2, 3), keepdim=k),
    "amin": lambda x, k: x.amin((0, 2, 3), keepdim=k),
    "mean": lambda x, k: x.mean((0, 2, 3), keepdim=k),
    "var": lambda x, k: x.var((0, 2, 3), keepdim=k),
}


@pytest.mark.parametrize("name", OUTER_DIM_REDUCTIONS)
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("keepdim", [False, True])
def test_outer_dims_of_nchw(name, channels_last, keepdim):
    op = OUTER_DIM_REDUCTIONS[name]
    record = check(
        lambda x: (op(x, keepdim),),
        nchw(4, 3, 8, 8, channels_last=channels_last),
        atol=1e-5,
        rtol=1e-5,
    )
    first, second = stages(record)
    # var is one Welford reduction: stage 1 writes partial means and m2s in one pass
    assert len(first) == len(second) == split_count(record) == 1


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_types_accumulate_in_float32(dtype):
    x = nchw(4, 3, 8, 8, dtype=dtype)
    record = check(
        lambda x: (x.sum((0, 2, 3)), x.amax((0, 2, 3)), x.mean((0, 2, 3))),
        x,
        atol=5e-2,
        rtol=5e-2,
    )
    first, _ = stages(record)
    assert first and all("float32[" in k.source.split("out_ptr0 = ")[1] for k in first)


def test_int64_and_bool():
    x = nchw(4, 3, 8, 8, dtype=torch.int64)
    record = check(
        lambda x: (x.sum((0, 2, 3)), x.amax((0, 2, 3)), x.amin((0, 2, 3)), x.prod(2)),
        x,
    )
    # the three over (0, 2, 3) share both stages; the prod is over 8 elements: too short
    assert split_count(record) == 3 and len(stages(record)[0]) == 1
    b = nchw(4, 3, 8, 8, dtype=torch.bool)
    record = check(lambda b: (b.any((0, 2, 3)), b.all((0, 2, 3)), b.sum((0, 2, 3))), b)
    first, _ = stages(record)
    # the bool sum accumulates, and keeps its partials, in int64
    assert first and "dtype=torch.int64" in record.wrapper_source


def test_prod_of_floats_and_ints():
    x = 1 + 0.01 * rand(3, 256)
    n = rand(3, 256, dtype=torch.int64)
    record = check(lambda x, n: (x.prod(1), n.prod(1)), x, n, rtol=1e-4, atol=1e-6)
    assert stages(record)[0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.bool])
def test_length_not_divisible_by_the_chunk(dtype):
    x = rand(3, 1009, dtype=dtype)  # prime: the last chunk of each row is masked
    if dtype == torch.bool:
        fn = lambda x: (x.any(1), x.all(1), x.sum(1))  # noqa: E731
    elif dtype == torch.int64:
        fn = lambda x: (x.sum(1), x.amax(1), x.amin(1))  # noqa: E731
    else:
        fn = lambda x: (x.sum(1), x.amax(1), x.amin(1), x.float().var(1))  # noqa: E731
    tol = {"atol": 5e-2, "rtol": 5e-2} if dtype == torch.float16 else {}
    record = check(fn, x, **tol)
    first, _ = stages(record)
    assert first and all("the last one masked" in k.source for k in first)


def test_nan_reaches_the_output_through_both_stages():
    x = rand(3, 1009)
    x[1, 500] = float("nan")
    record = check(lambda x: (x.amax(1), x.amin(1), x.sum(1)), x, atol=1e-4, rtol=1e-5)
    assert split_count(record) == 3


def test_argmax_and_argmin_stay_one_reduction():
    record = check(lambda x: (x.argmax(1), x.argmin(1)), rand(3, 1009))
    assert split_count(record) == 0


def test_full_reduction_to_a_scalar():
    record = check(lambda x: (x.sum(), x.amax(), x.mean()), rand(7, 300), atol=1e-4, rtol=1e-5)
    assert stages(record)[0]


def test_relu_backward_prologue_fuses_into_stage_one():
    """The batch norm backward pattern: both sums read `where(y <= 0, 0, g)`, computed in the
    stage-1 kernel rather than written to memory; the epilogue fuses into stage 2."""

    def fn(y, g, x, mean, w):
        d = torch.where(y <= 0, 0.0, g)
        s1 = d.sum((0, 2, 3))
        s2 = (d * (x - mean)).sum((0, 2, 3))
        return s1, s2 * w

    shape = (4, 3, 8, 8)
    inputs = (rand(*shape), rand(*shape), rand(*shape), rand(1, 3, 1, 1), rand(3))
    record = check(fn, *inputs, atol=1e-4, rtol=1e-5)
    kernels = triton_kernels(record)
    first, second = stages(record)
    assert len(kernels) == 2 and len(first) == len(second) == 1
    assert "tl.where(" in first[0].source and "le" in first[0].name.split("_")
    assert "mul" in second[0].name.split("_")  # s2 * w, in the stage-2 kernel


def test_split_results_are_the_same_run_to_run():
    from tests.codegen.helpers import compile_and_run

    x = rand(4, 3, 8, 8)
    out1, record, gm = compile_and_run(lambda x: (x.sum((0, 2, 3)), x.var((0, 2, 3))), x)
    assert stages(record)[0]
    for _ in range(2):
        out2, _, _ = compile_and_run(gm, x)
        for a, b in zip(out1, out2):
            assert torch.equal(a, b)


def test_batch_norm_training_forward_and_backward():
    import compiler
    from tests.aot.helpers import train_and_compare, training_graphs

    compiler.reset()
    torch.manual_seed(0)

    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
        torch.nn.Conv2d(4, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, 3),
    ).to(DEVICE)  # fmt: skip
    report = train_and_compare(
        model,
        lambda: (rand(4, 3, 8, 8), torch.randint(3, (4,), device=DEVICE)),
        F.cross_entropy,
        steps=2,
        atol=1e-4,
        rtol=1e-4,
    )
    (graph,) = training_graphs(report)
    split_parts = {
        k.graph for k in graph.kernels if "Split reduction, stage 1 of 2" in (k.source or "")
    }
    assert split_parts == {"forward", "backward"}
    # relu's backward (`le`, `where`) and batch norm's `sub`/`mul` are computed in a stage-1
    # kernel of the backward, not materialised by a pointwise kernel before it
    backward_first = [
        k.name
        for k in graph.kernels
        if k.graph == "backward" and "Split reduction, stage 1 of 2" in k.source
    ]
    assert any({"le", "where", "sub"} <= set(name.split("_")) for name in backward_first)
