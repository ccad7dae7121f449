"""Launching generated Triton kernels: grid and block sizes, warm-up compilation in parallel,
and `max-autotune` (time a few configs on the real buffers, keep the fastest, remember it on
disk)."""

from __future__ import annotations

import functools
import json
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import torch

from compiler.runtime.cache import cache_dir, load_module, source_key, write_atomic

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


class KernelText(Protocol):
    """What the runtime reads of a generated kernel (codegen's KernelSource has it): the
    runtime names no codegen module, which sits above it."""

    name: str
    source: str
    config: dict[str, Any]


def candidate_configs(config: dict) -> list[dict]:
    """The small search space of `max-autotune`, default first (a combo kernel's: its own
    config alone)."""
    kind, xnumel = config["kind"], config["xnumel"]
    base = {k: config[k] for k in ("XBLOCK", "RBLOCK", "num_warps") if k in config}
    out = [base]
    if kind == "combo":  # its table of program ids is written for its XBLOCK
        return out
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

    With Triton 3.6 and the C++ extension built, the kernel is compiled into our cache and
    launched by the extension's `CudaLaunch` (compiler/runtime/triton_binary.py: no C module
    built with gcc per kernel). Otherwise the first launch for a pattern of pointer
    alignments goes through `JITFunction`, which compiles (or finds) the kernel specialised
    for it, and later launches call that compiled kernel's launcher directly. Binding
    arguments and computing the specialisation key in `JITFunction.run` costs tens of
    microseconds a launch, as much as a small kernel runs. Triton specialises pointers on
    16-byte alignment, so the alignment of every buffer is part of the key: a view at an odd
    offset gets its own compiled kernel, never one that assumes aligned loads.

    A size-generic kernel (compiler/codegen/triton_sized.py) is one function shared by the
    sizes of a dynamic graph: each size's TritonKernel passes its own `sizes` after the
    buffers, with its own grid and block sizes."""

    def __init__(
        self,
        fn: Any,
        kernel: KernelText,
        mode: str | None,
        key: str,
        sizes: dict[str, int | float] | None = None,
        generic: Any = None,
    ):
        self.fn = fn
        self.name = kernel.name
        self.mode = mode
        self.own: KernelText | None = None  # a size-generic kernel's per-size code
        self.sizes = sizes or {}
        self.generic = generic  # the size_args.Variant whose code it runs, if any
        self._values = tuple(self.sizes.values())
        self.meta = kernel.config
        self.xnumel = kernel.config["xnumel"]
        self.config = {
            k: kernel.config[k] for k in ("XBLOCK", "RBLOCK", "num_warps") if k in kernel.config
        }
        # A size-generic kernel's sizes share its source: what max-autotune saves is kept per
        # range of block sizes (a persistent reduction's RBLOCK must hold its rows)
        if self._values:
            key += "-" + "-".join(f"{k}{v}" for k, v in sorted(self.config.items()))
        self.key = key
        self.autotune = mode in ("max-autotune", "max-autotune-no-cudagraphs") and not INTERPRET
        if self.autotune:
            tuned = read_tuned(self._tuned_path(), self.config)
            if tuned is not None:
                self.config = tuned
                self.autotune = False
        self.source = kernel.source
        # Triton contracts a multiply and an add into one FMA unless told not to; eager rounds
        # between them, which `emulate_precision_casts` kernels must do too. A kernel that
        # asserts its gather indices are inside (th.check_index) compiles in Triton's debug
        # mode, without the int32 overflow asserts that mode adds (our integers wrap, as
        # eager's do), as TorchInductor compiles its kernels.
        self.options = {"enable_fp_fusion": kernel.config.get("fp_fusion", True)}
        if kernel.config.get("debug"):
            self.options.update(debug=True, sanitize_overflow=False)
        self.launchers: dict[tuple[bool, ...], Callable] = {}  # through Triton's runtime
        # Launches through the C++ extension's CudaLaunch (compiler/runtime/triton_binary.py),
        # by pointer alignment; `launch` is the last one used, tried first. `direct_off` says
        # why this kernel is launched through Triton's runtime instead, None while it is not.
        self.direct: dict[tuple[bool, ...], Callable] = {}
        self.launch: Callable | None = None
        self.direct_off = "Triton's interpreter runs it" if INTERPRET else direct_launch_off()
        if self._values and self.direct_off is None:
            self.direct_off = "it takes size arguments, which CudaLaunch does not pass"
        self.hooks = _launch_hooks() if self.direct_off is None else None

    def _tuned_path(self):
        return cache_dir() / "autotune" / f"{self.key}.json"

    def _grid(self, config: dict) -> tuple[int, int, int]:
        return ((self.xnumel + config["XBLOCK"] - 1) // config["XBLOCK"], 1, 1)

    def _launch(self, args: Sequence[Any], config: dict) -> None:
        blocks = {k: v for k, v in config.items() if k != "num_warps"}
        grid = self._grid(config)
        if INTERPRET:
            from triton.runtime.errors import InterpreterError

            try:
                self.fn[grid](*args, **blocks)
            except InterpreterError as exc:  # th.check_index raised: the error eager's is
                if isinstance(exc.__cause__, IndexError):
                    raise exc.__cause__ from None
                raise
        else:
            self.fn[grid](*args, **blocks, num_warps=config["num_warps"], **self.options)

    def run(self, *args: Any) -> None:
        if self.xnumel == 0:
            return
        if self._values:
            ptrs = [*(a.data_ptr() for a in args), *self._values] if not INTERPRET else []
            args = (*args, *self._values)
            if not INTERPRET:  # a launcher bound to pointers and sizes (Triton's runtime)
                self._run_slow(args, ptrs)
                return
        if INTERPRET:
            self._launch(args, self.config)
            return
        ptrs = [a.data_ptr() for a in args]
        launch = self.launch
        if launch is not None:
            enter, exit_ = self.hooks
            # False: a pointer aligned otherwise than the kernel was compiled for, no launch
            if not (enter.calls or exit_.calls) and launch(_stream(), *ptrs):
                return
        self._run_slow(args, ptrs)

    def _run_slow(self, args: Sequence[Any], ptrs: list[int]) -> None:
        """A launch the fast path above did not make: the first for an alignment, or one with
        Triton's launch hooks set (a profiler), which Triton's runtime calls."""
        aligned = tuple(p % 16 == 0 for p in ptrs)
        if self.autotune:  # max-autotune's first launch: configs timed on these buffers
            self._tune(args)
            self.direct.clear()  # the warm-up compiled the default config
            self.launch = None
        if self.direct_off is None and not (self.hooks[0].calls or self.hooks[1].calls):
            launch = self.direct.get(aligned)
            if launch is None:
                launch = self._direct_launch([a.dtype for a in args], aligned)
            if launch is not None:
                self.launch = launch
                launch(_stream(), *ptrs)
                return
        launcher = self.launchers.get(aligned)
        if launcher is None:
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
        compiled = self.fn.warmup(
            *args, grid=(gx, gy, gz), **blocks, num_warps=config["num_warps"], **self.options
        )
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
        """Compile ahead of the first launch (GPU only), for aligned pointers: our binary
        loaded into a CudaLaunch, or, where kernels go through Triton's runtime, its
        compiled kernel and the launcher Triton builds with the C compiler per kernel
        signature (0.1-0.3 s each), lazily at the first launch, one after another, unless
        built here in parallel (the first launch then finds it in Triton's cache)."""
        aligned = (True,) * len(args_dtypes)
        if self.direct_off is None and self._direct_launch(args_dtypes, aligned) is not None:
            return
        self._warmup(args_dtypes)[(1, 1, 1)]  # indexing loads it and builds the launcher

    def spec(self, args_dtypes: Sequence[torch.dtype], aligned: tuple[bool, ...]):
        """What Triton compiles this kernel for, given its pointers' dtypes and alignment."""
        from compiler.runtime.triton_binary import Spec, pointer_dtypes

        blocks = tuple((k, v) for k, v in self.config.items() if k != "num_warps")
        return Spec(
            pointer_dtypes(args_dtypes), aligned, blocks, self.config["num_warps"], _target(),
            self.options["enable_fp_fusion"], self.options.get("debug", False),
        )  # fmt: skip

    def _direct_launch(
        self, args_dtypes: Sequence[torch.dtype], aligned: tuple[bool, ...]
    ) -> Callable | None:
        """The kernel compiled for these pointers (or found in our cache), loaded, and bound
        into a CudaLaunch; None, with `direct_off` saying why, when anything in that fails:
        Triton's runtime then compiles and launches it, and reports a real error itself."""
        from compiler.runtime import cpp_ext, triton_binary

        try:
            binary = triton_binary.compile_binary(
                self.fn, self.source, self.spec(args_dtypes, aligned)
            )
            load, launch_type = cpp_ext.cuda_launch_api()
            device = torch.cuda.current_device()
            function, *_ = load(binary.cubin, binary.name, binary.shared, device)
            grid = self._grid(self.config)
            launch = launch_type(function, grid, binary.num_warps, binary.shared, aligned)
        except Exception as e:
            self.direct_off = f"{type(e).__name__}: {e}"[:300]
            return None
        self.direct[aligned] = launch
        if self.launch is None and not self.autotune:  # a kernel to tune first stays slow
            self.launch = launch
        return launch

    def _warmup(self, args_dtypes: Sequence[torch.dtype]) -> Any:
        """Triton's compile (or cache lookup) of this kernel for pointers of these dtypes."""
        blocks = {k: v for k, v in self.config.items() if k != "num_warps"}
        return self.fn.warmup(
            *args_dtypes, *self._values, grid=(1,), num_warps=self.config["num_warps"], **blocks,
            **self.options,
        )  # fmt: skip

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


def _stream() -> int:
    return torch._C._cuda_getCurrentRawStream(torch._C._cuda_getDevice())


_targets: dict[int, tuple[str, int, int]] = {}


def _target() -> tuple[str, int, int]:
    """The current GPU as Triton's GPUTarget takes it, without Triton's driver (whose first
    use builds a C module with gcc)."""
    device = torch.cuda.current_device()
    if device not in _targets:
        major, minor = torch.cuda.get_device_capability(device)
        _targets[device] = ("cuda", major * 10 + minor, 32)
    return _targets[device]


@functools.lru_cache(maxsize=1)
def direct_launch_off() -> str | None:
    """Why kernels cannot be launched through the C++ extension's CudaLaunch in this
    process, or None when they can."""
    from compiler.runtime import cpp_ext, triton_binary

    if os.environ.get("COMPILER_TRITON_LAUNCHER") == "triton":
        return "COMPILER_TRITON_LAUNCHER=triton asks for Triton's runtime"
    why = triton_binary.launchable_here()
    if why is not None:
        return why
    if cpp_ext.cuda_launch_api() is None:
        return f"the C++ extension is not loaded ({cpp_ext.status()})"
    if _launch_hooks() is None:
        return "Triton's launch hooks are not hook chains"
    return None


def launch_notes(kernels: Sequence[TritonKernel]) -> list[str]:
    """For a graph's inspection record: how its Triton kernels are launched, and each kernel
    that could not be launched our way, with the reason."""
    why = direct_launch_off()
    if why is not None:
        return [f"Triton kernels are launched by Triton's runtime: {why}"]
    notes = [
        "Triton kernels are compiled to cubins in the cache's cubins/ folder and launched "
        "through the CUDA driver by the C++ extension (no launcher built with gcc)"
    ]
    by_reason: dict[str, list[str]] = {}
    for k in kernels:
        if k.direct_off is not None:
            by_reason.setdefault(k.direct_off, []).append(k.name)
    for why, names in by_reason.items():  # a dynamic graph's size-generic kernels share one
        if len(names) == 1:
            notes.append(f"{names[0]} is launched by Triton's runtime: {why}")
        else:
            shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
            notes.append(f"{len(names)} kernels ({shown}) are launched by Triton's runtime: {why}")
    return notes


def prepare() -> None:
    """What a CUDA process's first compile would wait for, started in the background when a
    function is first wrapped: the hashes Triton's compile needs, or, where kernels go
    through Triton's runtime, its CUDA driver, which builds a C module with the C compiler
    the first time it is used (about 1 s in a fresh cache)."""
    from compiler.runtime import triton_binary

    if direct_launch_off() is None:
        triton_binary.prepare_in_background()
        return

    def init_driver() -> None:
        try:
            from triton.runtime import driver

            driver.active.get_current_target()
        except Exception:
            pass  # the first compile meets the same error and reports it

    threading.Thread(target=init_driver, daemon=True).start()


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


def load_function(source: str, name: str) -> tuple[Any, str]:
    """The `@triton.jit` function `name` of a kernel module (imported from the cache, which
    writes it first if absent), and its cache key. Each call with a new source is one Triton
    kernel compiled (on a GPU, at its warm-up or first launch)."""
    device = "interpreter" if INTERPRET else "cuda"
    module, _ = load_module(source, device)
    return getattr(module, name), source_key(source, device)


def load_kernel(kernel: KernelText, mode: str | None) -> TritonKernel:
    fn, key = load_function(kernel.source, kernel.name)
    return TritonKernel(fn, kernel, mode, key)


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

    direct = [item for item in kernels if item[0].direct_off is None]
    through_triton = [item for item in kernels if item[0].direct_off is not None]
    compile_binaries(direct)
    for item in direct:  # each loads its binary from our cache (milliseconds)
        warm(item)
    if through_triton:
        in_workers(through_triton)
        with ThreadPoolExecutor(max_workers=_threads()) as pool:
            list(pool.map(warm, through_triton))


def _threads() -> int:
    return max(int(os.environ.get("COMPILER_COMPILE_THREADS", min(8, os.cpu_count() or 1))), 1)


def compile_binaries(kernels: Sequence[tuple[TritonKernel, Sequence[torch.dtype]]]) -> None:
    """Compile into our cache the binaries of `kernels` (for aligned pointers) that are not
    there: in the worker processes and in this thread together when the workers were
    started, else in threads. What fails here is compiled again by the kernel's own warm-up,
    which falls back to Triton's runtime and reports the error."""
    from compiler.runtime import compile_workers, triton_binary

    todo = []
    for kernel, dtypes in kernels:
        spec = kernel.spec(dtypes, (True,) * len(dtypes))
        # Only whether it is there: each kernel's warm-up reads and checks it next, and
        # compiles again one found damaged
        if not triton_binary.stored(triton_binary.key(kernel.source, spec)):
            todo.append((kernel, spec))
    if not todo:
        return

    def here(k: int) -> None:
        kernel, spec = todo[k]
        triton_binary.compile_binary(kernel.fn, kernel.source, spec)

    workers = compile_workers.pool()
    # The modules load_kernel imported the kernels from (registered under their names)
    modules = [sys.modules.get(kernel.fn.fn.__module__) for kernel, _ in todo]
    if workers is not None and None not in modules:
        requests = [
            compile_workers.Request(
                module.__file__, module.__name__, kernel.name, spec.to_json(), spec.target,
                kind="binary",
            )
            for module, (kernel, spec) in zip(modules, todo)
        ]  # fmt: skip
        workers.compile_all(requests, here=here)
        return
    with ThreadPoolExecutor(max_workers=_threads()) as pool:
        list(pool.map(lambda k: _quietly(here, k), range(len(todo))))


def _quietly(fn: Callable[[int], None], k: int) -> None:
    try:
        fn(k)
    except Exception:
        pass  # the kernel's own warm-up compiles it again and says why it fails


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
                    # the function's own name: a size-generic module binds no per-size one
                    module.__file__, module.__name__, kernel.fn.fn.__name__, spec,
                    (target.backend, target.arch, target.warp_size),
                )
            )  # fmt: skip
    if requests:
        workers.compile_all(requests)
