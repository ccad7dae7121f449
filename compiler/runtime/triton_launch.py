"""Launching generated Triton kernels: grid and block sizes, warm-up compilation in parallel,
and `max-autotune` (time a few configs on the real buffers, keep the fastest, remember it on
disk)."""

from __future__ import annotations

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from compiler.codegen.common import KernelSource
from compiler.runtime.cache import cache_dir, load_module, source_key, write_atomic

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


def candidate_configs(config: dict) -> list[dict]:
    """The small search space of `max-autotune`, default first."""
    kind, xnumel = config["kind"], config["xnumel"]
    base = {k: config[k] for k in ("XBLOCK", "RBLOCK", "num_warps") if k in config}
    out = [base]
    if kind == "pointwise":
        for xb, w in ((256, 4), (512, 4), (1024, 4), (1024, 8), (2048, 8), (4096, 8)):
            if xb <= max(1 << max(xnumel - 1, 0).bit_length(), 256):
                out.append({"XBLOCK": xb, "num_warps": w})
    elif config.get("persistent"):
        rb = config["RBLOCK"]
        for xb in (1, 2, 4, 8, 16, 32, 64):
            if xb * rb <= 16384 and xb <= max(xnumel, 1):
                for w in (4, 8) if rb >= 256 else (1, 4):
                    out.append({"XBLOCK": xb, "RBLOCK": rb, "num_warps": w})
    else:
        for xb, rb, w in (
            (1, 1024, 4),
            (1, 2048, 8),
            (4, 512, 8),
            (8, 256, 4),
            (16, 128, 4),
            (64, 32, 4),
        ):
            out.append({"XBLOCK": xb, "RBLOCK": rb, "num_warps": w})
    unique = []
    for c in out:
        if c not in unique:
            unique.append(c)
    return unique


