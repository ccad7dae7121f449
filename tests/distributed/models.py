"""Small models and the differential training loop of the distributed tests: the same model
trained under eager DDP and under compiler.compile(DDP(...)) in one process group, compared
after every step (loss, every gradient, every parameter)."""

from __future__ import annotations

import copy
from typing import Callable

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

import compiler


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 32)
        self.fc3 = torch.nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.fc1(x))
        x = torch.tanh(self.fc2(x))
        return self.fc3(x)


class ConvNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)  # BN follows
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, padding=1, stride=2)
        self.head = torch.nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.conv2(x))
        return self.head(x.mean(dim=(2, 3)))


class WithUnused(MLP):
    """An MLP with a layer its forward never calls: DDP needs find_unused_parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.unused = torch.nn.Linear(32, 32)


OPTIMIZERS: dict[str, Callable] = {
    "sgd": lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9),
    "adam": lambda params: torch.optim.Adam(params, lr=1e-2),
}
# Adam divides by the root of its second moment: an element whose gradients are near zero
# turns the last-bit differences of a reordered sum into 1e-5 of its update (the training
# tests of tests/aot allow the same)
TOLERANCE: dict[str, dict] = {"sgd": {}, "adam": {"rtol": 1e-4, "atol": 1e-5}}


def pair(
    make: Callable[[], torch.nn.Module], **ddp_kwargs
) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(eager DDP, compiled DDP) of two copies of one model, same on every rank."""
    torch.manual_seed(0)
    model = make()
    eager = DDP(model, **ddp_kwargs)
    compiled = compiler.compile(DDP(copy.deepcopy(model), **ddp_kwargs))
    return eager, compiled


def assert_same(eager: torch.nn.Module, compiled: torch.nn.Module, **tolerance) -> None:
    for (name, p), q in zip(eager.module.named_parameters(), compiled.module.parameters()):
        if p.grad is None or q.grad is None:
            assert p.grad is None and q.grad is None, f"{name}: grad is None on one side only"
        else:
            torch.testing.assert_close(q.grad, p.grad, msg=f"{name}.grad", **tolerance)
        torch.testing.assert_close(q, p, msg=name, **tolerance)


def train_same(
    eager: torch.nn.Module,
    compiled: torch.nn.Module,
    batch: Callable[[], tuple[torch.Tensor, torch.Tensor]],
    optimizer: str,
    steps: int = 3,
) -> None:
    """`steps` optimizer steps of both models on the same fresh batches (different per rank,
    so the all-reduce matters), compared after every backward and every step."""
    opts = [OPTIMIZERS[optimizer](m.parameters()) for m in (eager, compiled)]
    for _ in range(steps):
        x, y = batch()
        losses = []
        for model, opt in zip((eager, compiled), opts):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            losses.append(loss.detach())
        torch.testing.assert_close(losses[1], losses[0], **TOLERANCE[optimizer])
        assert_same(eager, compiled, **TOLERANCE[optimizer])
        for opt in opts:
            opt.step()
        assert_same(eager, compiled, **TOLERANCE[optimizer])
