"""Where the `aot` stage of a cold compile goes: its passes' seconds at the first call.

    python benchmarks/cold_aot.py [--workload train-resnet18] [--runs 3] [--device cpu]
        [--profile N]

Workloads: `resnet18`, `densenet121`, `bert` (inference: eval, no_grad), and
`train-resnet18`, `train-densenet121` (seed 000's train step, as benchmarks/cold_train.py).
Each run is a fresh process with empty kernel caches; the table gives the median over
`--runs` of every graph's recorded stages summed (`trace`, `aot`, `lower`, ...) and of the
aot passes inside them, timed by wrapping them: `describe`, `autograd` (make_fx of the joint
forward+backward) and `trace_forward` (functionalize + decompose; the only pass of
inference and optimizer graphs). `--profile N` prints the top N of a cProfile taken over
the aot stage only (one run).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _workload(name: str, device: str):
    """(the compiled callable, its first call) for a workload name."""
    import torch

    import compiler

    torch.manual_seed(0)
    if name == "bert":
        from transformers import BertConfig, BertModel

        model = BertModel(BertConfig()).eval().to(device)
        ids = torch.randint(1000, (1, 128), device=device)
        step = compiler.compile(model)
        return step, lambda: step(ids)
    import torchvision

    if name.startswith("train-"):
        from benchmarks.train_gpu import make_train

        model = getattr(torchvision.models, name.removeprefix("train-"))().to(device)
        data = (torch.randn(4, 3, 64, 64, device=device), torch.randint(1000, (4,), device=device))
        step = compiler.compile(make_train(torch.optim.Adam(model.parameters())))
        return step, lambda: step(model, data)
    model = getattr(torchvision.models, name)().eval().to(device)
    x = torch.randn(4, 3, 64, 64, device=device)
    step = compiler.compile(model)
    return step, lambda: step(x)


def child(name: str, device: str, profile: int) -> None:
    """One cold first call: prints a JSON line of seconds per stage and per aot pass."""
    import cProfile
    import pstats
    import time

    import torch

    import compiler
    from compiler.aot import joint
    from compiler.backends import inductor

    passes: dict[str, float] = defaultdict(float)
    prof = cProfile.Profile() if profile else None

    def timed(module, attr: str, label: str, profiled: bool = False) -> None:
        fn = getattr(module, attr)

        def wrapper(*args, **kwargs):
            t = time.perf_counter()
            if prof and profiled:
                prof.enable()
            try:
                return fn(*args, **kwargs)
            finally:
                if prof and profiled:
                    prof.disable()
                passes[label] += time.perf_counter() - t

        setattr(module, attr, wrapper)

    timed(joint, "describe", "describe")
    timed(joint, "_trace_autograd", "autograd")
    timed(joint, "trace_forward", "trace_forward (joint)")
    timed(inductor, "trace_forward", "trace_forward (forward-only)", profiled=True)
    from compiler.aot import training

    timed(training, "trace_joint", "joint total", profiled=True)
    step, call = _workload(name, device)
    t = time.perf_counter()
    with torch.no_grad() if not name.startswith("train-") else torch.enable_grad():
        call()
    if device == "cuda":
        torch.cuda.synchronize()
    total = time.perf_counter() - t
    stages: dict[str, float] = defaultdict(float)
    for g in compiler.inspect(step).graphs:
        for s in g.stage_times:
            stages[s.stage] += s.seconds
    print(json.dumps({"first call": total, **stages, **passes}))
    if prof:
        pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(profile)
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(profile)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--workload", default="train-resnet18")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--device", default="cpu")
    p.add_argument("--profile", type=int, default=0)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        sys.path.insert(0, ROOT)
        child(args.workload, args.device, args.profile)
        return
    rows: dict[str, list[float]] = defaultdict(list)
    for _ in range(1 if args.profile else args.runs):
        cache = tempfile.mkdtemp(prefix="cold_aot_")
        env = dict(
            os.environ,
            COMPILER_CACHE_DIR=os.path.join(cache, "compiler"),
            TRITON_CACHE_DIR=os.path.join(cache, "triton"),
        )
        cmd = [sys.executable, __file__, "--child", "--workload", args.workload]
        cmd += ["--device", args.device]
        cmd += ["--profile", str(args.profile)]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        if args.profile:
            print(out.stderr)
        line = [ln for ln in out.stdout.splitlines() if ln.startswith("{")][-1]
        for k, v in json.loads(line).items():
            rows[k].append(v)
    print(f"{args.workload} on {args.device}: median of {len(rows['first call'])} cold runs")
    print("| stage or pass | s (median) | runs |\n|---|---|---|")
    for k, vs in rows.items():
        print(f"| {k} | {statistics.median(vs):.2f} | {', '.join(f'{v:.2f}' for v in vs)} |")


if __name__ == "__main__":
    main()
