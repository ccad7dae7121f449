"""The joint's `describe` (compiler/aot/joint.py, through compiler/aot/outputs.py) reads the fake values our tracer recorded
instead of running the graph once more: the same output descriptions as that run, for
graphs with batch norm, outputs that are views of inputs or of other outputs, constants and
outputs computed without grad; graphs without recorded values still run."""

from __future__ import annotations

import torch

import compiler
from compiler.aot import joint, outputs


def _described(monkeypatch, fn, *args) -> int:
    """Compiles and calls `fn`; checks every graph the joint described both ways, and
    returns how many there were."""
    seen = []
    real = joint.describe

    def spy(gm, inputs):
        seen.append((gm, list(inputs)))
        return real(gm, inputs)

    monkeypatch.setattr(joint, "describe", spy)
    compiler.compile(fn)(*args)
    recorded = outputs.recorded
    for gm, inputs in seen:
        assert recorded(gm, inputs) is not None
        read = real(gm, inputs)
        monkeypatch.setattr(outputs, "recorded", lambda *a: None)
        ran = real(gm, inputs)
        monkeypatch.setattr(outputs, "recorded", recorded)
        assert read == ran
    return len(seen)


def test_batch_norm_cnn_in_training(monkeypatch):
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(), torch.nn.Flatten()
    )  # fmt: skip
    assert _described(monkeypatch, lambda x: model(x).sum(), torch.randn(2, 3, 6, 6)) == 1


def test_views_constants_and_outputs_without_grad(monkeypatch):
    w = torch.randn(4, 4, requires_grad=True)

    def fn(x):
        y = (x @ w).relu()
        with torch.no_grad():
            z = y * 2
        return x.t(), y, y[0], 3, z

    assert _described(monkeypatch, fn, torch.randn(3, 4)) == 1


def test_graphs_without_recorded_values_run():
    gm = torch.fx.symbolic_trace(lambda x: x.sin())
    x = torch.randn(3, requires_grad=True)
    assert outputs.recorded(gm, [x]) is None
    _, leaves, requires_grad = joint.describe(gm, [x])
    assert [o.differentiable for o in leaves] == [True] and requires_grad == [True]
