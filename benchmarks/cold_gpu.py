"""Where a cold compile's time goes on a CUDA machine: a profile, not a benchmark.

    python benchmarks/cold_gpu.py [--only sincos,resnet18]

Each workload runs in a fresh process with empty caches (ours and Triton's): the process's
import time, then the first call's stage times from the inspection records (trace, aot,
lower, schedule, codegen, compile) and the first call's wall time; then the 25 functions
with the most cumulative time under cProfile in a second fresh process. BENCHMARKS.md's cold
compile column comes from codegen_gpu.py; this script explains it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r"""
import os, sys, time, cProfile, pstats
t0 = time.perf_counter()
import torch, triton
sys.path.insert(0, {root!r})
import compiler
print(f"   imports {{time.perf_counter() - t0:.2f}} s (torch, triton, compiler)")
name = {name!r}
if name == "sincos":
    def fn(x, y):
        return torch.cos(x) + torch.sin(y)
    args = (torch.randn(2**20, device="cuda"), torch.randn(2**20, device="cuda"))
else:
    import torchvision
    fn = getattr(torchvision.models, name)().eval().cuda()
    args = (torch.randn(16, 3, 128, 128, device="cuda"),)
compiled = compiler.compile(fn)
torch.cuda.synchronize()
prof = cProfile.Profile() if {profile} else None
t = time.perf_counter()
with torch.no_grad():
    if prof: prof.enable()
    compiled(*args)
    torch.cuda.synchronize()
    if prof: prof.disable()
print(f"   first call {{time.perf_counter() - t:.2f}} s")
for g in compiler.inspect(compiled).graphs:
    print("   stages: " + ", ".join(f"{{s.stage}} {{s.seconds:.2f}} s" for s in g.stage_times))
if prof:
    pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="sincos,resnet18")
    args = parser.parse_args()
    for name in args.only.split(","):
        for profile in (False, True):
            cache = tempfile.mkdtemp(prefix="cold_gpu_")
            env = dict(
                os.environ,
                COMPILER_CACHE_DIR=os.path.join(cache, "ours"),
                TRITON_CACHE_DIR=os.path.join(cache, "triton"),
            )
            print(f"== {name}{' (cProfile)' if profile else ''}", flush=True)
            code = CHILD.format(root=ROOT, name=name, profile=profile)
            subprocess.run([sys.executable, "-c", code], env=env, check=False)


if __name__ == "__main__":
    main()
