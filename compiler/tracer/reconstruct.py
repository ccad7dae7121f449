"""Generated Python that moves values between the frame and a compiled graph.

`fetch(L, G)` returns the graph's input tensors read from their sources; `rebuild(L, G, O, F)`
turns the graph's outputs `O` back into the frame's Python values: the return value, or the
locals, cells and stack at a graph break. Both are straight-line code generated once per entry.
"""

from __future__ import annotations

import functools
import re
import types
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from compiler.support.autocast import AutocastRestore
from compiler.tracer.access import Local
from compiler.tracer.calls import REAL_NULL
from compiler.tracer.guards import CompiledGuards, list_item
from compiler.tracer.objects import AttrWrites, mapping_base
from compiler.tracer.shapes import is_symbolic
from compiler.tracer.variables import (
    AttrCallVar,
    AutocastExitVar,
    AutocastVar,
    CellVar,
    ConstVar,
    DictVar,
    ExceptionVar,
    FunctionVar,
    GradExitVar,
    GradModeVar,
    IteratorVar,
    ListVar,
    MethodVar,
    NewObjectVar,
    NullVar,
    ObjVar,
    PartialVar,
    SetVar,
    SliceVar,
    SuperVar,
    TensorVar,
    TupleVar,
    Var,
    tuple_kind,
)


class GradRestore:
    """The real `__exit__` of a grad-mode `with` block, left on the stack at a graph break."""

    def __init__(self, restore: bool):
        self.restore = restore

    def __call__(self, *exc_info: Any) -> None:
        torch._C._set_grad_enabled(self.restore)


_SIMPLE_LITERALS = (int, str, bytes, bool, type(None))
# Expressions whose value no write of the rebuild code changes (see Emitter.snapshot).
_STABLE_EXPR = re.compile(r"[A-Za-z_]\w*|L\['\w+'\]|O\[\d+\]|-?\d+(\.\d*)?(e[+-]?\d+)?")

# A tuple of a class other than tuple, from its items, by the class's kind (tuple_kind): a
# namedtuple takes them as arguments; torch.Size, a structseq (torch.return_types.sort, ...)
# and other tuple subclasses take one sequence, as tuple does.
_TUPLE_BUILDS = {
    "namedtuple": "{cls}({items})",
    "size": "{cls}([{items}])",
    "structseq": "{cls}([{items}])",
    "subclass": "{cls}([{items}])",
}


