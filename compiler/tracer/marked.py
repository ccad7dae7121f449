"""Calls of the callables a user marked (compiler/controls.py), as the tracer meets them.

Every call the tracer makes asks `marked_call` first (one dict lookup); a marked callee is
handled here instead of being inlined or put in the graph the usual way, and the entry's
record keeps a ControlRecord saying what the mark did.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import torch

from compiler.controls import Mark, mark_of
from compiler.records import ControlRecord
from compiler.tracer.breaks import Break
from compiler.tracer.variables import ConstVar, Var, as_python_constant
from compiler.tracer.wrap import wrap_unguarded

if TYPE_CHECKING:
    from compiler.tracer.context import Tracer


def marked_call(tx: Tracer, fn: Any, args: list[Var], kwargs: dict[str, Var]) -> Var | None:
    """The result of calling `fn` if the user marked it, else None (trace the call as usual)."""
    mark = mark_of(fn)
    if mark is None:
        return None
    return _HANDLERS[mark.kind](tx, mark, args, kwargs)


def _record(tx: Tracer, kind: str, target: str, detail: str) -> None:
    control = ControlRecord(kind, target, detail, tx.builder.line)
    if control not in tx.builder.controls:  # a loop calling it again says nothing new
        tx.builder.controls.append(control)


def _disabled(tx: Tracer, mark: Mark, args: list[Var], kwargs: dict[str, Var]) -> Var:
    why = f" ({mark.reason})" if mark.reason else ""
    callees = (
        "nothing it calls is compiled"
        if mark.recursive
        else "the functions it calls are compiled (recursive=False)"
    )
    reason = (
        f"{mark.name}() is disabled with compiler.disable{why}: the graph breaks around the "
        f"call, which runs eagerly, and {callees}"
    )
    _record(tx, "disable", mark.name, reason)
    raise Break(reason, "disabled")


def _disallowed(tx: Tracer, mark: Mark, args: list[Var], kwargs: dict[str, Var]) -> Var:
    reason = (
        f"{mark.name} is marked with compiler.disallow_in_graph: the graph breaks at the call, "
        "which runs in Python"
    )
    _record(tx, "disallow_in_graph", mark.name, reason)
    raise Break(reason, "disabled")


def _opaque(tx: Tracer, mark: Mark, args: list[Var], kwargs: dict[str, Var]) -> Var:
    out, node = tx.builder.call_opaque(mark.fn, args, kwargs)
    _record(
        tx,
        "allow_in_graph",
        mark.name,
        f"one opaque graph node ({node.name}) calls {mark.name} instead of tracing into it: "
        "it ran on fake tensors while tracing, and runs as a Python call on the real tensors",
    )
    return out


def _constant(tx: Tracer, mark: Mark, args: list[Var], kwargs: dict[str, Var]) -> Var:
    try:
        values = [as_python_constant(a) for a in args]
        kw = {k: as_python_constant(v) for k, v in kwargs.items()}
    except TypeError:
        raise Break(
            f"{mark.name}() is marked with compiler.assume_constant_result, but it is called "
            "with values that are not constants; the call is made for real"
        ) from None
    result = _memo(tx, mark.fn, values, kw)
    if _holds_tensor(result):
        raise Break(
            f"{mark.name}() (compiler.assume_constant_result) returned a tensor; only Python "
            "values are baked in as constants, so the call runs in Python"
        )
    shown = repr(result)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    _record(
        tx,
        "assume_constant_result",
        mark.name,
        f"{mark.name}() returned {shown} while tracing; the value is baked into the compiled "
        "code as a constant, and no guard checks it (a new value is seen only at a recompile)",
    )
    return wrap_unguarded(result)


def _memo(tx: Tracer, fn: Callable, values: list, kw: dict) -> Any:
    """`fn(*values, **kw)`, called once per compile: a restarted trace reuses the result, so
    the function runs as often as it would in one eager call."""
    for seen_fn, seen_values, seen_kw, result in tx.constants:
        if seen_fn is fn and _same(seen_values, values) and _same(seen_kw, kw):
            return result
    try:
        result = fn(*values, **kw)
    except Exception as e:
        raise Break(
            f"{getattr(fn, '__qualname__', fn)}() raised {type(e).__name__} while tracing "
            f"(compiler.assume_constant_result): {e}"
        ) from None
    tx.constants.append((fn, values, kw, result))
    return result


def _holds_tensor(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (tuple, list)):
        return any(_holds_tensor(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_tensor(v) for v in value.values())
    return False


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:
        return a is b


def _is_compiling(tx: Tracer, mark: Mark, args: list[Var], kwargs: dict[str, Var]) -> Var:
    return ConstVar(True)


_HANDLERS: dict[str, Callable[..., Var]] = {
    "disable": _disabled,
    "disallow_in_graph": _disallowed,
    "allow_in_graph": _opaque,
    "assume_constant_result": _constant,
    "is_compiling": _is_compiling,
}
