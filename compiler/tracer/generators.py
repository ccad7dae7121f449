"""Generators inlined by the tracer, and when that is unsafe.

The tracer runs an inlined generator to completion where it is created (translator.inline),
and iterating it hands out the values it yielded. Eager runs it lazily, a step per value,
interleaved with its consumer. The two agree only when neither can see the other's changes
to state in between: so a generator whose run changes state (a list it appends to, an
attribute, a cell, a tensor written in place) is not traced, and a generator whose consumer
changes state it may read while it is not finished is not traced either. Either way the
trace restarts and breaks at the instruction that created it, which then runs for real and
makes a real generator (a generator function always runs natively: evaluator.py).

The keys of a dict are taken ahead too, when an iterator over it is made: a read after the
dict changed size raises RuntimeError, as eager's next() does.

State changes are counted by the Tracer (`Tracer.changed`): `effects` for changes any code
may see (lists and dicts from outside the graph, attributes, cells, in-place tensor ops,
objects built in the trace) and a `version` on each list or dict built in the trace, which
only code holding it sees.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from compiler.tracer.breaks import Raised, Restart
from compiler.tracer.values.table import describe, ops_of
from compiler.tracer.variables import (
    CellVar,
    ConstVar,
    DictVar,
    ExceptionVar,
    FunctionVar,
    IteratorVar,
    ListVar,
    MethodVar,
    NewObjectVar,
    PartialVar,
    SetVar,
    TupleVar,
    Var,
    dict_vars,
)

if TYPE_CHECKING:
    from compiler.tracer.context import Tracer


@dataclass
class Inlined:
    """A generator the trace ran ahead: where it was made, and the state it could read."""

    name: str
    created_at: int  # the root-frame instruction that made it
    effects_at: int  # Tracer.effect_count() when its run ended
    # the lists and dicts built in the trace that it could read, with their versions then
    watched: list[tuple[Var, int]] = field(default_factory=list)
    generator: bool = False  # a generator object (not a map or filter run ahead)
    returned: Var | None = None  # what the generator returned (`yield from`'s value)


def run_started(tx: Tracer) -> tuple[int, int]:
    """What the counters say before a generator's run (see `run_finished`)."""
    return tx.effect_count(), tx.local_effects


def run_finished(
    tx: Tracer,
    name: str,
    before: tuple[int, int],
    inputs: list[Var],
    yields: list[Var],
    returned: Var | None = None,
) -> IteratorVar:
    """The iterator over what an inlined generator yielded; a Restart at the instruction that
    made it when its run changed any state (`inputs`: its arguments and closure cells)."""
    why = f"generator {name}() changes state as it runs; it runs in Python, step by step "
    inlined = _unchanged(tx, name, before, inputs, why + "with its consumer")
    inlined.generator = True
    inlined.returned = returned
    it = IteratorVar(yields)
    it.generator = inlined
    tx.generators.append(it)
    return it


def ran_ahead(tx: Tracer, name: str, before: tuple[int, int], inputs: list[Var]) -> Inlined:
    """What a lazy builtin that calls a function (map, filter) computed ahead could read; a
    Restart at the instruction that called it when the calls changed any state."""
    why = f"the function {name}() applies changes state; {name}() runs in Python, step by "
    return _unchanged(tx, name, before, inputs, why + "step with its consumer")


def _unchanged(
    tx: Tracer, name: str, before: tuple[int, int], inputs: list[Var], why: str
) -> Inlined:
    """The record of a run made ahead of its consumer, which changed nothing (else a Restart
    with `why`), and the containers it could read, with their versions now."""
    if (tx.effect_count(), tx.local_effects) != before:
        raise Restart(tx.root_pc, why)
    watched = [
        (v, v.version)
        for v in reachable(inputs)
        if isinstance(v, (ListVar, DictVar, SetVar, NewObjectVar))
    ]
    return Inlined(name, tx.root_pc, tx.effect_count(), watched)


def follow(
    tx: Tracer, out: IteratorVar, args: list[Var], own: Inlined | None = None
) -> IteratorVar:
    """`out`, an iterator computed ahead from `args`: it is checked as the generator among
    them is (or as itself, `own`, for map and filter) where its values are read."""
    inherited = next(
        (a.generator for a in args if isinstance(a, IteratorVar) and a.generator is not None),
        None,
    )
    out.generator = inherited or own
    if out.generator is not None or out.links:
        tx.generators.append(out)
    return out


