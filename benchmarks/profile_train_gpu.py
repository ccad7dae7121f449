"""Where the time of a compiled training step goes on a CUDA machine: a profile, not a benchmark.

    python benchmarks/profile_train_gpu.py [--models resnet18,densenet121] [--profile resnet18]

The step is train_gpu.py's (seed 000's `train`: zero_grad, forward, cross-entropy, backward,
Adam step; batch 16, 3x128x128, fp32). For each model it prints eager, ours and ours in
reduce-overhead mode: CUDA-event latency per step, host time per step (the GPU not waited on
inside the loop) and the GPU's own busy time per step (the sum of kernel times from
torch.profiler), so a row says whether a step is bound by the host or by its kernels. For the
models in --profile it then prints the Python functions and the GPU kernels that cost the
most. BENCHMARKS.md's training numbers come from train_gpu.py; this script explains them.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
import time
from typing import Any, Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("COMPILER_CACHE_DIR", tempfile.mkdtemp(prefix="profile_train_"))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import compiler  # noqa: E402
from benchmarks.profile_gpu import host_ms, python_profile  # noqa: E402
from benchmarks.train_gpu import guards_in_cpp, make_train, median_ms  # noqa: E402


def gpu_busy(fn: Callable[[], Any], calls: int = 3) -> tuple[float, int, Any]:
    """(GPU kernel ms per call, kernels per call, the profiler's averages)."""
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    busy = sum(e.device_time for e in kernels) / 1000 / calls
    return busy, len(kernels) // calls, prof.key_averages()


def run_model(name: str, detail: bool) -> None:
    import torchvision

    torch.manual_seed(0)
    base = getattr(torchvision.models, name)().cuda()
    data = (
        torch.randn(16, 3, 128, 128, device="cuda"),
        torch.randint(1000, (16,), device="cuda"),
    )
    steps: dict[str, Callable[[], Any]] = {}
    model = copy.deepcopy(base)
    eager = make_train(torch.optim.Adam(model.parameters()))
    steps["eager"] = lambda: eager(model, data)
    for mode in ("default", "reduce-overhead"):
        m = copy.deepcopy(base)
        step = compiler.compile(make_train(torch.optim.Adam(m.parameters())), mode=mode)
        t = time.perf_counter()
        step(m, data)
        torch.cuda.synchronize()
        report = compiler.inspect(step)
        print(
            f"== {name} ours {mode}: cold {time.perf_counter() - t:.1f} s, "
            f"{len(report.graphs)} graphs, {len(report.entries)} entries, "
            f"{len(report.kernels)} kernels",
            flush=True,
        )
        for e in report.entries:
            if e.graph_break is not None:
                print(f"   break: {e.graph_break.reason[:160]}")
        steps[f"ours {mode}"] = lambda s=step, m=m: s(m, data)
    print(f"| {name} | latency ms | host ms | GPU busy ms | kernels/step |")
    print("|---|---|---|---|---|")
    averages = {}
    for label, fn in steps.items():
        lat, host = median_ms(fn, 20), host_ms(fn, 20)
        busy, count, averages[label] = gpu_busy(fn)
        print(f"| {label} | {lat:.2f} | {host:.2f} | {busy:.2f} | {count} |", flush=True)
    if not detail:
        return
    for label in ("ours default", "ours reduce-overhead"):
        python_profile(steps[label], f"{name} {label}")
    for label in ("eager", "ours default"):
        print(f"-- {name} {label}: ops by self CPU time (3 steps)")
        print(
            averages[label].table(
                sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=60
            )
        )
        print(f"-- {name} {label}: kernels by GPU time (3 steps)")
        print(
            averages[label].table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=60)
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="resnet18")
    parser.add_argument("--profile", default="resnet18")
    args = parser.parse_args()
    assert torch.cuda.is_available(), "needs a CUDA device"
    print(torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    print("tensor checks:", guards_in_cpp(), flush=True)
    for name in args.models.split(","):
        compiler.reset()
        run_model(name, name in args.profile.split(","))


if __name__ == "__main__":
    main()
