"""Autocast regions as state changes: what a traced `with torch.autocast(...)` block becomes.

A graph holds `set_autocast(device, enabled, dtype)` calls where the block opens and closes.
make_fx runs them while it traces the graph (so autocast's casts are recorded as ops), the
eager backends run them as written, and the frame evaluator applies the state a graph ends
in when a graph break falls inside the block. The `__exit__` left on the stack at such a
break is an `AutocastRestore`, which holds only constants: the resumed entry's guards
compare them, never an object made at run time.

torch.autocast's own `__enter__` also switches on its weight-cast cache, cleared when the
outermost block exits. A region entered here switches the cache off instead: a graph that
opens a block and a later one that closes it (a break between) cannot pair the nesting
counts that clear it, and a stale cast of a weight the optimizer has updated since would
be a silent wrong result. Without the cache every use casts anew: the same values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

DEVICE_TYPES = ("cpu", "cuda")

# (enabled, dtype, cache_enabled) of one device type
State = tuple[bool, torch.dtype, bool]


def state_of(device_type: str) -> State:
    return (
        torch.is_autocast_enabled(device_type),
        torch.get_autocast_dtype(device_type),
        torch.is_autocast_cache_enabled(),
    )


def set_autocast(device_type: str, enabled: bool, dtype: torch.dtype, cache: bool) -> None:
    """Autocast for `device_type` switched to `enabled` with `dtype`; `cache` is the weight
    cast cache's switch (off inside a traced block, see the module's docstring)."""
    torch.set_autocast_enabled(device_type, enabled)
    torch.set_autocast_dtype(device_type, dtype)
    torch.set_autocast_cache_enabled(cache)


def snapshot() -> dict[str, State]:
    return {d: state_of(d) for d in DEVICE_TYPES}


def restore(states: dict[str, State]) -> None:
    for device_type, (enabled, dtype, cache) in states.items():
        set_autocast(device_type, enabled, dtype, cache)


def switch_off() -> None:
    for device_type in DEVICE_TYPES:
        set_autocast(device_type, False, torch.get_autocast_dtype(device_type), True)


@contextmanager
def preserved() -> Iterator[None]:
    """Whatever a traced graph's autocast calls switch while make_fx runs it is switched
    back afterwards: a graph may end inside a block that a later graph closes."""
    before = snapshot()
    try:
        yield
    finally:
        restore(before)


def outside(run: Callable) -> Callable:
    """`run` (compiled code) called with autocast off: make_fx recorded autocast's casts as
    ops of the graph, each under the state of its place in the graph (a traced block may
    switch it), so extern calls must not be cast again by the state around the call."""

    def call(*args: Any) -> Any:
        if not torch._C._is_any_autocast_enabled():
            return run(*args)
        before = snapshot()
        switch_off()
        try:
            return run(*args)
        finally:
            restore(before)

    return call


class AutocastRestore:
    """The real `__exit__` of a traced autocast block, left on the stack at a graph break:
    it switches `device_type` back to the state before the block."""

    def __init__(self, device_type: str, before: State):
        self.device_type = device_type
        self.before = before

    def __call__(self, *exc_info: object) -> None:
        set_autocast(self.device_type, *self.before)