class TritonKernel:
    """The object a wrapper line `name.run(*buffers)` calls.

    The first launch for a pattern of pointer alignments goes through `JITFunction`, which
    compiles (or finds) the kernel specialised for it; later launches call that compiled
    kernel's launcher directly. Binding arguments and computing the specialisation key in
    `JITFunction.run` costs tens of microseconds a launch, as much as a small kernel runs.
    Triton specialises pointers on 16-byte alignment, so the alignment of every buffer is
    part of the key: a view at an odd offset gets its own compiled kernel, never one that
    assumes aligned loads."""

    def __init__(self, fn: Any, kernel: KernelSource, mode: str | None, key: str):
        self.fn = fn
        self.name = kernel.name
        self.meta = kernel.config
        self.xnumel = kernel.config["xnumel"]
        self.config = {
            k: kernel.config[k] for k in ("XBLOCK", "RBLOCK", "num_warps") if k in kernel.config
        }
        self.key = key
        self.autotune = mode == "max-autotune" and not INTERPRET
        if self.autotune:
            tuned = read_tuned(self._tuned_path(), self.config)
            if tuned is not None:
                self.config = tuned
                self.autotune = False
        self.launchers: dict[tuple[bool, ...], Callable] = {}

    def _tuned_path(self):
        return cache_dir() / "autotune" / f"{self.key}.json"

    def _grid(self, config: dict) -> tuple[int, int, int]:
        return ((self.xnumel + config["XBLOCK"] - 1) // config["XBLOCK"], 1, 1)

    def _launch(self, args: Sequence[Any], config: dict) -> None:
        blocks = {k: v for k, v in config.items() if k != "num_warps"}
        grid = self._grid(config)
        if INTERPRET:
            self.fn[grid](*args, **blocks)
        else:
            self.fn[grid](*args, **blocks, num_warps=config["num_warps"])

    def run(self, *args: Any) -> None:
        if self.xnumel == 0:
            return
        if INTERPRET:
            self._launch(args, self.config)
            return
        ptrs = [a.data_ptr() for a in args]
        aligned = tuple(p % 16 == 0 for p in ptrs)
        launcher = self.launchers.get(aligned)
        if launcher is None:
            if self.autotune:
                self._tune(args)
            launcher = self._launcher(args)
            self.launchers[aligned] = launcher
        launcher(args, ptrs)

    def _launcher(self, args: Sequence[Any]) -> Callable[[tuple, list], None]:
        """A launch of the kernel compiled for buffers aligned as `args` are, taking their
        addresses: everything that stays the same from launch to launch (grid, block sizes,
        the loaded function, its packed metadata) is bound here once.

        Triton's own path per launch (the compiled kernel's `runner`, then its launcher
        object) costs ~10 µs of Python on the lent H100's host: resnet18's training step
        launches ~120 kernels. Here a launch is the C launcher call alone, given integer
        addresses (Triton's C launcher then neither calls `data_ptr()` nor asks the driver
        about each pointer: the wrapper's buffers are CUDA tensors by construction). That
        call's argument layout is Triton 3.6's; with launch hooks set (a profiler), scratch
        memory to allocate, or another layout, the launch goes through the compiled
        kernel's own launcher object, which handles them (Triton's hooks are chains, never
        None: empty ones are no hooks)."""
        config = self.config
        blocks = {k: v for k, v in config.items() if k != "num_warps"}
        gx, gy, gz = self._grid(config)
        compiled = self.fn.warmup(*args, grid=(gx, gy, gz), **blocks, num_warps=config["num_warps"])
        compiled._init_handles()
        constants = tuple(blocks[k] for k in ("XBLOCK", "RBLOCK") if k in blocks)
        run, function, packed = compiled.run, compiled.function, compiled.packed_metadata
        current_device, current_stream = (
            torch._C._cuda_getDevice,
            torch._C._cuda_getCurrentRawStream,
        )
        c_launch = _c_launch(run)
        if c_launch is not None:
            coop, pdl = run.launch_cooperative_grid, run.launch_pdl
            hooks = _launch_hooks()

            def launch(args: tuple, ptrs: list) -> None:
                if hooks[0].calls or hooks[1].calls:  # a profiler hooked in since
                    return launch_through_triton(args, ptrs)
                c_launch(
                    gx, gy, gz, current_stream(current_device()), function, coop, pdl,
                    None, None, packed, None, None, None, *ptrs, *constants,
                )  # fmt: skip

        def launch_through_triton(args: tuple, _: list) -> None:
            from triton import knobs

            hooks = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
            stream = current_stream(current_device())
            meta = compiled.launch_metadata((gx, gy, gz), stream, *args, *constants)
            run(gx, gy, gz, stream, function, packed, meta, *hooks, *args, *constants)

        return launch if c_launch is not None else launch_through_triton

    def warm(self, args_dtypes: Sequence[torch.dtype]) -> None:
        """Compile ahead of the first launch (GPU only), and build the compiled kernel's
        launcher: Triton builds one with the C compiler per kernel signature (0.1-0.3 s
        each), lazily at the first launch, one after another, unless built here in
        parallel (the first launch then finds it in Triton's cache)."""
        self._warmup(args_dtypes)[(1, 1, 1)]  # indexing loads it and builds the launcher

    def _warmup(self, args_dtypes: Sequence[torch.dtype]) -> Any:
        """Triton's compile (or cache lookup) of this kernel for pointers of these dtypes."""
        blocks = {k: v for k, v in self.config.items() if k != "num_warps"}
        return self.fn.warmup(*args_dtypes, grid=(1,), num_warps=self.config["num_warps"], **blocks)

    def specialisation(self, args_dtypes: Sequence[torch.dtype]) -> str | None:
        """Triton's specialisation data (JSON) for the compile `warm` would do, captured by
        its `jit_cache_hook` without compiling; None when the kernel is already compiled."""
        from triton import knobs

        captured: list[str] = []

        def hook(*, compile: dict, **_: Any) -> bool:
            captured.append(compile["specialization_data"])
            return True  # skip the compile

        previous = knobs.runtime.jit_cache_hook
        knobs.runtime.jit_cache_hook = hook
        try:
            self._warmup(args_dtypes)
        except Exception:
            return None
        finally:
            knobs.runtime.jit_cache_hook = previous
        return captured[0] if captured else None

    def _tune(self, args: Sequence[Any]) -> None:
        from triton.testing import do_bench

        best, best_ms = self.config, float("inf")
        for config in candidate_configs(self.meta):
            try:
                ms = do_bench(lambda c=config: self._launch(args, c), warmup=5, rep=25)
            except Exception:  # a config that does not compile (e.g. too many registers)
                continue
            if ms < best_ms:
                best, best_ms = config, ms
        self.config = best
        self.autotune = False
        write_atomic(self._tuned_path(), json.dumps(best))


def read_tuned(path: Path, default: dict) -> dict | None:
    """The config a max-autotune run saved for a kernel, or None when there is none or it
    cannot be used: a truncated or corrupt file, or one of another shape. Then the kernel
    is tuned again and the file rewritten."""
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict) or set(config) != set(default):
        return None
    if not all(type(v) is int and v > 0 and v & (v - 1) == 0 for v in config.values()):
        return None  # block sizes and warp counts are powers of two
    return config


