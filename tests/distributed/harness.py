"""Two CPU ranks over gloo for the distributed tests: `run_ranks(worker, *args)` spawns two
processes that join one process group (through a file store, so parallel runs never race
for a port), run `worker(rank, *args)` and leave; a failure in either rank fails the test
with that rank's traceback."""

from __future__ import annotations

import os
import tempfile
from typing import Any, Callable

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 2
# two processes that each import torch and compile: 20-40 s a test on a 2-core machine
TWO_RANKS = [
    pytest.mark.slow,
    pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()), reason="needs gloo"),
]


def run_ranks(worker: Callable[..., None], *args: Any) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        mp.spawn(_entry, args=(store, worker, args), nprocs=WORLD, join=True)


def _entry(rank: int, store: str, worker: Callable[..., None], args: tuple) -> None:
    torch.set_num_threads(1)  # two ranks on a 2-core CI machine
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    try:
        worker(rank, *args)
    finally:
        dist.destroy_process_group()