@dataclass
class Emitter:
    namespace: dict[str, Any]
    outputs: dict[int, int]  # id(fx node) -> index in O
    lines: list[str] = field(default_factory=list)
    memo: dict[int, str] = field(default_factory=dict)
    cells: dict[int, str] = field(
        default_factory=dict
    )  # id(CellVar) -> expression of its real cell
    # Python computing a symbolic size from the inputs (shapes.Shapes.python_text)
    sym_text: Callable[[Any, Callable], str] | None = None
    _counter: int = 0

    def ref(self, obj: Any, hint: str = "c") -> str:
        name = f"___{hint}{len(self.namespace)}"
        self.namespace[name] = obj
        return name

    def snapshot(self, expr: str) -> str:
        """`expr` evaluated now, into a temporary unless it is a name, a literal, a local of
        `L` or an output: sources such as `L['items'][1]` read objects that the side effects
        change, and every value must be read as the trace saw it, before any write."""
        if _STABLE_EXPR.fullmatch(expr):
            return expr
        return self.temp(expr)

    def temp(self, expr: str) -> str:
        self._counter += 1
        name = f"t{self._counter}"
        self.lines.append(f"    {name} = {expr}")
        return name

    def expr(self, v: Var) -> str:
        key = id(v)
        if key in self.memo:
            return self.memo[key]
        out = self._expr(v)
        if (
            isinstance(v, (ListVar, DictVar, SetVar, NewObjectVar, FunctionVar, IteratorVar))
            and not v.source
        ):
            out = self.temp(out)  # one object, however often it is referenced
        self.memo[key] = out
        return out

    def _expr(self, v: Var) -> str:
        if isinstance(v, TensorVar):
            if v.node.op == "placeholder" and v.source:
                return v.source
            return f"O[{self.outputs[id(v.node)]}]"
        if isinstance(v, ConstVar):
            value = v.value
            if self.sym_text is not None and is_symbolic(value):
                return self.sym_text(value, self.ref)
            if type(value) in _SIMPLE_LITERALS or (
                type(value) is float and value == value and abs(value) != float("inf")
            ):
                return repr(value)
            return self.ref(value)
        if isinstance(v, NullVar):
            return self.ref(REAL_NULL, "null")
        if v.source:
            return v.source
        if isinstance(v, ObjVar):
            return self.ref(v.value, "obj")
        if isinstance(v, ListVar):
            items = "[" + ", ".join(self.expr(i) for i in v.items) + "]"
            return items if v.cls is list else f"{self.ref(v.cls, 'cls')}({items})"
        if isinstance(v, TupleVar):
            inner = ", ".join(self.expr(i) for i in v.items)
            if v.cls is tuple:
                return f"({inner},)" if len(v.items) == 1 else f"({inner})"
            return _TUPLE_BUILDS[tuple_kind(v.cls)].format(cls=self.ref(v.cls, "cls"), items=inner)
        if isinstance(v, DictVar):
            inner = ", ".join(
                f"{self.ref(k, 'k') if type(k) not in _SIMPLE_LITERALS else repr(k)}: {self.expr(i)}"
                for k, i in v.items.items()
            )
            if v.cls is dict:
                return "{" + inner + "}"
            return f"{self.ref(v.cls, 'cls')}({{{inner}}})"
        if isinstance(v, SetVar):
            return "{" + ", ".join(self.expr(i) for i in v.items) + "}" if v.items else "set()"
        if isinstance(v, SliceVar):
            return f"slice({self.expr(v.start)}, {self.expr(v.stop)}, {self.expr(v.step)})"
        if isinstance(v, IteratorVar) and v.seq is not None:
            return f"{self.ref(_iterator_at, 'fn')}({self.expr(v.seq)}, {v.index})"
        if isinstance(v, IteratorVar):
            return "iter([" + ", ".join(self.expr(i) for i in v.items[v.index :]) + "])"
        if isinstance(v, FunctionVar):
            if v.fn is not None:
                return self.ref(v.fn, "fn")
            closure = "None"
            if v.closure:
                closure = "(" + "".join(self.cell(c) + ", " for c in v.closure) + ")"
            defaults = self.expr(v.defaults) if v.defaults is not None else "None"
            fn = f"{self.ref(types.FunctionType, 'cls')}({self.ref(v.code, 'code')}, {self.ref(v.globals, 'g')}, {v.name!r}, {defaults}, {closure})"
            if v.kwdefaults is not None:
                return f"{self.ref(_with_kwdefaults, 'fn')}({fn}, {self.expr(v.kwdefaults)})"
            return fn
        if isinstance(v, MethodVar):
            return (
                f"{self.ref(types.MethodType, 'cls')}({self.expr(v.func)}, {self.expr(v.self_var)})"
            )
        if isinstance(v, AttrCallVar):
            return f"getattr({self.expr(v.obj)}, {v.name!r})"
        if isinstance(v, GradExitVar):
            return self.ref(GradRestore(v.restore), "exit")
        if isinstance(v, GradModeVar):
            return f"{self.ref(torch.set_grad_enabled, 'fn')}({v.enabled})"
        if isinstance(v, AutocastExitVar):
            return self.ref(AutocastRestore(v.device_type, v.before), "exit")
        if isinstance(v, AutocastVar):
            return self.ref(
                torch.autocast(v.device_type, dtype=v.dtype, enabled=v.enabled), "autocast"
            )
        if isinstance(v, NewObjectVar):
            fields = ", ".join(f"{k!r}: {self.expr(i)}" for k, i in v.fields.items())
            items = self.expr(v.items) if v.items is not None else "None"
            return f"{self.ref(_new_object, 'fn')}({self.ref(v.cls, 'cls')}, {{{fields}}}, {items})"
        if isinstance(v, PartialVar):
            args = "".join(f"{self.expr(a)}, " for a in v.args)
            kwargs = "".join(f"{k}={self.expr(a)}, " for k, a in v.kwargs.items())
            return f"{self.ref(functools.partial, 'cls')}({self.expr(v.func)}, {args}{kwargs})"
        if isinstance(v, SuperVar):
            return f"super({self.ref(v.cls, 'cls')}, {self.expr(v.obj)})"
        if isinstance(v, CellVar):
            return self.cell(v)
        if isinstance(v, ExceptionVar) and v.cause is None:
            # an exception raised and caught in the trace, kept in a variable: its class and
            # arguments (the traceback of a raise that happened only in the trace is empty)
            args = "".join(f"{self.expr(a)}, " for a in v.args)
            return f"{self.ref(v.cls, 'cls')}({args})"
        raise TypeError(f"cannot rebuild a {type(v).__name__}")

    def cell(self, c: CellVar) -> str:
        """The real cell object for a cell var (closures that leave the graph need real cells)."""
        key = id(c)
        if key in self.cells:
            return self.cells[key]
        if c.cell is not None and c.source == f"L[{c.name!r}]":  # a cell of the frame itself
            expr = f"F.cells[{c.name!r}]"
        elif c.cell is not None:
            expr = self.ref(c.cell, "cell")
        else:
            contents = self.expr(c.contents) if c.contents is not None else None
            expr = self.temp(f"{self.ref(types.CellType, 'cls')}({contents or ''})")
        self.cells[key] = expr
        return expr


