"""Compiled optimizer steps (compiler/optim) against torch.optim's eager steps: parameters,
gradients and the whole optimizer state after every step, for SGD, Adam and AdamW in their
variants, on an MLP and a small CNN with BatchNorm (C++ kernels; one case in interpreted
Triton), and the cases that must fall back to torch.optim's own step, with the reason."""

from __future__ import annotations

import copy
from typing import Callable

import pytest
import torch
import torch.nn.functional as F

import compiler
from compiler import config
from compiler.backends import inductor
from compiler.records import FunctionRecord
from tests.aot.helpers import assert_state_close, seed_000_train
from tests.aot.test_training import _mlp

# fp32: the compiled update may round a few operations differently from eager's
TOL = {"rtol": 1e-6, "atol": 1e-7}


def _cnn() -> torch.nn.Module:
    # no bias before BatchNorm: its gradient is zero up to rounding, which Adam would blow
    # up to a full step in either direction (in eager and compiled alike, differently)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 3, bias=False), torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4),
    )  # fmt: skip


def _batch(model: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    if isinstance(model[0], torch.nn.Conv2d):
        return torch.randn(4, 3, 10, 10), torch.randint(4, (4,))
    return torch.randn(6, 12), torch.randint(5, (6,))


def assert_optimizers_close(
    eager: torch.optim.Optimizer,
    comp: torch.optim.Optimizer,
    what: str,
    groups: bool = True,
    **tol: float,
) -> None:
    """Every state tensor of every parameter (step counts included, wherever they live) and
    the param groups."""
    tol = tol or TOL
    e, c = eager.state_dict(), comp.state_dict()
    assert e["state"].keys() == c["state"].keys(), what
    for index, state in e["state"].items():
        assert state.keys() == c["state"][index].keys(), what
        for key, value in state.items():
            torch.testing.assert_close(
                c["state"][index][key].to(value.device),
                value,
                msg=lambda m, k=key: f"{what}: {k}: {m}",
                **tol,
            )
    if groups:
        assert c["param_groups"] == e["param_groups"], what


def train_both(
    model: torch.nn.Module,
    make_opt: Callable,
    steps: int = 4,
    scheduler: Callable | None = None,
    before_step: Callable | None = None,
    mode: str | None = None,
    **tol: float,
) -> tuple[compiler.records.CompiledReport, torch.optim.Optimizer]:
    """`steps` training steps of `model` and of a copy of it, eager against a function whose
    `opt.step()` is compiled (forward and backward run eagerly in both, so both steps get the
    same gradients); compared after every step (within `tol`, by default TOL). Returns the report and the compiled
    function's optimizer."""
    comp_model = copy.deepcopy(model)
    opt, comp_opt = make_opt(model), make_opt(comp_model)
    sched = scheduler(opt) if scheduler else None
    comp_sched = scheduler(comp_opt) if scheduler else None

    def step(o, s):
        o.step()
        if s is not None:
            s.step()

    compiled = compiler.compile(step, mode=mode)
    for k in range(steps):
        x, y = _batch(model)
        for mod, o in ((model, opt), (comp_model, comp_opt)):
            o.zero_grad(True)
            F.cross_entropy(mod(x), y).backward()
            if before_step is not None:
                before_step(mod, k)
        step(opt, sched)
        compiled(comp_opt, comp_sched)
        assert_state_close(model, comp_model, f"after step {k}", **(tol or TOL))
        assert_optimizers_close(opt, comp_opt, f"after step {k}", **tol)
    return compiler.inspect(compiled), comp_opt


def step_record(report) -> FunctionRecord:
    (record,) = [f for f in report.functions if f.name in ("sgd_step", "adam_step")]
    return record


OPTIMIZERS = {
    "sgd": lambda m: torch.optim.SGD(m.parameters(), lr=0.1),
    "sgd_momentum": lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9),
    "sgd_nesterov_wd": lambda m: torch.optim.SGD(
        m.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-2
    ),
    "sgd_wd_maximize": lambda m: torch.optim.SGD(
        m.parameters(), lr=0.05, weight_decay=1e-2, maximize=True
    ),
    "adam": lambda m: torch.optim.Adam(m.parameters(), lr=1e-2),
    "adam_wd": lambda m: torch.optim.Adam(m.parameters(), lr=1e-2, weight_decay=0.1),
    "adam_amsgrad": lambda m: torch.optim.Adam(m.parameters(), lr=1e-2, amsgrad=True),
    "adam_maximize_betas": lambda m: torch.optim.Adam(
        m.parameters(), lr=1e-2, betas=(0.8, 0.99), maximize=True
    ),
    "adamw": lambda m: torch.optim.AdamW(m.parameters(), lr=1e-2),
    "adamw_amsgrad": lambda m: torch.optim.AdamW(
        m.parameters(), lr=1e-2, weight_decay=0.1, amsgrad=True
    ),
}


