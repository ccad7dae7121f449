"""The frame evaluator: runs a compiled function's frame through its cache of entries.

For each (code, instruction) the cache holds entries: guards, a compiled graph, and generated
code that rebuilds the frame's values from the graph's outputs. A miss traces a new entry.
At a graph break the evaluator executes the breaking instruction for real (calls into user
functions come back here, so callees are compiled too) and looks up the entry for the next
instruction.
"""

from __future__ import annotations

import inspect as pyinspect
import time
import traceback
import types
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from compiler import config, controls, optim, records
from compiler.records import (
    CompilerWarning,
    ControlRecord,
    EntryRecord,
    FunctionRecord,
    GraphBreak,
    GraphRecord,
    SourceLine,
)
from compiler.support import autocast
from compiler.support.gc_pause import gc_paused
from compiler.tracer import concrete
from compiler.tracer.breaks import Unsupported
from compiler.tracer.bytecode import Code, decode
from compiler.tracer.calls import is_skipped, is_torch_function
from compiler.tracer.concrete import RealFrame, Returned
from compiler.tracer.effects import entry_side_effects
from compiler.tracer.graph_builder import SizeInput, is_node_impure
from compiler.tracer.guards import CompiledGuards, compile_guards, concise
from compiler.tracer.hints import hint_for
from compiler.tracer.reconstruct import compile_fetch, compile_rebuild
from compiler.tracer.shapes import DynamicPolicy
from compiler.tracer.translator import TraceResult, Translator
from compiler.tracer.variables import LazyVar, TensorVar, tensor_vars
from compiler.tracer.wrap import (
    container_alias_guards,
    key_alias_guards,
    object_alias_guards,
)


@dataclass
class CompileConfig:
    backend: Callable
    backend_name: str
    mode: str | None = None
    fullgraph: bool = False
    dynamic: bool | None = None


@dataclass
class Entry:
    guards: CompiledGuards
    fetch: Callable
    graph_fn: Callable | None
    rebuild: Callable
    kind: str
    break_pc: int | None
    end_grad: bool | None
    record: EntryRecord
    # The traced code had exception handlers and the graph changes nothing but its outputs:
    # if it raises, the code runs again eagerly from the entry's start, so that the handlers
    # run as in eager (see run_frame).
    rerun_on_error: bool = False
    # The keyword names a KW_NAMES in the graph's region set for the call the graph breaks at.
    break_kw_names: tuple | None = None
    # The autocast state per device type the graph leaves, where it differs from the one at
    # its start (a graph break inside a traced `with torch.autocast(...)` block): the
    # compiled code runs no Python, so the state is applied after it.
    end_autocast: dict | None = None
    # The attributes the entry writes back, by source (`L['self'].calls`): a guard of its own
    # on one of them fails on the next call (see _invalidates_itself).
    written: frozenset[str] = frozenset()
    # Calls made just before the graph (a torch.manual_seed the trace met ahead of any op).
    before_graph: tuple = ()


@dataclass
class CodeState:
    code: Code
    record: FunctionRecord
    entries: dict[int, list[Entry]] = field(default_factory=dict)
    count: int = 0
    native: str | None = None  # why this function always runs natively
    limit_warned: bool = False
    # per entry point: recompiles forced by an entry's own attribute writes
    self_invalidated: dict[int, int] = field(default_factory=dict)
    # per entry point: tensor sizes seen at its compiles, for automatic dynamic (shapes.py)
    sizes_seen: dict[int, dict[str, tuple]] = field(default_factory=dict)


class CompileContext:
    """The state of one `compiler.compile(...)` call: its configuration and caches."""

    def __init__(self, config: CompileConfig):
        self.config = config
        self.codes: dict[types.CodeType, CodeState] = {}
        self.functions: list[FunctionRecord] = []
        _CONTEXTS.add(self)

    def state_for(self, fn: types.FunctionType) -> CodeState:
        state = self.codes.get(fn.__code__)
        if state is None:
            decoded = decode(fn.__code__)
            record = FunctionRecord(
                name=fn.__name__,
                qualname=fn.__qualname__,
                filename=fn.__code__.co_filename,
                firstlineno=fn.__code__.co_firstlineno,
                source=_source_of(fn),
            )
            state = CodeState(decoded, record)
            if decoded.is_generator and not decoded.unsupported:
                decoded_reason = (
                    "generator functions run eagerly (they are traced only when inlined)"
                )
                state.native = decoded_reason
                record.warnings.append(decoded_reason)
            if decoded.unsupported:
                state.native = decoded.unsupported
                record.warnings.append(decoded.unsupported)
            self.codes[fn.__code__] = state
            self.functions.append(record)
        return state

    def reset(self) -> None:
        self.codes.clear()
        self.functions.clear()


