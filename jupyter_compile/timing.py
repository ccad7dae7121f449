"""Timing runs: eager vs ours (vs torch.compile on request), and per-kernel times.

Each variant is warmed up first (the first compiled call compiles; caches and allocators
settle over the next few), then run repeatedly until a small time budget is spent. On a GPU
every run is bracketed by CUDA events and synchronised; on a CPU `perf_counter` is enough.
The result reports median and interquartile spread, not the mean, so one slow outlier (a
garbage collection, a page fault) does not move it.

This is the only module of jupyter_compile that calls `torch.compile`, and only for the
column labelled "vs torch.compile" when the user asked for it with `--compare torch`.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from compiler.records import CompiledReport, KernelRecord
from jupyter_compile.targets import TimingInputs

WARMUP = 3
MIN_RUNS = 5
MAX_RUNS = 200
BUDGET_S = 1.0

TORCH_COMPILE_LABEL = "vs torch.compile"


@dataclass
class Measurement:
    label: str
    samples_ms: list[float] = field(default_factory=list)
    error: str | None = None

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples_ms) if self.samples_ms else float("nan")

    @property
    def spread_ms(self) -> tuple[float, float]:
        """The 25th and 75th percentiles."""
        if len(self.samples_ms) < 2:
            m = self.median_ms
            return (m, m)
        q = statistics.quantiles(self.samples_ms, n=4, method="inclusive")
        return (q[0], q[2])


@dataclass
class TimingResult:
    device: str
    measurements: list[Measurement]
    kernel_ms: dict[str, float] = field(default_factory=dict)

    def get(self, label: str) -> Measurement | None:
        return next((m for m in self.measurements if m.label == label), None)

    def speedup(self, label: str, baseline: str = "eager") -> float | None:
        m, b = self.get(label), self.get(baseline)
        if m is None or b is None or not m.samples_ms or not b.samples_ms or m.median_ms <= 0:
            return None
        return b.median_ms / m.median_ms


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def device_of(inputs: TimingInputs) -> str:
    tensors = _tensors(list(inputs.args)) + _tensors(inputs.kwargs)
    owner = getattr(inputs.eager, "__self__", None)
    if isinstance(owner, torch.nn.Module):
        tensors += list(owner.parameters())[:1]
    return "cuda" if any(t.is_cuda for t in tensors) else "cpu"


def measure(
    fn: Callable,
    args: tuple,
    kwargs: dict,
    device: str,
    label: str,
    warmup: int = WARMUP,
    min_runs: int = MIN_RUNS,
    max_runs: int = MAX_RUNS,
    budget_s: float = BUDGET_S,
) -> Measurement:
    """Milliseconds per call of `fn(*args, **kwargs)` after `warmup` calls."""
    result = Measurement(label)
    cuda = device == "cuda"
    try:
        for _ in range(warmup):
            fn(*args, **kwargs)
        if cuda:
            torch.cuda.synchronize()
        deadline = time.perf_counter() + budget_s
        while len(result.samples_ms) < max_runs:
            if cuda:
                start, end = (
                    torch.cuda.Event(enable_timing=True),
                    torch.cuda.Event(enable_timing=True),
                )
                start.record()
                fn(*args, **kwargs)
                end.record()
                end.synchronize()
                result.samples_ms.append(start.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                fn(*args, **kwargs)
                result.samples_ms.append((time.perf_counter() - t0) * 1e3)
            if len(result.samples_ms) >= min_runs and time.perf_counter() > deadline:
                break
    except Exception as exc:  # a variant that fails is reported in its row; the others still run
        result.error = f"{type(exc).__name__}: {exc}"
    return result


def kernel_times(
    fn: Callable, args: tuple, kwargs: dict, kernels: list[KernelRecord], device: str
) -> dict[str, float]:
    """Per-kernel milliseconds from one profiled call, matched to kernels by name: a Triton
    kernel appears under its own name on the GPU; a CPU kernel appears if it (C++ kernels
    do) or the generated wrapper brackets it with `torch.profiler.record_function(<name>)`."""
    names = {k.name for k in kernels if k.language != "extern"}
    if not names:
        return {}
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        fn(*args, **kwargs)
        if device == "cuda":
            torch.cuda.synchronize()
    found: dict[str, float] = {}
    for event in prof.key_averages():
        if event.key not in names or not event.count:
            continue
        total_us = getattr(event, "device_time_total", 0.0) if device == "cuda" else 0.0
        total_us = total_us or event.cpu_time_total
        found[event.key] = total_us / event.count / 1e3
    return found


def _kernels_visible_to_profiler(report: CompiledReport, device: str) -> bool:
    """GPU kernels show up in the profiler under their names; C++ kernels mark themselves
    with record_function while a profiler runs (compiler/codegen/cpp.py, CppKernel), and a
    wrapper may bracket other kernels. Without either, profiling finds nothing and only
    costs time (and, on a CPU-only torch, profiler log lines)."""
    return (
        device == "cuda"
        or any(k.language == "cpp" for k in report.kernels)
        or any("record_function" in (g.wrapper_source or "") for g in report.graphs)
    )


def torch_compiled(fn: Callable) -> Callable:
    """The comparison anchor, labelled as such wherever it is shown."""
    return torch.compile(fn)


def run_timing(
    inputs: TimingInputs, report: CompiledReport | None, compare_torch: bool = False
) -> TimingResult:
    """Time eager and compiled (and torch.compile when asked), then profile the kernels and
    store their times on the kernel records (`KernelRecord.measured_ms`)."""
    device = device_of(inputs)
    args, kwargs = inputs.args, inputs.kwargs
    rows = [
        measure(inputs.eager, args, kwargs, device, "eager"),
        measure(inputs.compiled, args, kwargs, device, "compiled"),
    ]
    if compare_torch:
        try:
            anchor = torch_compiled(inputs.uncompiled)
        except Exception as exc:
            rows.append(Measurement(TORCH_COMPILE_LABEL, error=f"{type(exc).__name__}: {exc}"))
        else:
            rows.append(measure(anchor, args, kwargs, device, TORCH_COMPILE_LABEL))
    result = TimingResult(device=device, measurements=rows)
    if report is not None and report.kernels and _kernels_visible_to_profiler(report, device):
        try:
            result.kernel_ms = kernel_times(inputs.compiled, args, kwargs, report.kernels, device)
        except Exception:  # the profiler is optional here: the call timings above stand
            result.kernel_ms = {}
        for kernel in report.kernels:
            if kernel.name in result.kernel_ms:
                kernel.measured_ms = result.kernel_ms[kernel.name]
    return result


def bandwidth_gbs(kernel: KernelRecord) -> float | None:
    """Achieved bandwidth: minimal bytes moved over measured time."""
    if not kernel.measured_ms or not kernel.bytes_accessed:
        return None
    return kernel.bytes_accessed / (kernel.measured_ms * 1e-3) / 1e9


def stage_totals(report: CompiledReport | None) -> dict[str, float]:
    """Compile seconds per stage, summed over every graph of the report, in first-seen order."""
    totals: dict[str, float] = {}
    for graph in report.graphs if report is not None else []:
        for st in graph.stage_times:
            totals[st.stage] = totals.get(st.stage, 0.0) + st.seconds
    return totals
