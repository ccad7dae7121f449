"""DistributedDataParallel training steps (issue 26): eager DDP, ours (compiler.compile of the
DDP model: the inner module compiled, its graph split at DDP's gradient-bucket boundaries)
and torch.compile of the DDP model (its DDPOptimizer splits the same way), in one run.

Models: torchvision's resnet50 (SGD with momentum, 224x224 images) and a GPT-2-small-style
decoder written here (12 layers, 768 wide, 12 heads, GPT-2's vocabulary; AdamW), each step
under bf16 autocast. Every configuration gets its own copy of the same weights and its own
DDP wrapper, runs --warm steps (the compiled ones compile there; their losses are printed
next to eager's), then is timed in --rounds rounds that take each configuration in turn
(the host's speed drifts): per round the median of --iters steps, CUDA events on the GPU;
the table shows the median over rounds as steps/s, on rank 0.

    # the device (kind nvidia-h200-x2, NCCL):
    python3 -m torch.distributed.run --nproc-per-node 2 benchmarks/ddp_train_gpu.py
    # a CPU check that it runs (gloo, tiny models, no timing worth reading; small buckets so
    # that both graphs are split; --precision fp32 makes the three losses agree closely):
    .venv/bin/torchrun --nproc-per-node 2 benchmarks/ddp_train_gpu.py --device cpu --tiny \
        --bucket-cap-mb 0.05 --rounds 1 --iters 2

torch.compile appears here only as the comparison anchor.
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import statistics
import sys
import time
import traceback
import warnings
from typing import Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import compiler

LABELS = ("eager", "ours", "torch.compile")


# ---- models --------------------------------------------------------------------------------


class Block(torch.nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.ln2 = torch.nn.LayerNorm(dim)
        self.fc = torch.nn.Linear(dim, 4 * dim)
        self.out = torch.nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(torch.nn.Module):
    """GPT-2 small's shape: token and position embeddings, pre-norm blocks, tied head."""

    def __init__(self, vocab: int, seq: int, dim: int, heads: int, layers: int) -> None:
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, dim)
        self.pos = torch.nn.Embedding(seq, dim)
        self.blocks = torch.nn.ModuleList([Block(dim, heads) for _ in range(layers)])
        self.ln = torch.nn.LayerNorm(dim)
        self.head = torch.nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tok.weight
        for p in self.parameters():
            if p.dim() > 1:
                torch.nn.init.normal_(p, std=0.02 / math.sqrt(2 * layers))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.tok(ids) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def resnet(tiny: bool) -> torch.nn.Module:
    import torchvision
    from torchvision.models.resnet import Bottleneck, ResNet

    if tiny:
        return ResNet(Bottleneck, [1, 1, 1, 1], num_classes=10)
    return torchvision.models.resnet50()


class Workload:
    """A model, its optimizer and a batch: `step()` is one DDP training step."""

    def __init__(self, name: str, tiny: bool, device: torch.device, batch: int | None) -> None:
        gen = torch.Generator().manual_seed(1234 + dist.get_rank())
        if name == "resnet50":
            size, classes = (32, 10) if tiny else (224, 1000)
            self.make = lambda: resnet(tiny)
            n = batch or (4 if tiny else 64)
            self.inputs = torch.randn(n, 3, size, size, generator=gen).to(device)
            self.target = torch.randint(0, classes, (n,), generator=gen).to(device)
            self.optimizer = lambda params: torch.optim.SGD(params, lr=0.01, momentum=0.9)
            self.loss = F.cross_entropy
        else:
            vocab, seq, dim, heads, layers = (
                (256, 32, 64, 4, 2) if tiny else (50257, 512, 768, 12, 12)
            )
            self.make = lambda: GPT(vocab, seq, dim, heads, layers)
            n = batch or (2 if tiny else 8)
            self.inputs = torch.randint(0, vocab, (n, seq), generator=gen).to(device)
            self.target = torch.randint(0, vocab, (n, seq), generator=gen).to(device)
            fused = {"fused": True} if device.type == "cuda" else {}
            self.optimizer = lambda params: torch.optim.AdamW(params, lr=1e-4, **fused)
            self.loss = lambda logits, t: F.cross_entropy(logits.flatten(0, 1), t.flatten())


def make_step(work: Workload, model: torch.nn.Module, device: torch.device, bf16: bool) -> Callable:
    opt = work.optimizer(model.parameters())

    def step() -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = work.loss(model(work.inputs), work.target)
        loss.backward()
        opt.step()
        return loss.detach()

    return step


# ---- timing --------------------------------------------------------------------------------


