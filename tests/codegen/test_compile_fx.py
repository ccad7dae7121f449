"""compile_fx as a backend: output structures, recompiles for new shapes, eager fallbacks,
inspection records, debug dumps and the kernel disk cache."""

import os
import subprocess
import sys
import warnings

import pytest
import torch

from compiler.backends.inductor import compile_fx
from compiler.records import GraphRecord, compiling_graph
from tests.codegen.helpers import compile_and_run, rand


@pytest.fixture(autouse=True)
def triton_on_cpu(monkeypatch, tmp_path):
    monkeypatch.setenv("COMPILER_CPU_EMITTER", "triton")
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("COMPILER_STRICT", raising=False)


def _record(gm):
    return GraphRecord(gm, gm.code, len(gm.graph.nodes))


def test_output_structures():
    x = rand(3)
    for fn in (
        lambda x: x + 1,
        lambda x: [x * 2, x.sum()],
        lambda x: (x.sin(), None),
        lambda x: {"a": x.cos()},
    ):
        gm = torch.fx.symbolic_trace(fn)
        out = compile_fx(gm, [x])(x)
        expected = fn(x)
        assert type(out) is type(expected)
        torch.testing.assert_close(out, expected)


def test_new_shapes_and_strides_compile_again():
    gm = torch.fx.symbolic_trace(lambda x: (x * 2 + 1,))
    compiled = compile_fx(gm, [rand(4)])
    for x in (rand(4), rand(7), rand(3, 5).t(), rand(2, dtype=torch.float16)):
        torch.testing.assert_close(compiled(x)[0], x * 2 + 1)
    assert len(compiled.entries) == 4


def test_copies_into_another_layout_have_eager_strides():
    x = rand(6, 4)
    cl = rand(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)

    def fn(x, cl):
        return x.t().contiguous(), (cl * 2).contiguous(), x.clone(), cl.clone()

    out, _, _ = compile_and_run(fn, x, cl)
    for o, e in zip(out, fn(x, cl)):
        torch.testing.assert_close(o, e)
        assert o.stride() == e.stride()


def test_records_kernels_stages_and_sources():
    def fn(x, w):
        return (torch.relu(x @ w + 1).sum(1),)

    gm = torch.fx.symbolic_trace(fn)
    record = _record(gm)
    with compiling_graph(record):
        compile_fx(gm, [rand(4, 3), rand(3, 5)])
    stages = [s.stage for s in record.stage_times]
    assert stages == ["aot", "lower", "schedule", "codegen", "compile"]
    assert "aten.mm" in record.aot_graphs["forward"]
    assert "def call(args)" in record.wrapper_source
    langs = [k.language for k in record.kernels]
    assert langs == ["extern", "triton"]
    mm, red = record.kernels
    assert mm.config["op"] == "aten.mm.default" and "torch.mm(" in mm.source
    assert red.name.startswith("triton_red_fused_") and "@triton.jit" in red.source
    assert red.grid and red.config["XBLOCK"] and red.bytes_accessed > 0
    assert set(red.fused_nodes) >= {"add", "relu", "sum_1"}
    assert "del buf" in record.wrapper_source or "return" in record.wrapper_source


def test_source_lines_in_kernel_header():
    def fn(x):
        return (torch.sin(x) * 2,)

    gm = torch.fx.symbolic_trace(fn)
    from compiler.records import SourceLine

    for node in gm.graph.nodes:
        if node.op == "call_function":
            node.meta["source_line"] = SourceLine("cell.py", 7, "return (torch.sin(x) * 2,)", "fn")
    record = _record(gm)
    with compiling_graph(record):
        compile_fx(gm, [rand(5)])
    kernel = record.kernels[0]
    assert "#   cell.py:7  return (torch.sin(x) * 2,)" in kernel.source
    assert kernel.source_lines[0].lineno == 7


def test_unlowered_op_runs_as_extern_with_note():
    gm = torch.fx.symbolic_trace(lambda x: (torch.cumsum(x, 0) + 1,))
    x = rand(6)
    out, record, _ = compile_and_run(gm, x)
    torch.testing.assert_close(out[0], torch.cumsum(x, 0) + 1)
    assert any("cumsum" in n and "extern call" in n for n in record.notes)
    assert record.fallback is None


