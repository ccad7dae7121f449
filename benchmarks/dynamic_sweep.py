"""One compile for every size: a decoder block called with 24 sequence lengths, on the CPU
or a GPU; and a GPT-2-style generation loop whose KV cache grows by a token a step.

    .venv/bin/python benchmarks/dynamic_sweep.py [--threads 1] [--repeat 20] [--runners eager,ours]
    .venv/bin/python benchmarks/dynamic_sweep.py --device cuda [--mode reduce-overhead]
    .venv/bin/python benchmarks/dynamic_sweep.py --device cuda --generate 256 [--layers 12]
        [--prompt 32] [--mode reduce-overhead] [--repeat 5]

The block (layer norm, causal attention with its mask built from arange of the length, MLP;
width 256, 4 heads, batch 1) is called once per length, as a generation loop or
variable-length batches call it. For each of eager, ours and torch.compile, a fresh process
with its own empty cache directories times the whole sweep (compiles included) and counts
compiles: ours, the batches of C++ kernels built (a graph's kernels build as one batch) and
the Triton kernel modules loaded (each a Triton compile on a GPU); torch.compile, its
compiled graphs (torch._dynamo's counters: benchmarks only). A new size's call: the median
wall time of the calls at lengths 3..24, each a new size of the dynamic graph (ours: its
lowering onwards; make_fx traces are counted, the dynamic graph's one symbolic). Steady state: one more process
builds all three, calls each at every length until nothing compiles, then times whole
sweeps interleaved round-robin (load from other jobs hits every column alike) and reports
the median per call; on a GPU timed by CUDA events. torch.compile is used here only, as the
anchor we measure against.

`--generate N`: GPT-2 (transformers' GPT2LMHeadModel, its default config, random weights,
float32, `--layers` of them) generates N tokens greedily after a prompt of `--prompt`
tokens, one forward per token with transformers' DynamicCache: N + 1 sizes of the cache.
One fresh process times each runner's first loop (compiles included) and counts compiles,
then times whole loops interleaved (CUDA-event medians) and checks the tokens against
eager's. `--mode` (reduce-overhead: CUDA graphs, one per size) applies to ours and to
torch.compile alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
LENGTHS = (7, 9, 12, 16, 19, 23, 28, 32, 37, 41, 48, 53, 64, 71, 80, 89, 96, 101, 113, 128,
           137, 150, 173, 192)  # fmt: skip
RUNNERS = ("eager", "ours", "torch.compile")
DEVICE = os.environ.get("SWEEP_DEVICE", "cpu")  # the children's device (--device)
MODE = os.environ.get("SWEEP_MODE") or None  # ours' and torch.compile's mode (--mode)
PIPELINE_RUNS: list[int] = []  # ours: graphs compiled from lowering on (one per size)
AOT_TRACES: list[str] = []  # ours: make_fx traces ("concrete" per size, "symbolic" once)


class DecoderBlock(nn.Module):
    def __init__(self, d: int = 256, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / (d // self.heads) ** 0.5)
        i = torch.arange(t, device=x.device)
        att = att.masked_fill(i[None, :] > i[:, None], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


def inputs() -> list[torch.Tensor]:
    torch.manual_seed(1)
    return [torch.randn(1, t, 256, device=DEVICE) for t in LENGTHS]


def build(runner: str, model: nn.Module | None = None):
    """(the callable, a function returning its compile count so far)."""
    torch.manual_seed(0)
    model = (model if model is not None else DecoderBlock()).eval().to(DEVICE)
    if runner == "eager":
        return model, lambda: 0
    if runner == "ours":
        sys.path.insert(0, str(ROOT))
        import compiler
        from compiler.runtime import cpp_build, triton_launch

        # A compile: one batch of C++ kernels built together (its translation units are
        # libraries compiled in parallel), as a graph's kernels are.
        built: list[str] = []
        rounds: list[int] = []
        real, real_many = cpp_build.compile_files, cpp_build.load_many

        def counting(sources, flags, lib):
            built.append(lib.name)
            return real(sources, flags, lib)

        def counting_many(sources, *args):
            before = len(built)
            out = real_many(sources, *args)
            if len(built) > before:
                rounds.append(len(built) - before)
            return out

        # A Triton kernel module loaded: one Triton compile on a GPU (a size-generic one is
        # loaded once for every size)
        real_load = triton_launch.load_function

        def counting_load(source, name):
            rounds.append(1)
            return real_load(source, name)

        # A graph compiled for one size (lowering to kernel text, which runs per size), and
        # the aot stage's make_fx traces (a dynamic graph's once, with symbolic sizes)
        from compiler.aot import symbolic
        from compiler.backends import inductor

        real_fx = inductor.compile_fx

        def counting_fx(*args, **kwargs):
            PIPELINE_RUNS.append(1)
            return real_fx(*args, **kwargs)

        def counting_trace(kind, real):
            def trace(*args, **kwargs):
                AOT_TRACES.append(kind)
                return real(*args, **kwargs)

            return trace

        cpp_build.compile_files, cpp_build.load_many = counting, counting_many
        triton_launch.load_function = counting_load
        inductor.compile_fx = counting_fx
        inductor.trace_forward = counting_trace("concrete", inductor.trace_forward)
        symbolic.trace_forward = counting_trace("symbolic", symbolic.trace_forward)
        compiled = compiler.compile(model, mode=MODE)
        return compiled, lambda: len(rounds)
    from torch._dynamo.utils import counters

    compiled = torch.compile(model, mode=MODE)
    return compiled, lambda: counters["stats"]["unique_graphs"]


class Clock:
    """Wall time on the CPU; CUDA events on a GPU (the GPU's time for what was queued)."""

    def __enter__(self) -> "Clock":
        if DEVICE == "cuda":
            self.events = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self.events[0].record()
        else:
            self.start = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        if DEVICE == "cuda":
            self.events[1].record()
            torch.cuda.synchronize()
            self.seconds = self.events[0].elapsed_time(self.events[1]) / 1e3
        else:
            self.seconds = time.perf_counter() - self.start


def sweep_child(runner: str, threads: int) -> dict:
    torch.set_num_threads(threads)
    xs = inputs()
    fn, compiles = build(runner)
    calls = []
    with torch.no_grad(), Clock() as clock:
        for x in xs:
            start = time.perf_counter()  # wall time: a compile is host work
            fn(x)
            if DEVICE == "cuda":
                torch.cuda.synchronize()
            calls.append(time.perf_counter() - start)
    # every length after the first two is a new size of the dynamic graph (compiled by then)
    out = {
        "sweep_s": clock.seconds,
        "compiles": compiles(),
        "new_size_ms": statistics.median(calls[2:]) * 1e3,
        "calls_s": calls,
    }
    if runner == "ours":
        import compiler

        report = compiler.inspect(fn)
        out["graphs"] = len(report.graphs)
        out["generic_kernel_records"] = sum(1 for k in report.kernels if k.size_generic)
        out["notes"] = [n for g in report.graphs for n in g.notes]
        out["aot_traces"] = AOT_TRACES
        with torch.no_grad():  # correctness at every length
            ref = build("eager")[0]
            out["max_abs_error"] = max(float((fn(x) - ref(x)).abs().max()) for x in xs)
    return out


def steady_child(threads: int, repeat: int, runners: list[str]) -> dict:
    torch.set_num_threads(threads)
    xs = inputs()
    fns = {r: build(r)[0] for r in runners}
    times: dict[str, list[float]] = {r: [] for r in runners}
    with torch.no_grad():
        for fn in fns.values():  # everything compiled, twice over
            for x in xs + xs:
                fn(x)
        for _ in range(repeat):
            for r, fn in fns.items():
                with Clock() as clock:
                    for x in xs:
                        fn(x)
                times[r].append(clock.seconds / len(xs))
    return {r: statistics.median(t) * 1e3 for r, t in times.items()}


# ---- a GPT-2-style generation loop ----------------------------------------------------------


def gpt2(layers: int) -> nn.Module:
    import transformers

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=layers)
    config.resid_pdrop = config.embd_pdrop = config.attn_pdrop = 0.0
    return transformers.GPT2LMHeadModel(config)


