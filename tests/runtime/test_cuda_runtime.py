"""The CUDA runtime (skipped without a GPU): launching compiled Triton kernels through their
own launcher, and mode="reduce-overhead" reading parameters and buffers in place.

Differential as everywhere: each compiled result against eager on fresh inputs."""

from __future__ import annotations

import pytest
import torch

import compiler
from compiler.backends.inductor import compile_fx
from compiler.runtime.cudagraphs import CudaGraphRunner

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def fresh(monkeypatch, tmp_path):
    from compiler.runtime import triton_launch

    # tests/codegen's conftest turns the interpreter on for its CPU tests: run this file in
    # a process of its own on a GPU machine, or these tests would not launch real kernels
    assert not triton_launch.INTERPRET, "TRITON_INTERPRET is set: run tests/runtime alone"
    monkeypatch.setenv("COMPILER_STRICT", "1")
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(tmp_path / "cache"))
    # Compiled graphs run convolutions channels-last, eager NCHW: under TF32 cuDNN's two
    # algorithms round differently (1e-3), so the comparisons are in full fp32.
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    compiler.reset()
    torch.manual_seed(0)
    yield
    compiler.reset()


def test_misaligned_views_get_their_own_compiled_kernel():
    def f(x, y):
        return torch.sin(x) + torch.cos(y)

    gm = torch.fx.symbolic_trace(f)
    base = torch.randn(4097, device="cuda")
    x, y = base[:4096], torch.randn(4096, device="cuda")
    compiled = compile_fx(gm, [x, y])
    for _ in range(2):
        torch.testing.assert_close(compiled(x, y), f(x, y))
        torch.cuda.synchronize()
    # The same shape and strides one float further on: 4-byte aligned, not 16. The guards
    # do not tell the two apart; the launcher must not reuse the aligned kernel for it.
    shifted = base[1:]
    for _ in range(2):
        base.normal_()
        torch.testing.assert_close(compiled(shifted, y), f(shifted, y))


def test_fast_launch_matches_eager_over_many_calls():
    def f(x):
        return (x * 2).relu().sum(1), torch.softmax(x, -1)

    gm = torch.fx.symbolic_trace(f)
    x = torch.randn(64, 300, device="cuda")
    compiled = compile_fx(gm, [x])
    for _ in range(5):
        x = torch.randn(64, 300, device="cuda")
        torch.testing.assert_close(compiled(x), f(x))


def test_launches_go_through_our_launcher_and_honour_launch_hooks(monkeypatch):
    """Triton 3.6 with the C++ extension: kernels are launched by its CudaLaunch and Triton's
    runtime builds no launcher; once a launch hook is added (what a profiler does), launches
    go through Triton's runtime, which calls it, and come back when it is removed."""
    from triton import knobs

    from compiler.runtime.triton_launch import TritonKernel, direct_launch_off

    built = []
    original = TritonKernel._launcher
    monkeypatch.setattr(
        TritonKernel, "_launcher", lambda self, args: built.append(1) or original(self, args)
    )

    def f(x):
        return torch.cos(x) * 3

    gm = torch.fx.symbolic_trace(f)
    x = torch.randn(1000, device="cuda")
    compiled = compile_fx(gm, [x])
    torch.testing.assert_close(compiled(x), f(x))
    assert direct_launch_off() is None, direct_launch_off()
    assert built == []
    seen = []
    hook = seen.append
    knobs.runtime.launch_enter_hook.add(hook)
    try:
        x = torch.randn(1000, device="cuda")
        torch.testing.assert_close(compiled(x), f(x))
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    assert len(seen) == 1
    torch.testing.assert_close(compiled(x), f(x))
    assert len(seen) == 1


def test_max_autotune_tunes_at_the_first_call(tmp_path, monkeypatch):
    """The warm-up compiles the default config ahead; the first call still times the
    candidates on the real buffers, saves the fastest and runs it."""
    from compiler.runtime.triton_launch import TritonKernel

    tuned = []
    original = TritonKernel._tune
    monkeypatch.setattr(
        TritonKernel, "_tune", lambda self, args: tuned.append(self.name) or original(self, args)
    )

    def f(x):
        return torch.sin(x) * 2 + 1

    compiled = compiler.compile(f, mode="max-autotune")
    for _ in range(2):
        x = torch.randn(1 << 20, device="cuda")
        torch.testing.assert_close(compiled(x), f(x))
    assert len(tuned) == 1
    assert list((tmp_path / "cache" / "autotune").glob("*.json"))
    notes = [n for g in compiler.inspect(compiled).graphs for n in g.notes]
    assert any("through the CUDA driver" in n for n in notes), notes


