"""Calls of the dataclasses module that build objects: `dataclasses.replace(obj, **changes)`
is the class called with the object's init fields, the changes over them, as the library
writes it (its checks of init=False and InitVar fields give eager's ValueError).
`asdict` / `astuple` are traced as the library's own Python: they recurse over fields,
lists, tuples and dicts and deep-copy the rest (a tensor is cloned, values/copies.py)."""

from __future__ import annotations

import dataclasses
import types
from typing import TYPE_CHECKING

from compiler.tracer import builtin_fns, calls
from compiler.tracer import operations as ops
from compiler.tracer.breaks import Break, Raised
from compiler.tracer.variables import ConstVar, ExceptionVar, ObjVar, Var

if TYPE_CHECKING:
    from compiler.tracer.context import Tracer


def _replace(tx: Tracer, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if len(args) != 1:
        raise Break("dataclasses.replace() with other than one positional argument")
    obj = args[0]
    cls = builtin_fns.SPECIAL[type](tx, [obj], {})
    real = cls.value if isinstance(cls, ObjVar) else getattr(cls, "value", None)
    if not isinstance(real, type) or not dataclasses.is_dataclass(real):
        message = ConstVar("replace() should be called on dataclass instances")
        raise Raised(ExceptionVar(TypeError, [message]))
    changes = dict(kwargs)
    for f in dataclasses.fields(real):
        if not f.init:
            if f.name in changes:
                message = f"field {f.name} is declared with init=False, it cannot be specified with replace()"
                raise Raised(ExceptionVar(ValueError, [ConstVar(message)]))
            continue
        if f.name not in changes:
            changes[f.name] = ops.load_attr(tx, obj, f.name)
    if any(
        isinstance(v, dataclasses.InitVar) or type(v) is dataclasses.InitVar
        for v in getattr(real, "__annotations__", {}).values()
    ):
        raise Break("dataclasses.replace() of a dataclass with InitVar fields")
    return calls.call(tx, cls, [], changes)


builtin_fns.SPECIAL[dataclasses.replace] = _replace


def _codes(code: types.CodeType) -> list[types.CodeType]:
    """`code` and the code of the comprehensions and generator expressions inside it."""
    nested = [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return [code, *(inner for c in nested for inner in _codes(c))]


for _fn in (
    dataclasses.asdict,
    dataclasses.astuple,
    dataclasses._asdict_inner,
    dataclasses._astuple_inner,
    dataclasses._is_dataclass_instance,
):
    calls.TRACED_STDLIB.update(_codes(_fn.__code__))