def generate(fn, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """Greedy generation: the prompt's forward, then one forward per new token, the KV
    cache (transformers' DynamicCache) growing by one each."""
    import inspect

    import transformers

    # transformers 5 names the argument `cache` (`past_key_values` before); the model grows
    # the one DynamicCache object in place
    params = inspect.signature(transformers.GPT2LMHeadModel.forward).parameters
    kw = {"cache" if "cache" in params else "past_key_values": transformers.DynamicCache()}
    out = fn(input_ids=prompt, use_cache=True, **kw)
    token = out.logits[:, -1:].argmax(-1)
    tokens = [token]
    for _ in range(new_tokens - 1):
        out = fn(input_ids=token, use_cache=True, **kw)
        token = out.logits[:, -1:].argmax(-1)
        tokens.append(token)
    return torch.cat(tokens, 1)


def _prompt(length: int) -> torch.Tensor:
    torch.manual_seed(2)
    return torch.randint(0, 50257, (1, length), device=DEVICE)


def generate_child(layers: int, prompt: int, new_tokens: int, repeat: int, runners) -> dict:
    """One process (a device call has 10 minutes): each runner's first loop, compiles
    included (ours and torch.compile keep separate caches, both empty at the start), then
    whole loops of all runners interleaved."""
    ids = _prompt(prompt)
    fns, cold, tokens = {}, {}, {}
    with torch.no_grad():
        for r in runners:
            fn, compiles = build(r, gpt2(layers))
            with Clock() as clock:
                tokens[r] = generate(fn, ids, new_tokens)
            fns[r], cold[r] = fn, {"loop_s": clock.seconds, "compiles": compiles()}
        ours = fns.get("ours")
        if ours is not None:
            import compiler

            report = compiler.inspect(ours)
            cold["ours"].update(
                graphs=len(report.graphs),
                sizes_compiled=len(PIPELINE_RUNS),
                aot_traces=list(AOT_TRACES),
                generic_kernel_records=sum(1 for k in report.kernels if k.size_generic),
                notes=[n for g in report.graphs for n in g.notes][-12:],
            )
        for fn in fns.values():  # every size compiled and, with CUDA graphs, recorded
            generate(fn, ids, new_tokens)
        times: dict[str, list[float]] = {r: [] for r in runners}
        for _ in range(repeat):
            for r, fn in fns.items():
                with Clock() as clock:
                    generate(fn, ids, new_tokens)
                times[r].append(clock.seconds)
    out = {"cold": cold, "steady_ms": {r: statistics.median(t) * 1e3 for r, t in times.items()}}
    if "eager" in tokens:  # greedy tokens equal to eager's, up to the first that differs
        for r, t in tokens.items():
            same = (t == tokens["eager"]).flatten().tolist()
            cold[r]["tokens_as_eager"] = same.index(False) if False in same else len(same)
    return out


def child(args: list[str], threads: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), SWEEP_DEVICE=DEVICE, SWEEP_MODE=MODE or "")
    with tempfile.TemporaryDirectory() as cache:
        env.update(
            COMPILER_CACHE_DIR=f"{cache}/ours",
            TORCHINDUCTOR_CACHE_DIR=f"{cache}/inductor",
            TRITON_CACHE_DIR=f"{cache}/triton",
            PYTHONPATH=str(ROOT),
        )
        proc = subprocess.run(
            [sys.executable, __file__, "--child", *args],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
    if proc.returncode:
        raise RuntimeError(f"child {args} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--runners", default=",".join(RUNNERS), help="of " + ",".join(RUNNERS))
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--mode", default="", help="ours' and torch.compile's mode")
    parser.add_argument("--generate", type=int, default=0, help="new tokens of a GPT-2 loop")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--child", nargs="+")
    a = parser.parse_args()
    if a.child:
        kind, *rest = a.child
        if kind == "sweep":
            result = sweep_child(rest[0], int(rest[1]))
        elif kind == "steady":
            result = steady_child(int(rest[0]), int(rest[1]), rest[2].split(","))
        else:
            *numbers, runners = rest
            result = generate_child(*map(int, numbers), runners.split(","))
        print(json.dumps(result))
        return
    global DEVICE, MODE
    DEVICE, MODE = a.device, a.mode or None
    runners = a.runners.split(",")
    if a.generate:
        generation(a, runners)
        return
    sweeps = {r: child(["sweep", r, str(a.threads)], a.threads) for r in runners}
    steady = child(["steady", str(a.threads), str(a.repeat), a.runners], a.threads)
    print(f"decoder block, width 256, {len(LENGTHS)} lengths {LENGTHS[0]}..{LENGTHS[-1]}, "
          f"{_where(a)}, {a.threads} thread(s), load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    print("| | whole sweep, compiles included | steady state per call | compiles | "
          "a new size's call (median of lengths 3..24) |")  # fmt: skip
    print("|---|---|---|---|---|")
    for r in runners:
        s = sweeps[r]
        print(f"| {r} | {s['sweep_s']:.2f} s | {steady[r]:.3f} ms | {s['compiles']} | "
              f"{s['new_size_ms']:.1f} ms |")  # fmt: skip
    ours = sweeps.get("ours")
    if ours is None:
        return
    print(f"ours: max |error| vs eager {ours['max_abs_error']:.2e}; graphs {ours['graphs']}; "
          f"kernel records run size-generic {ours['generic_kernel_records']}; make_fx traces "
          f"{_traces(ours['aot_traces'])}")  # fmt: skip
    for note in ours["notes"]:
        print(f"  note: {note}")


def _traces(kinds: list[str]) -> str:
    return ", ".join(f"{kinds.count(k)} {k}" for k in dict.fromkeys(kinds)) or "none"


def _where(a) -> str:
    device = torch.cuda.get_device_name() if a.device == "cuda" else "CPU"
    return f"{device}, mode {a.mode or 'default'}"


def generation(a, runners: list[str]) -> None:
    shape = [str(a.layers), str(a.prompt), str(a.generate), str(a.repeat)]
    result = child(["generate", *shape, ",".join(runners)], a.threads)
    cold, steady = result["cold"], result["steady_ms"]
    print(f"GPT-2 ({a.layers} layers, width 768, random weights, float32), prompt {a.prompt}, "
          f"{a.generate} new tokens (KV cache {a.prompt}..{a.prompt + a.generate - 1}), "
          f"{_where(a)}, load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    print("| | first loop, compiles included | loop, steady state (median) | per token | "
          "compiles | tokens as eager's |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for r in runners:
        ms = steady[r]
        same = cold[r].get("tokens_as_eager", "")
        print(f"| {r} | {cold[r]['loop_s']:.2f} s | {ms:.1f} ms | {ms / a.generate:.3f} ms | "
              f"{cold[r]['compiles']} | {same} |")  # fmt: skip
    ours = cold.get("ours")
    if ours is not None:
        print(f"ours: graph records {ours['graphs']}; graphs compiled per size (lowering to "
              f"kernel text, kernels not compiled again) {ours['sizes_compiled']}; make_fx "
              f"traces {_traces(ours['aot_traces'])}; kernel records run size-generic "
              f"{ours['generic_kernel_records']}")  # fmt: skip
        for note in ours["notes"]:
            print(f"  note: {note}")


if __name__ == "__main__":
    main()