@pytest.mark.parametrize("emitter", ["triton", "cpp"])
def test_extern_output_that_eager_leaves_undefined(emitter, monkeypatch):
    # _native_multi_head_attention without need_weights: eager returns None for the weights
    # where the meta function returns an empty tensor; outputs are matched by position.
    monkeypatch.setenv("COMPILER_CPU_EMITTER", emitter)
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    w, b, ow, ob = (
        p.detach() for p in (mha.in_proj_weight, mha.in_proj_bias, *mha.out_proj.parameters())
    )

    def fn(x):
        out, _ = torch.ops.aten._native_multi_head_attention(
            x, x, x, 8, 2, w, b, ow, ob, None, False
        )
        return (out.relu(),)

    gm = torch.fx.symbolic_trace(fn)
    x = rand(2, 3, 8)
    with torch.no_grad():
        out, record, _ = compile_and_run(gm, x)
        torch.testing.assert_close(out[0], fn(x)[0])
    assert record.fallback is None
    assert any("_native_multi_head_attention" in k.source for k in record.kernels)


def test_autograd_graphs_compile_a_backward():
    gm = torch.fx.symbolic_trace(lambda x: (x.sin() * 2,))
    x = rand(3).requires_grad_()
    record = _record(gm)
    with compiling_graph(record):
        fn = compile_fx(gm, [x])
    out = fn(x)[0]
    out.sum().backward()
    torch.testing.assert_close(x.grad, 2 * x.detach().cos())
    assert {k.graph for k in record.kernels} == {"forward", "backward"}
    assert record.partition is not None and record.fallback is None


def test_internal_failure_falls_back_with_warning(monkeypatch):
    import compiler.backends.inductor as cfx

    def broken(graph, **kwargs):
        raise RuntimeError("scheduler exploded")

    monkeypatch.setattr(cfx, "fuse", broken)
    gm = torch.fx.symbolic_trace(lambda x: (x + 1,))
    record = _record(gm)
    with compiling_graph(record), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn = compile_fx(gm, [rand(3)])
    x = rand(3)
    torch.testing.assert_close(fn(x)[0], x + 1)
    assert "scheduler exploded" in record.fallback
    assert any("runs eagerly" in str(w.message) for w in caught)
    monkeypatch.setenv("COMPILER_STRICT", "1")
    with pytest.raises(RuntimeError, match="scheduler exploded"):
        compile_fx(gm, [rand(3)])


def test_debug_dir_dumps(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPILER_DEBUG_DIR", str(tmp_path / "dbg"))
    gm = torch.fx.symbolic_trace(lambda x: (x.softmax(-1),))
    compile_fx(gm, [rand(2, 3)])
    d = tmp_path / "dbg" / "graph_0"
    names = sorted(p.name for p in d.iterdir())
    assert names == [
        "aten_graph.py",
        "fx_graph.py",
        "ir_after_fusion.txt",
        "ir_before_fusion.txt",
        "output_code.py",
    ]
    assert "reducing" in (d / "ir_after_fusion.txt").read_text()
    assert "@triton.jit" in (d / "output_code.py").read_text()


SECOND_PROCESS = """
import torch
from compiler.backends.inductor import compile_fx
from compiler.records import GraphRecord, compiling_graph
gm = torch.fx.symbolic_trace(lambda x, y: (torch.sin(x) + torch.cos(y),))
x = torch.ones(8)
compile_fx(gm, [x, x])(x, x)
"""


def test_second_process_finds_cached_kernels(tmp_path):
    env = dict(
        os.environ,
        COMPILER_CACHE_DIR=str(tmp_path / "cache"),
        COMPILER_CPU_EMITTER="triton",
        TRITON_INTERPRET="1",
    )
    env["PYTHONPATH"] = os.getcwd()
    subprocess.run([sys.executable, "-c", SECOND_PROCESS], env=env, check=True, timeout=120)
    files = sorted((tmp_path / "cache" / "kernels").glob("*.py"))
    assert len(files) == 1
    stamp = files[0].stat().st_mtime_ns
    subprocess.run([sys.executable, "-c", SECOND_PROCESS], env=env, check=True, timeout=120)
    assert sorted((tmp_path / "cache" / "kernels").glob("*.py")) == files
    assert files[0].stat().st_mtime_ns == stamp  # found, not rewritten


def test_modes_are_accepted_on_cpu():
    gm = torch.fx.symbolic_trace(lambda x: (x * 3,))
    x = rand(4)
    for mode in ("reduce-overhead", "max-autotune", "default", None):
        torch.testing.assert_close(compile_fx(gm, [x], mode=mode)(x)[0], x * 3)


def test_in_place_update_of_an_input():
    def fn(x, y):
        x.add_(1)
        y.mul_(2)
        return (x * y,)

    gm = torch.fx.symbolic_trace(fn)
    x, y = rand(5), rand(5)
    xe, ye = x.clone(), y.clone()
    expected = fn(xe, ye)
    record = GraphRecord(gm, gm.code, len(gm.graph.nodes))
    with compiling_graph(record):
        compiled = compile_fx(gm, [x.clone(), y.clone()])
    out = compiled(x, y)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close((x, y), (xe, ye))
    assert record.fallback is None
    assert any("mutated" in n for n in record.notes)
