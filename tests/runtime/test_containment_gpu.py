"""Failure containment on CUDA (issue 29): an internal error injected at each stage of the
compiler, in an inference call and in a whole training step (forward, backward, optimizer
step) under bf16 autocast, never reaches the user. The step runs eagerly where it must,
with a CompilerWarning naming the failure and a record, and every result is eager's.

tests/codegen/test_failure_containment.py checks the same on the CPU."""

from __future__ import annotations

import copy
import uuid
import warnings

import pytest
import torch

import compiler
from compiler.records import CompilerWarning
from compiler.runtime import triton_launch
from tests.codegen.test_failure_containment import STAGES as CPU_STAGES
from tests.codegen.test_failure_containment import inject

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)

# the CPU tests' stages, less the C++ compiler's: a CUDA graph's kernels are Triton's
STAGES = [s for s in CPU_STAGES if not s.startswith("cpp")]


@pytest.fixture(autouse=True)
def fresh(monkeypatch, tmp_path):
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("COMPILER_STRICT", raising=False)
    compiler.reset()
    yield
    compiler.reset()


def _inject(stage: str, monkeypatch, tmp_path, marker: str) -> None:
    if stage == "triton compile":  # on CUDA the kernels are compiled by load_kernel

        def broken(*args, **kwargs):
            raise RuntimeError(f"injected failure {marker}")

        monkeypatch.setattr(triton_launch, "load_kernel", broken)
        return
    inject(stage, monkeypatch, tmp_path, marker)


def _ours(caught) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, CompilerWarning)]


@pytest.mark.parametrize("stage", STAGES)
def test_inference_runs_eagerly_on_cuda(stage, monkeypatch, tmp_path):
    marker = f"{stage.replace(' ', '_')}-{uuid.uuid4().hex[:8]}"
    _inject(stage, monkeypatch, tmp_path, marker)

    def f(x, y):
        return torch.sin(x) * y + 1

    compiled = compiler.compile(f)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            x, y = torch.randn(64, 32, device="cuda"), torch.randn(32, device="cuda")
            torch.testing.assert_close(compiled(x, y), f(x, y))
    ours = _ours(caught)
    assert len(ours) == 1 and marker in ours[0], ours


def _training_step(model, opt):
    def step(x, t):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), t)
        loss.backward()
        opt.step()
        return loss.detach()

    return step


@pytest.mark.parametrize("stage", STAGES)
def test_autocast_training_step_runs_eagerly_on_cuda(stage, monkeypatch, tmp_path):
    marker = f"{stage.replace(' ', '_')}-{uuid.uuid4().hex[:8]}"
    _inject(stage, monkeypatch, tmp_path, marker)
    torch.manual_seed(0)
    base = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.LayerNorm(64), torch.nn.Linear(64, 8)
    ).cuda()
    runs = {}
    for label in ("eager", "ours"):
        model = copy.deepcopy(base)
        step = _training_step(model, torch.optim.AdamW(model.parameters(), lr=1e-2))
        fn = compiler.compile(step) if label == "ours" else step
        torch.manual_seed(1)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            losses = [
                fn(torch.randn(16, 32, device="cuda"), torch.randint(0, 8, (16,), device="cuda"))
                for _ in range(3)
            ]
        runs[label] = (losses, [p.detach().clone() for p in model.parameters()], _ours(caught))
    (eager_losses, eager_params, _), (losses, params, ours) = runs["eager"], runs["ours"]
    assert ours and all(marker in w for w in ours), ours
    torch.testing.assert_close(torch.stack(losses), torch.stack(eager_losses), atol=3e-2, rtol=3e-2)
    for p, q in zip(params, eager_params):
        torch.testing.assert_close(p, q, atol=3e-2, rtol=3e-2)
