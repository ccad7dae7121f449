"""Iterators (`IteratorVar`): over items the trace holds, a list or dict it iterates live, a
generator run ahead, or a real iterator read from the frame (advanced after the graph)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from compiler.tracer import generators
from compiler.tracer.breaks import Break
from compiler.tracer.values.table import VALUE_OPS, ValueOps
from compiler.tracer.variables import IteratorVar, Var

if TYPE_CHECKING:
    from compiler.tracer.context import Emitter, Tracer


def _iterate(tx: Tracer, it: IteratorVar) -> list[Var]:
    generators.check_read(tx, it)
    items = it.items[it.index :]
    it.move(len(it.items), exhausted=True)
    return items


def _attr(tx: Tracer, it: IteratorVar, name: str) -> Var:
    generators.check_generator_attr(it, name)
    raise Break(f"attribute {name!r} of an iterator is not traced")


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


def _rebuild(em: Emitter, it: IteratorVar) -> str:
    if it.seq is not None:
        return f"{em.ref(_iterator_at, 'fn')}({em.expr(it.seq)}, {it.index})"
    return "iter([" + ", ".join(em.expr(i) for i in it.items[it.index :]) + "])"


def _replay(em: Emitter, it: IteratorVar, lines: list[str]) -> None:
    if it.source and it.index > it.start:
        advance = em.ref(_advance, "fn")
        lines.append(f"    {advance}({em.snapshot(it.source)}, {it.index - it.start})")


VALUE_OPS[IteratorVar] = ValueOps(
    attr=_attr,
    truth=lambda tx, it: True,
    iterate=_iterate,
    get_iter=lambda tx, it: it,
    rebuild=_rebuild,
    one_object=True,
    replay_children=lambda it: list(it.items),
    replay=_replay,
)