_CONTEXTS: weakref.WeakSet[CompileContext] = weakref.WeakSet()


def reset_all() -> None:
    for ctx in list(_CONTEXTS):
        ctx.reset()


def _source_of(fn: types.FunctionType) -> str:
    try:
        return pyinspect.getsource(fn)
    except (OSError, TypeError):
        return ""


# ---- running a function --------------------------------------------------------------------


def run_function(
    ctx: CompileContext, fn: types.FunctionType, args: tuple | list, kwargs: dict
) -> Any:
    __tracebackhide__ = True  # IPython and pytest leave this frame out
    if controls.stance() == "force_eager":
        return fn(*args, **kwargs)
    disabled = controls.disabled_mark(fn)
    if disabled is not None:
        return _run_disabled(ctx, disabled, args, kwargs)
    state = ctx.state_for(fn)
    if state.native:
        return fn(*args, **kwargs)
    return run_frame(ctx, state, _real_frame(fn, state.code, args, kwargs))


def _real_frame(
    fn: types.FunctionType, decoded: Code, args: tuple | list, kwargs: dict
) -> RealFrame:
    code = fn.__code__
    bound = _bind(fn, args, kwargs)
    cells: dict[str, Any] = {}
    for name in code.co_cellvars:
        cell = types.CellType()
        if name in bound:
            cell.cell_contents = bound.pop(name)
        cells[name] = cell
    for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        cells[name] = cell
    return RealFrame(decoded, fn.__globals__, bound, cells, [], decoded.start, fn_name=code.co_name)


def _run_disabled(
    ctx: CompileContext, mark: controls.Mark, args: tuple | list, kwargs: dict
) -> Any:
    """A function under compiler.disable, called from compiled code (or compiled itself): it
    runs eagerly. With recursive=True that is a plain call (nothing it calls is compiled);
    with recursive=False its frame runs instruction by instruction here, so the calls it makes
    come back through the compiler."""
    __tracebackhide__ = True  # IPython and pytest leave this frame out
    fn = mark.fn
    if mark.recursive or not isinstance(fn, types.FunctionType):
        return fn(*args, **kwargs)
    decoded = decode(fn.__code__)
    if decoded.unsupported or decoded.is_generator:
        return fn(*args, **kwargs)  # runs natively: its callees run eagerly too
    frame = _real_frame(fn, decoded, args, kwargs)
    grad_at_entry = torch.is_grad_enabled()

    def call_real(target: Any, call_args: list, call_kwargs: dict) -> Any:
        __tracebackhide__ = True  # IPython and pytest leave this frame out
        return call_from_python(ctx, target, call_args, call_kwargs)

    try:
        return _run_rest(frame, call_real)
    except Returned as r:
        return r.value
    except BaseException:
        torch._C._set_grad_enabled(grad_at_entry)
        raise


