"""Where the time of a CPU workload goes: eager's top-level aten ops next to ours (C++ kernels
by name, extern aten calls, layout copies), from torch.profiler over a few calls each.

    .venv/bin/python benchmarks/profile_cpu.py resnet18 [--calls 5] [--top 25]
    .venv/bin/python benchmarks/profile_cpu.py transformers:llama_small --seq 32 --torch-compile

Workloads are benchmarks/cpu.py's, or SUITE:NAME, a model of benchmarks/models.py's suites
(random weights, eval, batch 2, 64x64 images or their fixed size, --seq tokens).
--torch-compile adds torch.compile's rows (its kernels are named `cpp_fused_*` too). Our C++ kernels mark themselves with record_function while
a profiler runs (compiler/codegen/cpp.py), so they appear under their own names; aten calls
of our wrapper (convolution, the copy of `ensure_layout`, allocations) appear as aten ops.
Rows are top-level events only (a convolution's inner mkldnn call is inside its row), totals
over `--calls` calls divided by the number of calls; "kind" sums rows by family (C++ pointwise
kernels, C++ reduction kernels, each aten op).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.cpu import compile_ours, make_workload
from benchmarks.model_suites import disable_randomness, make_inputs, suite_specs


def _family(name: str) -> str:
    if name.startswith("cpp_red_"):
        return "C++ reduction kernels"
    if name.startswith("cpp_"):
        return "C++ pointwise kernels"  # torch.compile's: pointwise and reductions
    return name


# torch.compile's wrappers around its graph: their children are the rows.
_WRAPPERS = (
    "Torch-Compiled Region",
    "## Call CompiledFxGraph",
    "TorchDynamo Cache Lookup",
    "Pregraph bytecode",
    "AOTDispatcher",
    "CompiledFunction",
)


def _wrapper(ev) -> bool:
    return ev.name.startswith(_WRAPPERS)


def _top(ev) -> bool:
    """Not a wrapper, and nothing but wrappers above it."""
    if _wrapper(ev):
        return False
    parent = ev.cpu_parent
    while parent is not None:
        if not _wrapper(parent):
            return False
        parent = parent.cpu_parent
    return True


def top_level(fn, inputs, calls: int) -> dict[str, tuple[float, int]]:
    """name -> (microseconds per call, events per call) of events with no parent event
    (torch.compile's wrappers aside), from each name's median event."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            fn(*inputs)
    times: dict[str, list[float]] = defaultdict(list)
    for ev in prof.events():
        if _top(ev):
            times[ev.name].append(ev.cpu_time_total)
    # The median event times its count per call: a process of another user taking the core
    # for a while inflates one event, not the row (this machine is shared).
    return {
        name: (statistics.median(ts) * len(ts) / calls, round(len(ts) / calls))
        for name, ts in times.items()
    }


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


def _workload(name: str, seq: int):
    if ":" not in name:
        return make_workload(name)
    suite, model_name = name.split(":", 1)
    spec = next(s for s in suite_specs(suite) if s.name == model_name)
    torch.manual_seed(0)
    model = spec.build().eval()
    disable_randomness(model)
    return model, make_inputs(spec, 2, 64, seq, "cpu", torch.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("workload")
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--seq", type=int, default=32, help="suite text models' length")
    parser.add_argument("--torch-compile", action="store_true")
    args = parser.parse_args()
    fn, inputs = _workload(args.workload, args.seq)
    runners = {"eager": fn, "ours": compile_ours(fn)[0]}
    if args.torch_compile:
        from torch._inductor import config as inductor_config

        # Its C++ kernels then mark themselves with record_function, as ours do.
        inductor_config.cpp.enable_kernel_profile = True
        runners["torch.compile"] = torch.compile(fn)
    with torch.no_grad():
        for _ in range(2):  # compile and warm up
            for f in runners.values():
                f(*inputs)
        rows = {name: top_level(f, inputs, args.calls) for name, f in runners.items()}
    print(f"# {args.workload}: {torch.get_num_threads()} threads, {args.calls} calls each")
    for name, r in rows.items():
        _print(name, r, args.top)


if __name__ == "__main__":
    main()
