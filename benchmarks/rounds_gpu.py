"""Steady-state latency on a shared CUDA machine: ours vs torch.compile, interleaved rounds.

    python benchmarks/rounds_gpu.py [--only resnet18,densenet121,bert] [--rounds 7]

codegen_gpu.py times each configuration once, one after another; on the lent machines the
host's speed drifts between configurations (eager resnet18 measured 1.47, 1.92 and 3.38 ms
in three calls of one day), and host work before the first launch is part of every number
here. So this script compiles every configuration first, then runs `--rounds` rounds, each
timing every configuration for `--iters` calls (CUDA events around one call, median), and
reports per configuration the median over rounds and each compiler's ratio to
torch.compile in the same mode within the same round (the median of those ratios). No
cold compiles: codegen_gpu.py measures those. torch.compile is only the comparison anchor.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from typing import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402

import compiler  # noqa: E402
from benchmarks.codegen_gpu import WORKLOADS, median_ms  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="resnet18,densenet121,bert")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--iters", type=int, default=50)
    args = parser.parse_args()
    for name in args.only.split(","):
        title, make = WORKLOADS[name]
        fn, inputs = make()
        configs: dict[str, Callable] = {"eager": fn}
        for mode in (None, "reduce-overhead"):
            tag = "RO" if mode else "default"
            configs[f"ours {tag}"] = compiler.compile(fn, mode=mode)
            configs[f"torch.compile {tag}"] = torch.compile(fn, mode=mode)
        with torch.no_grad():
            for f in configs.values():
                for _ in range(3):  # compiles, captures, warms up
                    f(*inputs)
            torch.cuda.synchronize()
            rounds: dict[str, list[float]] = {label: [] for label in configs}
            for _ in range(args.rounds):
                for label, f in configs.items():
                    rounds[label].append(
                        median_ms(lambda f=f, a=inputs: f(*a), args.iters, warmup=0)
                    )
        print(f"== {title}: median over {args.rounds} rounds of the median of {args.iters} calls")
        for label, ms in rounds.items():
            line = f"   {label:24s} {statistics.median(ms):7.3f} ms  (rounds {min(ms):.3f}-{max(ms):.3f})"
            if label.startswith("ours"):
                anchor = rounds["torch.compile " + label.split()[1]]
                ratio = statistics.median(o / t for o, t in zip(ms, anchor))
                line += f"  ours / torch.compile {ratio:.3f}"
            print(line, flush=True)
        del configs, fn, inputs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