def _bind(fn: types.FunctionType, args: tuple | list, kwargs: dict) -> dict[str, Any]:
    """The frame's arguments by name, in the order `inspect.getcallargs` gives them. Every call
    pays for this, so the usual shapes (no *args / **kwargs; keywords, defaults) are bound here
    directly; anything else, wrong calls included, goes to getcallargs, which raises the same
    TypeError as a real call."""
    code = fn.__code__
    n = code.co_argcount
    if code.co_flags & 0x0C or len(args) > n:
        return pyinspect.getcallargs(fn, *args, **kwargs)
    names = code.co_varnames
    bound = dict(zip(names, args))
    total = n + code.co_kwonlyargcount
    if kwargs:
        allowed = names[max(len(args), code.co_posonlyargcount) : total]
        for name, value in kwargs.items():
            if name not in allowed or name in bound:
                return pyinspect.getcallargs(fn, *args, **kwargs)
            bound[name] = value
    if len(bound) < total:
        defaults = fn.__defaults__ or ()
        first_default = n - len(defaults)
        for i in range(len(args), n):
            name = names[i]
            if name not in bound:
                if i < first_default:
                    return pyinspect.getcallargs(fn, *args, **kwargs)
                bound[name] = defaults[i - first_default]
        kwdefaults = fn.__kwdefaults__ or {}
        for name in names[n:total]:
            if name not in bound:
                if name not in kwdefaults:
                    return pyinspect.getcallargs(fn, *args, **kwargs)
                bound[name] = kwdefaults[name]
    return bound


def run_frame(ctx: CompileContext, state: CodeState, frame: RealFrame) -> Any:
    __tracebackhide__ = True  # IPython and pytest leave this frame out
    grad_at_entry = torch.is_grad_enabled()
    # taken before the first graph that leaves autocast switched (a break inside a block)
    autocast_at_entry = None
    any_autocast_at_entry = torch._C._is_any_autocast_enabled()

    def call_real(target: Any, args: list, kwargs: dict) -> Any:
        __tracebackhide__ = True  # IPython and pytest leave this frame out
        return call_from_python(ctx, target, args, kwargs)

    instructions = state.code.instructions
    clock = _CallClock(time.perf_counter(), _COMPILES[0], [])
    try:
        while True:
            if frame.unwinding:  # an exception raised for real: its handler runs here
                concrete.step(frame, instructions[frame.pc], call_real)
                continue
            L = frame.values()
            entry = _lookup(state, frame.pc, L, frame.globals)
            if entry is None:
                _COMPILES[0] += 1
                with gc_paused():
                    entry = _compile_entry(ctx, state, frame, L)
                if entry is None:
                    return _run_rest(frame, call_real)
            entry.record.hits += 1
            if entry.end_autocast is not None and autocast_at_entry is None:
                autocast_at_entry = autocast.snapshot()
            for call in entry.before_graph:
                call.fn(*call.args, **call.kwargs)
            graph_start = time.perf_counter()
            outputs = _run_graph(entry, L, frame) if entry.graph_fn is not None else ()
            clock.graphs.append((entry.record, time.perf_counter() - graph_start))
            if outputs is None:
                return _run_rest(frame, _call_eagerly)
            if entry.end_grad is not None:
                torch._C._set_grad_enabled(entry.end_grad)
            if entry.end_autocast is not None:
                autocast.restore(entry.end_autocast)
            if entry.kind == "return":
                return entry.rebuild(L, frame.globals, outputs, frame)
            frame.locals, frame.stack = entry.rebuild(L, frame.globals, outputs, frame)
            frame.kw_names = entry.break_kw_names
            concrete.step(frame, instructions[entry.break_pc], call_real)
    except Returned as r:
        return r.value
    except BaseException:
        torch._C._set_grad_enabled(grad_at_entry)
        # an exception out of a traced autocast block leaves the state it was entered with
        if autocast_at_entry is not None:
            autocast.restore(autocast_at_entry)
        elif not any_autocast_at_entry and torch._C._is_any_autocast_enabled():
            autocast.switch_off()  # an eager graph raised inside a block it opened
        raise
    finally:
        clock.account(state.record)


# Compiles so far in this process: a call during which anything compiled (its callees too)
# measures the compiler, so it is left out of the runtime accounting.
_COMPILES = [0]


@dataclass
class _CallClock:
    """The time of one run of a frame, and of each graph it ran."""

    start: float
    compiles_at_start: int
    graphs: list[tuple[EntryRecord, float]]

    def account(self, record: FunctionRecord) -> None:
        if _COMPILES[0] != self.compiles_at_start:
            return
        record.timed_calls += 1
        record.run_time_s += time.perf_counter() - self.start
        for entry, seconds in self.graphs:
            entry.timed_hits += 1
            entry.graph_time_s += seconds


