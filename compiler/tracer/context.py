"""What the tracer's handlers are handed, as they see it: the tracer running the trace and
the emitter writing rebuild code, the frames the tracer runs, and the records it keeps of
effects to make after the graph.

The tracer and the emitter are declared here as protocols, below every module that names
them: the value table (values/table.py), the dispatchers over it and the value families.
Their one implementation each, translator.Translator and reconstruct.Rebuilder, sit above
those modules and call into them, so imports point one way (tests/tracer/test_layering.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from compiler.records import SourceLine
from compiler.tracer.bytecode import Code, Instr
from compiler.tracer.graph_builder import GraphBuilder
from compiler.tracer.guards import GuardSet
from compiler.tracer.variables import CellVar, FunctionVar, IteratorVar, ObjVar, Var


@dataclass
class SymFrame:
    code: Code
    globals: dict
    globals_source: str
    locals: dict[str, Var]
    cells: dict[str, CellVar]
    stack: list[Var] = field(default_factory=list)
    pc: int = 0
    kw_names: tuple | None = None
    fn_name: str = ""
    yields: list[Var] | None = None  # values an inlined generator yielded
    # A generator run a step at a time (Tracer.resume): it pauses at each yield, and the
    # value and instruction of the last yield are kept
    suspend: bool = False
    yielded: Var | None = None
    yield_pc: int = 0

    def line(self, pc: int | None = None) -> SourceLine:
        ins = self.code.instructions[self.pc if pc is None else pc]
        return SourceLine(
            self.code.code.co_filename,
            ins.lineno or 0,
            self.code.line_text(ins.lineno),
            self.fn_name,
        )


@dataclass
class AttrWrites:
    """The attributes a trace wrote to one real object (None: deleted)."""

    obj: ObjVar
    values: dict[str, Var | None] = field(default_factory=dict)


@dataclass
class DeferredCall:
    """A call with constant arguments whose only effect is outside the program (a log record,
    a warning): the trace keeps it, and the entry's rebuild code makes it for real after the
    graph, in trace order (reconstruct.py). An argument that is a Var (a symbolic size, such
    as a step counter that changes per call) is computed by the rebuild code from the inputs."""

    fn: Any
    args: tuple  # Python values, or Vars of symbolic sizes
    kwargs: dict
    what: str  # readable, for the records


class Tracer(Protocol):
    """The symbolic interpreter, as handlers use it (translator.Translator says what each
    part holds)."""

    guards: GuardSet
    builder: GraphBuilder
    G: dict
    frame_values: dict
    constants: list
    current_frame: SymFrame | None
    root_pc: int
    resumed: bool
    current_exc: Var
    handling: int
    unwound: int | None
    attr_writes: dict[int, AttrWrites]
    deferred_calls: list[DeferredCall]
    before_graph: list[DeferredCall]
    cached_calls: dict[tuple, Var]
    local_effects: int
    generators: list[IteratorVar]
    external_containers: dict[int, Var]
    frame_objects: dict[str, Any]
    key_tensors: list[Var]
    real_iterators: dict[int, IteratorVar]

    def resolve(self, v: Var) -> Var: ...

    def changed(self, v: Var | None = None) -> None: ...

    def effect_count(self) -> int: ...

    def real_cell(self, cell: Any, name: str, source: str | None) -> CellVar: ...

    def cell_contents(self, cell: CellVar) -> Var: ...

    def inline(self, fn: FunctionVar, args: list[Var], kwargs: dict[str, Var]) -> Var: ...

    def start_frame(
        self, fn: FunctionVar, args: list[Var], kwargs: dict[str, Var]
    ) -> SymFrame: ...

    def resume(self, child: SymFrame, thrown: Var | None = None) -> tuple[bool, Var]: ...

    def jump(self, frame: SymFrame, ins: Instr) -> None: ...

    def pop(self, frame: SymFrame) -> Var: ...

    def popn(self, frame: SymFrame, n: int) -> list[Var]: ...

    def push(self, frame: SymFrame, v: Var) -> None: ...


class Emitter(Protocol):
    """The writer of an entry's rebuild code, as rebuild handlers use it (reconstruct.Rebuilder
    says what each part holds)."""

    outputs: dict[int, int]
    sym_text: Callable[[Any, Callable], str] | None

    def ref(self, obj: Any, hint: str = "c") -> str: ...

    def snapshot(self, expr: str) -> str: ...

    def temp(self, expr: str) -> str: ...

    def expr(self, v: Var) -> str: ...

    def cell(self, c: CellVar) -> str: ...
