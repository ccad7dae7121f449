"""Per-call overhead of compiled functions and modules: eager vs ours vs torch.compile.

    .venv/bin/python benchmarks/overhead.py [--device cpu|cuda|all] [--models resnet18,densenet121]
        [--calls N] [--model-calls N] [--batches K]

Two kinds of rows. The functions do almost no work (10-element tensors), so the time per call
is the price of the machinery around the kernels: guard checks, the frame evaluator, argument
handling, the launch. The models (torchvision, random weights, eval, batch 1, 3x32x32, under
`torch.no_grad()`) have hundreds of parameters and buffers behind nested Sequentials: the
guards and the fetch of their inputs grow with the module tree, so a model row shows what the
machinery costs once the graph is real.

Columns: both compilers with their default backend (kernels generated), with
backend="eager" (the captured graph run with torch ops), and with a no-op backend whose
graph returns the outputs of its first call without computing anything: that column is the
machinery alone (guards, fetch, frame evaluation, the wrapper), the number to compare with
torch.compile's. torch.compile is used here only, as the anchor we measure against.

Every runner of a row is built and warmed up first (compiled, caches filled); then the
runners are timed round-robin, `--batches` batches each of `--calls` (functions) or
`--model-calls` (models) back-to-back calls, so a change in machine load hits every column
alike. A batch's time divided by its calls is one sample; the table shows the median sample
(CUDA is synchronised at the end of each batch, so queued kernels are paid for).

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
import torch._dynamo  # the anchor's cache, reset between rows

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

MODELS = ("resnet18", "densenet121")


def noop_backend(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
    """A graph that returns the outputs of its first run without computing anything."""
    outputs = gm(*example_inputs)
    return lambda *args: outputs


def runners(fn: Callable) -> dict[str, Callable[[], Callable]]:
    """name -> a factory building the callable to time (built lazily: a compile may fail)."""
    return {
        "eager": lambda: fn,
        "ours": lambda: compiler.compile(fn),
        "ours (eager backend)": lambda: compiler.compile(fn, backend="eager"),
        "ours (no-op graph)": lambda: compiler.compile(fn, backend=noop_backend),
        "torch.compile": lambda: torch.compile(fn),
        "torch.compile (eager backend)": lambda: torch.compile(fn, backend="eager"),
        "torch.compile (no-op graph)": lambda: torch.compile(fn, backend=noop_backend),
    }


def time_row(fn: Callable, args: tuple, device: str, calls: int, batches: int) -> dict[str, str]:
    """Median over batches of the mean time of one call, in microseconds, per runner; the
    runners' batches interleaved."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    built: dict[str, Callable] = {}
    cells: dict[str, str] = {}
    for name, build in runners(fn).items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                runner = build()
                for _ in range(max(5, calls // 10)):  # compile, fill caches, settle the allocator
                    runner(*args)
            built[name] = runner
        except Exception as e:  # a runner that cannot run is shown as such, not as zero
            cells[name] = f"failed: {type(e).__name__}"
    samples: dict[str, list[float]] = {name: [] for name in built}
    sync()
    for _ in range(batches):
        for name, runner in built.items():
            start = time.perf_counter()
            for _ in range(calls):
                runner(*args)
            sync()
            samples[name].append((time.perf_counter() - start) / calls * 1e6)
    for name, times in samples.items():
        cells[name] = f"{statistics.median(times):.1f}"
    return cells


def model_and_input(name: str, device: str) -> tuple[torch.nn.Module, torch.Tensor]:
    import torchvision

    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None).eval().to(device)
    return model, torch.randn(1, 3, 32, 32, device=device)


def measure(
    device: str, models: list[str], calls: int, model_calls: int, batches: int
) -> list[tuple[str, dict[str, str]]]:
    rows = []
    for fn, n_args, label in FUNCTIONS.values():
        compiler.reset()
        torch._dynamo.reset()
        torch.manual_seed(0)
        args = tuple(torch.randn(10, device=device) for _ in range(n_args))
        rows.append((f"{label}, {device}", time_row(fn, args, device, calls, batches)))
    for name in models:
        compiler.reset()
        torch._dynamo.reset()
        model, x = model_and_input(name, device)
        with torch.no_grad():
            cells = time_row(model, (x,), device, model_calls, batches)
        rows.append((f"{name}, 1x3x32x32, eval, no_grad, {device}", cells))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda", "all"], default="all")
    parser.add_argument(
        "--models", default="resnet18", help=f"comma-separated, from {', '.join(MODELS)}; or none"
    )
    parser.add_argument("--calls", type=int, default=2000, help="calls per timed batch (functions)")
    parser.add_argument(
        "--model-calls", type=int, default=20, help="calls per timed batch (models)"
    )
    parser.add_argument("--batches", type=int, default=15, help="timed batches (samples)")
    opts = parser.parse_args()
    devices = ["cpu", "cuda"] if opts.device == "all" else [opts.device]
    devices = [d for d in devices if d == "cpu" or torch.cuda.is_available()]
    models = [m for m in opts.models.split(",") if m and m != "none"]
    unknown = sorted(set(models) - set(MODELS))
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
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
        f"median over {opts.batches} interleaved batches of {opts.calls} calls "
        f"({opts.model_calls} for models), 1 thread\n"
    )
    columns = list(runners(add_one))
    print("| row | " + " | ".join(f"{c} (µs)" for c in columns) + " | command | commit |")
    print("| --- " * (len(columns) + 3) + "|")
    for device in devices:
        for label, cells in measure(device, models, opts.calls, opts.model_calls, opts.batches):
            print(
                f"| {label} | "
                + " | ".join(cells[c] for c in columns)
                + f" | {command} | {commit} |"
            )


if __name__ == "__main__":
    main()
