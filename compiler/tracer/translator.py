"""The symbolic interpreter: the run loop over the opcodes' traced handlers (opcodes/).

It runs a frame's bytecode over tracer values (variables.py), recording torch work into an
FX graph (graph_builder.py) and guards (guards.py), until the frame returns or reaches an
instruction it cannot trace: a graph break. User functions it meets are inlined; a break
inside one restarts the trace and breaks at the call in the root frame instead.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any

from compiler.records import SourceLine
from compiler.tracer import binding, calls, generators
from compiler.tracer.breaks import Break, InlineBreak, Raised, Restart
from compiler.tracer.bytecode import Code, Instr, decode
from compiler.tracer.context import AttrWrites, DeferredCall, SymFrame
from compiler.tracer.exceptions import describe_exception
from compiler.tracer.graph_builder import GraphBuilder
from compiler.tracer.guards import GuardSet
from compiler.tracer.opcodes import TRACED
from compiler.tracer.opcodes.registry import Return
from compiler.tracer.shapes import DynamicPolicy

# Every value family, imported once by the interpreter that dispatches over them, so that
# each kind registers its handlers in values.table.VALUE_OPS before the first trace.
from compiler.tracer.values import families  # noqa: F401
from compiler.tracer.variables import (
    NULL,
    CellVar,
    ConstVar,
    DictVar,
    FunctionVar,
    IteratorVar,
    LazyVar,
    ListVar,
    NewObjectVar,
    SetVar,
    Var,
)
from compiler.tracer.wrap import wrap, wrap_unguarded

MAX_INSTRUCTIONS = 500_000
MAX_INLINE_DEPTH = 32
# What a closure cell read without a source may hold: code and classes, set once.
_STABLE_CELL_TYPES = (type, types.FunctionType, types.ModuleType, types.BuiltinFunctionType)


@dataclass
class TraceResult:
    kind: str  # "return" or "break"
    value: Var | None = None  # the returned value
    frame: SymFrame | None = None  # the root frame, before the breaking instruction
    reason: str = ""
    user_stack: list[SourceLine] = field(default_factory=list)
    break_kind: str = "unsupported"  # keys the fix suggested for a break (hints.py)


class Translator:
    """The symbolic interpreter: context.Tracer, as the handlers it runs see it."""

    def __init__(
        self,
        code: Code,
        G: dict,
        frame_locals: dict,
        L: dict,
        stack: list,
        cells: dict,
        pc: int,
        break_at: tuple[int, str, list[SourceLine], str] | None,
        fn_name: str,
        dynamic: DynamicPolicy | None = None,
        constants: list | None = None,
    ):
        self.guards = GuardSet()
        self.builder = GraphBuilder(self.guards, dynamic)
        # assume_constant_result calls already made, kept across restarts (compiler/tracer/marked.py)
        self.constants = constants if constants is not None else []
        self.guards.grad_mode(self.builder.grad_enabled)
        self.guards.global_state()
        self.G = G
        self.frame_values = L
        self.current_frame: SymFrame | None = None
        self.current_root_pc = pc
        self.root_pc = pc  # the root-frame instruction being traced (inlined calls included)
        self.resumed = pc != code.start  # the entry starts after a graph break
        # Exceptions raised in the trace (exceptions.py): the one being handled (what a bare
        # `raise` re-raises), how many handlers are running, the root-frame instruction where
        # the exception a handler runs for was raised (None when none runs), and whether any
        # traced instruction has a handler (then the graph may be rerun eagerly if it raises).
        self.current_exc: Var = ConstVar(None)
        self.handling = 0
        self.unwound: int | None = None
        self.covered = False
        self.attr_writes: dict[int, AttrWrites] = {}  # attributes written to real objects
        self.deferred_calls: list[DeferredCall] = []  # log calls made after the graph
        # calls made before the graph (torch.manual_seed ahead of any op: torch_functions.py)
        self.before_graph: list[DeferredCall] = []
        # lru_cache wrappers' calls on tensors in this trace, by wrapper and key (library_calls.py)
        self.cached_calls: dict[tuple, Var] = {}
        # State changes, counted for the generators the trace runs ahead (generators.py):
        # those any code may see, those to lists and dicts built in the trace, and the
        # iterators of the generators inlined.
        self.effects = 0
        self.local_effects = 0
        self.generators: list[IteratorVar] = []
        # lists and dicts read from the frame, by identity (wrap.py)
        self.external_containers: dict[int, Var] = {}
        self.real_iterators: dict[int, IteratorVar] = {}  # iterators read from the frame
        # plain objects read from the frame, by source: an attribute the trace writes to one
        # is seen through another only while the two are the same object (wrap.py)
        self.frame_objects: dict[str, Any] = {}
        # tensor keys of dicts made before a graph break, graph inputs (wrap._object_key)
        self.key_tensors: list[Var] = []
        self.break_at = break_at
        self.instructions_run = 0
        self.depth = 0
        self.globals_refs: dict[int, str] = {id(G): "G"}
        locals_ = {name: LazyVar(value, f"L[{name!r}]") for name, value in frame_locals.items()}
        # Real cells by identity: a closure the trace inlines may share a cell with the frame
        # or with another closure, and a write through one must be seen through the others.
        # Those written in the trace are written for real after the graph (reconstruct.py).
        self.real_cells: dict[int, CellVar] = {}
        cell_vars = {
            name: self.real_cell(cell, name, f"L[{name!r}]") for name, cell in cells.items()
        }
        stack_vars: list[Var] = [
            NULL if v is calls.REAL_NULL else LazyVar(v, f"L['__stack{i}']")
            for i, v in enumerate(stack)
        ]
        self.root = SymFrame(code, G, "G", locals_, cell_vars, stack_vars, pc, fn_name=fn_name)

    # ---- values from the frame --------------------------------------------------------------

    def resolve(self, v: Var) -> Var:
        if isinstance(v, LazyVar):
            return wrap(self, v.value, v.source)
        return v

    def globals_source(self, g: dict) -> str:
        name = self.globals_refs.get(id(g))
        if name is None:
            name = f"___globals{len(self.globals_refs)}"
            self.globals_refs[id(g)] = name
            self.guards.namespace[name] = g
        return name

    def changed(self, v: Var | None = None) -> None:
        """Count a change of state: of the list, dict or object `v` built in the trace, or of
        state any code may see (None, or a list or dict from outside the graph)."""
        if isinstance(v, (ListVar, DictVar, SetVar, NewObjectVar)) and v.source is None:
            v.version += 1
            self.local_effects += 1
        else:
            self.effects += 1

    def effect_count(self) -> int:
        """Changes of state any code may see, in-place tensor ops of the graph included."""
        return self.effects + self.builder.effects

    def real_cell(self, cell: Any, name: str, source: str | None) -> CellVar:
        """The one tracer value of a real cell, whatever path reached it."""
        var = self.real_cells.get(id(cell))
        if var is None:
            var = self.real_cells[id(cell)] = CellVar(cell=cell, name=name, source=source)
        elif var.source is None:
            var.source = source
        return var

    def written_cells(self, result: TraceResult | None = None) -> list[CellVar]:
        """The real cells the trace wrote: their new contents are written after the graph.
        Where a trace that began with the call returns (`result`), the frame's own cells
        (its cellvars: a nested function's name, a variable its closures share) were made by
        this call and die with it, unless a value that outlives it reaches them (a closure
        returned or stored): the others need no write, and may hold values that live only in
        the trace (a helper wrapped by functools.lru_cache in the trace)."""
        cells = [c for c in self.real_cells.values() if c.dirty]
        if result is None or result.kind != "return" or self.resumed:
            return cells
        own = {id(self.root.cells[n]) for n in self.root.code.cellvars if n in self.root.cells}
        roots = [result.value, *(c for c in cells if id(c) not in own)]
        roots.extend(v for v in self.external_containers.values() if v.mutated)
        for writes in self.attr_writes.values():
            roots.extend(v for v in writes.values.values() if v is not None)
        reached = {id(v) for v in generators.reachable(roots)}
        return [c for c in cells if id(c) not in own or id(c) in reached]

    def cell_contents(self, cell: CellVar) -> Var:
        if cell.contents is None:
            if cell.cell is None:
                raise Break(f"free variable {cell.name!r} referenced before assignment")
            try:
                value = cell.cell.cell_contents
            except ValueError:
                raise Break(f"free variable {cell.name!r} referenced before assignment") from None
            if cell.source is not None:
                cell.contents = wrap(self, value, cell.source)
            elif isinstance(value, _STABLE_CELL_TYPES):
                # The cell of a function reached without a source (a method found on a class):
                # cells holding code (`__class__`, a decorated function) are set once.
                cell.contents = wrap_unguarded(value)
            else:
                # Such a function's cell object is its own for the function's life: the guards
                # read its contents from the cell itself (a decorator's `tensor_name`).
                source = f"{self.guards.reference(cell.cell, 'cell')}.cell_contents"
                cell.contents = wrap(self, value, source)
        return cell.contents

    # ---- the run loop -------------------------------------------------------------------------

    def run(self) -> TraceResult:
        frame = self.root
        while True:
            ins = frame.code.instructions[frame.pc]
            self.builder.user_stack = [frame.line()]
            if self.break_at is not None and frame.pc == self.break_at[0]:
                return self._ended(
                    TraceResult(
                        "break",
                        frame=frame,
                        reason=self.break_at[1],
                        user_stack=self.break_at[2],
                        break_kind=self.break_at[3],
                    )
                )
            saved_stack = list(frame.stack)
            saved_kw = frame.kw_names
            self.root_pc = frame.pc
            try:
                result = self.step(frame, ins)
            except Restart as r:
                self.current_root_pc = r.pc
                return TraceResult(
                    "restart", reason=r.reason, user_stack=[frame.line()], break_kind=r.kind
                )
            except Break as b:
                if self.unwound is not None:
                    return self._restart_at_raise(
                        f"{b.reason} (in an exception handler)", [frame.line()], b.kind
                    )
                frame.stack = saved_stack
                frame.kw_names = saved_kw
                return self._ended(
                    TraceResult(
                        "break",
                        frame=frame,
                        reason=b.reason,
                        user_stack=[frame.line()],
                        break_kind=b.kind,
                    )
                )
            except InlineBreak as b:
                if self.unwound is not None:
                    return self._restart_at_raise(b.reason, [frame.line(), *b.user_stack], b.kind)
                frame.stack = saved_stack
                frame.kw_names = saved_kw
                self.current_root_pc = frame.pc
                return TraceResult(
                    "restart",
                    reason=b.reason,
                    user_stack=[frame.line(), *b.user_stack],
                    break_kind=b.kind,
                )
            except Raised as r:
                reason = f"{describe_exception(r.exc)} is raised here and not caught in the graph; it is raised again in Python"
                if self.unwound is not None:
                    return self._restart_at_raise(
                        reason, r.user_stack or [frame.line()], "exception"
                    )
                frame.stack = saved_stack
                frame.kw_names = saved_kw
                return self._ended(
                    TraceResult(
                        "break",
                        frame=frame,
                        reason=reason,
                        user_stack=r.user_stack or [frame.line()],
                        break_kind="exception",
                    )
                )
            if result is not None:
                return self._ended(TraceResult("return", value=result))

    def _ended(self, result: TraceResult) -> TraceResult:
        """`result`, or a restart where a generator the trace ran ahead is left unfinished
        where Python code runs next (generators.py)."""
        if result.kind == "return":
            roots = [result.value]
        else:
            roots = [*result.frame.locals.values(), *result.frame.stack]
        roots.extend(v for v in self.external_containers.values() if v.mutated)
        roots.extend(self.written_cells(result))
        for writes in self.attr_writes.values():
            roots.extend(v for v in writes.values.values() if v is not None)
        try:
            generators.check_live(self, roots)
        except Restart as r:
            self.current_root_pc = r.pc
            return TraceResult(
                "restart", reason=r.reason, user_stack=result.user_stack, break_kind=r.kind
            )
        return result

    def _restart_at_raise(
        self, reason: str, user_stack: list[SourceLine], kind: str
    ) -> TraceResult:
        """Trace again, ending the graph before the root-frame instruction that raised the
        exception whose handling the trace could not finish: that instruction then raises it
        for real."""
        self.current_root_pc = self.unwound
        return TraceResult("restart", reason=reason, user_stack=user_stack, break_kind=kind)

    def step(self, frame: SymFrame, ins: Instr) -> Var | None:
        self.instructions_run += 1
        self.current_frame = frame
        if self.instructions_run > MAX_INSTRUCTIONS:
            raise Break(
                f"the trace ran more than {MAX_INSTRUCTIONS} instructions (a very long loop)",
                "long_loop",
            )
        handler = TRACED.get(ins.opname)
        if handler is None:
            raise Break(f"bytecode {ins.opname} is not supported by the tracer")
        next_pc = frame.pc + 1
        frame.pc_next = next_pc  # type: ignore[attr-defined]
        if frame.code.handlers[frame.pc] is not None:
            self.covered = True
        size_conditions = len(self.builder.shapes.env.guards)
        try:
            out = handler(self, frame, ins)
        except Raised as r:
            self.unwind(frame, r)
            out = None
        if len(self.builder.shapes.env.guards) != size_conditions:
            self.builder.shapes.note_guards(size_conditions, self.builder.line)
        if isinstance(out, Return):
            return out.value
        frame.pc = frame.pc_next  # type: ignore[attr-defined]
        return None

    def jump(self, frame: SymFrame, ins: Instr) -> None:
        frame.pc_next = ins.jump_index  # type: ignore[attr-defined]

    def unwind(self, frame: SymFrame, raised: Raised) -> None:
        """Send `raised` to the handler of the instruction at frame.pc, or re-raise it to the
        caller when no handler covers the instruction."""
        if raised.user_stack is None:
            raised.user_stack = list(self.builder.user_stack)
        handler = frame.code.handlers[frame.pc]
        if handler is None:
            raise raised
        if len(frame.stack) < handler.depth:
            raise Break("the exception table's stack depth is deeper than the traced stack")
        if self.unwound is None:
            self.unwound = self.root_pc
        del frame.stack[handler.depth :]
        if handler.lasti:
            frame.stack.append(ConstVar(frame.pc))
        frame.stack.append(raised.exc)
        frame.kw_names = None
        frame.pc_next = handler.target  # type: ignore[attr-defined]

    # ---- inlining -------------------------------------------------------------------------------

    def inline(self, fn: FunctionVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
        child = self.start_frame(fn, args, kwargs)
        if child.code.is_generator:
            # Run the generator to completion now; its values are what iterating it yields
            # (generators.py says when that is safe).
            child.yields = []
            inputs = [*child.locals.values(), *child.cells.values()]
            before = generators.run_started(self)
        result = self._run_child(child)
        if child.yields is None:
            return result
        return generators.run_finished(
            self, child.code.name, before, inputs, child.yields, result
        )

    def start_frame(self, fn: FunctionVar, args: list[Var], kwargs: dict[str, Var]) -> SymFrame:
        """The frame of an inlined call of `fn`, its arguments bound, not yet run."""
        code = decode(fn.get_code())
        if code.unsupported and not code.is_generator:
            raise Break(f"cannot inline {fn.get_code().co_name}: {code.unsupported}")
        if self.depth >= MAX_INLINE_DEPTH:
            raise Break("inlining is nested too deeply (recursion?)")
        locals_ = binding.bind_arguments(self, fn, args, kwargs)
        g = fn.get_globals()
        cells: dict[str, CellVar] = {}
        for name in code.cellvars:
            cell = CellVar(name=name)
            if name in locals_:  # an argument captured by a closure
                cell.contents = locals_.pop(name)
            cells[name] = cell
        closure = binding.function_closure(self, fn)
        for name, cell in zip(code.freevars, closure):
            cells[name] = cell
        return SymFrame(
            code, g, self.globals_source(g), locals_, cells, [], code.start, fn_name=code.name
        )

    def resume(self, child: SymFrame, thrown: Var | None = None) -> tuple[bool, Var]:
        """Run a generator's frame on from where it last yielded (or from its start) to its
        next yield, (True, the value yielded), or to its return, (False, the value returned).
        `thrown`: the exception raised at the yield instead (generator.throw)."""
        child.suspend = True
        child.yielded = None
        if thrown is not None:
            child.stack.pop()  # the value the yield would have returned
            child.pc = child.yield_pc
            try:
                self.unwind(child, Raised(thrown))
            finally:
                child.pc = getattr(child, "pc_next", child.pc)
        result = self._run_child(child)
        if child.yielded is not None:
            return True, child.yielded
        return False, result

    def _run_child(self, child: SymFrame) -> Var:
        """Step an inlined frame until it returns (or, a suspendable generator, yields)."""
        parent_stack = self.builder.user_stack
        self.depth += 1
        try:
            while True:
                ins = child.code.instructions[child.pc]
                self.builder.user_stack = [*parent_stack, child.line()]
                try:
                    result = self.step(child, ins)
                except Break as b:
                    raise InlineBreak(b.reason, [child.line()], b.kind) from None
                except InlineBreak as b:
                    raise InlineBreak(b.reason, [child.line(), *b.user_stack], b.kind) from None
                except Raised:
                    if self.unwound is None:
                        self.unwound = self.root_pc  # the callee's effects so far are in the trace
                    raise
                if result is not None or child.yielded is not None:
                    return result
        finally:
            self.depth -= 1
            self.builder.user_stack = parent_stack

    # ---- stack helpers -------------------------------------------------------------------------

    def pop(self, frame: SymFrame) -> Var:
        return self.resolve(frame.stack.pop())

    def popn(self, frame: SymFrame, n: int) -> list[Var]:
        if n == 0:
            return []
        items = frame.stack[-n:]
        del frame.stack[-n:]
        return [self.resolve(v) for v in items]

    def push(self, frame: SymFrame, v: Var) -> None:
        frame.stack.append(v)
