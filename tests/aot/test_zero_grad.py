"""`opt.zero_grad()` at a graph break (compiler/optim/zero_grad.py): torch's own zero_grad
with set_to_none=True runs as a plain loop over the parameters, only where nothing can tell
it from torch's call (a profiler, a torch function or dispatch mode, an override,
set_to_none anything but True); the training loop it is part of matches eager's."""

from __future__ import annotations

import copy

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import compiler
from compiler import optim
from compiler.optim import zero_grad
from tests.aot.helpers import assert_state_close


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))


def _with_grads(model: torch.nn.Module) -> torch.nn.Module:
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    return model


_OVERRIDDEN: list[torch.optim.Optimizer] = []  # each call of _Overrides.zero_grad


class _Overrides(torch.optim.SGD):
    def zero_grad(self, set_to_none: bool = True) -> None:
        _OVERRIDDEN.append(self)
        super().zero_grad(set_to_none)


class _Inherits(torch.optim.SGD):
    pass


def _sgd(cls: type = torch.optim.SGD) -> torch.optim.Optimizer:
    return cls(_with_grads(_model()).parameters(), lr=0.1)


@pytest.mark.parametrize(
    "call",
    [
        lambda opt: (opt.zero_grad, [], {}),
        lambda opt: (opt.zero_grad, [True], {}),
        lambda opt: (opt.zero_grad, [], {"set_to_none": True}),
        lambda opt: (torch.optim.Optimizer.zero_grad, [opt], {}),
        lambda opt: (torch.optim.Optimizer.zero_grad, [opt, True], {}),
    ],
)
def test_recognised(call):
    opt = _sgd()
    assert zero_grad.zero_grad_call(*call(opt)) is opt
    inherits = _sgd(_Inherits)
    assert zero_grad.zero_grad_call(*call(inherits)) is inherits


@pytest.mark.parametrize(
    "call",
    [
        lambda opt: (opt.zero_grad, [False], {}),
        lambda opt: (opt.zero_grad, [], {"set_to_none": False}),
        lambda opt: (opt.zero_grad, [1], {}),  # truthy, but torch tests it per gradient
        lambda opt: (opt.zero_grad, [True, True], {}),  # torch's call raises TypeError
        lambda opt: (opt.zero_grad, [True], {"set_to_none": True}),
        lambda opt: (opt.zero_grad, [], {"to_none": True}),
        lambda opt: (opt.step, [], {}),
        lambda opt: (torch.optim.Optimizer.zero_grad, [], {}),
        lambda opt: (torch.optim.Optimizer.zero_grad, [object()], {}),
    ],
)
def test_not_recognised(call):
    assert zero_grad.zero_grad_call(*call(_sgd())) is None


def test_an_override_runs_as_it_is():
    opt = _sgd(_Overrides)
    assert zero_grad.zero_grad_call(opt.zero_grad, [], {}) is None


class _Dispatch(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("where", ["profiler", "function mode", "dispatch mode"])
def test_torch_runs_it_where_its_range_is_seen(where):
    opt = _sgd()
    contexts = {
        "profiler": lambda: torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU]
        ),
        "function mode": lambda: torch.device("cpu"),
        "dispatch mode": _Dispatch,
    }
    with contexts[where]():
        assert zero_grad.zero_grad_call(opt.zero_grad, [], {}) is None
    assert zero_grad.zero_grad_call(opt.zero_grad, [], {}) is opt


def test_clear_grads_as_torch():
    """Every gradient None (of every group), the profile name set and the class's step
    patched as torch's first zero_grad does for an optimizer that lacks them."""
    model = _with_grads(_model())
    opt = torch.optim.SGD(
        [{"params": model[0].parameters()}, {"params": model[2].parameters(), "lr": 0.5}]
    )
    del opt._zero_grad_profile_name
    zero_grad.clear_grads(opt)
    assert all(p.grad is None for p in model.parameters())
    assert opt._zero_grad_profile_name == "Optimizer.zero_grad#SGD.zero_grad"


def _train(model, opt, x):
    opt.zero_grad()
    loss = model(x).sum()
    loss.backward()
    opt.step()
    return loss


def _train_both(monkeypatch, make_opt, steps: int = 3):
    """Eager and compiled training of one model; how many zero_grads the loop made."""
    calls = []
    clear = optim.clear_grads

    def counted(opt):
        calls.append(opt)
        return clear(opt)

    monkeypatch.setattr(optim, "clear_grads", counted)
    model = _model()
    comp_model = copy.deepcopy(model)
    opt, comp_opt = make_opt(model), make_opt(comp_model)
    compiled = compiler.compile(_train)
    for step in range(steps):
        x = torch.randn(5, 4)
        torch.testing.assert_close(compiled(comp_model, comp_opt, x), _train(model, opt, x))
        assert_state_close(model, comp_model, f"step {step}")
    return compiled, calls


def test_training_loop_clears_the_gradients(monkeypatch):
    compiled, calls = _train_both(monkeypatch, lambda m: torch.optim.Adam(m.parameters()))
    assert len(calls) == 3
    (first, *_) = compiler.inspect(compiled).functions[0].breaks
    assert first.reason.startswith("optimizer.zero_grad() runs in Python")
    assert "set_to_none=True runs as one loop" in first.reason


def test_training_loop_with_an_override(monkeypatch):
    """The override runs (compiled as user code); its call of torch's zero_grad is the loop."""
    opts = []

    def make(m):
        opts.append(_Overrides(m.parameters(), lr=0.1))
        return opts[-1]

    _OVERRIDDEN.clear()
    _, calls = _train_both(monkeypatch, make)
    assert _OVERRIDDEN == [opts[1], opts[0]] * 3
    assert calls == [opts[1]] * 3


def test_training_loop_under_the_profiler_keeps_torchs_range(monkeypatch):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        _, calls = _train_both(monkeypatch, lambda m: torch.optim.SGD(m.parameters(), lr=0.1))
    assert calls == []
    names = {e.name for e in prof.events()}
    assert "Optimizer.zero_grad#SGD.zero_grad" in names
