"""The public API, mirroring torch.compile: compile, explain, export, reset, inspect."""

from __future__ import annotations

import functools
import types
from typing import Any, Callable

import torch

from compiler import verify as verify_mode
from compiler.backends.options import backend_options, mode_of_options
from compiler.backends.registry import backend_name, list_backends, lookup_backend, register_backend
from compiler.distributed import compile_distributed, ddp_aware
from compiler.explain import ExplainOutput, explain_records
from compiler.export import ExportResult, export
from compiler.records import CompiledReport, GraphRecord, compiling_graph, current_graph
from compiler.support.sharing import sharing_state
from compiler.tracer.breaks import Unsupported
from compiler.tracer.evaluator import CompileConfig, CompileContext, reset_all, run_function

MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")

__all__ = [
    "compile",
    "explain",
    "export",
    "ExportResult",
    "optimize",
    "reset",
    "inspect",
    "list_backends",
    "lookup_backend",
    "register_backend",
    "Unsupported",
]


def compile(
    model: Callable | None = None,
    *,
    backend: str | Callable = "inductor",
    mode: str | None = None,
    fullgraph: bool = False,
    dynamic: bool | None = None,
    options: dict | None = None,
    verify: bool = False,
) -> Any:
    """Compile a function or nn.Module; usable as `compile(fn)`, `@compile` and `@compile(...)`.

    `dynamic`: None (the default) compiles for the first call's sizes and traces a dimension
    with a symbolic size once a recompile finds it changed; True makes every dimension
    symbolic from the start; False only the ones marked with `compiler.mark_dynamic`
    (compiler/tracer/shapes.py).

    `verify=True` checks every call against eager runs in float64 and in the inputs' dtypes
    and warns (`VerificationWarning`) naming the first FX node that diverges (compiler/verify.py)."""
    if mode not in MODES:
        raise ValueError(
            f"unknown mode {mode!r}; choose one of {', '.join(repr(m) for m in MODES)}"
        )
    if options is not None and not isinstance(options, dict):
        raise TypeError(f"options must be a dict, got {type(options).__name__}")
    if backend == "inductor":  # a user backend's options are its own
        mode, options = mode_of_options(mode, options), None
    backend_fn = lookup_backend(backend)  # unknown names fail here, with the list of known ones
    if model is None:
        return lambda m: compile(
            m,
            backend=backend,
            mode=mode,
            fullgraph=fullgraph,
            dynamic=dynamic,
            options=options,
            verify=verify,
        )
    served = current_graph()
    if isinstance(model, torch.fx.GraphModule) and served is not None:
        # A backend compiling the graph it was handed: the graph is already captured, so it
        # goes straight to `backend`, and what that does lands in the served graph's record.
        return _GraphInBackend(model, backend_fn, backend_name(backend), mode, options, served)
    backend_fn = _with_options(backend_fn, mode, options, fullgraph)
    run: Callable = run_function
    if verify:  # off, nothing is wrapped: verify mode costs nothing
        backend_fn = verify_mode.checking_backend(backend_fn)
        run = functools.partial(verify_mode.run_verified, run_function)
    config = CompileConfig(
        backend=ddp_aware(backend_fn),
        backend_name=backend_name(backend),
        mode=mode,
        fullgraph=fullgraph,
        dynamic=dynamic,
    )
    ctx = CompileContext(config)
    if isinstance(model, torch.nn.Module):
        # pickling a compiled module (torch.save(model)) stores the original and these
        # arguments, and loading compiles it again: compiled code and caches are not state
        remake = functools.partial(
            _compile_again,
            backend=backend,
            mode=mode,
            fullgraph=fullgraph,
            dynamic=dynamic,
            verify=verify,
        )
        compile_module = functools.partial(_compile_module, run=run, remake=remake)
        compiled = compile_distributed(model, config, compile_module) or compile_module(
            model, ctx
        )
    elif callable(model):
        compiled = _compile_callable(model, ctx, run)
    else:
        raise TypeError(
            f"compiler.compile expects a function or an nn.Module, got {type(model).__name__}"
        )
    _prepare(config.backend_name)
    return compiled


@functools.lru_cache(maxsize=None)
def _prepare(backend: str) -> None:
    """The one-time setup of a process's first trace, paid when a function is wrapped (as
    torch.compile imports its machinery when it wraps) so that the first call only compiles:
    torch's ShapeEnv imports its symbolic-shape machinery on first use (about 3 s on a
    CI-class CPU), the code generator's decomposition table collects every composite aten
    op (about 0.5 s). On a CUDA machine Triton's compile workers start first, and the hashes
    Triton's first compile needs are computed in the background meanwhile."""
    if backend == "inductor":
        from compiler.runtime import triton_launch

        if torch.cuda.is_available() and not triton_launch.INTERPRET:
            from compiler.runtime import compile_workers

            if compile_workers.wanted() > 0:
                compile_workers.start()  # they import Triton while the first trace runs
            triton_launch.prepare()
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    ShapeEnv()
    if backend == "inductor":
        from compiler.aot.decompositions import decomposition_table

        decomposition_table()
        import compiler.backends.inductor  # noqa: F401 (0.1-0.2 s the first call would wait)


def optimize(
    backend: str | Callable = "inductor", *, nopython: bool = False, **kwargs: Any
) -> Callable:
    """The seeds' `dynamo.optimize(backend, nopython=...)` spelling: a decorator."""
    return lambda fn: compile(fn, backend=backend, fullgraph=nopython, **kwargs)


