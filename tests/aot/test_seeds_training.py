"""The seeds' training loops under compiler.compile (C++ kernels), against eager:
seed 000 compiles train() with the optimizer inside, seed 002 without it."""

from __future__ import annotations

import copy

import torch
import torchvision

import compiler
from tests.aot.helpers import assert_state_close, seed_000_train, training_graphs


def _model() -> torch.nn.Module:
    return torch.nn.Sequential(
        # no bias before BatchNorm: its gradient is zero up to rounding, which Adam would
        # blow up to a full step in either direction
        torch.nn.Conv2d(3, 8, 3, bias=False), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(8 * 14 * 14, 10),
    )  # fmt: skip


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(4, 3, 16, 16), torch.randint(10, (4,))


def test_seed_000_train_with_optimizer_inside():
    model = _model()
    comp_model = copy.deepcopy(model)

    train = seed_000_train(torch.optim.Adam(model.parameters()))
    train_opt = compiler.compile(seed_000_train(torch.optim.Adam(comp_model.parameters())))
    for step in range(3):
        data = _data()
        train(model, data)
        train_opt(comp_model, data)
        assert_state_close(model, comp_model, f"step {step}", atol=1e-5, rtol=1e-4)

    report = compiler.inspect(train_opt)
    reasons = [b.reason for b in report.functions[0].breaks]
    assert reasons[0].startswith("optimizer.zero_grad() runs in Python")
    assert reasons[1].startswith("loss.backward() runs autograd's engine in Python")
    assert reasons[2].startswith(
        "optimizer.step() ends the graph: Adam's update runs as a compiled"
    )
    (graph,) = training_graphs(report)  # forward and loss, compiled with their backward
    assert {k.graph for k in graph.kernels} == {"forward", "backward"}
    assert graph.fallback is None
    (step,) = [f for f in report.functions if f.name == "adam_step"]  # the compiled update
    (step_graph,) = step.graphs
    assert step_graph.fallback is None and not step.warnings
    # one kernel per parameter at most (small ones of one size share one), and one for the
    # step counts; every update is written in place (no copies back)
    assert {k.language for k in step_graph.kernels} == {"cpp"}
    assert len(step_graph.kernels) <= 1 + len(list(comp_model.parameters()))


def test_seed_002_train_with_optimizer_outside():
    model = _model()
    comp_model = copy.deepcopy(model)
    opt = torch.optim.Adam(model.parameters())
    comp_opt = torch.optim.Adam(comp_model.parameters())

    def train(mod, data):
        pred = mod(data[0])
        loss = torch.nn.CrossEntropyLoss()(pred, data[1])
        loss.backward()

    train_opt = compiler.compile(train)
    for step in range(3):
        data = _data()
        opt.zero_grad(True)
        train(model, data)
        opt.step()
        comp_opt.zero_grad(True)
        train_opt(comp_model, data)
        comp_opt.step()
        assert_state_close(model, comp_model, f"step {step}", atol=1e-5, rtol=1e-4)
    assert len(training_graphs(compiler.inspect(train_opt))) == 1


def test_resnet18_training_step_gradients_match_eager():
    """The seeds' torchvision models: one step of resnet18 (BatchNorm in train mode)."""
    model = torchvision.models.resnet18(num_classes=10)
    comp_model = copy.deepcopy(model)

    def train(mod, data):
        loss = torch.nn.CrossEntropyLoss()(mod(data[0]), data[1])
        loss.backward()
        return loss

    data = (torch.randn(4, 3, 32, 32), torch.randint(10, (4,)))
    expected = train(model, data)
    got = compiler.compile(train)(comp_model, data)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    # BatchNorm over 4 samples of 1x1 maps amplifies fp32 rounding: compare each gradient
    # as a whole, relative to its size
    for (name, p), (_, q) in zip(model.named_parameters(), comp_model.named_parameters()):
        error = (q.grad - p.grad).norm() / p.grad.norm()
        assert error < 1e-4, f"{name}.grad: relative error {error:.2e}"
    for (name, b), (_, c) in zip(model.named_buffers(), comp_model.named_buffers()):
        torch.testing.assert_close(c, b, msg=name, atol=1e-5, rtol=1e-5)
