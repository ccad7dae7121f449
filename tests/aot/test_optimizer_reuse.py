"""The compiled optimizer step reuses its last step's tensor lists (compiler/optim/step.py,
`_reuse`) only while nothing they came from changed: each test changes one such thing
between steps, in the eager and the compiled optimizer alike, and compares both after every
step (parameters, gradients, the whole optimizer state); a stale list would update the
wrong tensors, or miss some."""

from __future__ import annotations

from typing import Callable

import pytest
import torch

from compiler.optim import step as optim_step
from tests.aot.test_optimizers import OPTIMIZERS, train_both
from tests.aot.test_training import _mlp


@pytest.fixture
def afresh(monkeypatch) -> list[int]:
    """How many steps were prepared afresh (the others reused the last step's lists)."""
    calls = [0]
    prepare = optim_step._prepare_afresh

    def counted(*args):
        calls[0] += 1
        return prepare(*args)

    monkeypatch.setattr(optim_step, "_prepare_afresh", counted)
    return calls


def _run(make_opt: Callable, change: Callable, steps: int = 4) -> torch.optim.Optimizer:
    """train_both with `change(opt, model, k)` applied to each model and its optimizer after
    the backward of step k."""
    opts: dict[int, torch.optim.Optimizer] = {}

    def make(m):
        opts[id(m)] = make_opt(m)
        return opts[id(m)]

    def before_step(m, k):
        change(opts[id(m)], m, k)

    _, comp_opt = train_both(_mlp(), make, steps=steps, before_step=before_step)
    return comp_opt


def test_unchanged_steps_reuse_the_lists(afresh):
    _run(OPTIMIZERS["adam"], lambda opt, m, k: None)
    assert afresh[0] == 1


def test_lr_changed_between_steps(afresh):
    def change(opt, m, k):
        opt.param_groups[0]["lr"] = 1e-2 / (k + 1)

    opt = _run(OPTIMIZERS["adamw"], change)
    assert opt.param_groups[0]["lr"] == 1e-2 / 4
    assert afresh[0] == 1  # lr is read anew at every step


def test_weight_decay_changed_between_steps():
    def change(opt, m, k):
        if k == 2:
            opt.param_groups[0]["weight_decay"] = 0.5

    _run(OPTIMIZERS["adam"], change)


@pytest.mark.parametrize("step", [1, 2])
def test_gradient_none_on_one_step(step, afresh):
    def change(opt, m, k):
        if k == step:
            opt.param_groups[0]["params"][3].grad = None

    _run(OPTIMIZERS["adam"], change)
    assert afresh[0] == 3  # the first step, the one without it, and the one after


def test_gradient_of_a_whole_group_none_on_one_step():
    def make(m):
        return torch.optim.Adam([{"params": m[0].parameters()}, {"params": m[2].parameters()}])

    def change(opt, m, k):
        if k == 1:
            for p in opt.param_groups[1]["params"]:
                p.grad = None

    _run(make, change)


@pytest.mark.parametrize("how", ["clear", "delete_one", "replace_one", "replace_tensor", "load"])
def test_state_reset_or_replaced(how):
    def change(opt, m, k):
        if k != 2:
            return
        p = opt.param_groups[0]["params"][2]
        if how == "clear":
            opt.state.clear()
        elif how == "delete_one":
            del opt.state[p]
        elif how == "replace_one":
            opt.state[p] = {k: v.clone() for k, v in opt.state[p].items()}
        elif how == "replace_tensor":
            opt.state[p]["exp_avg"] = torch.zeros_like(p)
        else:
            opt.load_state_dict(opt.state_dict())

    _run(OPTIMIZERS["adam_amsgrad"], change)


def test_param_group_added():
    def make(m):
        return torch.optim.Adam([*m[0].parameters(), *m[2].parameters()], lr=1e-2)

    def change(opt, m, k):
        if k == 2:
            opt.add_param_group({"params": m[4].parameters(), "lr": 1e-3})

    opt = _run(make, change)
    assert len(opt.param_groups) == 2


@pytest.mark.parametrize("name", ["sgd", "adam"])
def test_parameter_replaced_in_its_group(name):
    """SGD without momentum keeps no state: only the params list tells the change."""
    replacements: list[torch.nn.Parameter] = []

    def change(opt, m, k):
        if k == 2:
            params = opt.param_groups[0]["params"]
            new = torch.nn.Parameter(params[1].detach().clone())
            new.grad = params[1].grad.clone()
            if params[1] in opt.state:
                opt.state[new] = opt.state.pop(params[1])
            params[1] = new  # the list edited in place
            replacements.append(new)
        elif k == 3:
            p = opt.param_groups[0]["params"][1]
            p.grad = torch.ones_like(p)  # the model no longer uses it

    _run(OPTIMIZERS[name], change)
    torch.testing.assert_close(replacements[0], replacements[1], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", ["sgd", "sgd_momentum"])
def test_sgd_momentum_switched(name):
    def change(opt, m, k):
        if k == 2:
            opt.param_groups[0]["momentum"] = 0.0 if name == "sgd_momentum" else 0.9

    _run(OPTIMIZERS[name], change)