def _iterator_at(seq: list, index: int) -> Any:
    """A real iterator over `seq`, `index` items in (an iterator over a list the trace made
    or read, which must iterate that very list)."""
    it = iter(seq)
    for _ in range(index):
        next(it)
    return it


def _advance(it: Any, n: int) -> None:
    """Consume `n` items of the real iterator `it`: as many as the trace did."""
    for _ in range(n):
        next(it)


def _new_object(cls: type, fields: dict, items: dict | None) -> Any:
    """An instance built in the trace, made for real from its state, as its constructor left
    it: no constructor runs again. The mapping of a dict subclass is filled through the
    builtin base's methods, which the subclass may have replaced (ModelOutput's raise)."""
    obj = cls.__new__(cls)
    if items:
        base = mapping_base(cls)
        for key, value in items.items():
            base.__setitem__(obj, key, value)
    obj.__dict__.update(fields)
    return obj


def side_effects(
    em: Emitter, values: list[Var], attr_writes: list[AttrWrites], cells: list[CellVar]
) -> list[str]:
    """Replay, on the real objects, the changes the trace made to lists and dicts that exist
    outside the graph (in place, so every reference to them sees the change), the attributes
    it wrote to real objects and the real closure cells it wrote. The new values are read
    into temporaries first (em.lines); the returned writes come after every read."""
    lines: list[str] = []
    seen: set[int] = set()

    def visit(v: Var) -> None:
        if id(v) in seen:
            return
        seen.add(id(v))
        children: list[Var] = []
        if isinstance(v, (ListVar, TupleVar, SetVar, IteratorVar)):
            children = list(v.items)
        elif isinstance(v, DictVar):
            children = list(v.items.values())
        elif isinstance(v, NewObjectVar):
            children = list(v.fields.values())
        elif isinstance(v, CellVar) and v.contents is not None:
            children = [v.contents]
        for c in children:
            visit(c)
        if isinstance(v, ListVar) and v.mutated and v.source:
            new = em.temp(f"[{', '.join(em.expr(i) for i in v.items)}]")
            target = em.snapshot(v.source)
            lines.append(f"    {target}[:] = {new}")
        if isinstance(v, IteratorVar) and v.source and v.index > v.start:
            advance = em.ref(_advance, "fn")
            lines.append(f"    {advance}({em.snapshot(v.source)}, {v.index - v.start})")
        if isinstance(v, DictVar) and v.mutated and v.source:
            # through the builtin mapping's methods: a subclass's own may do more (or refuse)
            base = em.ref(mapping_base(v.cls), "cls")
            items = ", ".join(f"{em.ref(k, 'k')}: {em.expr(i)}" for k, i in v.items.items())
            new = em.temp(f"{{{items}}}")
            target = em.snapshot(v.source)
            lines.append(f"    {base}.clear({target})")
            lines.append(f"    for k, v in {new}.items(): {base}.__setitem__({target}, k, v)")

    for v in values:
        visit(v)
    for writes in attr_writes:
        target = em.snapshot(writes.obj.source)
        for name, value in writes.values.items():
            if value is None:  # deleted after the trace wrote it: absent, as it was or not
                lines.append(f"    vars({target}).pop({name!r}, None)")
            else:
                visit(value)
                lines.append(f"    {target}.{name} = {em.snapshot(em.expr(value))}")
    for c in cells:
        if c.contents is not None:
            visit(c.contents)
            new = em.snapshot(em.expr(c.contents))
            lines.append(f"    {em.snapshot(em.cell(c))}.cell_contents = {new}")
    return lines


def _with_kwdefaults(fn: types.FunctionType, kwdefaults: dict) -> types.FunctionType:
    fn.__kwdefaults__ = kwdefaults
    return fn


