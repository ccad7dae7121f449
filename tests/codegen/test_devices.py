"""No compiled kernel is handed a tensor of another device (compiler/lowering/core.py,
compiler/scheduler/fusion.py): a graph's kernels run on its device, and whatever reads or
makes another device's tensors (`.cpu()`, `.cuda()`, a constant made on the CPU and moved to
the inputs' device, the ops between transfers) runs as extern aten calls, with explicit
transfers between kernels and no fusion across devices. Once, `x + 1, .cuda(), + 3,
.cpu(), + 5, .cuda(), + 7` gave a CUDA kernel a CPU tensor (the process died) and
`torch.tensor([...]).to(x.device)` with CUDA inputs failed to lower.

Without a GPU: graphs of fake CUDA tensors (FakeTensorMode makes them without one) are
traced, lowered and scheduled, and every kernel's aten nodes, read and computed, must be
on the graph's device according to the aten graph's own fake values (which say where eager
puts each tensor, unlike the IR under test). And compiled programs that move tensors from
the CPU to the meta device run for real: before the fix their C++ kernels were handed meta
tensors and the process died (rc 139), as on a GPU. The GPU tests run the programs of the
issue compiled against eager on the device."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import compiler
from compiler.aot.trace import trace_forward
from compiler.ir.nodes import Layout
from compiler.lowering.core import LoweringError, graph_device
from compiler.lowering.graph import lower
from compiler.scheduler.fusion import MixedDevices, check_devices, schedule
from compiler.scheduler.kernel import ExternCall, KernelGroup, Step


def _transfers(x):
    return (((x + 1).cuda() + 3).cpu() + 5).cuda() + 7


def _constant_moved_to_the_inputs_device(x):
    return x + torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]).to(x.device)


def _reduction_on_the_cpu(x):
    return (x.cpu().sum() + 1).cuda() * x


def _cpu_input(x, y):
    return x * 2 + y.cuda(), (y + 1).sum()


def _cpu_scalar_input(x, s):
    return x * s + 1


def _written_cpu_input(x, y):
    y.copy_((x + 1).cpu())
    return x.sin()


def _fake(mode: FakeTensorMode, *specs: tuple) -> list[torch.Tensor]:
    with mode:
        return [torch.empty(shape, device=device) for shape, device in specs]


CASES = {
    "transfers": (_transfers, [((8,), "cuda")]),
    "constant_moved": (_constant_moved_to_the_inputs_device, [((8,), "cuda")]),
    "reduction_on_the_cpu": (_reduction_on_the_cpu, [((8,), "cuda")]),
    "cpu_input": (_cpu_input, [((8,), "cuda"), ((8,), "cpu")]),
    "cpu_scalar_input": (_cpu_scalar_input, [((8,), "cuda"), ((), "cpu")]),
    "written_cpu_input": (_written_cpu_input, [((8,), "cuda"), ((8,), "cpu")]),
}


def _scheduled(fn, specs):
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    inputs = _fake(mode, *specs)
    gm = torch.fx.symbolic_trace(fn)
    with mode:
        aot = trace_forward(gm, inputs)
    device = graph_device(inputs)
    graph, _ = lower(aot, inputs, device=device)
    return aot, graph, schedule(graph, device=device), device


@pytest.mark.parametrize("case", CASES)
def test_every_kernel_is_on_the_graphs_device(case):
    aot, graph, sched, device = _scheduled(*CASES[case])
    assert device.type == "cuda"
    vals = {n.name: n.meta.get("val") for n in aot.gm.graph.nodes}
    users = {n.name: n for n in aot.gm.graph.nodes}
    ir = {n.name: n for n in graph.nodes}
    kernels = [k for k in sched.launches if isinstance(k, KernelGroup)]
    assert kernels
    for k in kernels:
        for name in k.ir_nodes:
            node = users[ir[name].aten]
            read = [vals[a.name] for a in node.all_input_nodes]
            for t in [vals[node.name], *read]:
                if isinstance(t, torch.Tensor):
                    assert t.device == device, f"{k.name} computes {node.name}: {t.device}"
        for buf in (*k.reads, *k.writes):
            assert sched.buffers[buf].device == device


def test_transfers_are_extern_calls_between_kernels():
    _, graph, sched, _ = _scheduled(*CASES["transfers"])
    kinds = [
        "kernel" if isinstance(k, KernelGroup) else k.node.op.split(".")[1] for k in sched.launches
    ]
    assert kinds == ["kernel", "device_put", "add", "device_put", "kernel"]
    # the host work compile_fx names in a note, and for which it skips CUDA graphs
    assert graph.off_device == ("device_put", "add_2", "device_put_1")


def test_a_cpu_scalar_read_by_the_device_is_an_extern_call():
    # `x * s` with s a 0-d CPU tensor: eager reads s on the host; once the graph ran eagerly
    # ("a CPU scalar read by a cuda kernel"), now only that multiplication does
    _, graph, sched, _ = _scheduled(*CASES["cpu_scalar_input"])
    assert graph.off_device == ("mul",)
    assert [type(k).__name__ for k in sched.launches] == ["ExternCall", "KernelGroup"]


def test_the_constant_is_moved_by_an_extern_call():
    _, graph, sched, device = _scheduled(*CASES["constant_moved"])
    assert [c.layout.device.type for c in graph.constants] == ["cpu"]
    first, kernel = sched.launches
    assert isinstance(first, ExternCall) and first.node.op == "prims.device_put.default"
    assert sched.buffers[first.writes[0]].device == device


def test_a_copy_into_a_cpu_input_stays_a_copy():
    # the scheduler folds a copy into an input into the kernel computing the value only
    # when both are on one device
    _, _, sched, _ = _scheduled(*CASES["written_cpu_input"])
    ops = [k.node.op for k in sched.launches if isinstance(k, ExternCall)]
    assert "aten.copy_.default" in ops


def test_graph_device():
    cpu, cuda = torch.device("cpu"), torch.device("cuda:0")
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    x, y, s = _fake(mode, ((4,), "cuda"), ((4,), "cpu"), ((), "cpu"))
    assert graph_device([x, y]) == cuda  # the accelerator's kernels, CPU ops as externs
    assert graph_device([s, x]) == cuda and graph_device([s]) == cpu and graph_device([]) == cpu
    assert graph_device([y, s]) == cpu
    with mode:
        z = torch.empty(4, device="cuda:1")
    with pytest.raises(LoweringError, match="several devices"):
        graph_device([x, z])


def test_check_devices_refuses_a_kernel_of_two_devices():
    lay = {
        "a": Layout((4,), (1,), torch.float32, torch.device("cpu")),
        "b": Layout((4,), (1,), torch.float32, torch.device("cuda:0")),
    }
    kernel = KernelGroup("k", "pointwise", (), (), (Step("b", "outer", None, torch.float32),), ("a",), ("b",), (), ("b",))  # fmt: skip
    with pytest.raises(MixedDevices, match="a on cpu, b on cuda:0"):
        check_devices([kernel], lay)
    with pytest.raises(MixedDevices, match="for cuda:0"):
        check_devices([kernel], {"a": lay["a"], "b": lay["a"]}, torch.device("cuda:0"))
    check_devices([kernel], {"a": lay["b"], "b": lay["b"]}, torch.device("cuda:0"))


# ---- on the CPU, with the meta device as the other one -------------------------------------

# Tensors moved to the meta device have no memory: a C++ kernel handed one reads through a
# null pointer, as a CUDA kernel handed a CPU tensor faults. These programs crashed the
# process before the fix; they run in a child process, so a regression fails the test
# instead of ending the run. Meta tensors are compared by size, dtype and device.
_META_PROGRAMS = """
import sys, torch, compiler