def _launch_hooks() -> tuple[Any, Any] | None:
    """Triton's launch enter and exit hooks when both are hook chains (Triton 3.6 keeps
    them as chains a profiler adds to, empty when none has), else None."""
    from triton import knobs

    enter, exit_ = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
    if isinstance(getattr(enter, "calls", None), list) and isinstance(
        getattr(exit_, "calls", None), list
    ):
        return enter, exit_
    return None


def _c_launch(run: Any) -> Callable | None:
    """The C function behind a compiled kernel's launcher object, when calling it directly
    is what the object itself would do: Triton 3.6's launcher layout, no scratch memory to
    allocate per launch, launch hooks in chains (the launch checks they are empty)."""
    try:
        from triton.backends.nvidia import driver as nvidia_driver
    except ImportError:
        return None
    if getattr(nvidia_driver, "_BASE_ARGS_FORMAT", None) != "iiiKKppOOOOOO":
        return None
    if _launch_hooks() is None:
        return None
    if getattr(run, "global_scratch_size", 1) or getattr(run, "profile_scratch_size", 1):
        return None
    launch = getattr(run, "launch", None)
    return launch if type(launch).__name__ == "builtin_function_or_method" else None


def load_kernel(kernel: KernelSource, mode: str | None) -> TritonKernel:
    device = "interpreter" if INTERPRET else "cuda"
    module, _ = load_module(kernel.source, device)
    return TritonKernel(
        getattr(module, kernel.name), kernel, mode, source_key(kernel.source, device)
    )


def warm_all(kernels: Sequence[tuple[TritonKernel, Sequence[torch.dtype]]]) -> None:
    """Compile every kernel before the first call, several at a time. A kernel that fails
    here is compiled by its first launch instead (which reports the error)."""
    if INTERPRET or not kernels:
        return

    def warm(item):
        try:
            item[0].warm(item[1])
        except Exception:
            pass

    in_workers(kernels)
    workers = int(os.environ.get("COMPILER_COMPILE_THREADS", min(8, os.cpu_count() or 1)))
    with ThreadPoolExecutor(max_workers=max(workers, 1)) as pool:
        list(pool.map(warm, kernels))


def in_workers(kernels: Sequence[tuple[TritonKernel, Sequence[torch.dtype]]]) -> None:
    """Compile the kernels in the worker processes (compiler/runtime/compile_workers.py),
    when they were started, into Triton's cache, where `warm` then finds them."""
    from compiler.runtime import compile_workers

    workers = compile_workers.pool()
    if workers is None:
        return
    try:
        from triton import knobs  # noqa: F401 (Triton 3.3 and later: the jit_cache_hook knob)
        from triton.runtime import driver

        target = driver.active.get_current_target()
    except Exception:
        return  # an older Triton, or no driver: the parent compiles as without workers
    requests = []
    for kernel, dtypes in kernels:
        spec = kernel.specialisation(dtypes)
        # The module load_kernel imported the kernel from (registered under its name)
        module = sys.modules.get(kernel.fn.fn.__module__)
        if spec is not None and module is not None:
            requests.append(
                compile_workers.Request(
                    module.__file__, module.__name__, kernel.name, spec,
                    (target.backend, target.arch, target.warp_size),
                )
            )  # fmt: skip
    if requests:
        workers.compile_all(requests)