COLD = """
import torch, triton
import compiler
compiles = []
real = triton.compile
triton.compile = lambda *a, **k: compiles.append(1) or real(*a, **k)
f = compiler.compile(lambda x, y: torch.sin(x) + torch.cos(y))
x, y = torch.randn(1000, device="cuda"), torch.randn(1000, device="cuda")
torch.testing.assert_close(f(x, y), torch.sin(x) + torch.cos(y))
print(len(compiles))
"""


def test_a_cold_process_builds_no_c_module_and_a_warm_one_compiles_nothing(tmp_path):
    """Kernels go from Triton's compile to our cache and our launcher: no launcher or driver
    module built with gcc in Triton's cache, and a second process finds the binary."""
    import os
    import subprocess
    import sys

    env = dict(
        os.environ,
        COMPILER_CACHE_DIR=str(tmp_path / "ours"),
        TRITON_CACHE_DIR=str(tmp_path / "triton"),
        PYTHONPATH=os.getcwd(),
    )
    env.pop("COMPILER_STRICT", None)
    runs = [
        subprocess.run(
            [sys.executable, "-c", COLD], env=env, capture_output=True, text=True, timeout=300
        )
        for _ in range(2)
    ]
    for run in runs:
        assert run.returncode == 0, run.stderr[-2000:]
    assert runs[1].stdout.split()[-1] == "0"  # the warm process compiled nothing
    assert list((tmp_path / "triton").rglob("*.so")) == []
    assert len(list((tmp_path / "ours" / "cubins").glob("*.cubin"))) == 1


def _model() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(8 * 16 * 16, 10),
    ).cuda()  # fmt: skip


def test_reduce_overhead_reads_parameters_in_place(monkeypatch):
    captures = []
    original = CudaGraphRunner._capture

    def counting(self, args):
        original(self, args)
        captures.append((len(self.borrowed), len(self.owned)))

    monkeypatch.setattr(CudaGraphRunner, "_capture", counting)
    model = _model().eval()
    compiled = compiler.compile(model, mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(4, 3, 16, 16, device="cuda")
            torch.testing.assert_close(compiled(x), model(x))
        # 6 parameters and BatchNorm's 2 running statistics read in place; only x is copied
        assert captures == [(8, 1)]
        (note,) = [n for g in compiler.inspect(compiled).graphs for n in g.notes if "capture" in n]
        assert note.startswith("CUDA graph (capture 1): reads 8 inputs where they are")
        assert "each replay copies 1 inputs in (0.0 MiB), 0 of them back" in note
        # Parameters changed in place are read where they are: no new capture needed
        model[0].weight.mul_(2)
        model[1].running_mean.add_(0.5)
        x = torch.randn(4, 3, 16, 16, device="cuda")
        torch.testing.assert_close(compiled(x), model(x))
        assert len(captures) == 1
        # A parameter replaced by another tensor: the graph is captured again
        model[4].weight = torch.nn.Parameter(torch.randn_like(model[4].weight))
        x = torch.randn(4, 3, 16, 16, device="cuda")
        torch.testing.assert_close(compiled(x), model(x))
        assert len(captures) == 2


def test_reduce_overhead_writes_mutated_inputs_back():
    def bump(x, y):
        x.add_(1)
        return x * y

    compiled = compiler.compile(bump, mode="reduce-overhead")
    for _ in range(3):
        x, y = torch.randn(100, device="cuda"), torch.randn(100, device="cuda")
        x_ref = x.clone()
        out = compiled(x, y)
        torch.testing.assert_close(out, bump(x_ref, y))
        torch.testing.assert_close(x, x_ref)  # the update reached the caller's tensor


def test_reduce_overhead_batchnorm_training_statistics_match_eager():
    model = _model().train()
    ref = _model().train()
    ref.load_state_dict(model.state_dict())
    compiled = compiler.compile(model, mode="reduce-overhead")
    for _ in range(3):
        x = torch.randn(4, 3, 16, 16, device="cuda")
        out, expected = compiled(x), ref(x)
        torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)
        out.sum().backward()
        expected.sum().backward()
    torch.testing.assert_close(model[1].running_mean, ref[1].running_mean)
    torch.testing.assert_close(model[1].running_var, ref[1].running_var)
    assert model[1].num_batches_tracked.item() == ref[1].num_batches_tracked.item() == 3
    torch.testing.assert_close(model[0].weight.grad, ref[0].weight.grad, atol=1e-4, rtol=1e-4)


