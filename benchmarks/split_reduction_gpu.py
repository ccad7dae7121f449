"""Split reductions on a CUDA machine: batch-norm-like reductions, eager vs ours (split and
unsplit) vs torch.compile.

    python benchmarks/split_reduction_gpu.py [--iters 50] [--shape 16,64,64,64]

Workloads, fp32, reducing dims (0, 2, 3) of an NCHW tensor (64 outputs of 65536 elements at
the default shape, what resnet18's first batch norm sees at batch 16, 128x128):
  relu_bwd_sum  where(y <= 0, 0, g).sum((0, 2, 3))      relu backward's prologue + one sum
  bn_bwd_sums   that d, d.sum(...) and (d * (x - mean)).sum(...)   batch norm backward's sums
  bn_fwd_stats  torch.var_mean(x, (0, 2, 3), correction=0)         batch norm forward's stats
  bn_train_fwd  F.batch_norm(x, rm, rv, w, b, training=True)      the statistics, the running
                statistics' updates and the normalisation (reads x twice: bytes are 2x)
Our variances are one-pass Welford reductions (split: partial means and m2s, then their
combination), so bn_fwd_stats should be two kernels, as torch.compile's.
For each it prints the GPU's kernel time per call (the sum of kernel times from
torch.profiler: no host overhead, so a split's two kernels are both counted) in µs, the
achieved bandwidth over the bytes a single pass must read (each input once, outputs are
negligible), and the kernels ours ran. "ours unsplit" is ours with
compiler.scheduler.split.SPLIT_MIN_ELEMENTS raised out of reach: the code before splitting.
torch.compile appears only as the comparison anchor.

Last, the variance of 1000 + randn over the same shape against float64, for eager, ours and
torch.compile: the largest relative error per channel (a float32 sum of squares would be off
by ~1e-1; two passes or Welford by ~1e-6).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Any, Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("COMPILER_CACHE_DIR", tempfile.mkdtemp(prefix="split_bench_"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import compiler  # noqa: E402
from compiler.scheduler import split  # noqa: E402


def relu_bwd_sum(y: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    return torch.where(y <= 0, 0.0, g).sum((0, 2, 3))


def bn_bwd_sums(y, g, x, mean):
    d = torch.where(y <= 0, 0.0, g)
    return d.sum((0, 2, 3)), (d * (x - mean)).sum((0, 2, 3))


def bn_fwd_stats(x):
    return torch.var_mean(x, (0, 2, 3), correction=0)


def bn_train_fwd(x, rm, rv, w, b):
    return F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.1, eps=1e-5)


def accuracy(shape: tuple[int, ...]) -> None:
    """Relative error of the per-channel variance of 1000 + randn against float64."""
    x = 1000 + torch.randn(shape, device="cuda")
    exact = x.double().var((0, 2, 3))

    def var(t):
        return t.var((0, 2, 3))

    compiler.reset()
    torch._dynamo.reset()
    print("\n== variance of 1000 + randn, largest relative error vs float64")
    for label, fn in (
        ("eager", var),
        ("ours", compiler.compile(var)),
        ("torch.compile", torch.compile(var)),
    ):
        err = ((fn(x).double() - exact).abs() / exact).max().item()
        print(f"| {label} | {err:.2e} |")


def gpu_us(fn: Callable[[], Any], calls: int) -> tuple[float, list[str]]:
    """(GPU kernel µs per call, the kernels of one call with their µs)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    per_call = len(kernels) // calls
    busy = sum(e.device_time for e in kernels) / calls
    one = [f"{e.name[:70]} {e.device_time:.1f} µs" for e in kernels[-per_call:]]
    return busy, one


def run(name: str, fn: Callable, args: tuple, nbytes: int, iters: int) -> None:
    expected = fn(*args)
    rows: list[tuple[str, Callable]] = [("eager", lambda: fn(*args))]
    saved = split.SPLIT_MIN_ELEMENTS
    for label, threshold in (("ours", saved), ("ours unsplit", 1 << 62)):
        split.SPLIT_MIN_ELEMENTS = threshold
        compiler.reset()
        compiled = compiler.compile(fn)
        try:
            got = compiled(*args)
        finally:
            split.SPLIT_MIN_ELEMENTS = saved
        torch.testing.assert_close(got, expected, atol=1e-3, rtol=1e-4)
        rows.append((label, lambda c=compiled: c(*args)))
    torch._dynamo.reset()
    anchor = torch.compile(fn)
    anchor(*args)
    rows.append(("torch.compile", lambda: anchor(*args)))
    print(f"\n== {name}: {nbytes / 1e6:.1f} MB read once")
    print("| | GPU µs/call | GB/s | kernels |")
    print("|---|---|---|---|")
    details = {}
    for label, call in rows:
        us, kernels = gpu_us(call, iters)
        details[label] = kernels
        print(f"| {label} | {us:.1f} | {nbytes / us / 1e3:.0f} | {len(kernels)} |", flush=True)
    for label in ("ours", "ours unsplit"):
        print(f"  {label}: " + "; ".join(details[label]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--shape", default="16,64,64,64")
    args = parser.parse_args()
    assert torch.cuda.is_available(), "needs a CUDA device"
    props = torch.cuda.get_device_properties(0)
    print(f"{props.name}, {props.multi_processor_count} SMs, torch {torch.__version__}")
    shape = tuple(int(s) for s in args.shape.split(","))
    torch.manual_seed(0)
    y, g, x = (torch.randn(shape, device="cuda") for _ in range(3))
    mean = x.mean((0, 2, 3), keepdim=True)
    size = x.numel() * x.element_size()
    with torch.no_grad():
        run("relu_bwd_sum", relu_bwd_sum, (y, g), 2 * size, args.iters)
        run("bn_bwd_sums", bn_bwd_sums, (y, g, x, mean), 3 * size, args.iters)
        run("bn_fwd_stats", bn_fwd_stats, (x,), size, args.iters)
        c = shape[1]
        params = tuple(torch.randn(c, device="cuda") for _ in range(2))
        stats = (torch.zeros(c, device="cuda"), torch.ones(c, device="cuda"))
        run("bn_train_fwd", bn_train_fwd, (x, *stats, *params), 2 * size, args.iters)
        accuracy(shape)


if __name__ == "__main__":
    main()
