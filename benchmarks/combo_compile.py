"""How long Triton takes to compile an AdamW step's combined kernel, by its number of parts.

Writes, for each count of parts, the combined kernel our emitter makes of that many fp32
AdamW updates (parameters of distinct sizes, so that vertical fusion joins none of them),
from a run under Triton's interpreter in a process of its own; then compiles each for sm_90
in this process, one after another, and prints the seconds of each stage of Triton's
compile: the AST front end (`ast`: the walk over the kernel's Python that builds its Triton
IR), make_ttir, make_ttgir, make_llir, make_ptx and ptxas (`cubin`). No GPU needed; on a
GPU machine the numbers are the same compile the compile workers run
(compiler/runtime/compile_workers.py).

    python benchmarks/combo_compile.py                 # 1 4 8 16 32 parts
    python benchmarks/combo_compile.py --parts 32 --folder /tmp/k   # keeps the kernels
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# run under TRITON_INTERPRET=1: an AdamW step over `parts` parameters, its combined kernel
# written to `folder`
GENERATE = r"""
import sys, torch
import compiler
from compiler import config
parts, folder = int(sys.argv[1]), sys.argv[2]
g = torch.Generator().manual_seed(0)
# GPT-2-like widths, each size its own (7 + k rows of 48): one update kernel per parameter
ps = [torch.nn.Parameter(torch.randn(7 + k, 48, generator=g)) for k in range(parts)]
opt = torch.optim.AdamW(ps, lr=1e-3, weight_decay=0.1)
for p in ps:
    p.grad = torch.randn(p.shape, generator=g)
step = compiler.compile(lambda o: o.step())
with config.patch(combo_kernels=True):
    step(opt)
(record,) = [f for f in compiler.inspect(step).functions if f.name.endswith("_step")]
kernels = [k for k in record.graphs[0].kernels if "expm1" in k.name or k.parts]
kernel = max(kernels, key=lambda k: len(k.parts))
assert len(kernel.parts) == (parts if parts > 1 else 0), [len(k.parts) for k in kernels]
open(f"{folder}/adamw_{parts}.py", "w").write(kernel.source)
"""


def generate(parts: int, folder: Path) -> Path:
    env = dict(os.environ, TRITON_INTERPRET="1", COMPILER_CPU_EMITTER="triton",
               PYTHONPATH=str(ROOT), COMPILER_CACHE_DIR=str(folder / "cache"))  # fmt: skip
    subprocess.run(
        [sys.executable, "-c", GENERATE, str(parts), str(folder)], env=env, check=True, cwd=ROOT
    )
    return folder / f"adamw_{parts}.py"


def compile_timed(path: Path, xblock: int = 1024, num_warps: int = 4) -> dict[str, float]:
    """Seconds per stage of compiling the kernel module at `path` for sm_90, as the runtime
    compiles it (compiler/runtime/triton_binary.py: aligned pointers, the block size a GPU
    run uses)."""
    import importlib.util

    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend
    from triton.compiler.compiler import ASTSource

    from compiler.runtime.triton_binary import Spec, ast_source

    times: dict[str, float] = {}

    def timed(name, fn):
        def run(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                times[name] = times.get(name, 0.0) + time.perf_counter() - t

        return run

    add_stages, make_ir = CUDABackend.add_stages, ASTSource.make_ir

    def add_timed_stages(self, stages, options, language):
        add_stages(self, stages, options, language)
        for name in list(stages):
            stages[name] = timed(name, stages[name])

    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = next(v for v in vars(module).values() if isinstance(v, triton.runtime.jit.JITFunction))
    source = path.read_text()
    dtypes = []
    for name in fn.arg_names:
        if name != "XBLOCK":
            dtypes.append(re.search(rf"# {name} = \w+: (\w+)\[", source).group(1))
    binary_spec = Spec(
        tuple(dtypes), (True,) * len(dtypes), (("XBLOCK", xblock),), num_warps, ("cuda", 90, 32)
    )
    CUDABackend.add_stages = add_timed_stages
    ASTSource.make_ir = timed("ast", make_ir)
    knobs.compilation.always_compile = True
    t = time.perf_counter()
    try:
        triton.compile(
            ast_source(fn, binary_spec),
            target=GPUTarget("cuda", 90, 32),
            options={"num_warps": num_warps, "enable_fp_fusion": True},
        )
    finally:
        CUDABackend.add_stages, ASTSource.make_ir = add_stages, make_ir
    times["total"] = time.perf_counter() - t
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", type=int, nargs="*", default=[1, 4, 8, 16, 32])
    parser.add_argument("--folder", help="where the kernels go (default: a temporary folder)")
    parser.add_argument("--kernels", nargs="*", default=[], help="kernel modules to time too")
    parser.add_argument("--repeat", type=int, default=1, help="compiles per kernel (median)")
    args = parser.parse_args()
    folder = Path(args.folder or tempfile.mkdtemp(prefix="combo_compile_"))
    folder.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TRITON_CACHE_DIR", str(folder / "triton_cache"))
    sys.path.insert(0, str(ROOT))
    stages = ["ast", "ttir", "ttgir", "llir", "ptx", "cubin", "total"]
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; seconds:")
    print(f"{'parts':>5} " + " ".join(f"{s:>6}" for s in stages))
    paths = [generate(parts, folder) for parts in args.parts] + [Path(k) for k in args.kernels]
    compile_timed(paths[0])  # Triton's first compile hashes its installation: not timed
    for path in paths:
        parts = len(re.findall(r"^\s+# part \d+ ", path.read_text(), re.M)) or 1
        runs = [compile_timed(path) for _ in range(args.repeat)]
        runs.sort(key=lambda r: r["total"])
        best = runs[len(runs) // 2]
        times = " ".join(f"{best.get(s, 0.0):6.2f}" for s in stages)
        print(f"{parts:>5} {times}  {path.name}", flush=True)


if __name__ == "__main__":
    main()
