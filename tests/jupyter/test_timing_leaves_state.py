"""Timing never changes what the user can see: `%%compile --compare eager` and the Run timing
button leave every object as one plain call would, and re-run only calls whose records show
no other change, on clones of the arguments (jupyter_compile/timing.py)."""

from __future__ import annotations

import pytest
import torch

import jupyter_compile
from jupyter_compile import timing
from tests.jupyter.conftest import run


@pytest.fixture
def shell(ipython, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(timing, "BUDGET_S", 0.02)  # a short run still makes many calls
    ipython.run_cell("import torch")
    return ipython


def inspector(shell, name: str):
    return jupyter_compile._installed[id(shell)]["magics"].inspectors[name]


def click_run_timing(shell, name: str) -> None:
    view = inspector(shell, name).views[4]
    view._clicked(view.button)
    assert not view.status.value, view.status.value


def labels(shell, name: str) -> list[str]:
    return [m.label for m in inspector(shell, name).state.timing.measurements]


def test_an_in_place_function_changes_its_argument_once(shell) -> None:
    out = run(
        shell,
        "%%compile --compare eager\n"
        "def bump_(x):\n"
        "    return x.add_(1)\n"
        "t = torch.zeros(4)\n"
        "bump_(t)\n",
    )
    assert out.result.success, out.stdout + out.stderr
    assert shell.user_ns["t"].tolist() == [1.0] * 4
    # it writes only its argument: timed eagerly and compiled on clones of it
    assert labels(shell, "bump_")[:2] == ["eager", "compiled"]
    click_run_timing(shell, "bump_")
    assert shell.user_ns["t"].tolist() == [1.0] * 4


TRAIN = """\
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
xs, ys = torch.randn(32, 8), torch.randn(32, 1)
"""

STEP = """\
def train_step(x, y):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return loss
losses = [train_step(xs, ys).item() for _ in range(5)]
"""


def _state(shell) -> tuple[list[torch.Tensor], int, list[float]]:
    ns = shell.user_ns
    params = [p.detach().clone() for p in ns["model"].parameters()]
    steps = {int(s["step"]) for s in ns["opt"].state.values()}
    return params, steps, ns["losses"]


def test_a_training_step_advances_the_optimizer_only_by_the_users_calls(shell) -> None:
    run(shell, TRAIN)
    assert run(shell, STEP).result.success
    plain_params, plain_steps, plain_losses = _state(shell)
    assert plain_steps == {5}

    run(shell, TRAIN)
    out = run(shell, "%%compile --backend eager --compare eager\n" + STEP)
    assert out.result.success, out.stdout + out.stderr
    params, steps, losses = _state(shell)
    assert steps == {5}
    assert losses == pytest.approx(plain_losses, rel=1e-4)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(params, plain_params))

    result = inspector(shell, "train_step").state.timing
    assert result.blocked is not None and "graph break" in result.blocked
    assert labels(shell, "train_step") == [timing.USER_CALLS_LABEL]  # 4 calls after the first
    assert len(result.measurements[0].samples_ms) == 4
    html = inspector(shell, "train_step").static_html()
    assert "timing needs a side-effect-free call" in html
    assert "train_step was not re-run for --compare" in out.texts()

    click_run_timing(shell, "train_step")
    params, steps, _ = _state(shell)
    assert steps == {5}
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(params, plain_params))


def test_a_global_write_is_not_re_run(shell) -> None:
    run(shell, "log = []")
    out = run(
        shell,
        "%%compile --backend eager --compare eager\n"
        "def logged(x):\n"
        "    log.append(1)\n"
        "    return x * 2\n"
        "logged(torch.ones(3))\n",
    )
    assert out.result.success, out.stdout + out.stderr
    assert shell.user_ns["log"] == [1]
    assert "G['log']" in inspector(shell, "logged").state.timing.blocked
    click_run_timing(shell, "logged")
    assert shell.user_ns["log"] == [1]


def test_a_module_updating_its_running_statistics_is_not_re_run(shell) -> None:
    out = run(
        shell,
        "%%compile --backend eager --compare eager\n"
        "class Net(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.bn = torch.nn.BatchNorm1d(4)\n"
        "    def forward(self, x):\n"
        "        return self.bn(x) * 2\n"
        "net = Net()\n"
        "net(torch.randn(8, 4))\n",
    )
    assert out.result.success, out.stdout + out.stderr
    assert int(shell.user_ns["net"].bn.num_batches_tracked) == 1
    assert "L['self'].bn." in inspector(shell, "Net").state.timing.blocked
    click_run_timing(shell, "Net")
    assert int(shell.user_ns["net"].bn.num_batches_tracked) == 1


def test_re_runs_leave_the_random_stream_where_the_users_call_left_it(shell) -> None:
    out = run(
        shell,
        "%%compile --backend eager --compare eager\n"
        "def noisy(x):\n"
        "    return x + torch.rand_like(x)\n"
        "torch.manual_seed(1)\n"
        "noisy(torch.zeros(3))\n"
        "after = torch.rand(2)\n",
    )
    assert out.result.success, out.stdout + out.stderr
    assert labels(shell, "noisy")[:2] == ["eager", "compiled"]  # re-run: nothing else changes
    torch.manual_seed(1)
    torch.rand(3)
    assert torch.equal(shell.user_ns["after"], torch.rand(2))
    before = torch.random.get_rng_state()
    click_run_timing(shell, "noisy")
    assert torch.equal(torch.random.get_rng_state(), before)


def test_the_users_calls_are_timed_without_re_running(shell) -> None:
    out = run(
        shell,
        "%%compile --backend eager\n"
        "def g(x):\n"
        "    return x.cos()\n"
        "for _ in range(6):\n"
        "    g(torch.ones(5))\n",
    )
    assert out.result.success
    view = inspector(shell, "g")
    assert "compiled, your calls" in view.static_html()  # 5 calls after the compiling one
    assert len(view.state.target.call_log.samples_ms()) == 5


@pytest.mark.gpu
def test_on_the_gpu_timing_leaves_the_argument_and_the_cuda_random_stream(shell) -> None:
    out = run(
        shell,
        "%%compile --compare eager\n"
        "def bump_(x):\n"
        "    x.add_(1)\n"
        "    return x + torch.rand_like(x)\n"
        "t = torch.zeros(1024, device='cuda')\n"
        "bump_(t)\n"
        "bump_(t)\n"
        "state = torch.cuda.get_rng_state()\n",
    )
    assert out.result.success, out.stdout + out.stderr
    assert shell.user_ns["t"].eq(2).all()  # the two calls in the cell, no more
    assert torch.equal(torch.cuda.get_rng_state(), shell.user_ns["state"])
    result = inspector(shell, "bump_").state.timing
    assert labels(shell, "bump_") == ["eager", "compiled", timing.USER_CALLS_LABEL]
    assert result.device == "cuda" and len(result.measurements[2].samples_ms) == 1