@pytest.mark.parametrize("model", [_mlp, _cnn], ids=["mlp", "cnn"])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_compiled_step_matches_eager(name, model):
    report, _ = train_both(model(), OPTIMIZERS[name])
    record = step_record(report)
    assert not record.warnings  # every step ran compiled
    (entry,) = record.entries  # compiled once: the step counts are tensors
    assert entry.hits == 4
    graph = entry.graph
    assert graph.fallback is None
    assert any(n.startswith("compiled optimizer step (compiler/optim)") for n in graph.notes)
    # every update is written in place by the kernel computing it: no copies back
    assert graph.kernels and all(k.language == "cpp" for k in graph.kernels)


def test_kernel_per_parameter_for_adam_on_an_mlp():
    model = _mlp()
    report, _ = train_both(model, OPTIMIZERS["adam"], steps=2)
    graph = step_record(report).graphs[0]
    params = len(list(model.parameters()))  # 6
    # one kernel per parameter (reads p, grad, exp_avg, exp_avg_sq; writes the last three),
    # and one that counts the steps and computes the bias corrections
    assert len(graph.kernels) == params + 1
    updates = [k for k in graph.kernels if any(n.startswith("lerp_") for n in k.fused_nodes)]
    assert len(updates) == params


def test_same_sized_parameters_share_one_compiled_update(monkeypatch):
    # two 512x512 weights: 1 MiB each, too large to join one kernel (fusion.py), so each has
    # an update kernel of its own, with the same code: compiled once, run for both
    model = torch.nn.Sequential(
        torch.nn.Linear(12, 512), torch.nn.Tanh(), torch.nn.Linear(512, 512), torch.nn.Tanh(),
        torch.nn.Linear(512, 512), torch.nn.Tanh(), torch.nn.Linear(512, 5),
    )  # fmt: skip
    shared_model, alone_model = copy.deepcopy(model), copy.deepcopy(model)
    # Against eager: a few of these 2x262k elements are up to ~1e-6 off eager's after step 2,
    # with sharing off as well: where a gradient nearly cancels the running average, the
    # update amplifies the compiled kernel's rounding (not eager's float ops in order). The
    # exact check that sharing changes nothing follows.
    report, _ = train_both(model, OPTIMIZERS["adam"], steps=3, rtol=1e-4, atol=1e-5)
    graph = step_record(report).graphs[0]
    assert any("kernels have the code of an earlier kernel" in n for n in graph.notes)
    # Shared or compiled apart, the kernels compute the same bits.
    results = []
    for m, share in ((shared_model, True), (alone_model, False)):
        if not share:
            monkeypatch.setattr(
                inductor, "shared_kernels", lambda ks, _: {k.name: k.name for k in ks}
            )
        opt = OPTIMIZERS["adam"](m)
        step = compiler.compile(lambda o: o.step())
        torch.manual_seed(1)
        for _ in range(3):
            x, y = _batch(m)
            opt.zero_grad(True)
            F.cross_entropy(m(x), y).backward()
            step(opt)
        notes = step_record(compiler.inspect(step)).graphs[0].notes
        assert share == any("kernels have the code of an earlier kernel" in n for n in notes)
        results.append([*m.parameters(), *(t for s in opt.state.values() for t in s.values())])
    assert all(torch.equal(a, b) for a, b in zip(*results))


def test_through_interpreted_triton(monkeypatch):
    monkeypatch.setenv("COMPILER_CPU_EMITTER", "triton")
    report, _ = train_both(_mlp(), OPTIMIZERS["adamw_amsgrad"], steps=3)
    graph = step_record(report).graphs[0]
    assert graph.fallback is None
    assert {k.language for k in graph.kernels} == {"triton"}


