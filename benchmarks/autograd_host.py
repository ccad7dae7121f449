"""Host time of one training graph's forward call (compiler/aot/autograd.py's
TrainingGraph.__call__) for a graph of ~730 inputs: torchvision's densenet121, narrowed as in
hostcost.py, in train mode (364 parameters, 363 BatchNorm buffers written back).

    .venv/bin/python benchmarks/autograd_host.py [--backend aot_eager] [--calls N] [--batches K]

On an H100 in mode="reduce-overhead" this call is ~3 ms of host time per densenet121 step
(issue 5) around a CUDA graph replay of a few hundred µs of launches. On the CPU the
kernels would bury it, so besides the real call (`real forward`) the rows time the call
with the compiled forward replaced by a replay: it returns the first call's results again,
as a CUDA graph hands back its static buffers, so what is left is autograd.py's own work
(the autograd.Function, the BatchNorm write-back, the saved tensors' bookkeeping).
`replay, graph memory` also marks the forward's saved intermediates as a CUDA graph's
internal outputs (runtime/cudagraphs.py's `_handed_out`), as reduce-overhead mode does.

Rows: µs per call, median / min over the batches (grad on; each call's outputs dropped, so
its saved tensors are freed as after a step's backward).
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import compiler  # noqa: E402
from benchmarks.hostcost import narrow, time_round_robin  # noqa: E402
from compiler.aot import autograd  # noqa: E402


def captured_graph(backend: str) -> tuple[autograd.TrainingGraph, list]:
    """densenet121 (narrow) compiled for training; its TrainingGraph and one call's inputs."""
    import torchvision

    torch.manual_seed(0)
    model = narrow(torchvision.models.densenet121()).train()
    seen: list[tuple[autograd.TrainingGraph, tuple]] = []
    real_call = autograd.TrainingGraph.__call__

    def spying(self: autograd.TrainingGraph, *args: Any) -> Any:
        seen.append((self, args))
        return real_call(self, *args)

    autograd.TrainingGraph.__call__ = spying  # type: ignore[method-assign]
    try:
        step = compiler.compile(lambda x: model(x).sum(), backend=backend)
        step(torch.randn(2, 3, 32, 32)).backward()
    finally:
        autograd.TrainingGraph.__call__ = real_call  # type: ignore[method-assign]
    graph, args = seen[-1]
    return graph, list(args)


def replaying(graph: autograd.TrainingGraph, args: list) -> None:
    """Make `graph.forward` return its next call's results at every call, the user-visible
    outputs as fresh copies (as CudaGraphRunner returns them: the Function attaches each
    call's history to them)."""
    with torch.no_grad():  # as the Function's forward runs it
        results = tuple(graph.forward(*args))
    n = graph.part.num_outputs
    graph.forward = lambda *a: (*(o.clone() for o in results[:n]), *results[n:])


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="aot_eager")
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--batches", type=int, default=7)
    opts = ap.parse_args()
    torch.set_num_threads(1)
    graph, args = captured_graph(opts.backend)
    n_grad = sum(graph.joint.requires_grad)
    print(
        f"densenet121 narrow, {opts.backend}, {_cpu()}, "
        f"{datetime.date.today()}: {len(args)} inputs ({n_grad} require grad), "
        f"{len(graph.part.mutated)} written back, {len(graph.part.saved)} saved "
        f"({sum(i is None for i in graph.part.saved_inputs)} intermediates)\n"
    )

    def call() -> None:
        graph(*args)

    rows = {"real forward": time_round_robin({"x": call}, max(opts.calls // 10, 3), opts.batches)}
    replaying(graph, args)
    rows["replay"] = time_round_robin({"x": call}, opts.calls, opts.batches)
    from compiler.runtime import cudagraphs

    internal = graph.forward(*args)[graph.part.num_outputs + len(graph.part.mutated) :]
    real_check = autograd.is_handed_out
    handed = cudagraphs._handed_out
    # the real check's work, with is_cpu for is_cuda
    autograd.is_handed_out = lambda t: bool(handed) and t.is_cpu and t.data_ptr() in handed
    handed.update(t.data_ptr() for t in internal)
    try:
        rows["replay, graph memory"] = time_round_robin({"x": call}, opts.calls, opts.batches)
    finally:
        handed.clear()
        autograd.is_handed_out = real_check
    print("| TrainingGraph call | µs per call (median / min) |")
    print("|---|---|")
    for name, t in rows.items():
        med, low = t["x"]
        print(f"| {name} | {med:.0f} / {low:.0f} |")


if __name__ == "__main__":
    main()
