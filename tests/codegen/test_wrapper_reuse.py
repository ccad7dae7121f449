"""compiler/codegen/wrapper.py: a new buffer takes the memory of a dead one of the same size,
strides and dtype, never one that an extern call's result may still view."""

from __future__ import annotations

import pytest
import torch

from compiler.backends.inductor import compile_fx
from compiler.codegen.wrapper import plan_reuse
from compiler.ir.nodes import ExternKernel, InputBuffer, Layout, TensorArg
from compiler.records import GraphRecord, compiling_graph
from compiler.scheduler.kernel import ExternCall, KernelGroup, Schedule

CPU = torch.device("cpu")
F32 = Layout((4, 4), (4, 1), torch.float32, CPU)


def _kernel(name: str, reads: tuple[str, ...], writes: tuple[str, ...]) -> KernelGroup:
    return KernelGroup(name, "pointwise", (), (), (), reads, writes, (), ())


def _extern(op: str, arg: str, out: str) -> ExternCall:
    return ExternCall(ExternKernel(out, op, (TensorArg(arg, F32),), (), ((out, F32),)))


def _schedule(launches: list, frees: list[tuple[str, ...]], layouts: dict[str, Layout]):
    inputs = (InputBuffer("arg0", 0, F32),)
    return Schedule(inputs, (), tuple(launches), {"arg0": F32, **layouts}, tuple(frees))


def test_a_dead_buffer_of_the_same_layout_is_reused():
    sched = _schedule(
        [
            _kernel("k0", ("arg0",), ("a",)),
            _kernel("k1", ("a",), ("b",)),
            _kernel("k2", ("b",), ("c",)),
        ],
        [(), ("a",), ("b",)],
        {"a": F32, "b": F32, "c": F32},
    )
    assert plan_reuse(sched) == {"c": "a"}  # b is still read by k2, which writes c


def test_another_dtype_or_an_input_is_not_reused():
    f64 = Layout((4, 4), (4, 1), torch.float64, CPU)
    sched = _schedule(
        [
            _kernel("k0", ("arg0",), ("a",)),
            _kernel("k1", ("a",), ("b",)),
            _kernel("k2", ("b",), ("c",)),
        ],
        [("arg0",), ("a",), ("b",)],
        {"a": F32, "b": F32, "c": f64},
    )
    assert plan_reuse(sched) == {}


@pytest.mark.parametrize("op", ["aten.view.default", "aten._unsafe_view.default"])
def test_a_buffer_an_extern_may_view_is_not_reused(op):
    # `v` may be `a`'s memory: writing `c` into `a` would change `v`, which is still live
    sched = _schedule(
        [
            _kernel("k0", ("arg0",), ("a",)),
            _extern(op, "a", "v"),
            _kernel("k1", ("v",), ("b",)),
            _kernel("k2", ("b", "v"), ("c",)),
        ],
        [(), ("a",), (), ("b", "v")],
        {"a": F32, "b": F32, "c": F32, "v": F32},
    )
    assert plan_reuse(sched) == {}


def test_an_extern_that_copies_leaves_its_argument_reusable():
    sched = _schedule(
        [
            _kernel("k0", ("arg0",), ("a",)),
            _extern("aten.mm.default", "a", "m"),
            _kernel("k1", ("m",), ("b",)),
        ],
        [(), ("a",), ("m",)],
        {"a": F32, "b": F32, "m": F32},
    )
    assert plan_reuse(sched) == {"b": "a"}


def _chain(x, w):
    for _ in range(4):
        x = torch.relu(torch.nn.functional.conv2d(x, w, padding=1)) * 0.5
    return x


def test_compiled_chain_reuses_and_matches_eager(monkeypatch, tmp_path):
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("COMPILER_STRICT", "1")
    torch.manual_seed(0)
    x, w = torch.randn(1, 4, 8, 8), torch.randn(4, 4, 3, 3)
    gm = torch.fx.symbolic_trace(_chain)
    record = GraphRecord(gm, gm.code, len(gm.graph.nodes))
    with compiling_graph(record):
        compiled = compile_fx(gm, [x, w])
    for _ in range(2):  # a second call runs on the buffers' reused memory just the same
        x, w = torch.randn(1, 4, 8, 8), torch.randn(4, 4, 3, 3)
        # convolutions summed in another order: float32 rounding, not reuse, differs
        torch.testing.assert_close(compiled(x, w), _chain(x, w), rtol=1e-4, atol=1e-4)
    assert "# reuses buf" in record.wrapper_source
