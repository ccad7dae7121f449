"""Binding the arguments of an inlined call to the callee's parameters, and its closure."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import torch

from compiler.tracer.breaks import Break
from compiler.tracer.variables import (
    CellVar,
    DictVar,
    FunctionVar,
    TupleVar,
    Var,
)
from compiler.tracer.wrap import wrap, wrap_unguarded

if TYPE_CHECKING:
    from compiler.tracer.context import Tracer


def bind_arguments(
    tx: Tracer, fn: FunctionVar, args: list[Var], kwargs: dict[str, Var]
) -> dict[str, Var]:
    code = fn.get_code()
    nargs, posonly, kwonly = code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount
    names = code.co_varnames
    pos_names = names[:nargs]
    kwonly_names = names[nargs : nargs + kwonly]
    i = nargs + kwonly
    varargs_name = varkw_name = None
    if code.co_flags & inspect.CO_VARARGS:
        varargs_name = names[i]
        i += 1
    if code.co_flags & inspect.CO_VARKEYWORDS:
        varkw_name = names[i]
    fname = code.co_name
    bound: dict[str, Var] = {}
    for name, a in zip(pos_names, args):
        bound[name] = a
    extra = args[nargs:]
    if extra and varargs_name is None:
        raise Break(
            f"{fname}() takes {nargs} positional arguments but {len(args)} were given", "user_error"
        )
    if varargs_name is not None:
        bound[varargs_name] = TupleVar(list(extra))
    varkw: dict[str, Var] = {}
    for k, v in kwargs.items():
        if k in pos_names[posonly:] or k in kwonly_names:
            if k in bound:
                raise Break(f"{fname}() got multiple values for argument {k!r}", "user_error")
            bound[k] = v
        elif varkw_name is not None:
            varkw[k] = v
        else:
            raise Break(f"{fname}() got an unexpected keyword argument {k!r}", "user_error")
    defaults = _defaults(tx, fn)
    first_default = nargs - len(defaults)
    for j, name in enumerate(pos_names):
        if name not in bound:
            if j >= first_default:
                bound[name] = defaults[j - first_default]
            else:
                raise Break(f"{fname}() missing required argument {name!r}", "user_error")
    kwdefaults = _kwdefaults(tx, fn)
    for name in kwonly_names:
        if name not in bound:
            if name not in kwdefaults:
                raise Break(
                    f"{fname}() missing required keyword-only argument {name!r}", "user_error"
                )
            bound[name] = kwdefaults[name]
    if varkw_name is not None:
        bound[varkw_name] = DictVar(varkw)
    return bound


def _defaults(tx: Tracer, fn: FunctionVar) -> list[Var]:
    if fn.fn is None:
        return list(fn.defaults.items) if fn.defaults is not None else []
    values = fn.fn.__defaults__ or ()
    return [_default_var(tx, fn, v, f"__defaults__[{i}]") for i, v in enumerate(values)]


def _kwdefaults(tx: Tracer, fn: FunctionVar) -> dict[str, Var]:
    if fn.fn is None:
        return dict(fn.kwdefaults.items) if fn.kwdefaults is not None else {}
    values = fn.fn.__kwdefaults__ or {}
    return {k: _default_var(tx, fn, v, f"__kwdefaults__[{k!r}]") for k, v in values.items()}


def _default_var(tx: Tracer, fn: FunctionVar, value: Any, attr: str) -> Var:
    if isinstance(value, torch.Tensor) or isinstance(value, (list, dict)):
        if fn.source is None:
            raise Break("a tensor or mutable default argument of a function without a source")
        return wrap(tx, value, f"{fn.source}.{attr}")
    return wrap_unguarded(value)


def function_closure(tx: Tracer, fn: FunctionVar) -> list[CellVar]:
    if fn.fn is None:
        return list(fn.closure or [])
    cells = fn.fn.__closure__ or ()
    names = fn.fn.__code__.co_freevars
    return [
        tx.real_cell(c, n, f"{fn.source}.__closure__[{i}].cell_contents" if fn.source else None)
        for i, (n, c) in enumerate(zip(names, cells))
    ]
