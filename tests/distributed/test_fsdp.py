"""compiler.compile of a model sharded per block with FSDP2's fully_shard, on two CPU ranks
over gloo: each block's forward and backward compiled, FSDP's all-gather and reduce-scatter
hooks run around them, trained step for step equal to the eager FSDP model
(compiler/distributed/fsdp.py)."""

from __future__ import annotations

import copy

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import compiler
from tests.distributed.harness import TWO_RANKS, WORLD, run_ranks
from tests.distributed.models import OPTIMIZERS, TOLERANCE

pytestmark = TWO_RANKS


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(16, 32)
        self.down = torch.nn.Linear(32, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(x)))


class TwoBlocks(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(), Block()])
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def _sharded(model: torch.nn.Module, mesh, shard_root: bool) -> torch.nn.Module:
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    return fully_shard(model, mesh=mesh) if shard_root else model


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def _assert_same(eager: torch.nn.Module, compiled: torch.nn.Module, tolerance: dict) -> None:
    for (name, p), q in zip(eager.named_parameters(), compiled.parameters()):
        torch.testing.assert_close(_full(q.grad), _full(p.grad), msg=f"{name}.grad", **tolerance)
        torch.testing.assert_close(_full(q), _full(p), msg=name, **tolerance)


def _worker(rank: int, optimizer: str, shard_root: bool) -> None:
    mesh = init_device_mesh("cpu", (WORLD,))
    torch.manual_seed(0)
    model = TwoBlocks()
    eager = _sharded(copy.deepcopy(model), mesh, shard_root)
    compiled = compiler.compile(_sharded(model, mesh, shard_root))
    opts = [OPTIMIZERS[optimizer](m.parameters()) for m in (eager, compiled)]
    gen = torch.Generator().manual_seed(300 + rank)
    for _ in range(3):
        x, y = torch.randn(8, 16, generator=gen), torch.randint(0, 4, (8,), generator=gen)
        for m, opt in zip((eager, compiled), opts):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(m(x), y).backward()
        _assert_same(eager, compiled, TOLERANCE[optimizer])
        for opt in opts:
            opt.step()
        _assert_same(eager, compiled, TOLERANCE[optimizer])

    report = compiler.inspect(compiled)
    functions = {f.qualname: f for f in report.functions}
    # the top-level forward breaks at each block call (FSDP's hooks run there) ...
    breaks = functions["TwoBlocks.forward"].breaks
    assert len(breaks) == 2 and all("has hooks" in b.reason for b in breaks)
    assert all("block(x)" in b.user_stack[-1].text for b in breaks)
    # ... each block's forward is a compiled training graph, one entry per block object
    block_graphs = functions["Block.forward"].graphs
    assert len(block_graphs) == 2
    for i, graph in enumerate(block_graphs):
        assert graph.fallback is None and graph.aot_graphs.get("backward")
        assert any(f"FSDP2 unit 'blocks.{i}'" in n for n in graph.notes), graph.notes
    head = [g for g in functions["TwoBlocks.forward"].graphs if "head" in g.code]
    # the head's parameters are the model's unit's when the model is sharded, else no unit's
    assert len(head) == 1
    assert any("unit '(root)'" in n for n in head[0].notes) == shard_root


def test_fsdp2_two_blocks_and_model_sgd() -> None:
    run_ranks(_worker, "sgd", True)


def test_fsdp2_two_blocks_only_adam() -> None:
    run_ranks(_worker, "adam", False)