def _run_graph(entry: Entry, L: dict, frame: RealFrame) -> Any:
    """The entry's graph outputs; None when the graph raised inside traced exception handlers
    and changed nothing: then the caller runs the frame eagerly from the entry's start (its
    locals and stack are still those of the start), and the handlers see the exception as in
    eager. An error in a graph without handlers is raised as it is."""
    grad = torch.is_grad_enabled()
    try:
        return entry.graph_fn(*entry.fetch(L, frame.globals))
    except Exception:
        if not entry.rerun_on_error:
            raise
        torch._C._set_grad_enabled(grad)  # the graph may have switched it before it failed
        return None


def _call_eagerly(target: Any, args: list, kwargs: dict) -> Any:
    return target(*args, **kwargs)


def _run_rest(frame: RealFrame, call_real: Callable) -> Any:
    instructions = frame.code.instructions
    while True:
        concrete.step(frame, instructions[frame.pc], call_real)


def _lookup(state: CodeState, pc: int, L: dict, G: dict) -> Entry | None:
    for entry in state.entries.get(pc, ()):
        if entry.guards.check(L, G):
            return entry
    return None


def call_from_python(ctx: CompileContext, target: Any, args: list, kwargs: dict) -> Any:
    """A call made for real at a graph break: user Python code goes back through the compiler,
    and so does an optimizer step (compiler/optim); torch's zero_grad(set_to_none=True) runs
    as one loop over the parameters (compiler/optim/zero_grad.py)."""
    __tracebackhide__ = True  # IPython and pytest leave this frame out
    step = optim.step_call(target, args, kwargs)
    if step is not None:
        return optim.run_step(ctx, step, run_function)
    cleared = optim.zero_grad_call(target, args, kwargs)
    if cleared is not None:
        return optim.clear_grads(cleared)
    fn, full_args = _compilable(target, args)
    if fn is None:
        return target(*args, **kwargs)
    return run_function(ctx, fn, full_args, kwargs)


def _compilable(target: Any, args: list) -> tuple[types.FunctionType | None, list]:
    target = getattr(target, "_orig_fn", target)  # a compiled function called from compiled code
    if isinstance(target, types.FunctionType):
        if is_skipped(target) or is_torch_function(target):
            return None, args
        return target, args
    if isinstance(target, types.MethodType) and isinstance(target.__func__, types.FunctionType):
        fn, _ = _compilable(target.__func__, args)
        return (fn, [target.__self__, *args]) if fn is not None else (None, args)
    if isinstance(target, torch.nn.Module):
        from torch.nn.modules import module as module_mod

        if (
            target._forward_hooks or target._forward_pre_hooks or target._backward_hooks
            or module_mod._global_forward_hooks or module_mod._global_forward_pre_hooks
            or module_mod._global_backward_hooks or "forward" in target.__dict__
        ):  # fmt: skip
            return None, args
        forward = type(target).forward
        if isinstance(forward, types.FunctionType) and not getattr(
            forward, "_compiled_forward", False
        ):
            return forward, [target, *args]
    return None, args


# ---- compiling an entry --------------------------------------------------------------------


