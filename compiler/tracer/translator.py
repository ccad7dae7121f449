"""The symbolic interpreter: one handler per opcode, named after it.

It runs a frame's bytecode over tracer values (variables.py), recording torch work into an
FX graph (graph_builder.py) and guards (guards.py), until the frame returns or reaches an
instruction it cannot trace: a graph break. User functions it meets are inlined; a break
inside one restarts the trace and breaks at the call in the root frame instead.
"""

from __future__ import annotations

import dis
import operator
import sys
import types
from dataclasses import dataclass, field
from typing import Any, Callable

from compiler.records import SourceLine
from compiler.tracer import binding, calls, generators
from compiler.tracer import operations as ops
from compiler.tracer.breaks import Break, InlineBreak, Raised, Restart
from compiler.tracer.bytecode import PY312, Code, Instr, decode
from compiler.tracer.container_opcodes import ContainerOpcodes
from compiler.tracer.exception_opcodes import ExceptionOpcodes
from compiler.tracer.exceptions import describe_exception
from compiler.tracer.graph_builder import GraphBuilder
from compiler.tracer.guards import GuardSet
from compiler.tracer.objects import AttrWrites
from compiler.tracer.shapes import DynamicPolicy
from compiler.tracer.variables import (
    NULL,
    CellVar,
    ConstVar,
    DictVar,
    ExceptionVar,
    FunctionVar,
    IteratorVar,
    ListVar,
    NewObjectVar,
    NullVar,
    ObjVar,
    SetVar,
    SliceVar,
    SuperVar,
    TupleVar,
    Var,
    as_python_constant,
)
from compiler.tracer.wrap import wrap, wrap_unguarded

MAX_INSTRUCTIONS = 500_000
MAX_INLINE_DEPTH = 32
# What a closure cell read without a source may hold: code and classes, set once.
_STABLE_CELL_TYPES = (type, types.FunctionType, types.ModuleType, types.BuiltinFunctionType)


class LazyVar(Var):
    """A root-frame local not read yet: wrapped (and guarded) on first use only."""

    def __init__(self, value: Any, source: str):
        self.value = value
        self.source = source


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

    def line(self, pc: int | None = None) -> SourceLine:
        ins = self.code.instructions[self.pc if pc is None else pc]
        return SourceLine(
            self.code.code.co_filename,
            ins.lineno or 0,
            self.code.line_text(ins.lineno),
            self.fn_name,
        )


@dataclass
class TraceResult:
    kind: str  # "return" or "break"
    value: Var | None = None  # the returned value
    frame: SymFrame | None = None  # the root frame, before the breaking instruction
    reason: str = ""
    user_stack: list[SourceLine] = field(default_factory=list)