def _with_options(
    backend_fn: Callable, mode: str | None, options: dict | None, fullgraph: bool = False
) -> Callable:
    """The backend, called with the compile call's mode, options and fullgraph visible to every
    backend it reaches (a user backend wrapping "inductor" compiles in the user's mode)."""
    if mode in (None, "default") and not options and not fullgraph:
        return backend_fn

    @functools.wraps(backend_fn)
    def with_options(gm, example_inputs):
        with backend_options(mode, options, fullgraph):
            return backend_fn(gm, example_inputs)

    return with_options


class _GraphInBackend:
    """`compiler.compile(gm)` called by a backend on the GraphModule it was given: compiled
    with `backend` on the first call's inputs, recorded in the served graph's record."""

    def __init__(
        self,
        gm: torch.fx.GraphModule,
        backend_fn: Callable,
        name: str,
        mode: str | None,
        options: dict | None,
        record: GraphRecord,
    ):
        self.gm, self.backend_fn, self.record = gm, backend_fn, record
        self.mode, self.options = mode, options
        self.compiled: Callable | None = None
        record.notes.append(
            f"compiled again by compiler.compile(gm, backend={name!r}) inside a backend"
        )

    def __call__(self, *args: Any) -> Any:
        if self.compiled is None:
            with compiling_graph(self.record), backend_options(self.mode, self.options):
                self.compiled = self.backend_fn(self.gm, list(args))
        return self.compiled(*args)


def _compile_callable(fn: Callable, ctx: CompileContext, run: Callable) -> Callable:
    if isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType):
        func, bound_self = fn.__func__, fn.__self__

        @functools.wraps(func)
        def compiled_method(*args, **kwargs):
            __tracebackhide__ = True  # IPython and pytest leave this frame out
            return run(ctx, func, (bound_self, *args), kwargs)

        compiled_method.__compiled__ = ctx
        return compiled_method
    if not isinstance(fn, types.FunctionType):
        target = fn

        def call(*args, **kwargs):
            __tracebackhide__ = True  # IPython and pytest leave this frame out
            return target(*args, **kwargs)

        functools.update_wrapper(call, fn, updated=())
        fn = call
    func = fn

    @functools.wraps(func)
    def compiled(*args, **kwargs):
        __tracebackhide__ = True  # IPython and pytest leave this frame out
        return run(ctx, func, args, kwargs)

    compiled.__compiled__ = ctx
    compiled._orig_fn = func
    return compiled


def _compile_again(mod: torch.nn.Module, **kwargs: Any) -> torch.nn.Module:
    """A pickled compiled module, loaded: its original compiled anew with the same arguments."""
    return compile(mod, **kwargs)


def _compile_module(
    mod: torch.nn.Module, ctx: CompileContext, run: Callable, remake: Callable
) -> torch.nn.Module:
    """A module sharing the original's attributes, parameters and state_dict (its __dict__ is
    the original's), whose forward runs through the compiler; it pickles as `remake` of the
    original."""
    cls = type(mod)
    forward = mod.__dict__.get("forward") or cls.forward

    def compiled_forward(self, *args, **kwargs):
        __tracebackhide__ = True  # IPython and pytest leave this frame out
        if isinstance(forward, types.FunctionType):
            return run(ctx, forward, (self, *args), kwargs)
        return run(ctx, _call_bound, (forward, *args), kwargs)

    def reduce(self, protocol: int) -> tuple:
        return remake, (mod,)

    compiled_forward._compiled_forward = True
    return sharing_state(mod, ctx, {"forward": compiled_forward, "__reduce_ex__": reduce})


def _call_bound(forward: Callable, *args, **kwargs):
    __tracebackhide__ = True  # IPython and pytest leave this frame out
    return forward(*args, **kwargs)


# ---- inspection ----------------------------------------------------------------------------


def _context_of(fn: Any) -> CompileContext:
    ctx = getattr(fn, "__compiled__", None)
    if not isinstance(ctx, CompileContext):
        raise TypeError(
            f"{getattr(fn, '__name__', type(fn).__name__)} was not made by compiler.compile"
        )
    return ctx


def inspect(fn: Any) -> CompiledReport:
    """The inspection records of a compiled function or module: every entry of it and of the
    functions the compiler reached from it (the function's own record first)."""
    ctx = _context_of(fn)
    return CompiledReport(
        functions=ctx.functions, backend=ctx.config.backend_name, mode=ctx.config.mode
    )


def reset() -> None:
    """Forget every compiled entry: the next call of any compiled function traces again."""
    reset_all()


# ---- explain --------------------------------------------------------------------------


def explain(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """`explain(fn)(*args, **kwargs)`: compile and run once, then report graphs and breaks."""

    def run(*call_args: Any, **call_kwargs: Any) -> ExplainOutput:
        graphs: list[torch.fx.GraphModule] = []

        def recording_backend(gm: torch.fx.GraphModule, example_inputs):
            graphs.append(gm)
            return gm.forward

        target = (
            fn._orig_mod if isinstance(fn, torch.nn.Module) and hasattr(fn, "_orig_mod") else fn
        )
        target = getattr(target, "_orig_fn", target)
        compiled = compile(target, backend=recording_backend)
        compiled(*call_args, **call_kwargs)
        return explain_records(_context_of(compiled).functions)

    if args or kwargs:
        return run(*args, **kwargs)
    return run
