"""Host (Python) work per call of a compiled model, with the kernels made small.

    .venv/bin/python benchmarks/hostcost.py [--models resnet18,densenet121] [--calls N]
        [--batches K] [--profile]

On a GPU a compiled model's call is host work (guards, fetching the parameters, the
generated wrapper, the training glue) while the kernels queue; on the H100 that host work is
what separates us from torch.compile (issues 3 and 5). It is the same Python on CPU, but a
full-width resnet18 at 1x3x32x32 spends ~12 ms in kernels on this machine, which buries a
host cost of a few hundred µs in noise. So the models here are "narrow": the torchvision
module tree (same classes, same names, same attributes, hence the same guards, graph inputs
and wrapper) with every channel count divided by 16 (3 input channels and 1000 classes
stay), so each kernel is tiny and a call's time is mostly host work.

Rows (µs per call, median / min over `--batches` batches of `--calls` calls, the runners of
one row timed round-robin):
- `guard function`: the entry's `CompiledGuards.check` alone (no_grad, full width: the guards
  do not depend on the widths), C++ tensor checks (benchmarks/guards.py builds it).
- `inference`: eval, `torch.no_grad()`, batch 1, 3x32x32; eager vs ours (C++ backend).
- `train step`: seed 000's `train(mod, data)` (zero_grad, forward, cross-entropy, backward,
  Adam step), train mode, batch 2, 3x32x32; eager vs ours.

`--profile` also prints cProfile's top functions by own time for ours' calls of each row.
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import os
import pstats
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import compiler  # noqa: E402
from benchmarks.guards import guard_function  # noqa: E402
from benchmarks.train_gpu import make_train  # noqa: E402
from compiler.runtime import cpp_ext  # noqa: E402

WIDTH_DIVISOR = 16


def _narrow(c: int) -> int:
    return c // WIDTH_DIVISOR if c % WIDTH_DIVISOR == 0 else c


def narrow(model: torch.nn.Module) -> torch.nn.Module:
    """`model` with each Conv2d, BatchNorm2d and Linear replaced by one of the same class and
    settings with channel counts divided by WIDTH_DIVISOR (a Linear keeps its outputs)."""
    nn = torch.nn
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Conv2d:
                new: nn.Module = nn.Conv2d(
                    _narrow(child.in_channels),
                    _narrow(child.out_channels),
                    child.kernel_size,
                    child.stride,
                    child.padding,
                    child.dilation,
                    child.groups,
                    child.bias is not None,
                )
            elif type(child) is nn.BatchNorm2d:
                new = nn.BatchNorm2d(_narrow(child.num_features))
            elif type(child) is nn.Linear:
                new = nn.Linear(_narrow(child.in_features), child.out_features)
            else:
                continue
            setattr(parent, name, new)
    return model


def time_round_robin(
    runners: dict[str, Callable[[], object]], calls: int, batches: int
) -> dict[str, tuple[float, float]]:
    """name -> (median, min) µs per call over the batches; the runners' batches interleaved."""
    samples: dict[str, list[float]] = {k: [] for k in runners}
    for _ in range(batches):
        for key, run in runners.items():
            start = time.perf_counter()
            for _ in range(calls):
                run()
            samples[key].append((time.perf_counter() - start) / calls * 1e6)
    return {k: (statistics.median(v), min(v)) for k, v in samples.items()}


def profile(run: Callable[[], object], calls: int, title: str, top: int = 25) -> None:
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        run()
    prof.disable()
    print(f"\n#### cProfile, {title}, {calls} calls (own time, total over the calls)\n")
    print("```")
    pstats.Stats(prof).sort_stats("tottime").print_stats(top)
    if os.environ.get("HOSTCOST_CALLERS"):
        pstats.Stats(prof).print_callers(os.environ["HOSTCOST_CALLERS"])
    print("```")


def rows_for(name: str, calls: int, batches: int, do_profile: bool) -> list[str]:
    import torchvision

    out = []
    checker = cpp_ext.load_library(cpp_ext.build()).TensorChecker
    torch.manual_seed(0)
    full = getattr(torchvision.models, name)().eval()
    with torch.no_grad():
        guards, L, G = guard_function(full, torch.randn(1, 3, 32, 32), checker)
        t = time_round_robin({"guards": lambda: guards.check(L, G)}, calls * 20, batches)
    med, low = t["guards"]
    out.append(
        f"| {name} guard function ({len(guards.checks)} guards) | - | {med:.1f} / {low:.1f} |"
    )

    compiler.reset()
    torch.manual_seed(0)
    model = narrow(getattr(torchvision.models, name)()).eval()
    x = torch.randn(1, 3, 32, 32)
    ours = compiler.compile(model)
    with torch.no_grad():
        for _ in range(5):
            ours(x)
        t = time_round_robin({"eager": lambda: model(x), "ours": lambda: ours(x)}, calls, batches)
        if do_profile:
            profile(lambda: ours(x), calls * 5, f"{name} narrow inference")
    out.append(
        f"| {name} narrow inference, 1x3x32x32 | {t['eager'][0]:.1f} / {t['eager'][1]:.1f}"
        f" | {t['ours'][0]:.1f} / {t['ours'][1]:.1f} |"
    )

    if name != "resnet18":
        return out
    compiler.reset()
    torch.manual_seed(0)
    base = narrow(getattr(torchvision.models, name)()).train()
    data = (torch.randn(2, 3, 32, 32), torch.randint(1000, (2,)))
    eager_model, ours_model = copy.deepcopy(base), copy.deepcopy(base)
    eager_step = make_train(torch.optim.Adam(eager_model.parameters()))
    ours_step = compiler.compile(make_train(torch.optim.Adam(ours_model.parameters())))
    for _ in range(3):
        eager_step(eager_model, data)
        ours_step(ours_model, data)
    t = time_round_robin(
        {
            "eager": lambda: eager_step(eager_model, data),
            "ours": lambda: ours_step(ours_model, data),
        },
        max(1, calls // 4),
        batches,
    )
    if do_profile:
        profile(lambda: ours_step(ours_model, data), calls, f"{name} narrow train step")
    out.append(
        f"| {name} narrow train step (Adam), 2x3x32x32 | {t['eager'][0]:.1f} / {t['eager'][1]:.1f}"
        f" | {t['ours'][0]:.1f} / {t['ours'][1]:.1f} |"
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,densenet121")
    parser.add_argument("--calls", type=int, default=100, help="calls per batch (x20 for guards)")
    parser.add_argument("--batches", type=int, default=11)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)  # host work, not parallel speed
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    rows = []
    for name in args.models.split(","):
        rows += rows_for(name, args.calls, args.batches, args.profile)
    print(f"\ncommit {commit}; µs per call, median / min of {args.batches} batches, 1 thread\n")
    print("| row | eager µs | ours µs |")
    print("| --- | --- | --- |")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
