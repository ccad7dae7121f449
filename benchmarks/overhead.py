"""Per-call overhead of a tiny compiled function: eager vs ours vs torch.compile.

    .venv/bin/python benchmarks/overhead.py [--device cpu|cuda|all] [--calls N] [--batches K]

The functions do almost no work (10-element tensors), so the time per call is the price of
the machinery around the kernels: guard checks, the frame evaluator, argument handling,
the launch. Each runner is warmed up (compiled, caches filled), then timed as `--batches`
batches of `--calls` back-to-back calls; a batch's time divided by its calls is one sample,
and the table shows the median sample (CUDA is synchronised at the end of each batch, so
queued kernels are paid for). Both compilers are timed with their default backend (kernels
generated) and with backend="eager" (the captured graph run with torch ops: the tracer's
overhead alone). torch.compile is used here only, as the anchor we measure against.

Prints one markdown table in BENCHMARKS.md's format; it appends nothing itself.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
import torch._dynamo  # the anchor's cache, reset between runners

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import compiler  # noqa: E402


def add_one(x):
    return x + 1


def three_ops(x, y):
    return torch.relu(x * 2 + y)


def with_break(a, b):
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:  # a data-dependent branch: two graphs and a break per call
        b = b * -1
    return x * b


FUNCTIONS: dict[str, tuple[Callable, int, str]] = {
    "add_one": (add_one, 1, "`x + 1`, 10 floats"),
    "three_ops": (three_ops, 2, "`relu(x * 2 + y)`, 10 floats"),
    "with_break": (with_break, 2, "seed `bar` (1 break), 10 floats"),
}


def runners(fn: Callable) -> dict[str, Callable[[], Callable]]:
    """name -> a factory building the callable to time (built lazily: a compile may fail)."""
    return {
        "eager": lambda: fn,
        "ours": lambda: compiler.compile(fn),
        "ours (eager backend)": lambda: compiler.compile(fn, backend="eager"),
        "torch.compile": lambda: torch.compile(fn),
        "torch.compile (eager backend)": lambda: torch.compile(fn, backend="eager"),
    }


def time_per_call(fn: Callable, args: tuple, device: str, calls: int, batches: int) -> float:
    """Median over batches of the mean time of one call, in microseconds."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(max(20, calls // 10)):  # warm-up: compile, fill caches, settle the allocator
        fn(*args)
    sync()
    samples = []
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(calls):
            fn(*args)
        sync()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def measure(device: str, calls: int, batches: int) -> list[tuple[str, dict[str, str]]]:
    rows = []
    for fn, n_args, label in FUNCTIONS.values():
        torch.manual_seed(0)
        args = tuple(torch.randn(10, device=device) for _ in range(n_args))
        cells: dict[str, str] = {}
        for runner, build in runners(fn).items():
            compiler.reset()
            torch._dynamo.reset()
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    cells[runner] = f"{time_per_call(build(), args, device, calls, batches):.1f}"
            except Exception as e:  # a runner that cannot run is shown as such, not as zero
                cells[runner] = f"failed: {type(e).__name__}"
        rows.append((f"{label}, {device}", cells))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda", "all"], default="all")
    parser.add_argument("--calls", type=int, default=2000, help="calls per timed batch")
    parser.add_argument("--batches", type=int, default=15, help="timed batches (samples)")
    opts = parser.parse_args()
    devices = ["cpu", "cuda"] if opts.device == "all" else [opts.device]
    devices = [d for d in devices if d == "cpu" or torch.cuda.is_available()]
    torch.set_num_threads(1)  # overhead, not parallel speed: keep thread pools out of it

    commit = (
        subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        or "-"
    )
    command = "`" + " ".join(["python benchmarks/overhead.py", *sys.argv[1:]]) + "`"
    print(
        f"python {sys.version.split()[0]}, torch {torch.__version__}, "
        f"{torch.cuda.get_device_name() if 'cuda' in devices else 'cpu only'}; "
        f"median over {opts.batches} batches of {opts.calls} calls, 1 thread\n"
    )
    columns = list(runners(add_one))
    print("| function | " + " | ".join(f"{c} (µs)" for c in columns) + " | command | commit |")
    print("| --- " * (len(columns) + 3) + "|")
    for device in devices:
        for label, cells in measure(device, opts.calls, opts.batches):
            print(
                f"| {label} | "
                + " | ".join(cells[c] for c in columns)
                + f" | {command} | {commit} |"
            )


if __name__ == "__main__":
    main()
