"""Diagnosis on a CUDA machine: seed 000's train step (resnet18, SGD) in reduce-overhead
mode against eager for 3 steps in fp32, with the optimizer step compiled or eager, and in
the default mode; prints the worst relative gradient and parameter error per step."""

from __future__ import annotations

import copy
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch
import torchvision

import compiler
from benchmarks.train_gpu import make_train
from compiler.optim import step as optim_step
from compiler.runtime import cudagraphs

torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False


def rel(a, b):
    return ((a - b).norm() / (b.norm() + 1e-12)).item()


def run(label, mode, eager_optimizer=False):
    compiler.reset()
    torch.manual_seed(0)
    dtype = torch.float64 if os.environ.get("DOUBLE") else torch.float32
    model = torchvision.models.resnet18(num_classes=10).cuda().to(dtype)
    comp = copy.deepcopy(model)
    train = make_train(torch.optim.SGD(model.parameters(), lr=0.01))
    original = optim_step.why_eager
    if eager_optimizer:
        optim_step.why_eager = lambda *a, **k: "debug: eager"
    try:
        step = compiler.compile(make_train(torch.optim.SGD(comp.parameters(), lr=0.01)), mode=mode)
        for k in range(3):
            data = (
                torch.randn(8, 3, 64, 64, device="cuda", dtype=dtype),
                torch.randint(10, (8,), device="cuda"),
            )
            train(model, data)
            step(comp, data)
            if os.environ.get("SYNC"):
                torch.cuda.synchronize()
            g = max(rel(q.grad, p.grad) for p, q in zip(model.parameters(), comp.parameters()))
            w = max(rel(q, p) for p, q in zip(model.parameters(), comp.parameters()))
            b = max(rel(q.float(), p.float()) for p, q in zip(model.buffers(), comp.buffers()))
            import gc

            runners = [o for o in gc.get_objects() if isinstance(o, cudagraphs.CudaGraphRunner)]
            stats = [
                (r.captures, r.ungraphed_calls, len(r.borrowed), len(r.handed), len(r.owned))
                for r in runners
            ]
            print(
                f"{label}: step {k}: grad {g:.1e} param {w:.1e} buffers {b:.1e} "
                f"runners (captures, ungraphed, borrowed, handed, owned) {stats}",
                flush=True,
            )
    finally:
        optim_step.why_eager = original


which = sys.argv[1] if len(sys.argv) > 1 else "all"
if os.environ.get("NCHW"):
    from compiler.backends import inductor

    inductor.TRAINING_CHANNELS_LAST = frozenset()
if os.environ.get("NOSPLIT"):
    from compiler.scheduler import split

    split.SPLIT_MIN_ELEMENTS = 1 << 60
if os.environ.get("SLOWLAUNCH"):
    from compiler.runtime import triton_launch

    triton_launch._c_launch = lambda run: None
if os.environ.get("CLONE_ALL"):
    _init = cudagraphs.CudaGraphRunner.__init__

    def _clone_all(self, call, mutated=(), internal_from=None):
        _init(self, call, mutated, None)

    cudagraphs.CudaGraphRunner.__init__ = _clone_all
if which == "eager":
    for k in range(3):
        run(f"RO, eager SGD, run {k}", "reduce-overhead", eager_optimizer=True)
elif which == "order":
    run("RO, eager SGD first", "reduce-overhead", eager_optimizer=True)
    run("RO, compiled SGD second", "reduce-overhead")
    run("RO, eager SGD third", "reduce-overhead", eager_optimizer=True)
    cudagraphs._handed_out.clear()
    run("RO, eager SGD fourth, handed-out set cleared", "reduce-overhead", eager_optimizer=True)
else:
    run("RO, compiled SGD", "reduce-overhead")
    run("RO, eager SGD", "reduce-overhead", eager_optimizer=True)
    run("default, compiled SGD", None)