def median_ms(step: Callable, iters: int, device: torch.device) -> float:
    times = []
    for _ in range(iters):
        if device.type == "cuda":
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t = time.perf_counter()
            step()
            times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def describe_ours(model: torch.nn.Module) -> list[str]:
    """What compiler.compile made of the DDP model: graphs, their buckets, breaks, fallbacks."""
    lines = []
    for fn in compiler.inspect(model).functions:
        for e in fn.entries:
            g = e.graph
            brk = f" break: {e.graph_break.reason[:160]}" if e.graph_break else ""
            if g is None:
                lines.append(f"  {fn.qualname}:{e.start_line} no graph{brk}")
                continue
            sizes = ", ".join(f"{b.param_bytes / 2**20:.1f}" for b in g.buckets)
            lines.append(
                f"  {fn.qualname}:{e.start_line} {g.op_count} ops, {len(g.buckets)} bucket parts "
                f"[{sizes}] MiB{brk}" + (f" FALLBACK: {g.fallback[:300]}" if g.fallback else "")
            )
        lines.extend(f"  {fn.qualname} warning: {w[:300]}" for w in fn.warnings)
    return lines


def bench(name: str, args: argparse.Namespace, device: torch.device) -> dict[str, float]:
    rank0 = dist.get_rank() == 0
    work = Workload(name, args.tiny, device, args.batch)
    torch.manual_seed(0)
    base = work.make().to(device)
    ddp_kwargs = {"device_ids": [device.index]} if device.type == "cuda" else {}
    if args.bucket_cap_mb is not None:
        ddp_kwargs["bucket_cap_mb"] = args.bucket_cap_mb
    steps, losses, models = {}, {}, {}
    for label in LABELS:
        if label in args.skip:
            continue
        model = DDP(copy.deepcopy(base), **ddp_kwargs)
        if label == "ours":
            model = compiler.compile(model, mode=args.mode)
        elif label == "torch.compile":
            model = torch.compile(model, mode=args.mode)
        models[label], steps[label] = (
            model,
            make_step(work, model, device, args.precision == "bf16"),
        )
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                losses[label] = [float(steps[label]()) for _ in range(args.warm)]
            except Exception:
                traceback.print_exc()
                del steps[label]
        if rank0:
            print(
                f"{name} {label}: {args.warm} warm-up steps in {time.perf_counter() - start:.1f} s,"
                f" losses {[round(v, 4) for v in losses.get(label, [])]}",
                flush=True,
            )
            for w in caught:
                if issubclass(w.category, compiler.CompilerWarning):
                    print(f"  {label} warning: {str(w.message)[:500]}")
            if label == "ours" and label in steps:
                print("\n".join(describe_ours(model)))
    rounds: dict[str, list[float]] = {label: [] for label in steps}
    for _ in range(args.rounds):
        for label, step in steps.items():
            rounds[label].append(median_ms(step, args.iters, device))
    return {label: 1e3 / statistics.median(ms) for label, ms in rounds.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--tiny", action="store_true", help="small models, to check the script runs")
    p.add_argument("--models", default="resnet50,gpt2")
    p.add_argument("--batch", type=int, default=None, help="per rank")
    p.add_argument("--bucket-cap-mb", type=float, default=None, help="DDP's (default 25)")
    p.add_argument(
        "--precision",
        choices=("bf16", "fp32"),
        default="bf16",
        help="fp32: no autocast, so the warm-up losses of all three should agree closely",
    )
    p.add_argument("--mode", default=None, help="compile mode for ours and torch.compile")
    p.add_argument("--warm", type=int, default=3)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--skip", default="", help="comma-separated labels not to run")
    args = p.parse_args()
    args.skip = set(filter(None, args.skip.split(",")))
    if args.device == "cuda":
        local = int(os.environ.get("LOCAL_RANK", 0))
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(max(1, (os.cpu_count() or 2) // int(os.environ["WORLD_SIZE"])))
        dist.init_process_group("gloo")
    results = {name: bench(name, args, device) for name in args.models.split(",")}
    if dist.get_rank() == 0:
        world = dist.get_world_size()
        print(f"\nDDP over {world} ranks ({args.device}), {args.precision}, steps/s (median):")
        print(f"{'model':10s} " + " ".join(f"{label:>14s}" for label in LABELS) + "   ours/tc")
        for name, res in results.items():
            cells = " ".join(
                f"{res[label]:14.2f}" if label in res else f"{'-':>14s}" for label in LABELS
            )
            ratio = (
                res["ours"] / res["torch.compile"]
                if {"ours", "torch.compile"} <= res.keys()
                else float("nan")
            )
            print(f"{name:10s} {cells}   {ratio:7.2f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
