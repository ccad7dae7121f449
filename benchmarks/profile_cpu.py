"""Where the time of a CPU workload goes: eager's top-level aten ops next to ours (C++ kernels
by name, extern aten calls, layout copies), from torch.profiler over a few calls each.

    .venv/bin/python benchmarks/profile_cpu.py resnet18 [--calls 5] [--top 25]

Workloads are benchmarks/cpu.py's. Our C++ kernels mark themselves with record_function while
a profiler runs (compiler/codegen/cpp.py), so they appear under their own names; aten calls
of our wrapper (convolution, the copy of `ensure_layout`, allocations) appear as aten ops.
Rows are top-level events only (a convolution's inner mkldnn call is inside its row), totals
over `--calls` calls divided by the number of calls; "kind" sums rows by family (C++ pointwise
kernels, C++ reduction kernels, each aten op).
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.cpu import compile_ours, make_workload


def _family(name: str) -> str:
    if name.startswith("cpp_red_"):
        return "C++ reduction kernels"
    if name.startswith("cpp_"):
        return "C++ pointwise kernels"
    return name


def top_level(fn, inputs, calls: int) -> dict[str, tuple[float, int]]:
    """name -> (microseconds per call, events per call) of events with no parent event."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            fn(*inputs)
    rows: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for ev in prof.events():
        if ev.cpu_parent is not None:
            continue
        row = rows[ev.name]
        row[0] += ev.cpu_time_total / calls
        row[1] += 1 / calls
    return {k: (v[0], round(v[1])) for k, v in rows.items()}


def _print(title: str, rows: dict[str, tuple[float, int]], top: int) -> None:
    total = sum(us for us, _ in rows.values())
    print(f"\n## {title}: {total / 1e3:.1f} ms per call in top-level events")
    families: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for name, (us, n) in rows.items():
        families[_family(name)][0] += us
        families[_family(name)][1] += n
    print("| kind | ms | count | share |\n|---|---|---|---|")
    for name, (us, n) in sorted(families.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"| {name} | {us / 1e3:.2f} | {int(n)} | {us / total:.0%} |")
    print("\n| event | ms | count |\n|---|---|---|")
    for name, (us, n) in sorted(rows.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"| {name[:90]} | {us / 1e3:.3f} | {n} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("workload")
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    fn, inputs = make_workload(args.workload)
    with torch.no_grad():
        ours, _ = compile_ours(fn)
        for f in (fn, ours, fn, ours):  # compile and warm up
            f(*inputs)
        eager_rows = top_level(fn, inputs, args.calls)
        ours_rows = top_level(ours, inputs, args.calls)
    print(f"# {args.workload}: {torch.get_num_threads()} threads, {args.calls} calls each")
    _print("eager", eager_rows, args.top)
    _print("ours", ours_rows, args.top)


if __name__ == "__main__":
    main()
