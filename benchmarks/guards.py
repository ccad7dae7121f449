"""Time of one call of a model's guard function, tensor checks in C++ vs in Python.

    .venv/bin/python benchmarks/guards.py [--models resnet18,densenet121] [--calls N] [--batches K]
        [--no-frozen]

Builds the C++ extension if needed (compiler/runtime/cpp_ext.py), compiles
each model (torchvision, random weights, eval, batch 1, 3x32x32, under `torch.no_grad()`) twice
with a no-op backend, once with the tensor checks in C++ and once all in Python, and takes
the two entries' guard functions (`CompiledGuards.check`) with the frame values they are
called with. They are then timed round-robin: `--batches` batches of `--calls` calls each;
a batch's time divided by its calls is one sample. Prints the median and minimum sample of
each, in µs, as a markdown table in BENCHMARKS.md's format. The C++ column is the guard
function a call runs with the extension: its TensorChecker and, from the second call on, its
FrozenReads fast path (compiler/tracer/frozen.py); with `--no-frozen`, the full function a
call runs when that path misses (or on a Python without dict version tags).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import compiler  # noqa: E402
from compiler.runtime import cpp_ext  # noqa: E402
from compiler.tracer import evaluator  # noqa: E402


def noop_backend(gm, example_inputs):
    outputs = None

    def run(*args):
        nonlocal outputs
        if outputs is None:
            outputs = gm(*args)
        return outputs

    return run


def guard_function(model: torch.nn.Module, x: torch.Tensor, checker) -> tuple:
    """The entry's CompiledGuards and the (L, G) it is checked with on a call, compiled with
    `checker` as the extension's TensorChecker (None: Python checks)."""
    compiler.reset()
    cpp_ext.checker_class = lambda: checker
    seen = {}
    lookup = evaluator._lookup

    def spy(state, pc, L, G):
        seen["args"] = (state, pc, L, G)
        return lookup(state, pc, L, G)

    evaluator._lookup = spy
    try:
        compiled = compiler.compile(model, backend=noop_backend)
        compiled(x)
        compiled(x)
    finally:
        evaluator._lookup = lookup
    state, pc, L, G = seen["args"]
    guards = state.entries[pc][0].guards
    assert guards.check(L, G)
    return guards, L, G


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--batches", type=int, default=15)
    parser.add_argument("--no-frozen", action="store_true", help="C++ column without FrozenReads")
    args = parser.parse_args()
    if args.no_frozen:
        cpp_ext.frozen_class = lambda: None
    import torchvision

    checker = cpp_ext.load_library(cpp_ext.build()).TensorChecker
    print(f"tensor guard extension: {cpp_ext.built_for()}, {cpp_ext.library_path().name}")
    print()
    print(
        "| model | guards | tensors | Python µs (median / min) | C++ µs (median / min) | speedup (median) |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for name in args.models.split(","):
        model = getattr(torchvision.models, name)().eval()
        x = torch.randn(1, 3, 32, 32)
        with torch.no_grad():
            runners = {
                "python": guard_function(model, x, None),
                "cpp": guard_function(model, x, checker),
            }
            samples: dict[str, list[float]] = {k: [] for k in runners}
            for _ in range(args.batches):
                for key, (guards, L, G) in runners.items():
                    check = guards.check
                    start = time.perf_counter()
                    for _ in range(args.calls):
                        check(L, G)
                    samples[key].append((time.perf_counter() - start) / args.calls * 1e6)
        med = {k: statistics.median(v) for k, v in samples.items()}
        low = {k: min(v) for k, v in samples.items()}
        guards = runners["python"][0]
        n_tensors = len(tensor_sources(runners["cpp"][0]))
        print(
            f"| {name} | {len(guards.checks)} | {n_tensors} | {med['python']:.1f} / {low['python']:.1f}"
            f" | {med['cpp']:.1f} / {low['cpp']:.1f} | {med['python'] / med['cpp']:.2f}x |"
        )


def tensor_sources(guards) -> set[str]:
    """The tensors a guard function checks (each once, though its fast path and its full
    path have a TensorChecker each)."""
    return {c.guard.source for c in guards.checks if c.guard.kind == "TENSOR_MATCH"}


if __name__ == "__main__":
    main()
