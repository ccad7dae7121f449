"""Triton compilation in worker processes, so a cold start uses every core.

Triton's front end (the walk over a kernel's Python AST that builds its IR) is Python and
holds the GIL, so compile threads take turns: on the H100's 16-core host, resnet18's 19
kernels took 3.1 s of a 5 s cold start in 8 threads, each kernel 0.3-0.5 s alone. Workers
are plain Python processes that import only Triton. They are started when `compile()` first
wraps a function on a CUDA machine, so they start while the tracer runs. Each compiles a
kernel for the specialisation the parent sends:
- "binary" requests (the default path, compiler/runtime/triton_binary.py): the cubin goes to
  our cache, where the parent loads it for its own launcher. The parent compiles requests
  from the same queue while the workers start, so a few kernels never wait for them.
- "jit" requests (where kernels go through Triton's runtime): the kernel and its launcher go
  to Triton's cache, from the specialisation the parent's JITFunction would compile
  (captured through Triton's `jit_cache_hook` without compiling); the parent's own compile
  then finds both there.

Nothing depends on them: a worker that is missing, slow, or fails only leaves the parent to
compile that kernel itself, as without workers.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]  # holds the `compiler` package
DEADLINE_S = 300.0  # for one batch; a kernel takes well under a second

# The worker: `compiler` and `compiler.runtime` stand in as bare packages, so a kernel module's
# `from compiler.runtime import triton_helpers` imports only that module (the package's
# __init__ imports torch, seconds a worker does not need). One JSON request per line in,
# one JSON answer per line out.
WORKER = r"""
import importlib.util, json, sys, types
root = sys.argv[1]
for name, sub in (("compiler", "compiler"), ("compiler.runtime", "compiler/runtime")):
    pkg = types.ModuleType(name)
    pkg.__path__ = [root + "/" + sub]
    sys.modules[name] = pkg
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

def listless(v):
    return tuple(listless(x) for x in v) if isinstance(v, list) else v

def constant(v):
    if isinstance(v, str) and tl.dtype.is_dtype(v):
        return tl.dtype(v)
    if isinstance(v, dict) and "constexpr" in v:
        return tl.constexpr(listless(v["constexpr"]))
    return listless(v)

from triton.runtime.cache import triton_key
triton_key()  # Triton hashes its installation before its first compile: before "ready",
import triton.compiler.code_generator  # as it imports its code generator
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    try:
        spec = importlib.util.spec_from_file_location(req["module"], req["path"])
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        fn = getattr(module, req["name"])
        if req["kind"] == "binary":  # into our cache, for the parent's own launcher
            from compiler.runtime import triton_binary
            with open(req["path"]) as f:
                source = f.read()
            triton_binary.compile_binary(fn, source, triton_binary.Spec.from_json(req["spec"]))
            print(json.dumps({"ok": True}), flush=True)
            continue
        data = json.loads(req["spec"])
        constexprs = {tuple(k): constant(v) for k, v in zip(data["constant_keys"], data["constant_vals"])}
        attrs = {tuple(k): v for k, v in zip(data["attrs_keys"], data["attrs_vals"])}
        signature = {k: listless(v) for k, v in data["signature"].items()}
        options = {k: listless(v) for k, v in data["options"].items()}
        src = ASTSource(fn, signature, constexprs, attrs)
        kernel = triton.compile(src, target=GPUTarget(*req["target"]), options=options)
        try:  # its launcher too, which Triton builds with the C compiler, into the same cache
            from triton.backends.nvidia.driver import CudaLauncher
            CudaLauncher(kernel.src, kernel.metadata)
        except Exception:
            pass  # another Triton: the parent builds it
        answer = {"ok": True}
    except Exception as exc:
        answer = {"ok": False, "error": repr(exc)[:300]}
    print(json.dumps(answer), flush=True)
