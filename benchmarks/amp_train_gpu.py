"""Mixed-precision transformer training on CUDA (issue 29): a GPT-2-small training step under
bf16 autocast with AdamW, in one compiled function. Checks it runs, compares the loss after
`--steps` steps from the same start with eager's, and prints any error with its traceback;
with `--time N`, the median of N more steps (CUDA events) for eager, ours and, with `--tc`,
torch.compile (the anchor), each after its own cold first step.

    python benchmarks/amp_train_gpu.py [--model gpt2|llama] [--layers 12] [--batch 8] [--seq 256] [--steps 5]
        [--mode reduce-overhead] [--time 20] [--tc] [--notes] [--profile] [--pad-matmuls off]
        [--combo-kernels off]

--notes prints every inspection note of our graphs; --profile counts, for one warm step of
each, the CUDA kernel launches and CUDA graph launches the host made (torch.profiler);
--combo-kernels off sets compiler.config.combo_kernels off: one kernel per parameter's
update, as before compiler/scheduler/horizontal.py.
--pad-matmuls sets compiler.config.pad_matmuls (off: the LM head's unaligned matmuls as eager
runs them).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
import traceback
import warnings

import torch

import compiler

VOCAB = {"gpt2": 50257, "llama": 32000}


def make_model(name: str, layers: int):
    """GPT-2 small, or a Llama-style decoder of about its size (RMSNorm, rotary embeddings,
    SwiGLU, grouped-query attention: 12 query heads, 4 key/value heads)."""
    import transformers as tf

    if name == "gpt2":
        cfg = tf.GPT2Config(n_layer=layers, n_embd=768, n_head=12, vocab_size=VOCAB[name])
        cls = tf.GPT2LMHeadModel
    else:
        cfg = tf.LlamaConfig(
            hidden_size=768, intermediate_size=2048, num_hidden_layers=layers,
            num_attention_heads=12, num_key_value_heads=4, vocab_size=VOCAB[name],
            max_position_embeddings=1024,
        )  # fmt: skip
        cls = tf.LlamaForCausalLM
    torch.manual_seed(0)
    return cls(cfg).cuda()


def make_step(model, opt):
    def step(ids):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(ids, labels=ids).loss
        loss.backward()
        opt.step()
        return loss.detach()

    return step


def median_ms(step, ids, n: int) -> float:
    times = []
    for _ in range(n):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step(ids)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def launches(step, ids) -> str:
    """Host-side launches of one warm step: kernels, CUDA graphs and host ops."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step(ids)
        torch.cuda.synchronize()
    counts: dict[str, int] = {}
    for e in prof.events():
        if e.name in ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx", "cudaGraphLaunch",
                      "cudaMemcpyAsync", "cudaStreamSynchronize", "cudaLaunchKernelExC"):
            counts[e.name] = counts.get(e.name, 0) + 1
    gpu: dict[str, list[float]] = {}
    for e in prof.key_averages():
        if e.device_time_total > 0 and e.device_type.name == "CUDA":
            gpu[e.key] = [e.device_time_total / 1e3, e.count]
    total = sum(ms for ms, _ in gpu.values())
    top = sorted(gpu.items(), key=lambda kv: -kv[1][0])[:15]
    lines = [f"  {ms:7.3f} ms x{n:<4d} {name[:90]}" for name, (ms, n) in top]
    launched = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    return f"{launched}; GPU time {total:.2f} ms in kernels, the top ones:\n" + "\n".join(lines)


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
    p.add_argument("--model", choices=sorted(VOCAB), default="gpt2")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--mode", default=None)
    p.add_argument("--time", type=int, default=0)
    p.add_argument("--tc", action="store_true")
    p.add_argument("--notes", action="store_true")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--pad-matmuls", choices=["auto", "on", "off"], default="auto")
    p.add_argument("--combo-kernels", choices=["on", "off"], default="on")
    args = p.parse_args()
    compiler.config.pad_matmuls = {"auto": "auto", "on": True, "off": False}[args.pad_matmuls]
    compiler.config.combo_kernels = args.combo_kernels == "on"
    base = make_model(args.model, args.layers)
    ids = torch.randint(0, VOCAB[args.model], (args.batch, args.seq), device="cuda")
    results, timing = {}, {}
    for label in ("eager", "ours", "torch.compile") if args.tc else ("eager", "ours"):
        model = copy.deepcopy(base)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        step = make_step(model, opt)
        if label == "ours":
            step = compiler.compile(step, mode=args.mode)
        elif label == "torch.compile":
            step = torch.compile(step, mode=args.mode)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                results[label] = run(label, step, ids, args.steps)
                if args.time:
                    timing[label] = median_ms(step, ids, args.time)
                if args.profile:
                    print(f"{label}: {launches(step, ids)}")
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
                    for note in e.graph.notes if e.graph else ():
                        if args.notes or "CUDA graph" in note:
                            print(f"  {fn.name}:{e.start_line} note: {note[:600]}")
                for w in fn.warnings:
                    print(f"  {fn.name} warning: {w[:500]}")
    if "eager" in results and "ours" in results:
        print("loss difference after each step:",
              [round(a - b, 5) for a, b in zip(results["eager"], results["ours"])])
    for label, ms in timing.items():
        print(f"{args.model} {label:14s} {ms:8.2f} ms/step (median of {args.time}, mode {args.mode})")


if __name__ == "__main__":
    main()
