"""Where the first call of a compiled training step goes: seconds per compile
stage of every graph (the tracer's `trace`, `aot`, `partition`, `lower`, `schedule`,
`codegen`, `compile`, ...), the whole first call, and optionally a cProfile of it.

    python benchmarks/cold_train.py [--model resnet18] [--batch 4] [--size 64] [--device cuda]
        [--optim-only] [--profile N] [--sort tottime|cumulative] [--dump FILE] [--outside N]

The step is seed 000's `train` (train_gpu.make_train: zero_grad, forward, cross-entropy,
backward, Adam step) on a torchvision model with random weights, with empty kernel caches (a
fresh COMPILER_CACHE_DIR and TRITON_CACHE_DIR per run), so every kernel is compiled: C++
kernels on the CPU, Triton on CUDA. `--optim-only`
compiles the Adam step alone (gradients from one eager backward). The `compile` stage is the
C++ or Triton compiler's work (run in parallel processes); the rest is our Python.
`--outside N` samples the first call's stack (wall clock) and prints the top N places of
the time no named stage records (benchmarks/outside_stages.py); not with --profile.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import os
import pstats
import sys
import tempfile
import time
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
_CACHE = tempfile.mkdtemp(prefix="cold_train_")
os.environ["COMPILER_CACHE_DIR"] = os.path.join(_CACHE, "compiler")
os.environ["TRITON_CACHE_DIR"] = os.path.join(_CACHE, "triton")

import torch  # noqa: E402

import compiler  # noqa: E402
from benchmarks.outside_stages import OutsideStages  # noqa: E402
from benchmarks.train_gpu import make_train  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="resnet18")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--device", default="cpu")
    p.add_argument("--optim-only", action="store_true")
    p.add_argument("--profile", type=int, default=0, help="print the top N of a cProfile")
    p.add_argument("--sort", default="tottime")
    p.add_argument("--dump", help="write the cProfile's stats to this file")
    p.add_argument("--outside", type=int, default=0, help="top N places outside the stages")
    args = p.parse_args()
    import torchvision

    torch.manual_seed(0)
    dev = torch.device(args.device)
    model = getattr(torchvision.models, args.model)().to(dev)
    data = (
        torch.randn(args.batch, 3, args.size, args.size, device=dev),
        torch.randint(1000, (args.batch,), device=dev),
    )
    opt = torch.optim.Adam(model.parameters())
    if args.optim_only:
        torch.nn.functional.cross_entropy(model(data[0]), data[1]).backward()
        step = compiler.compile(lambda: opt.step())
        call = step
    else:
        step = compiler.compile(make_train(opt))
        call = lambda: step(model, data)  # noqa: E731
    prof = cProfile.Profile() if args.profile or args.dump else None
    sampler = OutsideStages() if args.outside and not prof else contextlib.nullcontext()
    with sampler:
        t = time.perf_counter()
        if prof:
            prof.enable()
        call()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        if prof:
            prof.disable()
        total = time.perf_counter() - t
    report = compiler.inspect(step)
    stages: dict[str, float] = defaultdict(float)
    for g in report.graphs:
        print(
            f"graph of {g.op_count} FX nodes: "
            + ", ".join(f"{s.stage} {s.seconds:.2f}" for s in g.stage_times)
        )
        for s in g.stage_times:
            stages[s.stage] += s.seconds
    kernels = [k for k in report.kernels if k.language != "extern"]
    what = "Adam step alone" if args.optim_only else "train step"
    print(
        f"{args.model} {what}, b{args.batch} 3x{args.size}x{args.size} on {dev.type}: "
        f"first call {total:.2f} s, "
        f"{len(report.graphs)} graphs, {len(kernels)} kernels "
        f"({len({k.source for k in kernels})} distinct sources)"
    )
    for g in report.graphs:
        for note in g.notes:
            if "share its compiled code" in note:
                print("  " + note)
    print("| stage | s |\n|---|---|")
    for name, s in stages.items():
        print(f"| {name} | {s:.2f} |")
    # `backend` wraps the backend's own stages (aot ... compile); `trace` is outside it
    print(f"| not in trace or backend | {total - stages['trace'] - stages['backend']:.2f} |")
    if isinstance(sampler, OutsideStages):
        sampler.report(args.outside)
    if prof and args.dump:
        prof.dump_stats(args.dump)
    if prof and args.profile:
        pstats.Stats(prof).sort_stats(args.sort).print_stats(args.profile)


if __name__ == "__main__":
    main()
