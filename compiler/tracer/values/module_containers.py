"""nn.Sequential and nn.ModuleList built in the trace from modules it holds (`nn.Sequential(
self.a, self.b)(x)`): the container is its list of modules, each still read from its own
source; calling a Sequential calls each in turn, as its forward does. Where the container
outlives the graph it is made for real from the same modules, a new one at every call as
eagerly. A container read from the frame is a real module (modules.py).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from compiler.tracer import builtin_fns, calls, operations
from compiler.tracer.breaks import Break
from compiler.tracer.exceptions import raise_python
from compiler.tracer.values.table import VALUE_OPS, ValueOps
from compiler.tracer.variables import AttrCallVar, ConstVar, IteratorVar, ObjVar, Var

if TYPE_CHECKING:
    from compiler.tracer.context import Emitter, Tracer

_CLASSES = (torch.nn.Sequential, torch.nn.ModuleList)


@dataclass(eq=False)
class ModuleContainerVar(Var):
    cls: type  # torch.nn.Sequential or torch.nn.ModuleList
    items: list[Var]  # the modules, in order


def _is_module(v: Var) -> bool:
    return isinstance(v, ModuleContainerVar) or (
        isinstance(v, ObjVar) and isinstance(v.held, torch.nn.Module)
    )


def _build(cls: type) -> Callable[[Tracer, list[Var], dict[str, Var]], Var]:
    def build(tx: Tracer, args: list[Var], kwargs: dict[str, Var]) -> Var:
        items = (
            list(args)
            if cls is torch.nn.Sequential
            else (operations.unpack_iterable(tx, args[0]) if args else [])
        )
        if kwargs or (cls is torch.nn.ModuleList and len(args) > 1):
            raise Break(f"constructing a {cls.__name__} with these arguments runs in Python")
        if not all(_is_module(m) for m in items):
            # an OrderedDict of modules, or something that is not a module (eager raises)
            raise Break(f"a {cls.__name__} of values other than modules is made in Python")
        return ModuleContainerVar(cls, items)

    return build


def _call(tx: Tracer, seq: ModuleContainerVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if seq.cls is not torch.nn.Sequential or len(args) != 1 or kwargs:
        return NotImplemented  # ModuleList has no forward; Sequential's takes one input
    value = args[0]
    for module in seq.items:
        value = calls.call(tx, module, [value], {})
    return value


def _getitem(tx: Tracer, c: ModuleContainerVar, index: Var) -> Var:
    key = operations.const_index(index)
    if isinstance(key, slice):
        return ModuleContainerVar(c.cls, c.items[key])
    try:
        return c.items[operator.index(key)]
    except (IndexError, TypeError) as e:
        raise raise_python(e) from None


def _append(tx: Tracer, c: ModuleContainerVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if len(args) != 1 or kwargs or not _is_module(args[0]):
        raise Break(f"{c.cls.__name__}.append of something other than a module")
    tx.changed(c)
    c.items.append(args[0])
    return c  # both classes return the container itself


def _attr(tx: Tracer, c: ModuleContainerVar, name: str) -> Var:
    if name == "append":
        return AttrCallVar(c, name)
    raise Break(f"attribute {name!r} of a {c.cls.__name__} built during tracing")


def _rebuild(em: Emitter, c: ModuleContainerVar) -> str:
    items = ", ".join(em.expr(m) for m in c.items)
    cls = em.ref(c.cls, "cls")
    return f"{cls}({items})" if c.cls is torch.nn.Sequential else f"{cls}([{items}])"


VALUE_OPS[ModuleContainerVar] = ValueOps(
    describe=lambda c: f"a {c.cls.__name__} built during tracing",
    attr=_attr,
    call=_call,
    methods={"append": _append},
    getitem=_getitem,
    length=lambda tx, c: ConstVar(len(c.items)),
    truth=lambda tx, c: bool(c.items),  # both define __len__
    iterate=lambda tx, c: list(c.items),
    get_iter=lambda tx, c: IteratorVar(list(c.items)),
    rebuild=_rebuild,
    one_object=True,
    replay_children=lambda c: list(c.items),
)
for _cls in _CLASSES:
    builtin_fns.SPECIAL[_cls] = _build(_cls)
