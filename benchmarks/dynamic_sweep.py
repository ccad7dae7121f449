"""One compile for every size: a decoder block called with 24 sequence lengths, on the CPU.

    .venv/bin/python benchmarks/dynamic_sweep.py [--threads 1] [--repeat 20] [--runners eager,ours]

The block (layer norm, causal attention with its mask built from arange of the length, MLP;
width 256, 4 heads, batch 1) is called once per length, as a generation loop or
variable-length batches call it. For each of eager, ours and torch.compile, a fresh process
with its own empty cache directories times the whole sweep (compiles included) and counts
compiles: ours, the batches of C++ kernels built (a graph's kernels build as one batch);
torch.compile, its compiled graphs (torch._dynamo's counters: benchmarks only). Steady
state: one more process builds all three, calls each at every length until nothing
compiles, then times whole sweeps interleaved round-robin (load from other jobs hits every
column alike) and reports the median per call. torch.compile is used here only, as the
anchor we measure against.
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
    return [torch.randn(1, t, 256) for t in LENGTHS]


def build(runner: str):
    """(the callable, a function returning its compile count so far)."""
    torch.manual_seed(0)
    model = DecoderBlock().eval()
    if runner == "eager":
        return model, lambda: 0
    if runner == "ours":
        sys.path.insert(0, str(ROOT))
        import compiler
        from compiler.runtime import cpp_build

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

        cpp_build.compile_files, cpp_build.load_many = counting, counting_many
        compiled = compiler.compile(model)
        return compiled, lambda: len(rounds)
    from torch._dynamo.utils import counters

    compiled = torch.compile(model)
    return compiled, lambda: counters["stats"]["unique_graphs"]


def sweep_child(runner: str, threads: int) -> dict:
    torch.set_num_threads(threads)
    xs = inputs()
    fn, compiles = build(runner)
    start = time.perf_counter()
    with torch.no_grad():
        for x in xs:
            fn(x)
    out = {"sweep_s": time.perf_counter() - start, "compiles": compiles()}
    if runner == "ours":
        import compiler

        report = compiler.inspect(fn)
        out["graphs"] = len(report.graphs)
        out["generic_kernel_records"] = sum(1 for k in report.kernels if k.size_generic)
        out["notes"] = [n for g in report.graphs for n in g.notes]
        with torch.no_grad():  # correctness at every length
            ref = DecoderBlock().eval()
            ref.load_state_dict(build("eager")[0].state_dict())
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
                start = time.perf_counter()
                for x in xs:
                    fn(x)
                times[r].append((time.perf_counter() - start) / len(xs))
    return {r: statistics.median(t) * 1e3 for r, t in times.items()}


def child(args: list[str], threads: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
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
    parser.add_argument("--child", nargs="+")
    a = parser.parse_args()
    if a.child:
        kind = a.child[0]
        if kind == "sweep":
            result = sweep_child(a.child[1], int(a.child[2]))
        else:
            result = steady_child(int(a.child[1]), int(a.child[2]), a.child[3].split(","))
        print(json.dumps(result))
        return
    runners = a.runners.split(",")
    sweeps = {r: child(["sweep", r, str(a.threads)], a.threads) for r in runners}
    steady = child(["steady", str(a.threads), str(a.repeat), a.runners], a.threads)
    print(f"decoder block, width 256, {len(LENGTHS)} lengths {LENGTHS[0]}..{LENGTHS[-1]}, "
          f"CPU, {a.threads} thread(s), load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    print("| | whole sweep, compiles included | steady state per call | compiles |")
    print("|---|---|---|---|")
    for r in runners:
        s = sweeps[r]
        print(f"| {r} | {s['sweep_s']:.2f} s | {steady[r]:.3f} ms | {s['compiles']} |")
    ours = sweeps.get("ours")
    if ours is None:
        return
    print(f"ours: max |error| vs eager {ours['max_abs_error']:.2e}; graphs {ours['graphs']}; "
          f"kernel records run size-generic {ours['generic_kernel_records']}")  # fmt: skip
    for note in ours["notes"]:
        print(f"  note: {note}")


if __name__ == "__main__":
    main()
