"""Combined ("combo") Triton kernels (compiler/scheduler/horizontal.py, compiler/codegen/
combo.py): optimizer steps over parameters of mixed sizes and dtypes, whose per-parameter
updates launch as one kernel, against torch.optim's eager steps, and bit for bit against the
same steps compiled with one kernel per parameter. Interpreted Triton on CPU tensors here;
real Triton with CODEGEN_TEST_DEVICE=cuda (benchmarks/gpu_checks.sh)."""

from __future__ import annotations

from typing import Callable

import pytest
import torch

import compiler
from compiler import config
from tests.codegen.helpers import DEVICE, assert_compile_for_sm90

# (shape, parameter dtype, gradient dtype): sizes that share no block, one element, bfloat16
# parameters. A gradient of another dtype than its parameter's makes compiler/optim run
# torch.optim's own step (with a warning), or raise as eager does (Adam's lerp_).
FP32 = [((33, 17), torch.float32), ((17,), torch.float32), ((5, 3, 2), torch.float32),
        ((1,), torch.float32), ((300,), torch.float32)]  # fmt: skip
BF16 = [((40, 3), torch.bfloat16), ((7,), torch.bfloat16)]
# the dtypes taking turns: parts of one kind (one body, compiler/codegen/combo.py) that are
# not neighbours among the parts, a one-element part (parameters of one size would fuse into
# one kernel before combining)
INTERLEAVED = [((33, 17), torch.float32), ((40, 3), torch.bfloat16), ((1,), torch.float32),
               ((3,), torch.bfloat16), ((300,), torch.float32), ((7,), torch.bfloat16),
               ((17,), torch.float32), ((2,), torch.float32)]  # fmt: skip

OPTIMIZERS: dict[str, tuple[Callable, list]] = {
    "adamw": (
        lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
        [(s, d, d) for s, d in FP32 + BF16],
    ),
    "adamw_interleaved": (
        lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
        [(s, d, d) for s, d in INTERLEAVED],
    ),
    "adam_amsgrad": (
        lambda ps: torch.optim.Adam(ps, lr=1e-2, amsgrad=True),
        [(s, d, d) for s, d in FP32 + BF16],
    ),
    "sgd_momentum": (
        lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=1e-2),
        [(s, d, d) for s, d in FP32 + BF16],
    ),
}


@pytest.fixture(autouse=True)
def triton_on_cpu(monkeypatch, tmp_path):
    monkeypatch.setenv("COMPILER_CPU_EMITTER", "triton")
    monkeypatch.setenv("COMPILER_STRICT", "1")
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(tmp_path / "cache"))
    compiler.reset()
    yield
    compiler.reset()


def _params(specs, seed: int = 0) -> tuple[list[torch.Tensor], list[list[torch.Tensor]]]:
    """Parameters, and fresh gradients for each of 3 steps."""
    g = torch.Generator().manual_seed(seed)
    params = [torch.randn(s, generator=g).to(DEVICE, d) for s, d, _ in specs]
    grads = [[torch.randn(s, generator=g).to(DEVICE, gd) for s, _, gd in specs] for _ in range(3)]
    return params, grads


def _steps(make_opt, params, grads, compiled: bool, combo: bool = True):
    ps = [torch.nn.Parameter(p.clone()) for p in params]
    for p, g in zip(ps, grads[0]):
        if g.dtype != p.dtype:
            p.grad_dtype = None  # a gradient of another dtype (torch's opt-in)
    opt = make_opt(ps)
    compiler.reset()
    step = compiler.compile(lambda o: o.step()) if compiled else (lambda o: o.step())
    with config.patch(combo_kernels=combo):
        for step_grads in grads:
            for p, g in zip(ps, step_grads):
                p.grad = g.clone()
            step(opt)
    tensors = [*ps, *(t for s in opt.state.values() for t in s.values())]
    report = compiler.inspect(step) if compiled else None
    return tensors, report


def _on_eagers_device(ours: torch.Tensor, eager: torch.Tensor, device: torch.device):
    """Our tensor, on eager's device for the comparison. On CUDA, Adam's step counts live on
    the parameters' device under ours (compiler/optim/step.py: capturable=True, as
    torch.compile does) where eager keeps them on the CPU; nothing else may move."""
    if ours.device == eager.device:
        return ours
    assert ours.dim() == 0 and ours.device == device and eager.device.type == "cpu"
    return ours.cpu()