def check_read(tx: Tracer, it: IteratorVar) -> None:
    """Before a value of `it` is read: a generator whose inputs may have changed since it
    ran must run for real; a dict's keys whose dict changed size raise as in eager."""
    if isinstance(it.seq, DictVar) and len(it.seq.items) != len(it.items):
        message = ConstVar("dictionary changed size during iteration")
        raise Raised(ExceptionVar(RuntimeError, [message]))
    if it.index < len(it.items):
        _check_links(it)
    gen = it.generator
    if gen is None or it.index >= len(it.items):
        return
    if tx.effect_count() != gen.effects_at or any(v.version != n for v, n in gen.watched):
        raise Restart(
            gen.created_at,
            f"state that generator {gen.name}() may read changed while it was being consumed; "
            "it runs in Python",
        )


# What a generator object has and an iterator over its values does not: send(), throw(),
# close() drive the generator itself, and the gi_* attributes describe its frame.
_GENERATOR_ONLY = frozenset(dir(types.GeneratorType)) - frozenset(dir(iter([])))


def check_generator_attr(it: IteratorVar, name: str) -> None:
    """`gen.send(v)`, `gen.throw(e)`, `gen.gi_frame`: the values run ahead cannot answer
    them (send() hands the generator a value its run ahead never saw), so the generator is
    made for real at the instruction that created it."""
    gen = it.generator
    if gen is not None and gen.generator and name in _GENERATOR_ONLY:
        raise Restart(
            gen.created_at,
            f"generator {gen.name}().{name} needs the generator itself; it runs in Python",
        )


def _check_links(it: IteratorVar) -> None:
    """A lazy view (zip, map, islice over an iterator) computed its items ahead from where
    the iterators it reads stood; if other code read one of them since, eager's view would
    give other items: the view is made in Python."""
    for source, positions, _ in it.links:
        if source.index != positions[it.index]:
            raise Restart(
                it.made_at,
                "an iterator that zip(), map() or an itertools function reads lazily was read "
                "elsewhere in between; the lazy reader runs in Python",
                "unsupported",
            )


def check_live(tx: Tracer, roots: list[Var]) -> None:
    """At the end of the trace: a generator left unfinished where Python code runs next (the
    frame's values at a break, a returned value, a container or cell written) would be
    rebuilt from values computed ahead; it must run for real."""
    reachable_vars = reachable(roots)
    for v in reachable_vars:
        made_at = ops_of(v).made_at
        pc = made_at(v) if made_at is not None else None
        if pc is not None:
            raise Restart(
                pc,
                f"{describe(v)} lives only in the trace and is still reached where the graph "
                "ends; it runs in Python",
            )
    unfinished = [it for it in tx.generators if it.index < len(it.items)]
    if not unfinished:
        return
    reached = {id(v) for v in reachable_vars}
    for it in unfinished:
        if id(it) in reached and it.generator is None:
            # a lazy view: rebuilt from its items, it no longer advances the iterators it
            # reads, which Python code may go on to read (they are live, or the caller's)
            if any(id(s) in reached or s.source is not None for s, _, _ in it.links):
                raise Restart(
                    it.made_at,
                    "a lazy reader of an iterator (zip, map, itertools) is not finished where "
                    "the graph ends, and the iterator is read after it; it runs in Python",
                    "unsupported",
                )
        elif id(it) in reached:
            raise Restart(
                it.generator.created_at,
                f"generator {it.generator.name}() is not finished where the graph ends; it "
                "runs in Python",
            )


def reachable(roots: list[Var]) -> list[Var]:
    """Every value `roots` reach through containers, objects, closures and cells."""
    out: list[Var] = []
    seen: set[int] = set()
    todo = list(roots)
    while todo:
        v = todo.pop()
        if v is None or id(v) in seen:
            continue
        seen.add(id(v))
        out.append(v)
        todo.extend(_children(v))
    return out


def _children(v: Var) -> list[Var]:
    if isinstance(v, (ListVar, TupleVar, SetVar, IteratorVar)):
        return list(v.items)
    if isinstance(v, DictVar):
        return dict_vars(v)
    if isinstance(v, CellVar):
        return [v.contents] if v.contents is not None else []
    if isinstance(v, FunctionVar):
        return [*(v.closure or ()), v.defaults, v.kwdefaults, v.annotations]
    if isinstance(v, NewObjectVar):
        return [*v.fields.values(), v.items]
    if isinstance(v, MethodVar):
        return [v.func, v.self_var]
    if isinstance(v, PartialVar):
        return [v.func, *v.args, *v.kwargs.values()]
    return []
