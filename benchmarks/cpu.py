"""CPU benchmark: eager vs ours (C++/OpenMP kernels) vs torch.compile, in one run.

    .venv/bin/python benchmarks/cpu.py [--workloads sincos,resnet18,densenet121] [--repeat N]

Every (workload, runner) pair runs in a fresh subprocess with its own empty cache directory,
so the first call measures an honest cold compile (no in-memory or on-disk caches shared
with an earlier measurement); the same subprocess then times the steady state: the median
of `--repeat` calls after warm-up, under `torch.no_grad()`. torch.compile is used here only,
as the anchor we measure against.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]

WORKLOADS = {
    "sincos": "sin+cos over 2^24 floats",
    "resnet18": "resnet18 inference, batch 16, 3x128x128",
    "densenet121": "densenet121 inference, batch 4, 3x128x128",
}
RUNNERS = ("eager", "ours", "torch.compile")


def make_workload(name: str):
    """(callable, example inputs) for a workload; models are torchvision's, random weights."""
    torch.manual_seed(0)
    if name == "sincos":

        def sincos(x, y):
            return torch.sin(x) + torch.cos(y)

        return sincos, (torch.randn(1 << 24), torch.randn(1 << 24))
    import torchvision

    if name == "resnet18":
        model = torchvision.models.resnet18(weights=None).eval()
        return model, (torch.randn(16, 3, 128, 128),)
    if name == "densenet121":
        model = torchvision.models.densenet121(weights=None).eval()
        return model, (torch.randn(4, 3, 128, 128),)
    raise ValueError(name)


def compile_ours(fn):
    """`compiler.compile(fn)`, or when the tracer cannot take it, torch.fx.symbolic_trace +
    compile_fx directly (the second element says which path ran)."""
    import compiler

    compile_fn = getattr(compiler, "compile", None)
    if compile_fn is not None:
        return compile_fn(fn), "compiler.compile"
    from compiler.codegen.compile_fx import compile_fx

    gm = torch.fx.symbolic_trace(fn)
    holder: dict = {}

    def run(*args):
        if "compiled" not in holder:
            holder["compiled"] = compile_fx(gm, list(args))
        return holder["compiled"](*args)

    return run, "symbolic_trace+compile_fx"


def worker(workload: str, runner: str, repeat: int) -> dict:
    fn, inputs = make_workload(workload)
    path = "eager"
    with torch.no_grad():
        if runner == "ours":
            fn, path = compile_ours(fn)
        elif runner == "torch.compile":
            fn, path = torch.compile(fn), "torch.compile"
        start = time.perf_counter()
        first_out = fn(*inputs)
        first = time.perf_counter() - start
        for _ in range(2):
            fn(*inputs)
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            fn(*inputs)
            times.append(time.perf_counter() - start)
        ref_fn, _ = make_workload(workload)
        ref = ref_fn(*inputs)
    err = (first_out - ref).abs().max().item()
    median = statistics.median(times)
    return {
        "median_ms": median * 1e3,
        "min_ms": min(times) * 1e3,
        "compile_s": max(first - median, 0.0) if runner != "eager" else None,
        "max_abs_err": err,
        "path": path,
    }


def run_isolated(workload: str, runner: str, repeat: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-cache-") as cache:
        env = dict(os.environ)
        env.update(
            COMPILER_CACHE_DIR=cache,
            TORCHINDUCTOR_CACHE_DIR=str(Path(cache) / "inductor"),
            TRITON_CACHE_DIR=str(Path(cache) / "triton"),
            PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
        )
        cmd = [sys.executable, __file__, "--worker", workload, runner, "--repeat", str(repeat)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"error": " | ".join(tail)}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _fmt(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--worker", nargs=2, metavar=("WORKLOAD", "RUNNER"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(*args.worker, args.repeat)))
        return

    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in open("/proc/cpuinfo")
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {cpu}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, torch {torch.__version__}"
    )
    print(
        f"# medians of {args.repeat} calls after warm-up; cold compile = first call - median,"
        " each in a fresh process with empty caches"
    )
    rows = []
    for workload in args.workloads.split(","):
        results = {r: run_isolated(workload, r, args.repeat) for r in RUNNERS}
        rows.append((workload, results))
        for r, res in results.items():
            if "error" in res:
                print(f"# {workload} / {r}: failed: {res['error']}")

    header = (
        "| workload | eager ms | ours ms | torch.compile ms | ours speedup | torch.compile speedup "
        "| ours cold compile s | torch.compile cold compile s | ours max abs err | ours path |"
    )
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for workload, res in rows:
        eager = res["eager"].get("median_ms")
        ours = res["ours"].get("median_ms")
        tc = res["torch.compile"].get("median_ms")
        print(
            f"| {WORKLOADS[workload]} | {_fmt(eager)} | {_fmt(ours)} | {_fmt(tc)} "
            f"| {_fmt(eager / ours if eager and ours else None, 2)}x "
            f"| {_fmt(eager / tc if eager and tc else None, 2)}x "
            f"| {_fmt(res['ours'].get('compile_s'))} "
            f"| {_fmt(res['torch.compile'].get('compile_s'))} "
            f"| {_fmt(res['ours'].get('max_abs_err'), 6) if 'max_abs_err' in res['ours'] else '-'} "
            f"| {res['ours'].get('path', res['ours'].get('error', '-'))} |"
        )


if __name__ == "__main__":
    main()