def moved_and_computed_on(x):
    m = (x + 1).to("meta") + 3
    return m, x * 2, m.sum(), (m * x.to("meta")).exp()

def constant_moved(x):
    return x.sin() + 1, torch.tensor([1.0, 2.0]).to("meta") * 2

def reduction_then_moved(x):
    s = (x * 2).sum(0)
    return s.to("meta").neg(), s + 1

def same(a, b):
    if a.device.type == "meta":
        return (a.device, a.shape, a.dtype) == (b.device, b.shape, b.dtype)
    return a.device == b.device and torch.allclose(a, b, rtol=1.3e-6, atol=1e-5)

for fn in (moved_and_computed_on, constant_moved, reduction_then_moved):
    compiled = compiler.compile(fn)
    for _ in range(2):
        x = torch.randn(64, 8)
        got, expected = compiled(x), fn(x)
        assert all(same(a, b) for a, b in zip(got, expected)), fn.__name__
    print(fn.__name__, "ok")
"""


def test_kernels_never_get_another_devices_tensors_on_the_cpu(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "COMPILER_STRICT": "1"}
    env["COMPILER_CACHE_DIR"] = str(tmp_path / "cache")
    done = subprocess.run(
        [sys.executable, "-c", _META_PROGRAMS], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr[-3000:]}"
    assert done.stdout.split() == [
        "moved_and_computed_on", "ok", "constant_moved", "ok", "reduction_then_moved", "ok",
    ]  # fmt: skip


# ---- on the device: the programs of the issue, compiled, against eager ---------------------


def _run_both(fn, *inputs, mode=None):
    expected = fn(*[t.clone() for t in inputs])
    args = [t.clone() for t in inputs]
    compiled = compiler.compile(fn, mode=mode)
    for _ in range(2):
        args = [t.clone() for t in inputs]
        got = compiled(*args)
        torch.testing.assert_close(got, expected)
    return args


@pytest.mark.gpu
@pytest.mark.parametrize("start", ["cpu", "cuda"])
@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_transfers_on_the_gpu(start, mode, monkeypatch):
    monkeypatch.setenv("COMPILER_STRICT", "1")
    _run_both(_transfers, torch.randn(1000, device=start), mode=mode)
    torch.cuda.synchronize()


@pytest.mark.gpu
@pytest.mark.parametrize(
    "case", ["constant_moved", "reduction_on_the_cpu", "cpu_input", "cpu_scalar_input"]
)
def test_mixed_device_programs_on_the_gpu(case, monkeypatch):
    monkeypatch.setenv("COMPILER_STRICT", "1")
    fn, specs = CASES[case]
    inputs = [torch.randn(shape, device=device) for shape, device in specs]
    _run_both(fn, *inputs)
    torch.cuda.synchronize()


@pytest.mark.gpu
def test_a_cpu_input_written_from_the_gpu(monkeypatch):
    monkeypatch.setenv("COMPILER_STRICT", "1")
    x, y = torch.randn(8, device="cuda"), torch.randn(8)
    ye, yc = y.clone(), y.clone()
    expected = _written_cpu_input(x, ye)
    got = compiler.compile(_written_cpu_input)(x, yc)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(yc, ye)
