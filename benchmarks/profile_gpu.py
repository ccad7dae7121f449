"""Where the time of a compiled model goes on a CUDA machine: a profile, not a benchmark.

    python benchmarks/profile_gpu.py [--models resnet18,densenet121] [--out DIR]

For each model (fp32, eval, batch 16, 3x128x128) it times eager, ours and ours in
reduce-overhead mode with CUDA events, then profiles a few calls of ours with torch.profiler
and prints the GPU kernels and the host-side ops that cost the most, plus the host time of
one Triton launch. BENCHMARKS.md's numbers come from codegen_gpu.py; this script explains
them.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("COMPILER_CACHE_DIR", tempfile.mkdtemp(prefix="profile_gpu_"))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import compiler  # noqa: E402
from benchmarks.train_gpu import guards_in_cpp  # noqa: E402
from compiler.backends.inductor import compile_fx  # noqa: E402


def median_ms(fn, iters: int = 30, warmup: int = 5) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def host_ms(fn, iters: int = 30) -> float:
    """Host time per call with the GPU never waited on inside the loop (launch cost)."""
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(iters):
        fn()
    host = (time.perf_counter() - t) * 1000 / iters
    torch.cuda.synchronize()
    return host


def profile_calls(fn, out_dir: str, name: str) -> None:
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
    avgs = prof.key_averages()
    print(f"-- {name}: GPU kernels by total GPU time (5 calls)")
    print(avgs.table(sort_by="cuda_time_total", row_limit=20, max_name_column_width=70))
    print(f"-- {name}: host ops by self CPU time (5 calls)")
    print(avgs.table(sort_by="self_cpu_time_total", row_limit=20, max_name_column_width=70))
    if name.startswith("resnet18_ours"):  # the others' traces are too large to bring back
        prof.export_chrome_trace(os.path.join(out_dir, f"{name}.json"))


def python_profile(fn, name: str, calls: int = 20) -> None:
    """The Python functions a steady-state call spends its host time in (cProfile)."""
    import cProfile
    import pstats

    fn()
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    prof.disable()
    print(f"-- {name}: Python functions by own time ({calls} calls)")
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)


def model_profile(name: str, out_dir: str, with_torch: bool) -> None:
    import torchvision

    torch.manual_seed(0)
    model = getattr(torchvision.models, name)().eval().cuda()
    x = torch.randn(16, 3, 128, 128, device="cuda")
    with torch.no_grad():
        ref = model(x)
        ours = compiler.compile(model)
        t = time.perf_counter()
        out = ours(x)
        torch.cuda.synchronize()
        cold = time.perf_counter() - t
        err = ((out - ref).norm() / ref.norm()).item()
        report = compiler.inspect(ours)
        kinds = {}
        for k in report.kernels:
            kinds[k.language] = kinds.get(k.language, 0) + 1
        print(
            f"== {name}: cold {cold:.1f} s, rel err {err:.2e}, graphs {len(report.graphs)}, kernels {kinds}"
        )
        for g in report.graphs:
            if g.fallback:
                print("   fallback:", g.fallback[:200])
        ro = compiler.compile(model, backend=functools.partial(compile_fx, mode="reduce-overhead"))
        ro(x)
        gm = torch.fx.symbolic_trace(model)
        graph_only = compile_fx(gm, [x])
        print(
            f"   eager {median_ms(lambda: model(x)):.3f} ms | ours {median_ms(lambda: ours(x)):.3f} ms"
            f" | ours graph only {median_ms(lambda: graph_only(x)):.3f} ms"
            f" | ours RO {median_ms(lambda: ro(x)):.3f} ms"
        )
        print(
            f"   host per call: eager {host_ms(lambda: model(x)):.3f} ms | ours {host_ms(lambda: ours(x)):.3f} ms"
            f" | graph only {host_ms(lambda: graph_only(x)):.3f} ms | RO {host_ms(lambda: ro(x)):.3f} ms"
        )
        profile_calls(lambda: ours(x), out_dir, f"{name}_ours")
        profile_calls(lambda: ro(x), out_dir, f"{name}_ours_ro")
        python_profile(lambda: ours(x), f"{name}_ours")
        python_profile(lambda: ro(x), f"{name}_ours_ro")
        if with_torch:  # the anchor's kernels and host ops, for the same tables
            theirs = torch.compile(model)
            theirs(x)
            print(
                f"   torch.compile {median_ms(lambda: theirs(x)):.3f} ms,"
                f" host per call {host_ms(lambda: theirs(x)):.3f} ms"
            )
            profile_calls(lambda: theirs(x), out_dir, f"{name}_torch_compile")


def launch_cost() -> None:
    """Host microseconds of one launch of a generated pointwise kernel on 10 floats."""
    x = torch.randn(10, device="cuda")

    def f(x):
        return x + 1

    gm = torch.fx.symbolic_trace(f)
    compiled = compile_fx(gm, [x])
    compiled(x)
    n = 2000
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        compiled(x)
    torch.cuda.synchronize()
    per = (time.perf_counter() - t) / n * 1e6
    t = time.perf_counter()
    for _ in range(n):
        x + 1
    torch.cuda.synchronize()
    eager = (time.perf_counter() - t) / n * 1e6
    print(f"== launch: compiled x+1 graph {per:.1f} us/call, eager x+1 {eager:.1f} us/call")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="resnet18,densenet121")
    parser.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
    parser.add_argument("--torch", action="store_true", help="profile torch.compile too")
    args = parser.parse_args()
    print(torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    print("tensor checks:", guards_in_cpp(), flush=True)
    launch_cost()
    for name in args.models.split(","):
        model_profile(name, args.out, args.torch)


if __name__ == "__main__":
    main()
