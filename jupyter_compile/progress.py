"""A "compiling…" note under the running cell when a call takes longer than a moment.

The compiler tells nobody that a compile has *started* (records only change once it is done),
so the caller guesses: a call whose input signature (tensor shapes, dtypes, devices, constant
values) is new for this target is the one that may trace and compile. For such calls a timer
starts; if the call is still running after `DELAY_S`, a note appears, and when the call ends it
says whether the compiler recorded a compile during the call (a records subscription tells)
and how long it took. Calls with a known signature never start a timer, so a training loop
pays one set lookup per call.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable
from typing import Any

import torch
from IPython.display import HTML, display

from compiler import records
from jupyter_compile.html import esc

DELAY_S = 0.5
_MAX_SIGNATURES = 256


def _describe(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return ("T", tuple(value.shape), value.dtype, value.device.type, value.requires_grad)
    if isinstance(value, (int, float, bool, str, type(None))):
        return value
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_describe(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((k, _describe(v)) for k, v in value.items() if isinstance(k, str)))
    return type(value).__qualname__


def call_signature(args: tuple, kwargs: dict, owner: object = None) -> tuple:
    """What a guard would most likely check about this call, as a hashable value."""
    return (id(owner), _describe(args), tuple(sorted((k, _describe(v)) for k, v in kwargs.items())))


class SignatureLog:
    """The signatures a target has been called with (bounded: past the cap, nothing is new)."""

    def __init__(self) -> None:
        self._seen: set[tuple] = set()

    def is_new(self, signature: tuple) -> bool:
        if signature in self._seen or len(self._seen) >= _MAX_SIGNATURES:
            return False
        try:
            self._seen.add(signature)
        except TypeError:  # an unhashable constant inside: treat as seen, show no note
            return False
        return True


def _note(text: str, busy: bool) -> HTML:
    color = "#8a6d3b" if busy else "#3c763d"
    icon = "&#9203;" if busy else "&#10003;"
    return HTML(
        f'<div class="jc-progress" style="color: {color}; font-size: 12px;">'
        f"{icon} {esc(text)}</div>"
    )


class CompileProgress:
    """Context manager around one call that may compile."""

    def __init__(self, name: str, delay_s: float | None = None) -> None:
        self.name = name
        self.delay_s = DELAY_S if delay_s is None else delay_s
        self._handle = None
        self._lock = threading.Lock()
        self._done = False
        self._start = 0.0
        self._timer: threading.Timer | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self.compiled = False  # whether the compiler recorded anything during the call

    def _show(self) -> None:
        with self._lock:
            if self._done:
                return
            try:
                text = f"compiling {self.name} for new inputs…"
                self._handle = display(_note(text, busy=True), display_id=True)
            except Exception:  # no display available: the note is a nicety, never an error
                self._handle = None

    def _changed(self, _record: object) -> None:
        self.compiled = True

    def __enter__(self) -> CompileProgress:
        self._start = time.perf_counter()
        self._unsubscribe = records.subscribe(self._changed)
        # The note must land under the cell that made the call: run the timer in this context.
        context = contextvars.copy_context()
        self._timer = threading.Timer(self.delay_s, context.run, args=(self._show,))
        self._timer.daemon = True
        self._timer.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._unsubscribe is not None:
            self._unsubscribe()
        with self._lock:
            self._done = True
            if self._handle is None:
                return
            elapsed = time.perf_counter() - self._start
            if exc_type is not None:
                text = f"{self.name}: the call failed after {elapsed:.1f} s"
            elif self.compiled:
                text = f"{self.name}: compiled for these inputs; the call took {elapsed:.1f} s"
            else:
                text = f"{self.name}: nothing to compile (its guards held); the call took {elapsed:.1f} s"
            try:
                self._handle.update(_note(text, busy=False))
            except Exception:
                pass