class Tracer(ContainerOpcodes, ExceptionOpcodes):
    def __init__(
        self,
        code: Code,
        G: dict,
        frame_locals: dict,
        L: dict,
        stack: list,
        cells: dict,
        pc: int,
        break_at: tuple[int, str, list[SourceLine]] | None,
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
        # Exceptions raised in the trace (exceptions.py): the one being handled (what a bare
        # `raise` re-raises), how many handlers are running, the root-frame instruction where
        # the exception a handler runs for was raised (None when none runs), and whether any
        # traced instruction has a handler (then the graph may be rerun eagerly if it raises).
        self.current_exc: Var = ConstVar(None)
        self.handling = 0
        self.unwound: int | None = None
        self.covered = False
        self.attr_writes: dict[int, AttrWrites] = {}  # attributes written to real objects
        # State changes, counted for the generators the trace runs ahead (generators.py):
        # those any code may see, those to lists and dicts built in the trace, and the
        # iterators of the generators inlined.
        self.effects = 0
        self.local_effects = 0
        self.generators: list[IteratorVar] = []
        # lists and dicts read from the frame, by identity (wrap.py)
        self.external_containers: dict[int, Var] = {}
        self.real_iterators: dict[int, IteratorVar] = {}  # iterators read from the frame
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

    def written_cells(self) -> list[CellVar]:
        """The real cells the trace wrote: their new contents are written after the graph."""
        return [c for c in self.real_cells.values() if c.dirty]

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
                raise Break(f"closure variable {cell.name!r} has no source to guard")
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
                        "break", frame=frame, reason=self.break_at[1], user_stack=self.break_at[2]
                    )
                )
            saved_stack = list(frame.stack)
            saved_kw = frame.kw_names
            self.root_pc = frame.pc
            try:
                result = self.step(frame, ins)
            except Restart as r:
                self.current_root_pc = r.pc
                return TraceResult("restart", reason=r.reason, user_stack=[frame.line()])
            except Break as b:
                if self.unwound is not None:
                    return self._restart_at_raise(
                        f"{b.reason} (in an exception handler)", [frame.line()]
                    )
                frame.stack = saved_stack
                frame.kw_names = saved_kw
                return self._ended(
                    TraceResult("break", frame=frame, reason=b.reason, user_stack=[frame.line()])
                )
            except InlineBreak as b:
                if self.unwound is not None:
                    return self._restart_at_raise(b.reason, [frame.line(), *b.user_stack])
                frame.stack = saved_stack
                frame.kw_names = saved_kw
                self.current_root_pc = frame.pc
                return TraceResult(
                    "restart", reason=b.reason, user_stack=[frame.line(), *b.user_stack]
                )
            except Raised as r:
                reason = f"{describe_exception(r.exc)} is raised here and not caught in the graph; it is raised again in Python"
                if self.unwound is not None:
                    return self._restart_at_raise(reason, r.user_stack or [frame.line()])
                frame.stack = saved_stack
                frame.kw_names = saved_kw
                return self._ended(
                    TraceResult(
                        "break",
                        frame=frame,
                        reason=reason,
                        user_stack=r.user_stack or [frame.line()],
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
        roots.extend(self.written_cells())
        for writes in self.attr_writes.values():
            roots.extend(v for v in writes.values.values() if v is not None)
        try:
            generators.check_live(self, roots)
        except Restart as r:
            self.current_root_pc = r.pc
            return TraceResult("restart", reason=r.reason, user_stack=result.user_stack)
        return result

    def _restart_at_raise(self, reason: str, user_stack: list[SourceLine]) -> TraceResult:
        """Trace again, ending the graph before the root-frame instruction that raised the
        exception whose handling the trace could not finish: that instruction then raises it
        for real."""
        self.current_root_pc = self.unwound
        return TraceResult("restart", reason=reason, user_stack=user_stack)

    def step(self, frame: SymFrame, ins: Instr) -> Var | None:
        self.instructions_run += 1
        self.current_frame = frame
        if self.instructions_run > MAX_INSTRUCTIONS:
            raise Break(
                f"the trace ran more than {MAX_INSTRUCTIONS} instructions (a very long loop)"
            )
        handler = getattr(self, ins.opname, None)
        if handler is None:
            raise Break(f"bytecode {ins.opname} is not supported by the tracer")
        next_pc = frame.pc + 1
        frame.pc_next = next_pc  # type: ignore[attr-defined]
        if frame.code.handlers[frame.pc] is not None:
            self.covered = True
        size_conditions = len(self.builder.shapes.env.guards)
        try:
            out = handler(frame, ins)
        except Raised as r:
            self.unwind(frame, r)
            out = None
        if len(self.builder.shapes.env.guards) != size_conditions:
            self.builder.shapes.note_guards(size_conditions, self.builder.line)
        if isinstance(out, _Return):
            return out.value
        frame.pc = frame.pc_next  # type: ignore[attr-defined]
        return None

    def jump(self, frame: SymFrame, ins: Instr) -> None:
        frame.pc_next = ins.jump_index  # type: ignore[attr-defined]

    # ---- inlining -------------------------------------------------------------------------------

    def inline(self, fn: FunctionVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
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
        parent_stack = self.builder.user_stack
        child = SymFrame(
            code, g, self.globals_source(g), locals_, cells, [], code.start, fn_name=code.name
        )
        if code.is_generator:
            # Run the generator to completion now; its values are what iterating it yields
            # (generators.py says when that is safe).
            child.yields = []
            inputs = [*locals_.values(), *cells.values()]
            before = generators.run_started(self)
        self.depth += 1
        try:
            while True:
                ins = child.code.instructions[child.pc]
                self.builder.user_stack = [*parent_stack, child.line()]
                try:
                    result = self.step(child, ins)
                except Break as b:
                    raise InlineBreak(b.reason, [child.line()]) from None
                except InlineBreak as b:
                    raise InlineBreak(b.reason, [child.line(), *b.user_stack]) from None
                except Raised:
                    if self.unwound is None:
                        self.unwound = self.root_pc  # the callee's effects so far are in the trace
                    raise
                if result is not None:
                    if child.yields is None:
                        return result
                    return generators.run_finished(self, code.name, before, inputs, child.yields)
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

    # ---- opcodes: stack and locals --------------------------------------------------------------

    def NOP(self, frame, ins):
        pass

    RESUME = EXTENDED_ARG = CACHE = MAKE_CELL = COPY_FREE_VARS = NOP

    def PUSH_NULL(self, frame, ins):
        self.push(frame, NULL)

    def POP_TOP(self, frame, ins):
        frame.stack.pop()

    def END_FOR(self, frame, ins):
        del frame.stack[-2:]

    def COPY(self, frame, ins):
        self.push(frame, frame.stack[-ins.arg])

    def SWAP(self, frame, ins):
        i = ins.arg
        frame.stack[-1], frame.stack[-i] = frame.stack[-i], frame.stack[-1]

    def LOAD_CONST(self, frame, ins):
        self.push(frame, calls.constant(ins.argval))

    def RETURN_CONST(self, frame, ins):
        return _Return(calls.constant(ins.argval))

    def LOAD_FAST(self, frame, ins):
        name = ins.argval
        if name not in frame.locals:
            raise Break(f"local variable {name!r} referenced before assignment")
        v = frame.locals[name]
        if isinstance(v, LazyVar):
            v = frame.locals[name] = self.resolve(v)
        self.push(frame, v)

    LOAD_FAST_CHECK = LOAD_FAST

    def LOAD_FAST_AND_CLEAR(self, frame, ins):
        v = frame.locals.pop(ins.argval, None)
        self.push(frame, self.resolve(v) if v is not None else NULL)

    def STORE_FAST(self, frame, ins):
        v = frame.stack.pop()
        if isinstance(v, NullVar):  # 3.12 comprehension restoring an unbound local
            frame.locals.pop(ins.argval, None)
        else:
            frame.locals[ins.argval] = v

    def DELETE_FAST(self, frame, ins):
        frame.locals.pop(ins.argval, None)

    def LOAD_CLOSURE(self, frame, ins):
        self.push(frame, frame.cells[ins.argval])

    def LOAD_DEREF(self, frame, ins):
        self.push(frame, self.cell_contents(frame.cells[ins.argval]))

    def STORE_DEREF(self, frame, ins):
        cell = frame.cells[ins.argval]
        if cell.cell is not None and cell.source is None:
            # the function was reached without a guarded path: its cells may not be the ones
            # the next call reaches, so the write is not replayed on a baked-in cell
            raise Break(
                f"assignment to closure variable {cell.name!r} of a function without a source"
            )
        cell.contents = self.pop(frame)
        cell.dirty = True
        self.changed()

    def LOAD_GLOBAL(self, frame, ins):
        if (ins.arg or 0) & 1:
            self.push(frame, NULL)
        name = ins.argval
        self.push(frame, self.load_global(frame, name))

    def load_global(self, frame: SymFrame, name: str) -> Var:
        if name in frame.globals:
            return wrap(self, frame.globals[name], f"{frame.globals_source}[{name!r}]")
        builtins = frame.globals.get("__builtins__", __builtins__)
        if isinstance(builtins, dict):
            if name in builtins:
                return calls.builtin_var(builtins[name])
        elif hasattr(builtins, name):
            return calls.builtin_var(getattr(builtins, name))
        raise Break(f"name {name!r} is not defined")

    def STORE_GLOBAL(self, frame, ins):
        raise Break(f"assignment to global {ins.argval!r} runs in Python")

    # ---- attributes -----------------------------------------------------------------------------

    def LOAD_ATTR(self, frame, ins):
        obj = self.pop(frame)
        name = ins.argval
        if PY312 and (ins.arg or 0) & 1:
            # 3.12 method load: [meth, self] or [NULL, attr]
            attr = ops.load_attr(self, obj, name)
            self.push(frame, NULL)
            self.push(frame, attr)
            return
        self.push(frame, ops.load_attr(self, obj, name))

    def LOAD_METHOD(self, frame, ins):
        obj = self.pop(frame)
        self.push(frame, NULL)
        self.push(frame, ops.load_attr(self, obj, ins.argval))

    def LOAD_SUPER_ATTR(self, frame, ins):
        # 3.12: `super().name`; bit 0 of the argument asks for a method load, bit 1 says the
        # call was super(cls, obj) (both forms leave [super, cls, obj] on the stack).
        obj = self.pop(frame)
        cls = self.pop(frame)
        super_fn = self.pop(frame)
        if not (isinstance(super_fn, ObjVar) and super_fn.value is super):
            raise Break("super() through a name rebound from the builtin")
        attr = ops.load_attr(self, SuperVar(as_python_constant(cls), obj), ins.argval)
        if ins.arg & 1:
            self.push(frame, NULL)
        self.push(frame, attr)

    def STORE_ATTR(self, frame, ins):
        obj = self.resolve(frame.stack[-1])
        value = self.resolve(frame.stack[-2])
        ops.store_attr(self, obj, ins.argval, value)
        del frame.stack[-2:]

    # ---- calls -----------------------------------------------------------------------------------

    def KW_NAMES(self, frame, ins):
        frame.kw_names = (
            ins.argval if isinstance(ins.argval, tuple) else frame.code.code.co_consts[ins.arg]
        )

    def PRECALL(self, frame, ins):
        pass

    def CALL(self, frame, ins):
        argc = ins.arg
        kw_names = frame.kw_names or ()
        frame.kw_names = None
        args = self.popn(frame, argc)
        callable_ = self.pop(frame)
        head = frame.stack.pop()
        if not isinstance(head, NullVar):
            # [callable, self, args...]
            args = [callable_, *args]
            callable_ = self.resolve(head)
        kwargs = {}
        if kw_names:
            kwargs = dict(zip(kw_names, args[len(args) - len(kw_names) :]))
            args = args[: len(args) - len(kw_names)]
        self.push(frame, calls.call(self, callable_, args, kwargs))

    def CALL_FUNCTION_EX(self, frame, ins):
        kwargs_var = self.pop(frame) if ins.arg & 1 else None
        args_var = self.pop(frame)
        fn = self.pop(frame)
        if frame.stack and isinstance(frame.stack[-1], NullVar):
            frame.stack.pop()  # the NULL pushed before the callable
        args = ops.unpack_iterable(self, args_var)
        kwargs: dict[str, Var] = {}
        if kwargs_var is not None:
            if not isinstance(kwargs_var, DictVar):
                raise Break("**kwargs of an unknown mapping")
            kwargs = dict(kwargs_var.items)
        self.push(frame, calls.call(self, fn, args, kwargs))

    def MAKE_FUNCTION(self, frame, ins):
        flags = ins.arg or 0
        code_var = self.pop(frame)
        closure = self.pop(frame) if flags & 0x08 else None
        if flags & 0x04:
            self.pop(frame)  # annotations
        kwdefaults = self.pop(frame) if flags & 0x02 else None
        defaults = self.pop(frame) if flags & 0x01 else None
        code = as_python_constant(code_var)
        self.push(
            frame,
            FunctionVar(
                code=code,
                globals=frame.globals,
                name=code.co_name,
                defaults=defaults,
                kwdefaults=kwdefaults,
                closure=list(closure.items) if closure is not None else None,
            ),
        )

    def RETURN_VALUE(self, frame, ins):
        return _Return(self.pop(frame))

    # ---- operators -------------------------------------------------------------------------------

    def BINARY_OP(self, frame, ins):
        b = self.pop(frame)
        a = self.pop(frame)
        op = ins.argrepr
        self.push(frame, ops.binary(self, ops.BINARY_OPS[op], a, b))

    def COMPARE_OP(self, frame, ins):
        b = self.pop(frame)
        a = self.pop(frame)
        op = ins.argval if isinstance(ins.argval, str) else dis.cmp_op[ins.arg]
        self.push(
            frame, ops.binary(self, ops.COMPARE_OPS[op.replace("bool(", "").rstrip(")")], a, b)
        )

    def IS_OP(self, frame, ins):
        b = self.pop(frame)
        a = self.pop(frame)
        same = ops.is_same(a, b)
        self.push(frame, ConstVar(same != bool(ins.arg)))

    def CONTAINS_OP(self, frame, ins):
        container = self.pop(frame)
        item = self.pop(frame)
        self.push(frame, ConstVar(ops.contains(self, container, item) != bool(ins.arg)))

    def UNARY_NEGATIVE(self, frame, ins):
        self.push(frame, ops.unary(self, operator.neg, self.pop(frame)))

    def UNARY_POSITIVE(self, frame, ins):
        self.push(frame, ops.unary(self, operator.pos, self.pop(frame)))

    def UNARY_INVERT(self, frame, ins):
        self.push(frame, ops.unary(self, operator.invert, self.pop(frame)))

    def UNARY_NOT(self, frame, ins):
        self.push(frame, ConstVar(not ops.truth(self, self.pop(frame))))

    def CALL_INTRINSIC_1(self, frame, ins):
        kind = ins.argrepr
        v = self.pop(frame)
        if kind == "INTRINSIC_LIST_TO_TUPLE":
            self.push(frame, TupleVar(list(v.items)))
        elif kind == "INTRINSIC_UNARY_POSITIVE":
            self.push(frame, ops.unary(self, operator.pos, v))
        elif kind == "INTRINSIC_STOPITERATION_ERROR" and isinstance(v, ExceptionVar):
            # 3.12 generators: a StopIteration leaving the body becomes a RuntimeError (PEP 479)
            if issubclass(v.cls, StopIteration):
                message = "generator raised StopIteration"
                v = ExceptionVar(RuntimeError, [ConstVar(message)], cause=v)
            self.push(frame, v)
        else:
            raise Break(f"CALL_INTRINSIC_1 {kind} is not supported")

    # ---- subscripts ------------------------------------------------------------------------------

    def BINARY_SUBSCR(self, frame, ins):
        index = self.pop(frame)
        obj = self.pop(frame)
        self.push(frame, ops.getitem(self, obj, index))

    def BINARY_SLICE(self, frame, ins):
        stop = self.pop(frame)
        start = self.pop(frame)
        obj = self.pop(frame)
        self.push(frame, ops.getitem(self, obj, SliceVar(start, stop, ConstVar(None))))

    def STORE_SUBSCR(self, frame, ins):
        index = self.resolve(frame.stack[-1])
        obj = self.resolve(frame.stack[-2])
        value = self.resolve(frame.stack[-3])
        ops.setitem(self, obj, index, value)
        del frame.stack[-3:]

    def STORE_SLICE(self, frame, ins):
        stop = self.resolve(frame.stack[-1])
        start = self.resolve(frame.stack[-2])
        obj = self.resolve(frame.stack[-3])
        value = self.resolve(frame.stack[-4])
        ops.setitem(self, obj, SliceVar(start, stop, ConstVar(None)), value)
        del frame.stack[-4:]

    def DELETE_SUBSCR(self, frame, ins):
        index = self.resolve(frame.stack[-1])
        obj = self.resolve(frame.stack[-2])
        ops.delitem(self, obj, index)
        del frame.stack[-2:]

    # ---- iteration and jumps ---------------------------------------------------------------------

    def GET_ITER(self, frame, ins):
        self.push(frame, ops.get_iter(self, self.pop(frame)))

    def FOR_ITER(self, frame, ins):
        it = self.resolve(frame.stack[-1])
        frame.stack[-1] = it
        if not isinstance(it, IteratorVar):
            raise Break(f"iteration over {type(it).__name__} is not traced")
        generators.check_read(self, it)
        if it.index < len(it.items):
            self.push(frame, it.items[it.index])
            it.move(it.index + 1)
            return
        it.move(it.index, exhausted=True)
        if PY312:
            self.push(frame, NULL)  # END_FOR pops the iterator and this
        else:
            frame.stack.pop()
        self.jump(frame, ins)

    def JUMP_FORWARD(self, frame, ins):
        self.jump(frame, ins)

    JUMP_BACKWARD = JUMP_BACKWARD_NO_INTERRUPT = JUMP = JUMP_NO_INTERRUPT = JUMP_FORWARD

    def _pop_jump(self, frame, ins, when: Callable[[SymFrame, Var], bool]):
        v = self.resolve(frame.stack[-1])
        taken = when(frame, v)
        frame.stack.pop()
        if taken:
            self.jump(frame, ins)

    def POP_JUMP_IF_FALSE(self, frame, ins):
        self._pop_jump(frame, ins, lambda f, v: not ops.truth(self, v))

    def POP_JUMP_IF_TRUE(self, frame, ins):
        self._pop_jump(frame, ins, lambda f, v: ops.truth(self, v))

    def POP_JUMP_IF_NONE(self, frame, ins):
        self._pop_jump(frame, ins, lambda f, v: ops.is_none(v))

    def POP_JUMP_IF_NOT_NONE(self, frame, ins):
        self._pop_jump(frame, ins, lambda f, v: not ops.is_none(v))

    POP_JUMP_FORWARD_IF_FALSE = POP_JUMP_BACKWARD_IF_FALSE = POP_JUMP_IF_FALSE
    POP_JUMP_FORWARD_IF_TRUE = POP_JUMP_BACKWARD_IF_TRUE = POP_JUMP_IF_TRUE
    POP_JUMP_FORWARD_IF_NONE = POP_JUMP_BACKWARD_IF_NONE = POP_JUMP_IF_NONE
    POP_JUMP_FORWARD_IF_NOT_NONE = POP_JUMP_BACKWARD_IF_NOT_NONE = POP_JUMP_IF_NOT_NONE

    def JUMP_IF_FALSE_OR_POP(self, frame, ins):
        v = self.resolve(frame.stack[-1])
        if not ops.truth(self, v):
            self.jump(frame, ins)
        else:
            frame.stack.pop()

    def JUMP_IF_TRUE_OR_POP(self, frame, ins):
        v = self.resolve(frame.stack[-1])
        if ops.truth(self, v):
            self.jump(frame, ins)
        else:
            frame.stack.pop()

    # ---- imports and the rest -----------------------------------------------------------------

    def IMPORT_NAME(self, frame, ins):
        fromlist = ops.as_python_constant_or_none(self.pop(frame))
        level = ops.as_python_constant_or_none(self.pop(frame))
        name = ins.argval
        if level != 0 or name not in sys.modules:
            raise Break(f"import {name} runs in Python (the module is not imported yet)")
        module = sys.modules[name] if fromlist else sys.modules[name.split(".")[0]]
        self.push(frame, ObjVar(module))

    def IMPORT_FROM(self, frame, ins):
        self.push(frame, ops.load_attr(self, self.resolve(frame.stack[-1]), ins.argval))

    def DELETE_ATTR(self, frame, ins):
        ops.delete_attr(self, self.pop(frame), ins.argval)

    def RETURN_GENERATOR(self, frame, ins):
        if not frame.code.is_generator:
            raise Break("RETURN_GENERATOR outside a generator")
        self.push(frame, ConstVar(None))  # popped by the POP_TOP that follows

    def YIELD_VALUE(self, frame, ins):
        if frame.yields is None:
            raise Break("yield outside an inlined generator")
        frame.yields.append(self.pop(frame))
        self.push(frame, ConstVar(None))  # the value sent back in


@dataclass
class _Return:
    value: Var
