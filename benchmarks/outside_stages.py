"""Where a first call spends the time no named compile stage records: a sampling profiler
(a thread reading the main thread's stack every few milliseconds, wall clock, waits
included) that keeps the samples taken outside the tracer's `trace`, the backend and every
`GraphRecord.stage(...)` (a training graph's backward compiles at its first call, outside
the backend), grouped by the innermost frames of compiler/ (and of generated wrappers).

    with OutsideStages() as sampler:
        step(...)
    sampler.report(25)

Used by benchmarks/cold_train.py --outside N; pure Python, so it runs on the GPU machine.
"""

from __future__ import annotations

import collections
import contextlib
import sys
import threading
import time

from compiler import records

# Frames that are a named stage by themselves (their time is recorded without stage()):
# the tracer's `trace` (compiler/tracer/evaluator.py times _trace up to GraphBuilder.finish)
# and `backend` (_run_backend).
_STAGE_FRAMES = {
    ("evaluator.py", "_trace"),
    ("graph_builder.py", "finish"),
    ("evaluator.py", "_run_backend"),
}


class OutsideStages:
    def __init__(self, interval_s: float = 0.002) -> None:
        self.interval_s = interval_s
        self.samples: collections.Counter = collections.Counter()
        self.leaves: collections.Counter = collections.Counter()
        self.taken = 0.0  # seconds sampled
        self._depth = 0
        self._stop = threading.Event()
        self._real_stage = records.GraphRecord.stage

    def __enter__(self) -> OutsideStages:
        real, sampler = self._real_stage, self

        @contextlib.contextmanager
        def stage(record, name):
            sampler._depth += 1
            try:
                with real(record, name):
                    yield
            finally:
                sampler._depth -= 1

        records.GraphRecord.stage = stage
        self._main = threading.get_ident()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        records.GraphRecord.stage = self._real_stage

    def _run(self) -> None:
        # Each sample stands for the time since the one before: the thread waits for the
        # GIL, so samples come further apart while the main thread runs Python.
        last = time.perf_counter()
        while not self._stop.wait(self.interval_s):
            frame = sys._current_frames().get(self._main)
            now = time.perf_counter()
            weight, last = now - last, now
            if frame is None:
                continue
            self.taken += weight
            if self._depth:
                continue
            stack = []
            while frame is not None:
                code = frame.f_code
                name = code.co_filename.rsplit("/", 1)[-1]
                if (name, code.co_name) in _STAGE_FRAMES:
                    break
                stack.append((code.co_filename, name, code.co_name, frame.f_lineno))
                frame = frame.f_back
            else:
                ours = [s for s in stack if "/compiler/" in s[0] or "/wrappers/" in s[0]]
                key = " < ".join(f"{s[2]}@{s[1]}" for s in ours[:3]) or "(not ours)"
                self.samples[key] += weight
                self.leaves[f"{stack[0][2]}@{stack[0][1]}:{stack[0][3]}"] += weight

    def report(self, top: int) -> None:
        outside = sum(self.samples.values())
        print(
            f"sampled outside the named stages: {outside:.2f} s of {self.taken:.2f} s "
            f"(a sample every {self.interval_s * 1e3:.0f} ms or more)"
        )
        print("| s | innermost frames of ours (inner < outer) |\n|---|---|")
        for key, seconds in self.samples.most_common(top):
            print(f"| {seconds:.3f} | {key} |")
        print("| s | innermost frame |\n|---|---|")
        for key, seconds in self.leaves.most_common(top):
            print(f"| {seconds:.3f} | {key} |")