def _graph(report):
    (record,) = [f for f in report.functions if f.name.endswith("_step")]
    assert not record.warnings
    (graph,) = record.graphs
    return graph


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizer_step_in_combo_kernels_matches_eager(name):
    make_opt, specs = OPTIMIZERS[name]
    params, grads = _params(specs)
    eager, _ = _steps(make_opt, params, grads, compiled=False)
    combo, report = _steps(make_opt, params, grads, compiled=True)
    apart, report_apart = _steps(make_opt, params, grads, compiled=True, combo=False)
    for k, (c, e) in enumerate(zip(combo, eager)):
        # bfloat16 parameters and states: the kernels round once per stored value where eager
        # rounds after every op, a few bfloat16 ulps apart after 3 steps
        tol = {"rtol": 0.05, "atol": 0.05} if e.dtype == torch.bfloat16 else {}
        c = _on_eagers_device(c, e, params[0].device)
        torch.testing.assert_close(c, e, msg=lambda m, k=k: f"tensor {k}: {m}", **tol)
    # combining launches changes no bit of any part's result
    for k, (c, a) in enumerate(zip(combo, apart)):
        assert torch.equal(c, a), f"tensor {k} differs from the kernel-per-parameter step"
    kernels, alone = _graph(report).kernels, _graph(report_apart).kernels
    updates = len(specs)
    assert len(alone) >= updates  # one update kernel per parameter
    assert len(kernels) <= 3  # the steps' count, the updates in one combined kernel
    (combo_kernel,) = [k for k in kernels if k.parts]
    assert len(combo_kernel.parts) == updates
    assert combo_kernel.config["kind"] == "combo"
    # every part's programs, one after another, fill the launch grid
    ranges = sorted((p.first_program, p.last_program) for p in combo_kernel.parts)
    assert ranges[0][0] == 0
    assert all(b[0] == a[1] + 1 for a, b in zip(ranges, ranges[1:]))
    xblock = combo_kernel.config["XBLOCK"]
    assert combo_kernel.config["xnumel"] == (ranges[-1][1] + 1) * xblock
    assert [p.elements for p in combo_kernel.parts] == [torch.Size(s).numel() for s, *_ in specs]
    # the source names each part and the FX nodes it came from
    for p in combo_kernel.parts:
        assert f"{p.name}, {p.elements} elements; FX nodes {', '.join(p.fused_nodes)}" in (
            combo_kernel.source
        )


def test_parts_of_one_kind_share_one_body():
    """AdamW updates of one dtype differ only in their pointers and sizes: the combined
    kernel holds their body once, each program choosing its part's pointers and size (a
    compile of one body instead of one per part), with the same bits as kernels apart. A
    size that is no multiple of 16 (which Triton's vectorised accesses need) is a kind of
    its own."""
    make_opt = OPTIMIZERS["adamw"][0]
    specs = [((k + 1, 16), torch.float32, torch.float32) for k in range(6)]
    specs.append(((3, 5), torch.float32, torch.float32))
    params, grads = _params(specs)
    combo, report = _steps(make_opt, params, grads, compiled=True)
    apart, _ = _steps(make_opt, params, grads, compiled=True, combo=False)
    for k, (c, a) in enumerate(zip(combo, apart)):
        assert torch.equal(c, a), f"tensor {k} differs from the kernel-per-parameter step"
    (kernel,) = [k for k in _graph(report).kernels if k.parts]
    assert len(kernel.parts) == 7
    assert "# kind 0: 6 parts, one body (programs 0..5)" in kernel.source
    assert "# kind 1: 1 part (programs 6..6)" in kernel.source
    # one update's stores per kind: the parameter, exp_avg and exp_avg_sq
    assert kernel.source.count("tl.store(") == 2 * 3
    assert kernel.source.count("if pid <") == 2  # `if` and one `elif`
    # each part but the last (the default) chooses its first program, size and 5 pointers
    # (gradient, parameter, both moments, step count); the learning rate, one buffer for
    # all parts, is read through the kernel's parameter itself
    assert kernel.source.count("tl.where(k0_here, ") == 5 * (2 + 5)


def test_adam_with_gradients_of_another_dtype_raises_as_eager():
    make_opt = OPTIMIZERS["adamw"][0]
    params, grads = _params(
        [((6,), torch.float32, torch.bfloat16), ((3,), torch.float32, torch.float32)]
    )
    with pytest.raises(RuntimeError) as eager:
        _steps(make_opt, params, grads, compiled=False)
    with pytest.raises(RuntimeError) as compiled:
        _steps(make_opt, params, grads, compiled=True)
    assert str(compiled.value) == str(eager.value)


def test_zero_grad_fills_and_updates_of_a_training_step():
    """A whole training step (forward, backward, SGD step, zero_grad in one function): the
    gradients' fills and the updates launch in as few kernels as their dependencies allow."""
    model = torch.nn.Sequential(torch.nn.Linear(6, 20), torch.nn.Tanh(), torch.nn.Linear(20, 3)).to(
        DEVICE
    )
    ref = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def train(x, y):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
        return loss

    eager_model = torch.nn.Sequential(
        torch.nn.Linear(6, 20), torch.nn.Tanh(), torch.nn.Linear(20, 3)
    ).to(DEVICE)
    with torch.no_grad():
        for p, r in zip(eager_model.parameters(), ref):
            p.copy_(r)
    eager_opt = torch.optim.SGD(eager_model.parameters(), lr=0.1, momentum=0.9)
    compiled = compiler.compile(train)
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        x, y = torch.randn(4, 6, generator=g).to(DEVICE), torch.randn(4, 3, generator=g).to(DEVICE)
        compiled(x, y)
        loss = torch.nn.functional.mse_loss(eager_model(x), y)
        loss.backward()
        eager_opt.step()
        eager_opt.zero_grad(set_to_none=False)
    for p, e in zip(model.parameters(), eager_model.parameters()):
        torch.testing.assert_close(p, e)
        torch.testing.assert_close(p.grad, e.grad)
    report = compiler.inspect(compiled)
    kernels = [k for f in report.functions for g in f.graphs for k in g.kernels]
    assert any(k.parts for k in kernels)