def test_parameter_without_gradient_is_skipped():
    def freeze_middle(mod, step):
        if step % 2 == 0:
            mod[2].weight.grad = None  # as if it took no part in this step's loss

    report, opt = train_both(_mlp(), OPTIMIZERS["adam"], before_step=freeze_middle)
    # the set of parameters with gradients is guarded: two entries, one per set
    record = step_record(report)
    assert len(record.entries) == 2
    assert record.entries[1].recompile_reason.startswith("len(L['groups'][0][0]) == 5 (got 6)")
    state = opt.state_dict()["state"]
    assert [state[i]["step"].item() for i in range(6)] == [4, 4, 2, 4, 4, 4]


def test_reduce_overhead_mode_on_cpu_steps_like_the_default():
    report, _ = train_both(_cnn(), OPTIMIZERS["adam_wd"], steps=3, mode="reduce-overhead")
    assert step_record(report).entries[0].hits == 3


def test_no_gradient_anywhere_changes_nothing():
    model = _mlp()
    opt = torch.optim.Adam(model.parameters())
    step = compiler.compile(lambda o: o.step())
    before = [p.detach().clone() for p in model.parameters()]
    step(opt)
    assert not opt.state and all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert not step_record(compiler.inspect(step)).entries  # nothing to compile


def test_force_eager_stance_runs_torch_optims_step():
    model = _mlp()
    opt = torch.optim.Adam(model.parameters())
    step = compiler.compile(lambda o: o.step())
    F.cross_entropy(model(torch.randn(2, 12)), torch.randint(5, (2,))).backward()
    with compiler.set_stance("force_eager"):
        step(opt)
    assert len(opt.state) == 6
    assert not [f for f in compiler.inspect(step).functions if f.name == "adam_step"]


def test_two_param_groups_with_their_own_lr():
    def make(m):
        return torch.optim.SGD(
            [
                {"params": m[0].parameters(), "lr": 0.01},
                {"params": [*m[2].parameters(), *m[4].parameters()], "momentum": 0.5},
            ],
            lr=0.1,
        )

    report, _ = train_both(_mlp(), make)
    assert len(step_record(report).entries) == 1


@pytest.mark.parametrize(
    "scheduler",
    [
        lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5),
        lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda epoch: 1 / (1 + epoch)),
    ],
    ids=["step_lr", "lambda_lr"],
)
def test_lr_scheduler_changes_lr_without_recompiling(scheduler):
    report, opt = train_both(_mlp(), OPTIMIZERS["adamw"], steps=5, scheduler=scheduler)
    assert len(step_record(report).entries) == 1  # lr is a tensor input
    assert opt.param_groups[0]["lr"] < 1e-2
    # the scheduler's wrapper of opt.step is recognised, and marks the optimizer stepped
    assert opt._opt_called
    reasons = [b.reason for b in report.functions[0].breaks]
    assert reasons[0].startswith("optimizer.step() ends the graph: AdamW's update runs as a")
    assert reasons[1].startswith("lr_scheduler.step() runs in Python")


def test_state_dict_round_trip_after_compiled_steps():
    model = _mlp()
    make = OPTIMIZERS["adam_amsgrad"]
    train_both(model, make, steps=2)  # warms nothing up: each call compiles afresh below
    eager_model, comp_model = copy.deepcopy(model), copy.deepcopy(model)
    eager_opt, first = make(eager_model), make(comp_model)
    step = compiler.compile(lambda o: o.step())
    for k in range(4):
        x, y = _batch(model)
        for mod, o in ((eager_model, eager_opt), (comp_model, first)):
            o.zero_grad(True)
            F.cross_entropy(mod(x), y).backward()
        eager_opt.step()
        if k < 2:
            step(first)
            continue
        if k == 2:  # a new optimizer restored from the compiled one's state
            second = make(comp_model)
            second.load_state_dict(first.state_dict())
        step(second)
        assert_state_close(eager_model, comp_model, f"step {k}", **TOL)
        assert_optimizers_close(eager_opt, second, f"step {k}")