def _compile_entry(
    ctx: CompileContext, state: CodeState, frame: RealFrame, L: dict
) -> Entry | None:
    record = state.record
    pc = frame.pc
    if controls.stance() == "force_eager":  # set while this frame ran: the rest runs eagerly
        return None
    existing = state.entries.get(pc, [])
    recompile_reason = None
    if state.self_invalidated.get(pc, 0) >= SELF_INVALIDATED_LIMIT:
        return None
    if existing:
        failed = existing[-1].guards.failures(L, frame.globals)
        recompile_reason = existing[-1].guards.describe(failed, L, frame.globals)
        if not _recompile_allowed(state, frame, recompile_reason):
            return None
        if _invalidates_itself(state, frame, existing[-1], failed, recompile_reason):
            return None
    limit = config.cache_size_limit
    if len(existing) >= limit:
        if not state.limit_warned:
            state.limit_warned = True
            msg = (
                f"{record.qualname} was recompiled {limit} times at line {_line_of(state, pc)} "
                f"(config.cache_size_limit = {limit}); it now runs eagerly there. "
                f"Failing guard: {recompile_reason or 'n/a'}"
            )
            record.warnings.append(msg)
            warnings.warn(msg, CompilerWarning, stacklevel=4)
            records.notify(record)
        if pc == state.code.start and not frame.stack:
            state.native = "recompile limit reached"
        return None
    start = time.perf_counter()
    policy = DynamicPolicy(
        ctx.config.dynamic, state.sizes_seen.setdefault(pc, {}), config.automatic_dynamic_shapes
    )
    try:
        result, tracer = _trace(state, frame, L, policy)
        if result.kind == "break" and ctx.config.fullgraph:
            raise Unsupported(
                result.reason, result.user_stack, hint_for(result.break_kind), result.break_kind
            )
        entry = _build_entry(ctx, state, frame, L, result, tracer, recompile_reason, start)
    except Unsupported:
        raise
    except Exception as e:
        if ctx.config.fullgraph or config.strict():
            raise
        msg = f"{record.qualname}: the compiler failed ({type(e).__name__}: {concise(str(e))}); this frame runs eagerly"
        record.warnings.append(msg)
        warnings.warn(msg, CompilerWarning, stacklevel=4)
        config.log(f"{msg}\n{traceback.format_exc()}")
        if pc == state.code.start and not frame.stack:
            state.native = msg
        records.notify(record)
        return None
    policy.remember()
    state.entries.setdefault(pc, []).append(entry)
    state.count += 1
    record.entries.append(entry.record)
    _log_entry(entry.record)
    records.notify(record)
    return entry


# Recompiles of one entry point that its own entries' attribute writes forced, after which
# it runs eagerly there: the first is a value settling (Swin sets its window size once),
# a second one a value the frame changes on every call (`self.calls += 1`), which would
# otherwise recompile on every call until config.cache_size_limit.
SELF_INVALIDATED_LIMIT = 2


def _invalidates_itself(
    state: CodeState, frame: RealFrame, last: Entry, failed: list, reason: str
) -> bool:
    """Whether this recompile is forced by `last`'s own writes, once too often: then the
    entry point runs eagerly from now on, with a warning naming the guard."""
    pc = frame.pc
    if not {g.source for g in failed} & last.written:
        return False
    count = state.self_invalidated[pc] = state.self_invalidated.get(pc, 0) + 1
    if count < SELF_INVALIDATED_LIMIT:
        return False
    msg = (
        f"{state.record.qualname} changes a value its own guards check on every call "
        f"(line {_line_of(state, pc)}: {reason}); it now runs eagerly there rather than "
        "recompile each call"
    )
    state.record.warnings.append(msg)
    warnings.warn(msg, CompilerWarning, stacklevel=5)
    if pc == state.code.start and not frame.stack:
        state.native = "its entries change what their own guards check"
    records.notify(state.record)
    return True


def _recompile_allowed(state: CodeState, frame: RealFrame, reason: str) -> bool:
    """The stance's say on a recompile: "eager_on_recompile" runs the rest of the frame
    eagerly, "fail_on_recompile" raises."""
    stance = controls.stance()
    if stance == "default":
        return True
    where = f"{state.record.qualname} at line {_line_of(state, frame.pc)}"
    if stance == "fail_on_recompile":
        raise controls.RecompileError(
            f"{where} needs a recompile and the stance is 'fail_on_recompile'; failing guard: {reason}"
        )
    detail = f"a recompile was needed at line {_line_of(state, frame.pc)} ({reason}); ran eagerly instead"
    control = ControlRecord("stance", "eager_on_recompile", detail)
    if control not in state.record.controls:
        state.record.controls.append(control)
        records.notify(state.record)
    return False


def _line_of(state: CodeState, pc: int) -> int:
    return state.code.instructions[pc].lineno or state.record.firstlineno


def _log_entry(entry: EntryRecord) -> None:
    if not config.verbose:
        return
    graph = f"a graph of {entry.graph.op_count} ops" if entry.graph is not None else "no graph"
    parts = [
        f"compiled {entry.function} from line {entry.start_line}: {graph}, {len(entry.guards)} guards"
    ]
    if entry.recompile_reason:
        parts.append(f"recompiled because: {entry.recompile_reason}")
    if entry.graph_break is not None:
        parts.append(f"graph break: {entry.graph_break}")
    parts.extend(str(c) for c in entry.controls)
    config.log("\n    ".join(parts))


