"""Inspection records: what every compile step leaves behind.

The compiler returns these dataclasses; the Jupyter extension and `explain` only render them.
They are mutable on purpose: a function's record grows as later calls recompile, and
subscribers (the live inspector) are told each time it changes.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from compiler.support.gc_pause import gc_paused


class CompilerWarning(UserWarning):
    """A function, or a graph of it, runs eagerly because the compiler could not handle it;
    the same text is kept in the records (FunctionRecord.warnings, GraphRecord.fallback)."""


@dataclass
class SourceLine:
    """One line of user source, as shown next to graphs, guards, breaks and kernels."""

    filename: str
    lineno: int
    text: str
    function: str = ""

    def __str__(self) -> str:
        return f'File "{self.filename}", line {self.lineno}, in {self.function}\n    {self.text.strip()}'


@dataclass
class Guard:
    """One check that must hold for a compiled entry to be reused.

    `expr` is a Python expression over `L` (the frame's locals and stack, by name) and `G`
    (the function's globals); the guard function of an entry is these expressions joined.
    """

    kind: str  # TENSOR_MATCH, CONSTANT_MATCH, ID_MATCH, TYPE_MATCH, LENGTH_CHECK, GRAD_MODE, ...
    source: str  # where the value came from, e.g. "L['x']" or "L['self'].lin.weight"
    expr: str  # the Python text checked, e.g. "L['x'].dtype == torch.float32"
    description: str = ""  # readable reason, e.g. "x is float32 of shape (10, 10)"
    user_line: SourceLine | None = None


@dataclass(frozen=True)
class BreakHint:
    """How to get rid of a graph break of one kind (compiler/tracer/hints.py)."""

    category: str  # "user code", "fundamental" or "not yet supported"
    suggestion: str  # what to change, in a sentence or two
    snippet: str  # the change as code


@dataclass
class GraphBreak:
    """Why a graph ended before the function did, and where, and how to avoid it."""

    reason: str
    user_stack: list[SourceLine] = field(default_factory=list)
    instruction: str = ""  # the bytecode instruction executed for real, e.g. "POP_JUMP_IF_FALSE"
    kind: str = "unsupported"  # what caused it: keys `hint` in compiler/tracer/hints.py
    hint: BreakHint | None = None

    def __str__(self) -> str:
        where = self.user_stack[-1] if self.user_stack else None
        return f"{self.reason}" + (f"\n  {where}" if where else "")


@dataclass
class ControlRecord:
    """One of the user's controls (compiler/controls.py) that shaped what was compiled: a
    disabled call, an opaque node, a baked-in constant, a dynamic size, a stance."""

    kind: str  # "disable", "allow_in_graph", "disallow_in_graph", "assume_constant_result",
    # "dynamic", "stance", "lru_cache", "record_function"
    target: str  # what it applied to: a function's name, a tensor's size ("L['x'].size(0)")
    detail: str  # what it did, readable
    user_line: SourceLine | None = None

    def __str__(self) -> str:
        return f"{self.kind}: {self.target}: {self.detail}"


@dataclass
class StageTime:
    stage: str  # "trace", "aot", "lower", "schedule", "codegen", "compile", ...
    seconds: float


@dataclass
class KernelPart:
    """One part of a combined kernel (compiler/scheduler/horizontal.py): a pointwise kernel
    that runs inside another kernel's launch, on programs `first_program..last_program`."""

    name: str
    elements: int
    first_program: int
    last_program: int
    fused_nodes: list[str] = field(default_factory=list)


@dataclass
class KernelRecord:
    """One generated kernel (or extern call) of a compiled graph."""

    name: str
    language: str  # "triton", "cpp", or "extern" for an aten call
    source: str
    fused_nodes: list[str] = field(default_factory=list)  # FX node names fused into it
    source_lines: list[SourceLine] = field(default_factory=list)  # user lines those nodes came from
    grid: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    bytes_accessed: int = 0  # minimal bytes read + written, for achieved bandwidth
    measured_ms: float | None = None  # filled by a timing run
    graph: str = ""  # "forward" or "backward" for a training graph's kernels, else ""
    # A dynamic graph's kernel run by size-generic code (compiler/codegen/size_args.py): the
    # generic kernel's name, its source, the size arguments this kernel passes it, and the
    # arguments of every size the generic kernel has served (C++ and Triton alike).
    size_generic: str = ""
    generic_source: str = ""
    size_args: dict[str, int | float] = field(default_factory=dict)
    sizes_served: list[tuple] = field(default_factory=list)
    parts: list[KernelPart] = field(default_factory=list)  # a combined kernel's parts


@dataclass
class SavedTensorRecord:
    """A tensor a training graph's forward keeps for its backward."""

    name: str  # its node in the forward aten graph
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    fused_nodes: list[str] = field(default_factory=list)  # the user's FX nodes it came from
    source_lines: list[SourceLine] = field(default_factory=list)
    is_input: bool = False  # a graph input (a parameter, ...): kept alive by its owner anyway


@dataclass
class PartitionRecord:
    """How a training graph was split into forward and backward (compiler/aot/partition.py)."""

    saved: list[SavedTensorRecord] = field(default_factory=list)
    recomputed: list[str] = field(default_factory=list)  # forward aten nodes the backward redoes
    mutated_inputs: list[str] = field(default_factory=list)  # written back after the forward

    @property
    def saved_bytes(self) -> int:
        """Bytes the backward keeps alive beyond the graph's inputs."""
        return sum(s.nbytes for s in self.saved if not s.is_input)


@dataclass
class Mismatch:
    """Verify mode (compiler/verify.py) found a compiled graph diverging from eager: the first
    FX node whose compiled value fails the accuracy check, and the user line it came from."""

    node: str  # the FX node's name, e.g. "sin"
    target: str  # its op, readable, e.g. "torch.sin"
    user_line: SourceLine | None
    compiled_rmse: float  # RMSE of the compiled value against the float64 eager value
    eager_rmse: float  # RMSE of eager in the input dtype against the same
    detail: str = ""

    def __str__(self) -> str:
        where = f" at line {self.user_line.lineno}" if self.user_line else ""
        return (
            f"{self.node} ({self.target}){where} diverges from eager: RMSE {self.compiled_rmse:.3g} "
            f"against float64, where eager's is {self.eager_rmse:.3g}"
        )


@dataclass
class BucketRecord:
    """One part of a graph split at DistributedDataParallel's gradient-bucket boundaries
    (compiler/distributed/): its backward hands these parameters' gradients to DDP, whose
    all-reduce of them then overlaps the backward of the parts before it."""

    index: int  # the part's place in the forward; the backward runs the parts in reverse
    params: list[str]  # the parameters whose gradients its backward produces (graph inputs)
    param_bytes: int
    # the size it was filled to: DDP's bucket_cap_mb, or for the graph's last part, whose
    # gradients are ready first, DDP's smaller first-bucket cap
    cap_bytes: int
    nodes: list[str]  # the FX nodes of the part
    split_after: str = ""  # the last node before the cut that ends it; "" for the last part
    split_line: SourceLine | None = None  # the user line of that node
    # the part's own compile (aot graphs, partition); None when the graph is one part
    graph: GraphRecord | None = None


@dataclass
class GraphRecord:
    """One FX graph the tracer captured and what the backend made of it."""

    graph_module: Any  # torch.fx.GraphModule
    code: str  # readable Python of the graph
    op_count: int
    source_lines: list[SourceLine] = field(default_factory=list)  # user lines this graph covers
    backend: str = ""
    example_inputs: list[str] = field(default_factory=list)  # readable descriptions
    aot_graphs: dict[str, str] = field(
        default_factory=dict
    )  # "forward", "backward", "joint" -> code
    kernels: list[KernelRecord] = field(default_factory=list)
    wrapper_source: str | None = None
    stage_times: list[StageTime] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # e.g. "op aten.foo ran as an extern call"
    fallback: str | None = None  # set when the backend failed and the graph runs eagerly
    partition: PartitionRecord | None = None  # training graphs: what the backward saves/redoes
    mismatch: Mismatch | None = None  # verify mode: where this graph's result went wrong
    verified_runs: int = 0  # verify mode: calls of this graph checked against eager
    # under DistributedDataParallel: the parts the graph was split into, one per gradient
    # bucket (one when a bucket holds the whole graph; empty outside DDP)
    buckets: list[BucketRecord] = field(default_factory=list)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            with gc_paused():
                yield
        finally:
            self.stage_times.append(StageTime(name, time.perf_counter() - start))


@dataclass
class SideEffect:
    """Something running an entry changes besides returning its value (tracer/effects.py)."""

    kind: str  # "tensor_write", "container", "attribute", "cell", "python", "opaque", "deferred"
    target: str  # the source changed, e.g. "L['x']", "G['log']"; "" when nothing outside
    detail: str  # readable, e.g. "add_ writes L['x']"


@dataclass
class EntryRecord:
    """One cache entry: a graph (possibly empty) run from instruction `start_line` on,
    valid while its guards hold, ending at a return or a graph break."""

    function: str
    start_line: int
    graph: GraphRecord | None
    guards: list[Guard] = field(default_factory=list)
    guard_source: str = ""  # the generated straight-line guard function
    graph_break: GraphBreak | None = None
    recompile_reason: str | None = None  # the guard that failed on the entries before this one
    compile_time_s: float = 0.0
    hits: int = 0
    # Runtime accounting over the calls that compiled nothing (FunctionRecord.timed_calls):
    # the runs of this entry's graph and their time (CPU time; on a GPU, the launches).
    timed_hits: int = 0
    graph_time_s: float = 0.0
    controls: list[ControlRecord] = field(default_factory=list)  # what the user steered
    # What a run of the entry changes besides its result; empty: it only reads and returns.
    side_effects: list[SideEffect] = field(default_factory=list)


@dataclass
class FunctionRecord:
    """Everything compiled for one Python code object."""

    name: str
    qualname: str
    filename: str
    firstlineno: int
    source: str
    entries: list[EntryRecord] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # eager fallbacks and why
    # controls that applied to the function as a whole (a stance that ran it eagerly, ...)
    controls: list[ControlRecord] = field(default_factory=list)
    # Runtime accounting: the calls that compiled nothing and their time, of which the
    # entries' graph_time_s ran in compiled graphs and the rest in Python (guards, the code
    # around graph breaks, callees that run eagerly).
    timed_calls: int = 0
    run_time_s: float = 0.0

    @property
    def graphs(self) -> list[GraphRecord]:
        return [e.graph for e in self.entries if e.graph is not None]

    @property
    def breaks(self) -> list[GraphBreak]:
        return [e.graph_break for e in self.entries if e.graph_break is not None]

    @property
    def graph_time_s(self) -> float:
        return sum(e.graph_time_s for e in self.entries)

    @property
    def all_controls(self) -> list[ControlRecord]:
        """The function's controls and its entries', each once (a recompile repeats them)."""
        out: list[ControlRecord] = []
        for c in [*self.controls, *(c for e in self.entries for c in e.controls)]:
            if c not in out:
                out.append(c)
        return out


@dataclass
class CompiledReport:
    """`compiler.inspect(fn)`: the records of the compiled function and every callee the
    compiler reached from it, the function's own record first."""

    functions: list[FunctionRecord]
    backend: str = ""
    mode: str | None = None

    @property
    def entries(self) -> list[EntryRecord]:
        return [e for f in self.functions for e in f.entries]

    @property
    def graphs(self) -> list[GraphRecord]:
        return [g for f in self.functions for g in f.graphs]

    @property
    def kernels(self) -> list[KernelRecord]:
        return [k for g in self.graphs for k in g.kernels]

    @property
    def mismatches(self) -> list[Mismatch]:
        """What verify mode found diverging from eager, graph by graph."""
        return [g.mismatch for g in self.graphs if g.mismatch is not None]

    @property
    def controls(self) -> list[ControlRecord]:
        """Every control that shaped the result, function by function."""
        return [c for f in self.functions for c in f.all_controls]


# ---- live updates -------------------------------------------------------------------------

_subscribers: list[Callable[[FunctionRecord], None]] = []


def subscribe(callback: Callable[[FunctionRecord], None]) -> Callable[[], None]:
    """Call `callback(record)` whenever a function record changes; returns an unsubscribe."""
    _subscribers.append(callback)
    return lambda: _subscribers.remove(callback) if callback in _subscribers else None


def notify(record: FunctionRecord) -> None:
    for callback in list(_subscribers):
        try:
            callback(record)
        except Exception:  # a broken view must never break a compile
            pass


# ---- the graph a backend is compiling ------------------------------------------------------

_current_graph: contextvars.ContextVar[GraphRecord | None] = contextvars.ContextVar(
    "current_graph", default=None
)


def current_graph() -> GraphRecord | None:
    """The record of the graph being handed to a backend, so the backend (ours, or ours called
    from a user's backend) can attach kernels, stage times and notes to it."""
    return _current_graph.get()


@contextlib.contextmanager
def compiling_graph(record: GraphRecord) -> Iterator[GraphRecord]:
    token = _current_graph.set(record)
    try:
        yield record
    finally:
        _current_graph.reset(token)
