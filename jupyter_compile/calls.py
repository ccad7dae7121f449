"""The durations of the calls the user makes through a compiled wrapper.

Timing what the user already ran is the one measurement that cannot change anything the user
sees, so every call through `%%compile`'s wrapper is timed here: `perf_counter` around a CPU
call; CUDA events around a call on the GPU, read later (the call is never synchronised, so a
training loop keeps its overlap). Calls that compiled are left out of the log: they measure
the compiler, which the Timing tab shows by stage.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from typing import Any

import torch

MAX_CALLS = 1000  # the most recent calls kept


def on_cuda(args: tuple, kwargs: dict, owner: object = None) -> bool:
    """Whether the call runs on a GPU: a tensor argument (or the module's first parameter) is
    on one. Top-level arguments only: this runs on every call."""
    values = [*args, *kwargs.values()]
    if isinstance(owner, torch.nn.Module):
        values.append(next(owner.parameters(), None))
    return any(isinstance(v, torch.Tensor) and v.is_cuda for v in values)


class CallLog:
    """Milliseconds of the user's recent calls, and how many calls compiled."""

    def __init__(self) -> None:
        self._cpu_ms: collections.deque[float] = collections.deque(maxlen=MAX_CALLS)
        self._events: collections.deque[tuple[Any, Any]] = collections.deque(maxlen=MAX_CALLS)
        self.compiling_calls = 0

    def call(self, fn: Callable, args: tuple, kwargs: dict, cuda: bool, compiling: bool) -> Any:
        __tracebackhide__ = True  # IPython and pytest leave this frame out
        if compiling:
            self.compiling_calls += 1
            return fn(*args, **kwargs)
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            result = fn(*args, **kwargs)
            end.record()
            self._events.append((start, end))
            return result
        t0 = time.perf_counter()
        result = fn(*args, **kwargs)
        self._cpu_ms.append((time.perf_counter() - t0) * 1e3)
        return result

    def samples_ms(self) -> list[float]:
        """The finished calls' durations, oldest first (GPU calls still running are left out)."""
        gpu = [s.elapsed_time(e) for s, e in self._events if e.query()]
        return [*self._cpu_ms, *gpu]

    def __len__(self) -> int:
        return len(self._cpu_ms) + len(self._events)
