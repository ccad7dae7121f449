"""Host time of the two per-parameter loops of a compiled training step at its graph breaks:
`opt.zero_grad()` and the compiled optimizer step's `_reuse` (compiler/optim), for
densenet121's 364 parameters, each with a gradient.

    python benchmarks/optim_host.py [--device cpu|cuda] [--repeats 300]

Rows: torch's own Optimizer.zero_grad(set_to_none=True) and compiler/optim/zero_grad.py's
`clear_grads`, which the frame evaluator makes instead; `_reuse` with the C++
extension's `group_grads` and with the Python checks. zero_grad is timed twice: with the
gradients also held elsewhere (the loop alone) and with each gradient freed by the call (a
new gradient per call, as a backward makes them; the tensor's deallocation included).
Medians of --repeats calls, in microseconds per call and per parameter.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from typing import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402

from compiler.optim import step as optim_step  # noqa: E402
from compiler.optim import zero_grad  # noqa: E402
from compiler.optim.functional import adam_step  # noqa: E402
from compiler.runtime import cpp_ext  # noqa: E402


def _median_us(fn: Callable, setup: Callable, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        setup()
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def main() -> None:
    import torchvision

    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=300)
    args = parser.parse_args()
    device = torch.device(args.device)
    model = torchvision.models.densenet121().to(device)
    params = list(model.parameters())
    grads = [torch.zeros_like(p) for p in params]
    opt = torch.optim.Adam(model.parameters())
    for p, g in zip(params, grads):
        p.grad = g
    optim_step._prepare_afresh(opt, adam_step, None)
    plan = optim_step._PLANS[opt]
    n = len(params)

    def held() -> None:
        for p, g in zip(params, grads):
            p.grad = g

    def fresh() -> None:
        for p in params:
            p.grad = torch.empty_like(p)

    group_grads = cpp_ext.group_grads_function()
    assert group_grads is not None, cpp_ext.status()

    def python_only(fn: Callable) -> Callable:
        def run() -> None:
            cpp_ext.group_grads_function = lambda: None
            try:
                fn()
            finally:
                cpp_ext.group_grads_function = lambda: group_grads

        return run

    cpp_ext.group_grads_function = lambda: group_grads
    rows = []
    for label, setup in (("gradients held elsewhere", held), ("gradients freed", fresh)):
        rows += [
            (f"torch zero_grad ({label})", lambda: opt.zero_grad(), setup),
            (f"clear_grads ({label})", lambda: zero_grad.clear_grads(opt), setup),
        ]
    rows += [
        ("_reuse, C++ group_grads", lambda: optim_step._reuse(opt, plan), held),
        ("_reuse, Python checks", python_only(lambda: optim_step._reuse(opt, plan)), held),
    ]
    held()
    assert optim_step._reuse(opt, plan) is not None
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"torch {torch.__version__}, {device}, {n} parameters, {time.strftime('%Y-%m-%d')}"
    )
    print("| what | us/call | us/parameter |")
    print("|---|---|---|")
    for label, fn, setup in rows:
        us = _median_us(fn, setup, args.repeats)
        print(f"| {label} | {us:.1f} | {us / n:.3f} |")


if __name__ == "__main__":
    main()
