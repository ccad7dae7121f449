"""Timing: the calls the user made, and eager vs compiled re-runs where they change nothing.

Timing must never change what the user can see. The calls the user made through the
compiled wrapper are always shown (jupyter_compile/calls.py logs them). Re-running the call
(eager, compiled, torch.compile, and one profiled call per kernel table) happens only when
the compiler's records say that the call changes nothing but tensors passed as arguments
(`EntryRecord.side_effects`), and then on clones of those arguments, with the random number
generators' state restored afterwards; the eager twin never sees the user's tensors. When the
records show any other change (a global, a module's buffer, an optimizer, a graph break that
runs Python) the view says so instead of re-running.

Each re-run variant is warmed up first (the first compiled call compiles; caches and
allocators settle over the next few), then run repeatedly until a small time budget is spent.
On a GPU every run is bracketed by CUDA events and synchronised; on a CPU `perf_counter` is
enough. The result reports median and interquartile spread, not the mean, so one slow outlier
(a garbage collection, a page fault) does not move it.

This is the only module of jupyter_compile that calls `torch.compile`, and only for the
column labelled "vs torch.compile" when the user asked for it with `--compare torch`.
"""

from __future__ import annotations

import inspect
import re
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

PROFILED_CALLS = 5

TORCH_COMPILE_LABEL = "vs torch.compile"
USER_CALLS_LABEL = "compiled, your calls"


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
    blocked: str | None = None  # why nothing was re-run (what the call would change)
    profiled_call_ms: float | None = None  # one compiled call while the profiler ran
    kernel_note: str = ""  # why there are no kernel times, when there are none

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
    fn: Callable,
    args: tuple,
    kwargs: dict,
    kernels: list[KernelRecord],
    device: str,
    calls: int = PROFILED_CALLS,
) -> tuple[dict[str, float], float]:
    """Per-kernel milliseconds per call, over `calls` profiled calls, matched to kernels by
    name (a Triton kernel appears under its own name on the GPU; a CPU kernel appears if it, as
    C++ kernels do, or the generated wrapper brackets it with `record_function(<name>)`); and
    the milliseconds of one call while the profiler ran, which the kernels' times add up
    within (the profiler slows the call itself, so they are not compared with the median)."""
    names = {k.name for k in kernels if k.language != "extern"}
    if not names:
        return {}, 0.0
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        start = time.perf_counter()
        for _ in range(calls):
            fn(*args, **kwargs)
        if device == "cuda":
            torch.cuda.synchronize()
        call_ms = (time.perf_counter() - start) * 1e3 / calls
    found: dict[str, float] = {}
    for event in prof.key_averages():
        if event.key not in names or not event.count:
            continue
        total_us = getattr(event, "device_time_total", 0.0) if device == "cuda" else 0.0
        total_us = total_us or event.cpu_time_total
        found[event.key] = total_us / calls / 1e3
    return found, call_ms


def profiler_usable(device: str) -> bool:
    """torch's profiler starts its GPU tracing library whenever torch was built for a GPU; on
    a machine without one that prints device errors into the cell (`gpuGetDeviceCount failed
    with code 35`), so it is started only where a GPU is present or torch has no GPU build."""
    built_for_gpu = bool(torch.version.cuda or getattr(torch.version, "hip", None))
    return device == "cuda" or not built_for_gpu or torch.cuda.is_available()


