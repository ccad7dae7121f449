"""CPU benchmark: eager vs ours (C++/OpenMP kernels) vs torch.compile, in one run.

    .venv/bin/python benchmarks/cpu.py [--workloads sincos,resnet18,densenet121] [--repeat N]

Cold compile: each compiler's first call in a fresh subprocess with its own empty cache
directories (no in-memory or on-disk cache shared with any earlier measurement), minus one
steady-state call. Steady state: one more fresh process builds eager, ours and torch.compile
and times their calls interleaved round-robin (so load from other jobs on a shared machine
hits every column alike); medians of `--repeat` calls after warm-up, under `torch.no_grad()`.
torch.compile is used here only, as the anchor we measure against.
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
    from compiler.backends.inductor import compile_fx

    gm = torch.fx.symbolic_trace(fn)
    holder: dict = {}

    def run(*args):
        if "compiled" not in holder:
            holder["compiled"] = compile_fx(gm, list(args))
        return holder["compiled"](*args)

    return run, "symbolic_trace+compile_fx"


def _build(workload: str, runner: str):
    fn, inputs = make_workload(workload)
    if runner == "ours":
        fn, path = compile_ours(fn)
    elif runner == "torch.compile":
        fn, path = torch.compile(fn), "torch.compile"
    else:
        path = "eager"
    return fn, inputs, path


def cold_worker(workload: str, runner: str) -> dict:
    """First call of a fresh process (compile included) minus one steady call."""
    with torch.no_grad():
        fn, inputs, path = _build(workload, runner)
        start = time.perf_counter()
        fn(*inputs)
        first = time.perf_counter() - start
        steady = []
        for _ in range(3):
            start = time.perf_counter()
            fn(*inputs)
            steady.append(time.perf_counter() - start)
    return {"compile_s": max(first - min(steady), 0.0), "path": path}


def steady_worker(workload: str, repeat: int, runners: list[str]) -> dict:
    """All runners in one process, their calls interleaved round-robin, so a change in
    machine load (other jobs on a shared 2-core machine) hits every column alike."""
    results: dict = {}
    with torch.no_grad():
        built = {r: _build(workload, r) for r in runners}
        ref = None
        for r, (fn, inputs, path) in built.items():
            out = fn(*inputs)
            for _ in range(2):
                fn(*inputs)
            ref = out if ref is None else ref
            results[r] = {"times": [], "path": path, "max_abs_err": (out - ref).abs().max().item()}
        for _ in range(repeat):
            for r, (fn, inputs, _) in built.items():
                start = time.perf_counter()
                fn(*inputs)
                results[r]["times"].append(time.perf_counter() - start)
    for res in results.values():
        times = res.pop("times")
        res["median_ms"] = statistics.median(times) * 1e3
        res["min_ms"] = min(times) * 1e3
    return results


def run_isolated(args: list[str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-cache-") as cache:
        env = dict(os.environ)
        env.update(
            COMPILER_CACHE_DIR=cache,
            TORCHINDUCTOR_CACHE_DIR=str(Path(cache) / "inductor"),
            TRITON_CACHE_DIR=str(Path(cache) / "triton"),
            PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
        )
        cmd = [sys.executable, __file__, *args]
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
    parser.add_argument("--runners", default=",".join(RUNNERS), help="a subset, for quick checks")
    parser.add_argument(
        "--cold-runners",
        default="ours,torch.compile",
        help="whose cold compile to measure (each a fresh process; '' for none)",
    )
    parser.add_argument("--cold", nargs=2, metavar=("WORKLOAD", "RUNNER"), help=argparse.SUPPRESS)
    parser.add_argument("--steady", metavar="WORKLOAD", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cold:
        print(json.dumps(cold_worker(*args.cold)))
        return
    if args.steady:
        print(json.dumps(steady_worker(args.steady, args.repeat, args.runners.split(","))))
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
        f"# medians of {args.repeat} interleaved calls after warm-up; cold compile = first call"
        " minus a steady call, each compiler in a fresh process with empty caches"
    )
    rows = []
    for workload in args.workloads.split(","):
        results = run_isolated(
            ["--steady", workload, "--repeat", str(args.repeat), "--runners", args.runners]
        )
        if "error" in results:
            print(f"# {workload}: steady-state run failed: {results['error']}")
        results = {r: results.get(r, {}) for r in RUNNERS}
        for r in [r for r in ("ours", "torch.compile") if r in args.cold_runners.split(",")]:
            cold = run_isolated(["--cold", workload, r])
            if "error" in cold:
                print(f"# {workload} / {r}: cold compile failed: {cold['error']}")
            results[r].update(cold)
        rows.append((workload, results))
        print(f"# {workload}: {json.dumps(results)}", flush=True)

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
