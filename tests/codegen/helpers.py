"""The differential helper of the codegen tests: compile with compile_fx, run, compare with
eager and with the loop-IR reference interpreter. benchmarks/codegen_gpu.py reuses it on GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from torch.utils._pytree import tree_flatten

from compiler.aot.trace import trace_forward
from compiler.backends.inductor import compile_fx
from compiler.ir.interpret import run_graph
from compiler.lowering.graph import lower
from compiler.records import GraphRecord, compiling_graph


def to_graph(fn: Callable | torch.nn.Module) -> torch.fx.GraphModule:
    if isinstance(fn, torch.fx.GraphModule):
        return fn
    return torch.fx.symbolic_trace(fn)


def compile_graph(
    fn: Callable | torch.nn.Module, *inputs: Any, mode: str | None = None
) -> tuple[Callable, GraphRecord, torch.fx.GraphModule]:
    """compile_fx(fn) for `inputs`: the compiled callable, its record and the FX graph."""
    gm = to_graph(fn)
    record = GraphRecord(gm, gm.code, len(gm.graph.nodes))
    with compiling_graph(record):
        compiled = compile_fx(gm, list(inputs), mode=mode)
    return compiled, record, gm


def compile_and_run(
    fn: Callable | torch.nn.Module, *inputs: Any, mode: str | None = None
) -> tuple[Any, GraphRecord, torch.fx.GraphModule]:
    compiled, record, gm = compile_graph(fn, *inputs, mode=mode)
    return compiled(*inputs), record, gm


def _close(actual: Any, expected: Any, atol: float | None, rtol: float | None) -> None:
    a_flat, _ = tree_flatten(actual)
    e_flat, _ = tree_flatten(expected)
    assert len(a_flat) == len(e_flat)
    for a, e in zip(a_flat, e_flat):
        if isinstance(e, torch.Tensor):
            assert isinstance(a, torch.Tensor)
            assert a.dtype == e.dtype and a.shape == e.shape
            torch.testing.assert_close(a, e, atol=atol, rtol=rtol, equal_nan=True)
        else:
            assert a == e


def check(
    fn: Callable | torch.nn.Module,
    *inputs: Any,
    atol: float | None = None,
    rtol: float | None = None,
    interpreter: bool = True,
    mode: str | None = None,
) -> GraphRecord:
    """compile_fx(fn) == eager(fn) (== the IR interpreter) on `inputs`; returns the record."""
    gm = to_graph(fn)
    with torch.no_grad():
        expected = gm(*inputs)
        actual, record, _ = compile_and_run(gm, *inputs, mode=mode)
    assert record.fallback is None, record.fallback
    _close(actual, expected, atol, rtol)
    if interpreter and all(t.device.type == "cpu" for t in inputs if isinstance(t, torch.Tensor)):
        with torch.no_grad():
            aot = trace_forward(gm, list(inputs))
            # Welford variances, which the interpreter evaluates exactly (the C++ emitter
            # compiles the two-pass form, whose lowering the C++ kernels' results check)
            graph, _ = lower(aot, list(inputs), welford=True)
            flat = run_graph(graph, list(inputs))
        out_node = next(n for n in aot.gm.graph.nodes if n.op == "output")
        _, spec = tree_flatten(out_node.args[0])
        _close(spec.unflatten(flat), expected, atol, rtol)
    return record


# benchmarks/codegen_gpu.py runs these tests with CODEGEN_TEST_DEVICE=cuda: real Triton.
DEVICE = os.environ.get("CODEGEN_TEST_DEVICE", "cpu")


def triton_kernels(record: GraphRecord) -> list:
    return [k for k in record.kernels if k.language == "triton"]


def rand(*shape: int, dtype: torch.dtype = torch.float32, device: str = DEVICE) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.rand(shape, device=device) > 0.5
    if not dtype.is_floating_point:
        return torch.randint(-5, 6, shape, dtype=dtype, device=device)
    return torch.randn(shape, device=device).to(dtype)


def inputs_like(shapes: Sequence[tuple[int, ...]], **kw: Any) -> list[torch.Tensor]:
    return [rand(*s, **kw) for s in shapes]


def assert_compile_for_sm90(kernels: Path) -> None:
    """Every Triton kernel file in `kernels` compiles for sm_90 (tests/codegen/compile_sm90.py,
    in a process of its own without Triton's interpreter): no GPU needed."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.getcwd()
    script = os.path.join(os.path.dirname(__file__), "compile_sm90.py")
    result = subprocess.run(
        [sys.executable, script, str(kernels)], env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout + result.stderr
