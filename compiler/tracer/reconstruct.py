"""Generated Python that moves values between the frame and a compiled graph.

`fetch(L, G)` returns the graph's input tensors read from their sources; `rebuild(L, G, O, F)`
turns the graph's outputs `O` back into the frame's Python values: the return value, or the
locals, cells and stack at a graph break. Both are straight-line code generated once per entry.
"""

from __future__ import annotations

import re
import types
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from compiler.tracer.access import Local
from compiler.tracer.context import AttrWrites, DeferredCall
from compiler.tracer.guards import CompiledGuards, list_item
from compiler.tracer.values.table import ops_of
from compiler.tracer.variables import CellVar, LazyVar, TensorVar, Var


class GradRestore:
    """The real `__exit__` of a grad-mode `with` block, left on the stack at a graph break."""

    def __init__(self, restore: bool):
        self.restore = restore

    def __call__(self, *exc_info: Any) -> None:
        torch._C._set_grad_enabled(self.restore)


# Expressions whose value no write of the rebuild code changes (see Rebuilder.snapshot).
_STABLE_EXPR = re.compile(r"[A-Za-z_]\w*|L\['\w+'\]|O\[\d+\]|-?\d+(\.\d*)?(e[+-]?\d+)?")


@dataclass
class Rebuilder:
    """Writes an entry's rebuild code: context.Emitter, as the rebuild handlers of the value
    kinds see it."""

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
        if ops_of(v).one_object and not v.source:
            out = self.temp(out)  # one object, however often it is referenced
        self.memo[key] = out
        return out

    def _expr(self, v: Var) -> str:
        ops = ops_of(v)
        if v.source and ops.source_first:
            return v.source
        if ops.rebuild is None:
            raise TypeError(f"cannot rebuild a {type(v).__name__}")
        return ops.rebuild(self, v)

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


def side_effects(
    em: Rebuilder, values: list[Var], attr_writes: list[AttrWrites], cells: list[CellVar]
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
        ops = ops_of(v)
        for c in ops.replay_children(v) if ops.replay_children is not None else ():
            visit(c)
        if ops.replay is not None:
            ops.replay(em, v, lines)

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
    deferred: list[DeferredCall] = (),
) -> tuple[Callable, str]:
    """`rebuild(L, G, O, F)`: for a return, the value; for a break, (locals, stack). It
    first reads every value the frame gets back (as the trace saw them), then replays the
    side effects: containers, attributes and the real cells written (`cells`), among them
    those of the real frame `F`. `sym_text` writes the Python of a symbolic size (sizes are
    computed from the inputs, not graph outputs). Last come the `deferred` calls (log records,
    warnings), in the order the trace met them."""
    em = Rebuilder(
        dict(namespace), {id(t.node): i for i, t in enumerate(outputs)}, sym_text=sym_text
    )
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
    effects.extend(_deferred_call(em, c) for c in deferred)
    body = [*em.lines, *effects, f"    return {result}"]
    source = "def rebuild(L, G, O, F):\n" + "\n".join(body) + "\n"
    ns = em.namespace
    exec(compile(source, "<rebuild>", "exec"), ns)
    return ns["rebuild"], source


def _deferred_call(em: Rebuilder, call: DeferredCall) -> str:
    """One deferred call; a Var argument (a symbolic size) is read with the other values,
    before any side effect is replayed."""
    args = ", ".join(
        em.snapshot(em.expr(a)) if isinstance(a, Var) else em.ref(a, "a") for a in call.args
    )
    return f"    {em.ref(call.fn, 'fn')}({args}, **{em.ref(call.kwargs, 'kw')})"


def _is_lazy_same(v: Var, name: str) -> bool:
    return isinstance(v, LazyVar) and v.source == f"L[{name!r}]"