def _kernels_visible_to_profiler(report: CompiledReport, device: str) -> bool:
    """GPU kernels show up in the profiler under their names; C++ kernels mark themselves
    with record_function while a profiler runs (compiler/codegen/cpp_kernels.py, CppKernel), and a
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


_LOCAL_ARGUMENT = re.compile(r"^L\['(\w+)'\](?:\[(?:\d+|'[^']*')\])*$")


def _clonable(value: Any) -> bool:
    """A value `clone_arguments` copies whole: tensors, and lists, tuples and dicts of them
    (and of constants)."""
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (list, tuple)):
        return all(_clonable(v) for v in value)
    if isinstance(value, dict):
        return all(_clonable(v) for v in value.values())
    return isinstance(value, (int, float, bool, str, type(None)))


def _cloned_names(inputs: TimingInputs) -> set[str]:
    """The parameter names of the call whose values a re-run receives as clones."""
    try:
        bound = inspect.signature(inputs.eager).bind(*inputs.args, **inputs.kwargs)
    except (TypeError, ValueError):
        return set()
    return {name for name, value in bound.arguments.items() if _clonable(value)}


def rerun_blocker(inputs: TimingInputs, report: CompiledReport | None) -> str | None:
    """What re-running the call would change that the user could see; None when it changes
    nothing but the argument tensors (which a re-run receives as clones)."""
    if report is None or not report.entries:
        return "it has not been compiled yet"
    cloned = _cloned_names(inputs)
    for i, fn in enumerate(report.functions):
        if fn.warnings:
            return f"{fn.qualname} runs eagerly, so what it changes is not known"
        for entry in fn.entries:
            for effect in entry.side_effects:
                match = _LOCAL_ARGUMENT.match(effect.target)
                # Writes to the call's own argument tensors happen on the clones; a callee's
                # L[...] names its own frame, whose values a clone of the call may not reach.
                on_clone = i == 0 and (not effect.target or (match and match[1] in cloned))
                if effect.kind != "tensor_write" or not on_clone:
                    return f"{fn.qualname}: {effect.detail}"
    return None


def clone_arguments(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Copies of the arguments' tensors (inside lists, tuples and dicts too) that keep their
    type, requires_grad and aliasing (a tensor passed twice is one clone passed twice);
    anything else is passed as it is."""
    memo: dict[int, Any] = {}

    def clone(value: Any) -> Any:
        if id(value) in memo:
            return memo[id(value)]
        if isinstance(value, torch.Tensor):
            copy = value.detach().clone()
            if isinstance(value, torch.nn.Parameter):
                copy = torch.nn.Parameter(copy, requires_grad=value.requires_grad)
            elif value.requires_grad:
                copy.requires_grad_(True)
        elif isinstance(value, (list, tuple)) and type(value) in (list, tuple):
            copy = type(value)(clone(v) for v in value)
        elif type(value) is dict:
            copy = {k: clone(v) for k, v in value.items()}
        else:
            return value
        memo[id(value)] = copy
        return copy

    return tuple(clone(a) for a in args), {k: clone(v) for k, v in kwargs.items()}


def user_calls(inputs: TimingInputs) -> Measurement | None:
    samples = inputs.calls.samples_ms() if inputs.calls is not None else []
    return Measurement(USER_CALLS_LABEL, samples) if samples else None


def run_timing(
    inputs: TimingInputs, report: CompiledReport | None, compare_torch: bool = False
) -> TimingResult:
    """The calls the user made; and, where re-running changes nothing the user can see,
    eager and compiled (and torch.compile when asked) re-run on clones of the arguments, and
    the kernels' times, stored on the kernel records (`KernelRecord.measured_ms`)."""
    device = device_of(inputs)
    own = user_calls(inputs)
    rows = [own] if own is not None else []
    blocked = rerun_blocker(inputs, report)
    result = TimingResult(device=device, measurements=rows, blocked=blocked)
    if blocked is not None:
        return result
    devices = [torch.cuda.current_device()] if device == "cuda" else []
    with torch.random.fork_rng(devices=devices):  # re-runs leave the random streams as they were
        args, kwargs = clone_arguments(inputs.args, inputs.kwargs)
        rows.insert(0, measure(inputs.eager, args, kwargs, device, "eager"))
        args, kwargs = clone_arguments(inputs.args, inputs.kwargs)
        rows.insert(1, measure(inputs.compiled, args, kwargs, device, "compiled"))
        if compare_torch:
            try:
                anchor = torch_compiled(inputs.uncompiled)
            except Exception as exc:
                rows.append(Measurement(TORCH_COMPILE_LABEL, error=f"{type(exc).__name__}: {exc}"))
            else:
                args, kwargs = clone_arguments(inputs.args, inputs.kwargs)
                rows.append(measure(anchor, args, kwargs, device, TORCH_COMPILE_LABEL))
        if report is not None and report.kernels:
            _time_kernels(result, inputs, report, device)
    return result


def _time_kernels(
    result: TimingResult, inputs: TimingInputs, report: CompiledReport, device: str
) -> None:
    if not _kernels_visible_to_profiler(report, device):
        return
    if not profiler_usable(device):
        result.kernel_note = (
            "per-kernel times need torch's profiler, which this GPU build of torch cannot "
            "start without a GPU"
        )
        return
    args, kwargs = clone_arguments(inputs.args, inputs.kwargs)
    try:
        result.kernel_ms, result.profiled_call_ms = kernel_times(
            inputs.compiled, args, kwargs, report.kernels, device
        )
    except Exception as exc:  # the profiler is optional here: the call timings above stand
        result.kernel_ms, result.kernel_note = {}, f"the profiler failed: {type(exc).__name__}"
    for kernel in report.kernels:
        if kernel.name in result.kernel_ms:
            kernel.measured_ms = result.kernel_ms[kernel.name]


def bandwidth_gbs(kernel: KernelRecord) -> float | None:
    """Achieved bandwidth: minimal bytes moved over measured time."""
    if not kernel.measured_ms or not kernel.bytes_accessed:
        return None
    return kernel.bytes_accessed / (kernel.measured_ms * 1e-3) / 1e9
