"""Whose float64 is off? One train step of a model in float64, four ways, compared pairwise.

    python benchmarks/f64_gpu.py --only mobilenet_v3_large,levit_128s [--no-cpu-compile]

models.py judges a float32 result that is further from float64 than eager's own float32 error
again in float64: ours compiled in float64 against eager in float64. On the H100, two train
steps (mobilenet_v3_large, levit_128s) came out 1.5e-7 and 5.7e-7 apart there, where float64
rounding alone is about 1e-13. That is either our CUDA code computing something in float32, or
one of eager's own float64 kernels that is not exact (hardsigmoid's backward multiplies by the
float32 sixth on CPU and CUDA alike). This runs the same step (same weights, batch and loss) as
eager on CUDA, eager on CPU, eager on CUDA with hardsigmoid's backward computed exactly, ours on
CUDA (Triton) and ours on CPU (C++), and prints the largest error of each pair with the tensor
it comes from. Ours on both devices near each other and eager-exact, eager apart from all of
them, means eager's kernels are the inexact ones.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
from typing import Any, Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("COMPILER_CACHE_DIR", tempfile.mkdtemp(prefix="f64_"))

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import compiler  # noqa: E402
from benchmarks.model_suites import (  # noqa: E402
    disable_randomness,
    make_inputs,
    timm_specs,
    torchvision_specs,
)
from benchmarks.models import capture, scalar_loss, tensor_error  # noqa: E402


class ExactHardsigmoidBackward(TorchDispatchMode):
    """Eager, except hardsigmoid's backward multiplies by the float64 sixth."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.hardsigmoid_backward.default:
            grad, x = args
            inside = (x > -3.0) & (x < 3.0)
            return torch.where(inside, grad / 6.0, torch.zeros_like(grad))
        return func(*args, **(kwargs or {}))


def step(model: torch.nn.Module, fn: Callable, inputs: tuple) -> dict[str, Any]:
    for p in model.parameters():
        p.grad = None
    out = fn(*inputs)
    loss = scalar_loss(out)
    loss.backward()
    result = capture(model, out, loss)
    return {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in result.items()}


def run(spec, args) -> None:
    torch.manual_seed(0)
    base = spec.build()
    disable_randomness(base)
    base = base.double().train()
    inputs = make_inputs(spec, args.batch, args.size, args.seq, "cpu", torch.float64)
    results: dict[str, dict[str, Any]] = {}

    def fresh(device: str) -> tuple[torch.nn.Module, tuple]:
        return copy.deepcopy(base).to(device), tuple(t.to(device) for t in inputs)

    m, x = fresh(args.device)
    results[f"eager {args.device}"] = step(m, m, x)
    m, x = fresh(args.device)
    with ExactHardsigmoidBackward():
        results[f"eager {args.device} exact-hsig"] = step(m, m, x)
    m, x = fresh("cpu")
    results["eager cpu"] = step(m, m, x)
    m, x = fresh(args.device)
    results[f"ours {args.device}"] = step(m, compiler.compile(m), x)
    if not args.no_cpu_compile:
        m, x = fresh("cpu")
        results["ours cpu"] = step(m, compiler.compile(m), x)
    names = list(results)
    print(f"\n{spec.name} (float64, train step, input {tuple(inputs[0].shape)})", flush=True)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            ra, rb = results[a], results[b]
            errs = {k: tensor_error(ra[k], rb.get(k)) for k in ra}
            worst = max(errs, key=errs.get)
            print(f"  {a:>22} vs {b:<22} {errs[worst]:.1e}  ({worst})", flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--only", default="mobilenet_v3_large,levit_128s")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--size", type=int, default=128)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--no-cpu-compile", action="store_true")
    p.add_argument("--device", default="cuda")
    args = p.parse_args()
    specs = {s.name: s for s in torchvision_specs() + timm_specs()}
    for name in args.only.split(","):
        try:
            run(specs[name], args)
        except Exception as exc:  # one model's failure must not hide the others'
            print(f"\n{name}: {type(exc).__name__}: {exc}", flush=True)


if __name__ == "__main__":
    main()