"""


@dataclass(frozen=True)
class Request:
    path: str  # the kernel module's file in our cache
    module: str  # the name the parent imported it under
    name: str  # the JITFunction's name in it
    spec: str  # Triton's specialisation data (JSON) for the compile the parent would do
    target: tuple  # (backend, arch, warp_size) of the parent's GPU
    # "jit": into Triton's cache, with its launcher, for JITFunction; "binary": `spec` is a
    # triton_binary.Spec, compiled into our cache
    kind: str = "jit"


class Pool:
    """Worker processes, each answering one request at a time."""

    def __init__(self, size: int):
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        self.procs = [
            subprocess.Popen(
                [sys.executable, "-c", WORKER, str(ROOT)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                env=env,
            )
            for _ in range(size)
        ]
        # Set once a worker says it has imported Triton; the thread reading that line is the
        # worker's only reader until then, compile_all's afterwards.
        self.ready = [threading.Event() for _ in range(size)]
        for proc, ready in zip(self.procs, self.ready):
            threading.Thread(target=_await_ready, args=(proc, ready), daemon=True).start()
        self.lock = threading.Lock()  # one batch at a time: a worker's pipe has one reader

    def compile_all(
        self, requests: list[Request], here: Callable[[int], None] | None = None
    ) -> list[str | None]:
        """Compile every request; returns per request None on success or the error. Blocks
        until each request is answered, or the workers have gone and the calling thread
        does not compile. With `here`, the calling thread takes requests too and compiles
        request k by calling here(k): a few kernels then compile at once, without waiting
        for the workers to be ready."""
        todo: queue.Queue = queue.Queue()
        for k, r in enumerate(requests):
            todo.put((k, r))
        results: list[str | None] = ["not compiled by a worker"] * len(requests)
        done = threading.Condition()
        answered, serving = [0], [len(self.procs)]

        def finish(k: int, result: str | None) -> None:
            with done:
                results[k] = result
                answered[0] += 1
                done.notify_all()

        def serve(w: int) -> None:
            proc = self.procs[w]
            try:
                # wait for the worker to be ready while there is work it could take
                while not self.ready[w].wait(0.02):
                    if todo.empty() or proc.poll() is not None:
                        return
                while proc.poll() is None:
                    try:
                        k, r = todo.get_nowait()
                    except queue.Empty:
                        return
                    proc.stdin.write(json.dumps(r.__dict__) + "\n")
                    proc.stdin.flush()
                    line = proc.stdout.readline()
                    if not line:  # the worker died: its request goes to the parent
                        finish(k, "not compiled by a worker")
                        return
                    answer = json.loads(line)
                    finish(k, None if answer.get("ok") else answer.get("error", "failed"))
            except (OSError, ValueError):
                return
            finally:
                with done:
                    serving[0] -= 1
                    done.notify_all()  # the caller may be waiting for the last one to end

        with self.lock:
            # The calling thread's first request is its own before any worker can take it:
            # a single kernel compiles at once, not after a round trip to a process whose
            # first compile is colder than this one's.
            mine = todo.get_nowait() if here is not None and requests else None
            threads = [
                threading.Thread(target=serve, args=(w,), daemon=True)
                for w in range(len(self.procs))
            ]
            for t in threads:
                t.start()
            while here is not None:
                if mine is not None:
                    (k, _), mine = mine, None
                else:
                    try:
                        k, _ = todo.get_nowait()
                    except queue.Empty:
                        break
                try:
                    here(k)
                    finish(k, None)
                except Exception as exc:
                    finish(k, repr(exc)[:300])
            with done:
                finished = done.wait_for(
                    lambda: answered[0] == len(requests) or serving[0] == 0,
                    timeout=DEADLINE_S,
                )
            if not finished:
                # A worker stuck in a compile: end them all (their readers then see the pipes
                # close); what they had not answered, the parent compiles.
                self.close()
            for t in threads:
                t.join()
        return results

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()


def _await_ready(proc: subprocess.Popen, ready: threading.Event) -> None:
    try:
        if proc.stdout.readline():  # the worker says it has imported Triton
            ready.set()
    except (OSError, ValueError):
        pass


_pool: Pool | None = None


def start(size: int | None = None) -> Pool | None:
    """The process's pool, started on first use (the processes import Triton in the
    background; nothing waits for them here); None when no process can be started."""
    global _pool
    if _pool is None:
        try:
            _pool = Pool(max(size or wanted(), 1))
        except OSError:  # no processes to be had: the parent compiles alone
            return None
        atexit.register(_pool.close)
    return _pool


def wanted() -> int:
    """How many workers: COMPILER_COMPILE_WORKERS (0: none, the parent compiles in threads),
    else one per core up to 16."""
    return int(os.environ.get("COMPILER_COMPILE_WORKERS", min(16, os.cpu_count() or 1)))


def pool() -> Pool | None:
    return _pool
