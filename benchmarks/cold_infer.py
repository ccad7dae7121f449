"""Where the first inference call of a compiled model goes on the CPU: seconds per compile
stage (the tracer's `trace`, `aot`, `lower`, `schedule`, `codegen`, `compile`), the whole
first call, and optionally a cProfile of it.

    python benchmarks/cold_infer.py [--model resnet18] [--batch 1] [--size 64]
        [--emitter cpp|triton] [--repeat N] [--profile N] [--sort tottime|cumulative]

Each run is a fresh process with empty kernel caches (COMPILER_CACHE_DIR, TRITON_CACHE_DIR).
`--emitter triton` emits Triton kernels for the CPU tensors and runs them in Triton's
interpreter (TRITON_INTERPRET=1, COMPILER_CPU_EMITTER=triton): the emitter a GPU's cold
compile pays for, measured without a GPU (the kernels' own run is slow there; keep the
input small). `--repeat N` runs N processes and prints each stage's median. Models are
torchvision's (random weights) or "bert" (transformers' BertModel, base config) in eval
mode under torch.no_grad().
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r"""
import cProfile, json, pstats, sys, time
from collections import defaultdict
sys.path.insert(0, {root!r})
import torch
import compiler
name, batch, size = {name!r}, {batch}, {size}
torch.manual_seed(0)
if name == "bert":
    from transformers import BertConfig, BertModel
    model = BertModel(BertConfig()).eval()
    args = (torch.randint(1000, (batch, size)),)
else:
    import torchvision
    model = getattr(torchvision.models, name)().eval()
    args = (torch.randn(batch, 3, size, size),)
compiled = compiler.compile(model)
prof = cProfile.Profile() if {profile} else None
t = time.perf_counter()
with torch.no_grad():
    if prof:
        prof.enable()
    compiled(*args)
    if prof:
        prof.disable()
total = time.perf_counter() - t
stages = defaultdict(float)
for g in compiler.inspect(compiled).graphs:
    for s in g.stage_times:
        stages[s.stage] += s.seconds
stages["first call"] = total
print("STAGES " + json.dumps(stages))
if prof:
    pstats.Stats(prof).sort_stats({sort!r}).print_stats({profile})
"""


def run_once(args: argparse.Namespace, profile: int) -> dict[str, float]:
    cache = tempfile.mkdtemp(prefix="cold_infer_")
    env = dict(
        os.environ,
        COMPILER_CACHE_DIR=os.path.join(cache, "ours"),
        TRITON_CACHE_DIR=os.path.join(cache, "triton"),
    )
    if args.emitter == "triton":
        env.update(TRITON_INTERPRET="1", COMPILER_CPU_EMITTER="triton")
    code = CHILD.format(
        root=ROOT, name=args.model, batch=args.batch, size=args.size, profile=profile,
        sort=args.sort,
    )  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    stages = None
    for line in out.stdout.splitlines():
        if line.startswith("STAGES "):
            stages = json.loads(line[len("STAGES ") :])
        elif profile:
            print(line)
    if stages is None:
        raise RuntimeError(f"the run failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return stages


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="resnet18")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--emitter", choices=("cpp", "triton"), default="cpp")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--profile", type=int, default=0, help="print the top N of a cProfile")
    p.add_argument("--sort", default="tottime")
    args = p.parse_args()
    if args.profile:
        run_once(args, args.profile)
        return
    runs = [run_once(args, 0) for _ in range(args.repeat)]
    print(
        f"{args.model} inference, b{args.batch} size {args.size}, {args.emitter} kernels, "
        f"median of {len(runs)} fresh processes"
    )
    print("| stage | s | runs |\n|---|---|---|")
    for stage in runs[0]:
        values = [r.get(stage, 0.0) for r in runs]
        spread = " ".join(f"{v:.2f}" for v in values)
        print(f"| {stage} | {statistics.median(values):.2f} | {spread} |")


if __name__ == "__main__":
    main()