def test_hyperparameters_are_guarded():
    model = _mlp()

    def change_momentum(mod, step):
        if step == 2:
            comp_opt_ref[0].param_groups[0]["momentum"] = 0.5
            eager_opt_ref[0].param_groups[0]["momentum"] = 0.5

    eager_opt_ref, comp_opt_ref = [], []

    def make(m):
        o = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        (comp_opt_ref if eager_opt_ref else eager_opt_ref).append(o)
        return o

    report, _ = train_both(model, make, before_step=change_momentum)
    record = step_record(report)
    assert len(record.entries) == 2
    assert record.entries[1].recompile_reason == "L['groups'][0][4] == 0.9 (got 0.5)"


def test_recompile_limit_falls_back_to_torch_optim(monkeypatch):
    monkeypatch.setattr(config, "cache_size_limit", 2)

    def new_betas(mod, step):
        for o in opts:
            o.param_groups[0]["betas"] = (0.9, 0.99 - step / 100)

    opts = []

    def make(m):
        opts.append(torch.optim.Adam(m.parameters(), lr=1e-2))
        return opts[-1]

    with pytest.warns(compiler.records.CompilerWarning, match="recompiled 2 times"):
        report, _ = train_both(_mlp(), make, steps=5, before_step=new_betas)
    record = step_record(report)
    assert len(record.entries) == 2
    assert any(
        "ran torch.optim's eager update" in w and "recompile limit" in w for w in record.warnings
    )


class _MyAdam(torch.optim.Adam):
    pass


def test_subclass_runs_torch_optims_step_with_reason():
    report, _ = train_both(_mlp(), lambda m: _MyAdam(m.parameters(), lr=1e-2), steps=2)
    reason = report.functions[0].breaks[0].reason
    assert reason.startswith("optimizer.step() runs in Python: torch.optim's eager update")
    assert "_MyAdam subclasses torch.optim.Adam" in reason
    assert not [f for f in report.functions if f.name == "adam_step"]


def test_step_hook_runs_torch_optims_step_with_reason():
    calls = []

    def make(m):
        o = torch.optim.SGD(m.parameters(), lr=0.1)
        o.register_step_post_hook(lambda *a: calls.append(1))
        return o

    report, _ = train_both(_mlp(), make, steps=2)
    assert len(calls) == 4  # eager's hooks and the compiled function's both ran
    assert "step hooks" in report.functions[0].breaks[0].reason


def test_hook_added_after_compiling_is_seen_at_the_next_step():
    model = _mlp()
    report, opt = train_both(model, OPTIMIZERS["sgd_momentum"], steps=2)
    calls = []
    opt.register_step_pre_hook(lambda *a: calls.append(1))
    step = compiler.compile(lambda o: o.step())
    F.cross_entropy(model(torch.randn(2, 12)), torch.randint(5, (2,))).backward()
    step(opt)
    assert calls == [1]
    record = step_record(compiler.inspect(step))
    assert record.warnings == [
        "SGD.step() ran torch.optim's eager update: the optimizer has step hooks, which "
        "torch.optim's step calls"
    ]


def test_sgd_with_dampening_first_step_runs_eagerly():
    make = lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, dampening=0.1)  # noqa: E731
    report, _ = train_both(_mlp(), make, steps=3)
    record = step_record(report)
    assert len(record.entries) == 1 and record.entries[0].hits == 2
    assert "dampening creates its momentum buffers" in record.warnings[0]


def test_whole_training_step_compiled():
    """Seed 000's shape: zero_grad, forward, loss, backward and step in one compiled function."""
    model = _cnn()
    comp_model = copy.deepcopy(model)

    train = seed_000_train(torch.optim.AdamW(model.parameters(), lr=1e-3))
    comp_opt = torch.optim.AdamW(comp_model.parameters(), lr=1e-3)
    train_opt = compiler.compile(seed_000_train(comp_opt))
    for k in range(3):
        data = _batch(model)
        train(model, data)
        train_opt(comp_model, data)
        # the compiled backward rounds differently: looser than the step-only tests
        assert_state_close(model, comp_model, f"step {k}", atol=1e-5, rtol=1e-4)
    report = compiler.inspect(train_opt)
    record = step_record(report)
    assert record.entries[0].hits == 3 and not record.warnings
