"""Sets (`SetVar`), of constants: also what dict.keys() gives, a view that compares and
combines as a set."""

from __future__ import annotations

from typing import TYPE_CHECKING

from compiler.tracer import operations
from compiler.tracer.values.table import VALUE_OPS, ValueOps
from compiler.tracer.variables import (
    AttrCallVar,
    ConstVar,
    SetVar,
    TensorVar,
    Var,
    as_python_constant,
    is_python_constant,
)

if TYPE_CHECKING:
    from compiler.tracer.reconstruct import Emitter
    from compiler.tracer.translator import Tracer


def _add_or_discard(name: str):
    def method(tx: Tracer, s: SetVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
        if not is_python_constant(args[0]):
            return NotImplemented
        present = [i for i in s.items if as_python_constant(i) != as_python_constant(args[0])]
        tx.changed()
        s.items[:] = present + ([args[0]] if name == "add" else [])
        return ConstVar(None)

    return method


def _contains(tx: Tracer, s: SetVar, item: Var) -> bool:
    if isinstance(item, TensorVar):
        return NotImplemented
    return operations.const_index(item) in {as_python_constant(i) for i in s.items}


def _rebuild(em: Emitter, s: SetVar) -> str:
    return "{" + ", ".join(em.expr(i) for i in s.items) + "}" if s.items else "set()"


VALUE_OPS[SetVar] = ValueOps(
    attr=lambda tx, s, name: AttrCallVar(s, name),
    methods={"add": _add_or_discard("add"), "discard": _add_or_discard("discard")},
    truth=lambda tx, s: bool(s.items),
    contains=_contains,
    iterate=lambda tx, s: list(s.items),
    rebuild=_rebuild,
    one_object=True,
    replay_children=lambda s: list(s.items),
)
