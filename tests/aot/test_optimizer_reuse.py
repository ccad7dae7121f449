"""The compiled optimizer step reuses its last step's tensor lists (compiler/optim/step.py,
`_reuse`) only while nothing they came from changed: each test changes one such thing
between steps, in the eager and the compiled optimizer alike, and compares both after every
step (parameters, gradients, the whole optimizer state); a stale list would update the
wrong tensors, or miss some."""

from __future__ import annotations

import dataclasses
from typing import Callable

import pytest
import torch

from compiler.optim import step as optim_step
from compiler.optim.functional import FUNCTIONS, adam_step
from compiler.runtime import cpp_ext
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


# ---- `_reuse` itself: each change it must see, with the extension's group_grads and with
# the Python checks it falls back to.


@pytest.fixture(params=["cpp", "python"])
def checks(request, monkeypatch) -> str:
    """The per-parameter checks of `_reuse` in the extension (skipped where it is not
    built) or in Python."""
    if request.param == "python":
        monkeypatch.setattr(cpp_ext, "group_grads_function", lambda: None)
    elif cpp_ext.group_grads_function() is None:
        pytest.skip(f"the C++ extension is not loaded: {cpp_ext.status()}")
    return request.param


def _planned(name: str = "adam") -> tuple[torch.optim.Optimizer, optim_step._StepPlan]:
    """An optimizer of a small model after a prepared step (state created, plan kept)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    opt = OPTIMIZERS[name](model)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    optim_step._prepare_afresh(opt, FUNCTIONS[type(opt)], None)
    return opt, optim_step._PLANS[opt]


def _param(opt: torch.optim.Optimizer, k: int = 2) -> torch.nn.Parameter:
    return opt.param_groups[0]["params"][k]


def test_reuse_unchanged_hands_over_this_steps_gradients(checks):
    opt, plan = _planned()
    for p in opt.param_groups[0]["params"]:
        p.grad = torch.randn_like(p)  # new gradient objects, as each backward makes
    (group,) = optim_step._reuse(opt, plan)
    params, grads = group[0], group[1]
    assert params is plan.groups[0].lists[0]
    assert len(grads) == len(params) and all(g is p.grad for p, g in zip(params, grads))


def _with_other_data(p: torch.Tensor, data: torch.Tensor, then: Callable) -> None:
    """Run `then()` while `p.data` is `data` (torch only takes a gradient that fits the
    parameter's dtype and device at assignment), then give `p` its data back."""
    old = p.data
    p.data = data
    then()
    p.data = old


def _grad_of_other_dtype(opt):
    p = _param(opt)
    _with_other_data(p, p.data.double(), lambda: setattr(p, "grad", p.grad.double()))


def _grad_sparse(opt):
    p = _param(opt)
    p.grad = p.grad.to_sparse()


def _param_data_of_other_dtype(opt):
    p = _param(opt)
    p.data = p.data.double()


def _grad_none(opt):
    _param(opt).grad = None


def _state_tensor_replaced(opt):
    state = opt.state[_param(opt)]
    state["exp_avg_sq"] = state["exp_avg_sq"].clone()


def _state_dict_replaced(opt):
    p = _param(opt)
    opt.state[p] = dict(opt.state[p])


def _param_replaced_in_group(opt):
    params = opt.param_groups[0]["params"]
    new = torch.nn.Parameter(params[1].detach().clone())
    new.grad = params[1].grad.clone()
    if params[1] in opt.state:
        opt.state[new] = opt.state.pop(params[1])
    params[1] = new


def _params_list_replaced(opt):
    opt.param_groups[0]["params"] = list(opt.param_groups[0]["params"])


@pytest.mark.parametrize(
    "change",
    [
        _grad_of_other_dtype,
        _grad_sparse,
        _param_data_of_other_dtype,
        _grad_none,
        _state_tensor_replaced,
        _state_dict_replaced,
        _param_replaced_in_group,
        _params_list_replaced,
    ],
)
def test_reuse_sees_the_change(change, checks):
    opt, plan = _planned("adam_amsgrad")
    assert optim_step._reuse(opt, plan) is not None
    change(opt)
    assert optim_step._reuse(opt, plan) is None


def test_reuse_sees_another_device(checks):
    """A CPU-only machine has no second device to move a gradient to (torch only takes a
    gradient on its parameter's device type): the plan's device differs instead."""
    opt, plan = _planned()
    assert optim_step._reuse(opt, dataclasses.replace(plan, device=torch.device("meta"))) is None


def test_reuse_sees_a_gradient_appear(checks):
    opt, _ = _planned()
    p = _param(opt)
    p.grad = None
    optim_step._prepare_afresh(opt, adam_step, None)  # planned without p's gradient
    plan = optim_step._PLANS[opt]
    assert optim_step._reuse(opt, plan) is not None
    p.grad = torch.ones_like(p)
    assert optim_step._reuse(opt, plan) is None


def test_reuse_keeps_a_parameter_whose_data_was_replaced_alike(checks):
    """`p.data = ...` of the same dtype and device keeps the parameter object, which the
    update writes in place: the lists stay valid."""
    opt, plan = _planned()
    p = _param(opt)
    p.data = p.data.clone()
    (group,) = optim_step._reuse(opt, plan)
    assert group[0][2] is p


def test_reuse_sgd_without_momentum_keeps_no_state(checks):
    opt, plan = _planned("sgd")
    assert plan.groups[0].state_lists == ()
    assert optim_step._reuse(opt, plan) is not None
    _param_replaced_in_group(opt)
    assert optim_step._reuse(opt, plan) is None


class _Logged(torch.Tensor):
    """A tensor subclass whose attribute reads run Python (__torch_function__)."""

    reads: list[str] = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.reads.append(getattr(func, "__name__", str(func)))
        return super().__torch_function__(func, types, args, kwargs or {})


def test_reuse_checks_a_subclass_gradient_in_python(checks):
    opt, plan = _planned()
    p = _param(opt)
    p.grad = p.grad.as_subclass(_Logged)
    _Logged.reads.clear()
    (group,) = optim_step._reuse(opt, plan)
    assert group[1][2] is p.grad
    # its dtype, layout and device were read once each, as the Python checks read them
    assert sorted(set(_Logged.reads)) == ["__get__"] and len(_Logged.reads) == 3


def test_reuse_under_a_torch_function_mode(checks):
    opt, plan = _planned()
    with torch.device("cpu"):  # a torch function mode: the reads go through it
        assert optim_step._reuse(opt, plan) is not None
        _param(opt).grad = None
        assert optim_step._reuse(opt, plan) is None