def compile_fetch(
    sources: list[str], namespace: dict[str, Any], guards: CompiledGuards
) -> tuple[Callable, str]:
    """`fetch(L, G)`: the graph's inputs, each prefix of their sources read once, through the
    locals the guard function defined (their short paths are guarded there).

    Where the guard function has a FrozenReads that answers every frozen local the sources
    read (a module's parameters and buffers), a call takes them from it instead, when it
    answers (no dict or class they were read through changed since the guard's call)."""
    lines: list[str] = []
    defined: set[str] = set()
    values = []
    needed: list[Local] = []
    resolved = []
    for src in sources:
        expr, needs = guards.access.rewrite(src, src)
        if any(local.name not in guards.defined for local in needs):
            resolved.append((src, []))
        else:
            resolved.append((expr, needs))
    for expr, needs in _spread_runs(resolved, guards.lengths):
        for local in needs:
            if local.name not in defined:
                defined.add(local.name)
                needed.append(local)
                lines.append(f"    {local.name} = {local.expr}")
        values.append(expr)
    result = f"return [{', '.join(values)}]"
    body = [*lines, f"    {result}"]
    if guards.frozen is not None:
        ref, selection, frozen = guards.frozen
        if any(local.name in frozen for local in needed) and all(
            local.name in selection for local in needed if local.name in frozen
        ):
            reads = [
                f"        {local.name} = {local.expr}"
                for local in needed
                if local.name not in frozen
            ]
            body = [
                f"    ___cached = {ref}()  # the guard function's frozen reads, where unchanged",
                "    if ___cached is not None:",
                f"        {', '.join(selection)}, = ___cached",
                *reads,
                f"        {result}",
                *body,
            ]
    source = "def fetch(L, G):\n" + "".join(line + "\n" for line in body)
    ns = dict(namespace)
    exec(compile(source, "<fetch>", "exec"), ns)
    return ns["fetch"], source


def _spread_runs(
    resolved: list[tuple[str, list[Local]]], lengths: dict[str, int]
) -> list[tuple[str, list[Local]]]:
    """`resolved` with each run of inputs that is a whole guarded list or tuple, X[0] to
    X[n-1] in order, as one `*X` (an Adam step's inputs are four lists of one tensor per
    parameter): one unpacking instead of a local per element."""
    out = []
    i = 0
    while i < len(resolved):
        expr, needs = resolved[i]
        first = list_item(needs[-1], lengths) if needs and needs[-1].name == expr else None
        if first is not None and first[1] == 0:
            n = lengths[first[0]]
            run = resolved[i : i + n]
            if len(run) == n and all(
                ns and ns[-1].name == e and list_item(ns[-1], lengths) == (first[0], k)
                for k, (e, ns) in enumerate(run)
            ):
                out.append((f"*{first[0]}", needs[:-1]))
                i += n
                continue
        out.append((expr, needs))
        i += 1
    return out


def compile_rebuild(
    kind: str,
    value: Var | None,
    locals_: dict[str, Var] | None,
    stack: list[Var] | None,
    outputs: list[TensorVar],
    namespace: dict[str, Any],
    mutated: list[Var] = (),
    attr_writes: list[AttrWrites] = (),
    cells: list[CellVar] = (),
    sym_text: Callable[[Any, Callable], str] | None = None,
) -> tuple[Callable, str]:
    """`rebuild(L, G, O, F)`: for a return, the value; for a break, (locals, stack). It
    first reads every value the frame gets back (as the trace saw them), then replays the
    side effects: containers, attributes and the real cells written (`cells`), among them
    those of the real frame `F`. `sym_text` writes the Python of a symbolic size (sizes are
    computed from the inputs, not graph outputs)."""
    em = Emitter(dict(namespace), {id(t.node): i for i, t in enumerate(outputs)}, sym_text=sym_text)
    if kind == "return":
        result = em.snapshot(em.expr(value))
    else:
        local_items = ", ".join(
            f"{name!r}: {em.snapshot(em.expr(v))}"
            for name, v in locals_.items()
            if not _is_lazy_same(v, name)
        )
        keep = [name for name, v in locals_.items() if _is_lazy_same(v, name)]
        stack_items = ", ".join(em.snapshot(em.expr(v)) for v in stack)
        keep_expr = " ".join(f"{n!r}: L[{n!r}]," for n in keep)
        result = f"{{{keep_expr} {local_items}}}, [{stack_items}]"
    effects = side_effects(em, list(mutated), list(attr_writes), list(cells))
    body = [*em.lines, *effects, f"    return {result}"]
    source = "def rebuild(L, G, O, F):\n" + "\n".join(body) + "\n"
    ns = em.namespace
    exec(compile(source, "<rebuild>", "exec"), ns)
    return ns["rebuild"], source


def _is_lazy_same(v: Var, name: str) -> bool:
    from compiler.tracer.translator import LazyVar

    return isinstance(v, LazyVar) and v.source == f"L[{name!r}]"
