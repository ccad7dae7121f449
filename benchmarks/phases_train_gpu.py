"""Where the host time of a compiled training step goes, phase by phase, without a profiler.

    python benchmarks/phases_train_gpu.py [--models densenet121] [--modes reduce-overhead]

cProfile and torch.profiler add a cost to every call they see, which distorts a step made of
thousands of small calls (densenet121's has ~10,000). Here a few functions of the runtime are
wrapped in `perf_counter` timers (inclusive times: a phase includes the phases it calls), the
step runs --steps times without waiting on the GPU inside the loop, and the table gives each
phase's host microseconds per step. The GPU is idle-waiting in a host-bound step, so the
clock measures the host's own work.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
import time
from collections import defaultdict
from typing import Any, Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("COMPILER_CACHE_DIR", tempfile.mkdtemp(prefix="phases_train_"))

import torch  # noqa: E402

import compiler  # noqa: E402
from benchmarks.train_gpu import guards_in_cpp, make_train  # noqa: E402

_TOTALS: dict[str, float] = defaultdict(float)
_COUNTS: dict[str, int] = defaultdict(int)
_PATCHED: list[tuple[Any, str]] = []


def _timed(label: str, fn: Callable) -> Callable:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            _TOTALS[label] += time.perf_counter() - t
            _COUNTS[label] += 1

    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    # Run as the compiler's own code, never traced: zero_grad and backward are called at
    # graph breaks, where a user function would be compiled (new entries, other timings).
    wrapper.__module__ = "compiler.phase_timer"
    return wrapper


def _instrument() -> None:
    from compiler import optim
    from compiler.aot import autograd
    from compiler.optim import step as optim_step
    from compiler.runtime import cudagraphs

    targets = [
        # the evaluator makes torch's zero_grad(set_to_none=True) as this loop; a timer
        # wrapped around Optimizer.zero_grad would be called instead, and time torch's
        (optim, "clear_grads", "zero_grad (compiler/optim clear_grads)"),
        (torch.Tensor, "backward", "loss.backward (engine, inclusive)"),
        (autograd.TrainingGraph, "__call__", "forward: TrainingGraph call"),
        (autograd.TrainingGraph, "run_forward", "  run_forward"),
        (autograd.TrainingGraph, "run_backward", "  run_backward (inside engine)"),
        (cudagraphs.CudaGraphRunner, "__call__", "CudaGraphRunner (all graphs)"),
        (torch.cuda.CUDAGraph, "replay", "  CUDAGraph.replay"),
        (cudagraphs, "copy_many", "  runner copy_many"),
        (cudagraphs, "clone_many", "  runner clone_many"),
        (cudagraphs, "_moved", "  runner address checks"),
        (autograd._WriteBack, "__call__", "  forward write-back"),
        (autograd._GraphMemory, "of", "  saved: graph memory check"),
        (optim, "run_step", "optimizer step (inclusive)"),
        (optim_step, "_reuse", "  optimizer _reuse"),
    ]
    for owner, name, label in targets:
        setattr(owner, name, _timed(label, getattr(owner, name)))
        _PATCHED.append((owner, name))


def _uninstrument() -> None:
    for owner, name in _PATCHED:
        setattr(owner, name, getattr(owner, name).__wrapped__)
    _PATCHED.clear()


def run_model(name: str, modes: list[str], steps: int) -> None:
    import torchvision

    torch.manual_seed(0)
    base = getattr(torchvision.models, name)().cuda()
    data = (
        torch.randn(16, 3, 128, 128, device="cuda"),
        torch.randint(1000, (16,), device="cuda"),
    )
    for mode in modes:
        compiler.reset()
        m = copy.deepcopy(base)
        step = compiler.compile(make_train(torch.optim.Adam(m.parameters())), mode=mode)
        for _ in range(5):
            step(m, data)
        torch.cuda.synchronize()
        entries = len(compiler.inspect(step).entries)
        _instrument()
        _TOTALS.clear()
        _COUNTS.clear()
        t = time.perf_counter()
        for _ in range(steps):
            step(m, data)
        host = (time.perf_counter() - t) / steps
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t) / steps
        _uninstrument()
        assert len(compiler.inspect(step).entries) == entries, "the timers made it recompile"
        print(f"\n== {name} {mode}: host {host * 1e3:.2f} ms/step, wall {wall * 1e3:.2f} ms/step")
        print("| phase | us/step | calls/step |")
        print("|---|---|---|")
        for label, total in _TOTALS.items():
            print(f"| {label} | {total / steps * 1e6:.0f} | {_COUNTS[label] / steps:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="densenet121")
    parser.add_argument("--modes", default="reduce-overhead")
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    assert torch.cuda.is_available(), "needs a CUDA device"
    print(torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    print("tensor checks:", guards_in_cpp(), flush=True)
    for name in args.models.split(","):
        run_model(name, args.modes.split(","), args.steps)


if __name__ == "__main__":
    main()
