"""The driver half of benchmarks/models.py: each model and mode in a subprocess of its own
with fresh, empty caches, killed at --timeout, its row appended to OUT.jsonl as it finishes.

`--jobs N` runs N of those subprocesses at once, each with its share of the cores for our
compile workers. Their timings then contend for the CPU and the GPU, so a run with more than
one job measures capture and correctness only (models.py makes --jobs imply --no-timing).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.model_suites import ModelSpec

ROOT = Path(__file__).resolve().parents[1]
MODELS_SCRIPT = ROOT / "benchmarks" / "models.py"


def commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "")
    except OSError:
        return "?"


def new_row(spec: ModelSpec, args: argparse.Namespace, mode: str | None = None) -> dict[str, Any]:
    mode = mode or args.mode
    return {
        "suite": spec.suite,
        "model": spec.name,
        "mode": mode,
        "device": args.device,
        "dtype": args.dtype,
        "batch": default_batch(args, mode),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "commit": os.environ.get("MODELS_BENCH_COMMIT") or commit(),
        "host": f"{platform.node()}, {os.cpu_count()} cores",
        "skip_torch_compile": args.skip_torch_compile,
    }


def run_isolated(spec: ModelSpec, mode: str, args: argparse.Namespace, log: Path) -> dict:
    """One model in one mode in a fresh process with empty caches; killed at --timeout."""
    with tempfile.TemporaryDirectory(prefix="models-bench-") as tmp:
        partial = Path(tmp) / "row.json"
        env = dict(os.environ)
        env.update(
            COMPILER_CACHE_DIR=str(Path(tmp) / "ours"),
            TORCHINDUCTOR_CACHE_DIR=str(Path(tmp) / "inductor"),
            TRITON_CACHE_DIR=str(Path(tmp) / "triton"),
            PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
            MODELS_BENCH_COMMIT=args.commit,
        )
        if args.jobs > 1:
            # Each job's compile workers get their share of the cores (and torch.compile's
            # its share of threads), not all of them each.
            share = str(max(1, (os.cpu_count() or 1) // args.jobs))
            env.setdefault("COMPILER_COMPILE_WORKERS", share)
            env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", share)
        cmd = [
            sys.executable,
            str(MODELS_SCRIPT),
            "--worker",
            f"{spec.suite}:{spec.name}",
            "--partial",
            str(partial),
            *_forwarded(args, mode),
        ]
        start = time.perf_counter()
        with open(log, "w") as log_file:
            proc = subprocess.Popen(
                cmd,
                env=env,
                cwd=ROOT,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                proc.wait(timeout=args.timeout)
                outcome = None if proc.returncode == 0 else f"exit status {proc.returncode}"
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                outcome = f"timeout after {args.timeout} s"
        row = json.loads(partial.read_text()) if partial.exists() else new_row(spec, args, mode)
        row["mode"] = mode
        row["wall_s"] = round(time.perf_counter() - start, 1)
    if outcome is not None:
        row["outcome"] = outcome
        if "error" not in row:
            tail = [line for line in log.read_text().splitlines() if line.strip()][-2:]
            row["error"] = (
                f"{outcome} in {row.get('phase', 'start-up')}: " + " | ".join(tail)[-300:]
            )
    return row


def _forwarded(args: argparse.Namespace, mode: str) -> list[str]:
    out = [
        "--mode", mode, "--device", args.device, "--dtype", args.dtype,
        "--batch", str(default_batch(args, mode)), "--size", str(args.size), "--seq", str(args.seq),
        "--budget", str(args.budget),
    ]  # fmt: skip
    out += ["--skip-torch-compile"] if args.skip_torch_compile else []
    return out + (["--no-timing"] if args.no_timing else [])


def default_batch(args: argparse.Namespace, mode: str) -> int:
    """--batch, else 16 on GPU; on CPU 2 for eval and 4 for train: at batch 2 the last batch
    norms of a 64 px ReLU6 network (mobilenetv2, efficientnet_lite) see 8 values each, and
    a train step is so ill-conditioned that compiled code (ours and torch.compile's) lands
    far outside float32's tolerance of float64 while eager's double-accumulated batch norm
    does not."""
    if args.batch:
        return args.batch
    if args.device != "cpu":
        return 16
    return 4 if mode == "train" else 2


def read_rows(paths: list[Path]) -> list[dict]:
    """Rows of several runs; a later row for the same model, mode and device replaces one."""
    rows: dict[tuple, dict] = {}
    for path in paths:
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                rows[(row["suite"], row["model"], row["mode"], row["device"])] = row
    return list(rows.values())


def run_all(
    work: list[tuple[ModelSpec, str]], args: argparse.Namespace, jsonl: Path, logs: Path
) -> None:
    """Every (model, mode) of `work` in isolation, `args.jobs` at a time; rows are appended
    to `jsonl` (and a line printed) as each finishes."""
    lock = threading.Lock()

    def one(item: tuple[ModelSpec, str]) -> None:
        spec, mode = item
        row = run_isolated(spec, mode, args, logs / f"{spec.suite}-{spec.name}-{mode}.log")
        ours = row.get("ours", {})
        with lock:
            with open(jsonl, "a") as f:
                f.write(json.dumps(row, default=str) + "\n")
            print(
                f"{spec.suite}:{spec.name} {mode}: {row.get('phase')} {row.get('wall_s')} s; "
                f"ours graphs={ours.get('graphs')} correct={ours.get('correct')} "
                f"{ours.get('error') or row.get('error') or ''}",
                flush=True,
            )

    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        list(pool.map(one, work))