@pytest.mark.skipif(DEVICE != "cpu", reason="compiles the interpreted run's kernels")
def test_combo_kernels_compile_for_sm90(tmp_path):
    pytest.importorskip("triton.backends.nvidia")
    kernels = tmp_path / "sm90"
    kernels.mkdir()
    for name in OPTIMIZERS:
        make_opt, specs = OPTIMIZERS[name]
        params, grads = _params(specs)
        _, report = _steps(make_opt, params, grads[:1], compiled=True)
        for k in _graph(report).kernels:  # the cache may hold them from an earlier test
            (kernels / f"{name}_{k.name}.py").write_text(k.source)
    assert any("triton_combo" in p.name for p in kernels.iterdir())
    assert_compile_for_sm90(kernels)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_gpt2_sized_adamw_step_on_the_gpu(mode):
    """GPT-2-small's parameter shapes (one layer's, twice): the updates in combined kernels
    under real Triton, in both modes, against eager AdamW."""
    layer = [(768,), (768,), (768, 2304), (2304,), (768, 768), (768,), (768,), (768,),
             (768, 3072), (3072,), (3072, 768), (768,)]  # fmt: skip
    shapes = [(50257, 768), (1024, 768), *layer, *layer, (768,), (768,)]
    specs = [(s, torch.float32, torch.float32) for s in shapes]
    g = torch.Generator().manual_seed(0)
    params = [torch.randn(s, generator=g).cuda() * 0.02 for s, *_ in specs]
    grads = [[torch.randn(s, generator=g).cuda() for s, *_ in specs] for _ in range(3)]
    make_opt = lambda ps: torch.optim.AdamW(ps, lr=1e-3, weight_decay=0.1)  # noqa: E731
    eager, _ = _steps(make_opt, params, grads, compiled=False)
    ps = [torch.nn.Parameter(p.clone()) for p in params]
    opt = make_opt(ps)
    step = compiler.compile(lambda o: o.step(), mode=mode)
    for step_grads in grads:
        for p, gr in zip(ps, step_grads):
            p.grad = gr.clone()
        step(opt)
    combo = [*ps, *(t for s in opt.state.values() for t in s.values())]
    for c, e in zip(combo, eager):
        torch.testing.assert_close(_on_eagers_device(c, e, ps[0].device), e, rtol=1e-5, atol=1e-6)
    # parameters of one size update in one kernel already (vertical fusion: the H200 gave 13
    # parts for these 28 parameters), the rest join combined kernels
    kernels = _graph(compiler.inspect(step)).kernels
    assert any(k.parts for k in kernels)
    assert len(kernels) <= 4


def _scaled(*xs):
    return tuple(x * (k + 2) - 1 for k, x in enumerate(xs))


def _pads(*xs):
    return tuple(torch.constant_pad_nd(x, (1, 1, 1, 1), 2) for x in xs)


def _kernels(fn, combo):
    xs = [torch.randint(-9, 9, (k + 1, 3, 5), dtype=torch.int64, device=DEVICE) for k in range(6)]
    compiler.reset()
    compiled = compiler.compile(fn)
    with config.patch(combo_kernels=combo):
        out = compiled(*xs)
    for o, e in zip(out, fn(*xs)):
        assert torch.equal(o, e)
    (record,) = compiler.inspect(compiled).functions
    return record.graphs[0].kernels


def test_plain_graphs_combine_kernels_only_when_asked():
    """combo_kernels="auto" (the default) combines an optimizer step's updates only, as
    torch.compile combines only its foreach kernels; a user's graph of independent kernels
    keeps one launch per kernel unless combo_kernels=True."""
    assert config.combo_kernels == "auto"
    assert not any(k.parts for k in _kernels(_scaled, "auto"))
    assert len(_kernels(_scaled, "auto")) == 6
    (combined,) = _kernels(_scaled, True)
    assert len(combined.parts) == 6
    assert len(_kernels(_scaled, False)) == 6


def test_kernels_addressed_by_coordinates_are_never_combined():
    """Padding's kernels compute their addresses from coordinates and mask their loads: such
    parts are not combined even under combo_kernels=True (compiler/scheduler/horizontal.py
    says what Triton made of 32 of them on the H200)."""
    kernels = _kernels(_pads, True)
    assert len(kernels) == 6
    assert not any(k.parts for k in kernels)