def _trace(
    state: CodeState, frame: RealFrame, L: dict, policy: DynamicPolicy
) -> tuple[TraceResult, Translator]:
    break_at = None
    constants: list = []  # assume_constant_result calls, made once across restarts
    for _ in range(4):
        tracer = Translator(
            state.code, frame.globals, frame.locals, L, frame.stack, frame.cells, frame.pc, break_at,
            frame.fn_name, policy, constants,
        )  # fmt: skip
        with torch.set_grad_enabled(torch.is_grad_enabled()), controls.tracing():
            result = tracer.run()
        if result.kind != "restart":
            return result, tracer
        break_at = (tracer.current_root_pc, result.reason, result.user_stack, result.break_kind)
    raise RuntimeError("tracing did not settle after restarts")


def _build_entry(
    ctx: CompileContext,
    state: CodeState,
    frame: RealFrame,
    L: dict,
    result: TraceResult,
    tracer: Translator,
    recompile_reason: str | None,
    start: float,
) -> Entry:
    builder = tracer.builder
    end_frame = result.frame
    if result.kind == "return":
        live = [result.value]
    else:
        live = [*end_frame.locals.values(), *end_frame.stack]
    written_cells = tracer.written_cells(result)
    live.extend(written_cells)
    mutated = [v for v in tracer.external_containers.values() if v.mutated]
    mutated.extend(it for it in tracer.real_iterators.values() if it.index > it.start)
    live.extend(mutated)
    attr_writes = list(tracer.attr_writes.values())
    live.extend(v for writes in attr_writes for v in writes.values.values() if v is not None)
    found: list = []
    seen: set[int] = set()
    for v in live:
        if not isinstance(v, LazyVar):
            tensor_vars(v, found, seen)
    outputs, nodes = [], set()
    for t in found:
        if t.node.op != "placeholder" and id(t.node) not in nodes:
            nodes.add(id(t.node))
            outputs.append(t)
    gm = builder.finish(outputs)
    op_count = builder.op_count()
    trace_time = time.perf_counter() - start
    name = f"{state.record.name}_{state.count}"
    for msg in builder.shapes.finish(tracer.guards):
        warnings.warn(msg, CompilerWarning, stacklevel=5)
    container_alias_guards(tracer)
    object_alias_guards(tracer)
    key_alias_guards(tracer)
    guards = compile_guards(tracer.guards, f"guard_{_identifier(name)}", L, frame.globals)
    fetch, _ = compile_fetch([t.source for t in builder.inputs], guards.namespace, guards)
    if result.kind == "return":
        rebuild, _ = compile_rebuild(
            "return", result.value, None, None, outputs, tracer.guards.namespace, mutated,
            attr_writes, written_cells, builder.shapes.python_text, tracer.deferred_calls,
        )  # fmt: skip
    else:
        rebuild, _ = compile_rebuild(
            "break", None, end_frame.locals, end_frame.stack, outputs, tracer.guards.namespace,
            mutated, attr_writes, written_cells, builder.shapes.python_text,
            tracer.deferred_calls,
        )  # fmt: skip
    graph_record = None
    graph_fn = None
    if op_count:
        graph_record = GraphRecord(
            graph_module=gm,
            code=gm.code,
            op_count=op_count,
            source_lines=_graph_lines(gm),
            backend=ctx.config.backend_name,
            example_inputs=[_describe_input(t) for t in builder.inputs],
        )
        graph_record.stage_times.append(records.StageTime("trace", trace_time))
        graph_fn = _run_backend(ctx, gm, fetch(L, frame.globals), graph_record)
    graph_break = None
    break_pc = None
    if result.kind == "break":
        break_pc = end_frame.pc
        ins = state.code.instructions[break_pc]
        graph_break = GraphBreak(
            result.reason,
            result.user_stack,
            ins.opname,
            kind=result.break_kind,
            hint=hint_for(result.break_kind),
        )
    lineno = state.code.instructions[frame.pc].lineno or state.record.firstlineno
    entry_record = EntryRecord(
        function=state.record.qualname,
        start_line=lineno,
        graph=graph_record,
        guards=list(guards.guards),
        guard_source=guards.source,
        graph_break=graph_break,
        recompile_reason=recompile_reason,
        compile_time_s=time.perf_counter() - start,
        controls=list(builder.controls),
        side_effects=entry_side_effects(
            gm,
            mutated,
            attr_writes,
            tracer.root.cells,
            result.reason if graph_break else None,
            tracer.deferred_calls,
            tracer.before_graph,
        ),
    )
    start_grad = torch.is_grad_enabled()
    end_grad = builder.grad_enabled if builder.grad_enabled != start_grad else None
    # calls made before the graph (random draws) would be made twice by an eager rerun
    rerun = tracer.covered and not _has_effects(gm) and not tracer.before_graph
    kw_names = end_frame.kw_names if result.kind == "break" else None
    end_autocast = {
        d: state for d, state in builder.autocast.items() if state != builder.autocast_at_start[d]
    }
    return Entry(
        guards,
        fetch,
        graph_fn,
        rebuild,
        result.kind,
        break_pc,
        end_grad,
        entry_record,
        rerun,
        kw_names,
        end_autocast or None,
        frozenset(
            f"{w.obj.source}.{name}" for w in attr_writes if w.obj.source for name in w.values
        ),
        tuple(tracer.before_graph),
    )