def test_convolution_graphs_run_channels_last_on_cuda():
    import torchvision

    model = torchvision.models.resnet18(num_classes=10).cuda().eval()
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
    compiled = compiler.compile(model)
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(2, 3, 64, 64, device="cuda")
            torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)
    record = compiler.inspect(compiled)
    assert any("cuDNN" in n for g in record.graphs for n in g.notes)
    # Weights reach cuDNN NHWC already (copied by kernels of ours): aten's own conversion
    # inside the convolution is a clone of ~30 us of host time per convolution and call.
    with (
        torch.no_grad(),
        torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof,
    ):
        compiled(x)
    names = {e.name for e in prof.events()}
    assert "aten::cudnn_convolution" in names and "aten::contiguous" not in names


def test_channels_last_graph_returns_eager_strides_on_cuda():
    conv = torch.nn.Conv2d(4, 8, 3, padding=1).cuda()

    def f(x):
        y = conv(x).relu()
        return y, y.sum(1), y[:, :3] * 2

    compiled = compiler.compile(f)
    with torch.no_grad():
        for fmt in (torch.contiguous_format, torch.channels_last):
            x = torch.randn(2, 4, 10, 10, device="cuda").to(memory_format=fmt)
            outs, refs = compiled(x), f(x)
            for out, ref in zip(outs, refs):
                torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
                assert out.stride() == ref.stride()


class _ConvThenAttention(torch.nn.Module):
    """A convolution (so the graph runs channels-last) whose output, computed into heads of
    shape [B, heads, N, D], feeds CUDA's attention: laid out NHWC, such a query's last
    dimension is not contiguous, which the attention kernels refuse (timm's coatnet, maxvit
    and eva02 fell back to eager on an H100 for it, 2026-11-24)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 48, 1)

    def forward(self, x):
        y = self.conv(x)
        b, _, h, w = y.shape
        q, k, v = (y.reshape(b, 3, 2, 8, h * w).transpose(-1, -2) * 2).relu().unbind(1)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v).sum((-1, -2))


def test_attention_inputs_in_a_channels_last_graph_on_cuda():
    model = _ConvThenAttention().cuda()
    compiled = compiler.compile(model)
    for _ in range(2):
        x = torch.randn(2, 8, 6, 6, device="cuda")
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)
        x.requires_grad_(True)
        model.zero_grad(set_to_none=True)
        (g_eager,) = torch.autograd.grad(model(x).sum(), x)
        (g_ours,) = torch.autograd.grad(compiled(x).sum(), x)
        torch.testing.assert_close(g_ours, g_eager, atol=1e-4, rtol=1e-4)
    assert not [g for g in compiler.inspect(compiled).graphs if g.fallback]


class _Attention(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(64, 3 * 64)

    def forward(self, x):
        q, k, v = self.qkv(x).view(2, 16, 3, 4, 16).permute(2, 0, 3, 1, 4).unbind(0)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_the_record_names_the_attention_kernel_that_ran_on_cuda():
    """Issue 29: the inspector says which of torch's fused attention kernels ran, forward
    and backward, as eager's dispatch picked it (cuDNN's for bf16 on the H200 with torch
    2.11, flash or memory-efficient elsewhere)."""
    model = _Attention().cuda().to(torch.bfloat16)
    compiled = compiler.compile(model)
    x = torch.randn(2, 16, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    compiled(x).sum().backward()
    notes = [n for g in compiler.inspect(compiled).graphs for n in g.notes]
    attention = [n for n in notes if n.startswith("attention")]
    fused = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION")
    for side in ("forward", "backward"):
        heads = tuple(f"attention {side}: torch's {kernel} kernel" for kernel in fused)
        assert any(n.startswith(heads) for n in attention), attention
