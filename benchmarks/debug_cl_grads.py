"""Diagnosis on a CUDA machine: one forward+backward of a torchvision model in fp32 (TF32
off), eager and ours, each against eager in float64 from the same weights and batch, and ours
in float64 against eager in float64; prints the worst and median relative gradient errors."""

from __future__ import annotations

import copy
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch
import torchvision

import compiler

torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False


def fwd_bwd(mod, data):
    torch.nn.CrossEntropyLoss()(mod(data[0]), data[1]).backward()


def errors(mod, ref):
    errs = sorted(
        (((q.grad.double() - p.grad).norm() / (p.grad.norm() + 1e-30)).item(), n)
        for (n, p), q in zip(ref.named_parameters(), mod.parameters())
    )
    return f"worst {errs[-1][0]:.1e} at {errs[-1][1]}; median {errs[len(errs) // 2][0]:.1e}"


for name in sys.argv[1:]:
    torch.manual_seed(0)
    base = getattr(torchvision.models, name)().cuda()
    x, y = torch.randn(16, 3, 128, 128, device="cuda"), torch.randint(1000, (16,), device="cuda")
    ref = copy.deepcopy(base).double()
    fwd_bwd(ref, (x.double(), y))
    eager = copy.deepcopy(base)
    fwd_bwd(eager, (x, y))
    print(f"{name} eager fp32 vs float64: {errors(eager, ref)}", flush=True)
    for dtype in (torch.float32, torch.float64):
        compiler.reset()
        comp = copy.deepcopy(base).to(dtype)
        compiler.compile(fwd_bwd)(comp, (x.to(dtype), y))
        print(f"{name} ours {dtype} vs float64: {errors(comp, ref)}", flush=True)