def _has_effects(gm: torch.fx.GraphModule) -> bool:
    """The graph changes state other than the grad mode and autocast: an input mutated in
    place, running statistics updated."""
    return any(
        n.op in ("call_function", "call_method")
        and n.target not in (torch._C._set_grad_enabled, autocast.set_autocast)
        and is_node_impure(n)
        for n in gm.graph.nodes
    )


def _run_backend(
    ctx: CompileContext, gm: torch.fx.GraphModule, example_inputs: list, record: GraphRecord
) -> Callable:
    start = time.perf_counter()
    try:
        with records.compiling_graph(record):
            compiled = ctx.config.backend(gm, example_inputs)
        if not callable(compiled):
            raise TypeError(
                f"backend {ctx.config.backend_name!r} returned {type(compiled).__name__}, not a callable"
            )
        # The entry's guards pin every input's metadata: the compiled graph need not check it.
        guarded = getattr(compiled, "for_guarded_inputs", None)
        if guarded is not None:
            compiled = guarded(example_inputs)
    except Exception as e:
        if ctx.config.fullgraph or config.strict():
            raise
        # the record keeps the whole error for the inspector; the warning is one line
        record.fallback = f"backend {ctx.config.backend_name!r} failed ({type(e).__name__}: {e}); the graph runs eagerly"
        short = f"backend {ctx.config.backend_name!r} failed ({type(e).__name__}: {concise(str(e))}); the graph runs eagerly"
        warnings.warn(short, CompilerWarning, stacklevel=6)
        config.log(f"{record.fallback}\n{traceback.format_exc()}")
        compiled = gm.forward
    record.stage_times.append(records.StageTime("backend", time.perf_counter() - start))
    return compiled


def _graph_lines(gm: torch.fx.GraphModule) -> list[SourceLine]:
    lines: dict[tuple[str, int], SourceLine] = {}
    for node in gm.graph.nodes:
        line = node.meta.get("source_line")
        if line is not None:
            lines.setdefault((line.filename, line.lineno), line)
    return [lines[k] for k in sorted(lines)]


def _describe_input(inp: TensorVar | SizeInput) -> str:
    if isinstance(inp, SizeInput):
        if isinstance(inp.fake, torch.SymFloat):
            return f"{inp.source}: float, the symbol {inp.node.name}"
        return f"{inp.source}: int, the symbolic size {inp.node.name}"
    return _describe_tensor(inp.source, inp.fake)


def _describe_tensor(source: str | None, fake: torch.Tensor) -> str:
    dtype = str(fake.dtype).replace("torch.", "")
    return f"{source}: {dtype}{list(fake.shape)} on {fake.device}"


def _identifier(name: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in name)
