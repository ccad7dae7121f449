"""Mixed-precision transformer training on CUDA (issue 29): a GPT-2-small training step under
bf16 autocast with AdamW, in one compiled function. Checks it runs, compares the loss after
`--steps` steps from the same start with eager's, and prints any error with its traceback.

    python benchmarks/amp_train_gpu.py [--layers 12] [--batch 8] [--seq 256] [--steps 5]
"""

from __future__ import annotations

import argparse
import copy
import time
import traceback
import warnings

import torch

import compiler


def make_model(layers: int):
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=layers, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024)
    torch.manual_seed(0)
    return GPT2LMHeadModel(cfg).cuda()


def make_step(model, opt):
    def step(ids):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(ids, labels=ids).loss
        loss.backward()
        opt.step()
        return loss.detach()

    return step


def run(label: str, step, ids, steps: int) -> list[float]:
    losses = []
    for i in range(steps):
        t = time.perf_counter()
        loss = step(ids)
        torch.cuda.synchronize()
        losses.append(float(loss))
        print(f"{label} step {i}: loss {losses[-1]:.5f} ({time.perf_counter() - t:.2f} s)", flush=True)
    return losses


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--mode", default=None)
    args = p.parse_args()
    base = make_model(args.layers)
    ids = torch.randint(0, 50257, (args.batch, args.seq), device="cuda")
    results = {}
    for label in ("eager", "ours"):
        model = copy.deepcopy(base)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        step = make_step(model, opt)
        if label == "ours":
            step = compiler.compile(step, mode=args.mode)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                results[label] = run(label, step, ids, args.steps)
            except Exception:
                traceback.print_exc()
        for w in caught:
            if issubclass(w.category, compiler.CompilerWarning):
                print(f"{label} warning: {str(w.message)[:2000]}")
        if label == "ours":
            for fn in compiler.inspect(step).functions:
                for e in fn.entries:
                    brk = e.graph_break.reason if e.graph_break else ""
                    fb = e.graph.fallback if e.graph else None
                    print(f"  {fn.name}:{e.start_line} ops={e.graph.op_count if e.graph else 0}"
                          f" break={brk!s:.200} fallback={fb!s:.300}")
                for w in fn.warnings:
                    print(f"  {fn.name} warning: {w[:500]}")
    if len(results) == 2:
        print("loss difference after each step:",
              [round(a - b, 5) for a, b in zip(results["eager"], results["ours"])])


if __name__ == "__main__":
    main()
