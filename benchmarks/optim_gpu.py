"""The optimizer step alone on a CUDA machine: torch.optim's eager Adam (foreach, its CUDA
default, and fused), torch.compile's compiled step, and ours (compiler/optim) in the default
and reduce-overhead modes.

    python benchmarks/optim_gpu.py [--models resnet18,densenet121,gpt2,llama] [--optimizer adam|adamw|sgd]

The parameters and gradients are a torchvision model's after one backward at batch 16,
3x128x128 (train_gpu.py's step), or for gpt2 and llama the parameters of amp_train_gpu.py's
transformers (GPT-2 small: 148 tensors from 768 to 38.6M elements) with random gradients;
every variant steps its own copy with the same gradients. Per variant: the first step's time
(ours and torch.compile's compile the update there), the CUDA-event latency per step, host
time per step (the GPU not waited on in the loop), and kernels per step from torch.profiler.
Ours runs with its per-parameter updates in combined kernels (compiler/scheduler/
horizontal.py) and, as "1/param", with config.combo_kernels off; it also prints its kernel
count and the worst relative difference from eager foreach after the timed steps.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
import time
from typing import Any, Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("COMPILER_CACHE_DIR", tempfile.mkdtemp(prefix="optim_gpu_"))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import compiler  # noqa: E402
from benchmarks.amp_train_gpu import VOCAB, make_model  # noqa: E402
from benchmarks.profile_gpu import host_ms, median_ms  # noqa: E402
from benchmarks.train_gpu import guards_in_cpp  # noqa: E402

OPTIMIZERS = {
    "adam": lambda params, **kw: torch.optim.Adam(params, lr=1e-3, **kw),
    "adamw": lambda params, **kw: torch.optim.AdamW(params, lr=1e-3, **kw),
    "sgd": lambda params, **kw: torch.optim.SGD(params, lr=1e-2, momentum=0.9, **kw),
}


def kernels_per_call(fn: Callable[[], Any], calls: int = 3) -> float:
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return len(kernels) / calls


VARIANTS = (
    "eager foreach",
    "eager fused",
    "torch.compile",
    "torch.compile r-o",
    "ours default",
    "ours r-o",
    "ours r-o 1/param",
)


def model_with_grads(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if name in VOCAB:  # a transformer's parameters; the gradients' values do not matter
        base = make_model(name, 12)
        for p in base.parameters():
            p.grad = torch.randn_like(p) * 1e-3
        return base
    import torchvision

    base = getattr(torchvision.models, name)().cuda()
    x = torch.randn(16, 3, 128, 128, device="cuda")
    y = torch.randint(1000, (16,), device="cuda")
    torch.nn.functional.cross_entropy(base(x), y).backward()
    return base


def run(name: str, optimizer: str) -> None:
    base = model_with_grads(name)
    make = OPTIMIZERS[optimizer]
    variants: dict[str, tuple[torch.nn.Module, Callable[[], Any]]] = {}
    for label in VARIANTS:
        model = copy.deepcopy(base)
        for p, q in zip(base.parameters(), model.parameters()):
            q.grad = p.grad.clone()
        if label == "eager fused":
            opt = make(model.parameters(), fused=True)
            fn = opt.step
        elif label.startswith("torch.compile"):
            opt = make(model.parameters())
            fn = torch.compile(opt.step, mode="reduce-overhead" if "r-o" in label else None)
        elif label.startswith("ours"):
            opt = make(model.parameters())
            mode = "reduce-overhead" if "r-o" in label else None
            step = compiler.compile(lambda o: o.step(), mode=mode)
            fn = lambda s=step, o=opt: s(o)  # noqa: E731
        else:
            opt = make(model.parameters(), foreach=True)
            fn = opt.step
        t = time.perf_counter()
        # combo_kernels is read where the step compiles: at its first call
        with compiler.config.patch(combo_kernels=not label.endswith("1/param")):
            fn()
        torch.cuda.synchronize()
        first = time.perf_counter() - t
        variants[label] = (model, fn)
        lat, host = median_ms(fn), host_ms(fn)
        kernels = kernels_per_call(fn)
        extra = ""
        if label.startswith("ours"):
            report = compiler.inspect(step)
            (record,) = [f for f in report.functions if f.name.endswith("_step")]
            graph = record.graphs[0]
            extra = f" | {len(graph.kernels)} kernels in the graph; warnings: {record.warnings}"
        print(
            f"| {name} | {optimizer} | {label} | {first * 1000:.0f} | {lat:.3f} | {host:.3f} "
            f"| {kernels:.0f}{extra} |",
            flush=True,
        )
    reference = variants["eager foreach"][0]
    for label in [v for v in VARIANTS if v.startswith("ours")]:
        worst = max(
            ((q - p).norm() / p.norm().clamp_min(1e-12)).item()
            for p, q in zip(reference.parameters(), variants[label][0].parameters())
        )
        print(f"   {label}: worst relative difference from eager foreach {worst:.1e}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="resnet18")
    parser.add_argument("--optimizer", default="adam", choices=sorted(OPTIMIZERS))
    args = parser.parse_args()
    print(torch.__version__, torch.cuda.get_device_name())
    print("tensor checks:", guards_in_cpp(), flush=True)
    print("| model | optimizer | step | first call ms | latency ms | host ms | kernels/step |")
    print("|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        run(name, args.optimizer)


if __name__ == "__main__":
    main()
