"""The cell rewrite (definitions rebound, line numbers kept) and the timing run's kernel
profiling, without a shell."""

from __future__ import annotations

import ast

import pytest
import torch

from compiler.records import CompiledReport, EntryRecord, FunctionRecord, KernelRecord
from jupyter_compile import timing
from jupyter_compile.cell import HOOK_NAME, RebindDefinitions
from jupyter_compile.targets import TimingInputs
from jupyter_compile.timing import bandwidth_gbs, device_of, kernel_times, measure, run_timing
from tests.jupyter.fixtures import first_graph, graph_record

CELL = """\
import functools

@functools.lru_cache
def f(x):
    return x + 1

class C:
    pass

if True:
    def nested(x):
        return x
y = f(1)
"""


def test_rewrite_rebinds_top_level_definitions_after_their_last_line() -> None:
    tree = RebindDefinitions().visit(ast.parse(CELL))
    hooks = [s for s in tree.body if isinstance(s, ast.Assign) and HOOK_NAME in ast.unparse(s)]
    assert [ast.unparse(h) for h in hooks] == [
        f"f = {HOOK_NAME}(f, 'f')",
        f"C = {HOOK_NAME}(C, 'C')",
    ]  # the nested def inside `if` is not top level
    assert [h.lineno for h in hooks] == [5, 8]  # the def's and the class's last lines
    seen = []
    namespace = {HOOK_NAME: lambda obj, name: seen.append((name, obj)) or obj}
    exec(compile(tree, "<cell>", "exec"), namespace)
    assert [name for name, _ in seen] == ["f", "C"]
    assert hasattr(seen[0][1], "cache_info")  # the decorated object, not the bare function


def _profiled_kernel(x: torch.Tensor) -> torch.Tensor:
    with torch.profiler.record_function("cpp_fused_sin_0"):
        return torch.sin(x)


def test_kernel_times_match_profiler_ranges_by_kernel_name() -> None:
    kernel = KernelRecord("cpp_fused_sin_0", "cpp", "", bytes_accessed=2 * 4 * 4096)
    extern = KernelRecord("extern_mm", "extern", "")
    x = torch.randn(4096)
    found, call_ms = kernel_times(_profiled_kernel, (x,), {}, [kernel, extern], "cpu")
    assert set(found) == {"cpp_fused_sin_0"} and found["cpp_fused_sin_0"] > 0
    assert found["cpp_fused_sin_0"] <= call_ms  # the kernel runs inside the call


@pytest.fixture
def profiler(monkeypatch: pytest.MonkeyPatch) -> None:
    """Profile even on a GPU build of torch without a GPU (it prints device errors there,
    which is why timing does not start it on such a machine by itself)."""
    monkeypatch.setattr(timing, "profiler_usable", lambda device: True)


def test_the_profiler_is_not_started_on_a_gpu_build_without_a_gpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert not timing.profiler_usable("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert timing.profiler_usable("cpu")
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert timing.profiler_usable("cpu")


def test_run_timing_stores_kernel_times_on_the_records(profiler) -> None:
    graph = graph_record(first_graph, [])
    graph.kernels = [KernelRecord("cpp_fused_sin_0", "cpp", "", bytes_accessed=32768)]
    graph.wrapper_source = (
        "with record_function('cpp_fused_sin_0'):\n    cpp_fused_sin_0(arg0, buf0)"
    )
    entry = EntryRecord("f", 1, graph)
    report = CompiledReport([FunctionRecord("f", "f", "<cell>", 1, "", entries=[entry])])
    inputs = TimingInputs(torch.sin, _profiled_kernel, torch.sin, (torch.randn(4096),), {})
    result = run_timing(inputs, report)
    assert [m.label for m in result.measurements] == ["eager", "compiled"]
    kernel = report.kernels[0]
    assert kernel.measured_ms is not None and bandwidth_gbs(kernel) > 0


@pytest.mark.gpu
def test_measure_uses_cuda_events_on_the_gpu() -> None:
    x = torch.randn(1 << 20, device="cuda")
    inputs = TimingInputs(torch.sin, torch.sin, torch.sin, (x,), {})
    assert device_of(inputs) == "cuda"
    m = measure(torch.sin, (x,), {}, "cuda", "eager", budget_s=0.05)
    assert m.error is None and len(m.samples_ms) >= 5 and 0 < m.median_ms < 100


def test_run_timing_measures_real_cpp_kernels(profiler) -> None:
    import compiler

    def fn(x):
        return (x.sin() * 2).sum(-1)

    compiled = compiler.compile(fn)
    x = torch.randn(64, 512)
    compiled(x)
    report = compiler.inspect(compiled)
    cpp = [k for k in report.kernels if k.language == "cpp"]
    assert cpp
    result = run_timing(TimingInputs(fn, compiled, fn, (x,), {}), report)
    assert all(k.measured_ms is not None and k.measured_ms > 0 for k in cpp)
    # every kernel ran inside the profiled call: together they fit in its time
    timed = {k.name: k.measured_ms for k in report.kernels if k.measured_ms is not None}
    assert 0 < sum(timed.values()) <= result.profiled_call_ms


@pytest.mark.gpu
def test_the_users_gpu_calls_are_timed_with_events_without_a_sync() -> None:
    from jupyter_compile.calls import CallLog, on_cuda

    x = torch.randn(1 << 16, device="cuda")
    log = CallLog()
    assert on_cuda((x,), {})
    for _ in range(4):
        log.call(torch.sin, (x,), {}, cuda=True, compiling=False)
    torch.cuda.synchronize()
    samples = log.samples_ms()
    assert len(samples) == 4 and all(0 < s < 1000 for s in samples)
