"""compiler.compile(DistributedDataParallel(model)) on two CPU ranks over gloo: the inner
module's graph split at gradient-bucket boundaries, trained step for step equal to eager DDP
(compiler/distributed/ddp.py, split.py)."""

from __future__ import annotations

import copy

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import compiler
from tests.distributed.harness import TWO_RANKS, run_ranks
from tests.distributed.models import MLP, ConvNet, WithUnused, assert_same, pair, train_same

pytestmark = TWO_RANKS

# 1 KiB buckets: every Linear of the MLP fills one, so its graph has three parts
SMALL_BUCKETS = 0.001


def _mlp_batch(rank: int):
    gen = torch.Generator().manual_seed(100 + rank)
    return lambda: (torch.randn(8, 16, generator=gen), torch.randint(0, 8, (8,), generator=gen))


def _mlp_worker(rank: int) -> None:
    for optimizer in ("sgd", "adam"):
        eager, compiled = pair(MLP, bucket_cap_mb=SMALL_BUCKETS)
        train_same(eager, compiled, _mlp_batch(rank), optimizer)
    report = compiler.inspect(compiled)
    assert len(report.graphs) == 1 and not [b for f in report.functions for b in f.breaks]
    graph = report.graphs[0]
    assert [b.split_after for b in graph.buckets] == ["relu", "tanh", ""]
    assert [b.params for b in graph.buckets] == [
        ["L['self'].fc1.weight", "L['self'].fc1.bias"],
        ["L['self'].fc2.weight", "L['self'].fc2.bias"],
        ["L['self'].fc3.weight", "L['self'].fc3.bias"],
    ]
    assert [b.param_bytes for b in graph.buckets] == [2176, 4224, 1056]
    assert all(b.graph.aot_graphs.get("backward") for b in graph.buckets), "a part per backward"
    assert graph.fallback is None and graph.kernels


def test_mlp_sgd_and_adam() -> None:
    run_ranks(_mlp_worker)


def _conv_worker(rank: int) -> None:
    gen = torch.Generator().manual_seed(200 + rank)

    def batch():
        return torch.randn(4, 3, 8, 8, generator=gen), torch.randint(0, 10, (4,), generator=gen)

    for optimizer in ("sgd", "adam"):
        # 0.5 KiB buckets: head (680 B), conv2 (4.6 KiB), conv1 (864 B) with bn1 fill one each
        eager, compiled = pair(ConvNet, bucket_cap_mb=0.0005)
        train_same(eager, compiled, batch, optimizer)
        torch.testing.assert_close(compiled.module.bn1.running_mean, eager.module.bn1.running_mean)
        graph = compiler.inspect(compiled).graphs[0]
        assert len(graph.buckets) == 3, [b.nodes for b in graph.buckets]
        assert graph.buckets[-1].params == ["L['self'].head.weight", "L['self'].head.bias"]


def test_convnet_sgd_and_adam() -> None:
    run_ranks(_conv_worker)


def _no_sync_worker(rank: int) -> None:
    eager, compiled = pair(MLP, bucket_cap_mb=SMALL_BUCKETS)
    batch = _mlp_batch(rank)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (eager, compiled)]
    for _ in range(2):
        micro = [batch() for _ in range(3)]
        for model, opt in zip((eager, compiled), opts):
            opt.zero_grad()
            with model.no_sync():  # accumulate two micro-batches locally
                for x, y in micro[:2]:
                    torch.nn.functional.cross_entropy(model(x), y).backward()
        # inside no_sync nothing is all-reduced: the ranks' gradients still differ
        local = compiled.module.fc1.weight.grad.clone()
        other = [torch.empty_like(local) for _ in range(2)]
        dist.all_gather(other, local)
        assert not torch.equal(other[0], other[1])
        assert_same(eager, compiled)
        for model in (eager, compiled):
            x, y = micro[2]
            torch.nn.functional.cross_entropy(model(x), y).backward()  # synchronises
        assert_same(eager, compiled)
        for opt in opts:
            opt.step()
        assert_same(eager, compiled)


def test_no_sync_accumulation() -> None:
    run_ranks(_no_sync_worker)


def _unused_worker(rank: int) -> None:
    eager, compiled = pair(WithUnused, bucket_cap_mb=SMALL_BUCKETS, find_unused_parameters=True)
    train_same(eager, compiled, _mlp_batch(rank), "sgd")
    assert compiled.module.unused.weight.grad is None
    graph = compiler.inspect(compiled).graphs[0]
    assert len(graph.buckets) == 3
    assert not any("unused" in p for b in graph.buckets for p in b.params)


def test_find_unused_parameters() -> None:
    run_ranks(_unused_worker)


def _static_worker(rank: int) -> None:
    eager, compiled = pair(MLP, bucket_cap_mb=SMALL_BUCKETS, static_graph=True)
    train_same(eager, compiled, _mlp_batch(rank), "adam", steps=3)
    assert len(compiler.inspect(compiled).graphs[0].buckets) == 3


def test_static_graph() -> None:
    run_ranks(_static_worker)


def _ddp_of_compiled_worker(rank: int) -> None:
    # DDP(compiler.compile(model)): the graph compiles inside DDP's forward, so it is split too
    torch.manual_seed(0)
    model = MLP()
    eager = DDP(model, bucket_cap_mb=SMALL_BUCKETS)
    inner = compiler.compile(copy.deepcopy(model))
    compiled = DDP(inner, bucket_cap_mb=SMALL_BUCKETS)
    train_same(eager, compiled, _mlp_batch(rank), "sgd")
    graph = compiler.inspect(inner).graphs[0]
    assert [b.split_after for b in graph.buckets] == ["relu", "tanh", ""]


def test_ddp_of_a_compiled_module() -> None:
    run_ranks(_ddp_of_compiled_worker)


def _default_buckets_worker(rank: int) -> None:
    # DDP's default 25 MiB buckets hold the whole MLP: one graph, not split, and said so
    eager, compiled = pair(MLP)
    train_same(eager, compiled, _mlp_batch(rank), "sgd", steps=1)
    graph = compiler.inspect(compiled).graphs[0]
    assert len(graph.buckets) == 1 and graph.buckets[0].split_after == ""
    assert any("not split" in n for n in graph.notes)


def test_default_bucket_cap_does_not_split() -> None:
    run_ranks(_default_buckets_worker)
