"""Library calls the tracer handles without a graph break: functools.lru_cache / cache
wrappers, and log calls and warnings, which become side effects replayed after the graph.

A log call or warning with constant arguments does nothing the graph could see: it is kept
as a DeferredCall (effects.py) and made for real by the entry's rebuild code after the graph
has run, in the order the trace met it (reconstruct.py), so every call of the compiled
function logs what eager logs. With tensor arguments the message would read the tensor's
value: the graph breaks, as for print().
"""

from __future__ import annotations

import functools
import logging
import operator
import types
import warnings
from typing import TYPE_CHECKING, Any

import torch

from compiler.records import ControlRecord, SourceLine
from compiler.tracer import builtin_fns, calls, operations
from compiler.tracer.breaks import Break
from compiler.tracer.context import DeferredCall
from compiler.tracer.shapes import is_symbolic
from compiler.tracer.variables import (
    ConstVar,
    FunctionVar,
    ObjVar,
    TupleVar,
    Var,
    as_python_constant,
)
from compiler.tracer.wrap import wrap, wrap_unguarded

if TYPE_CHECKING:
    from compiler.tracer.context import Tracer


# ---- constant arguments -----------------------------------------------------------------


def _holds_traced(value: Any) -> bool:
    if isinstance(value, torch.Tensor) or is_symbolic(value):
        return True
    if isinstance(value, (tuple, list, set, frozenset)):
        return any(_holds_traced(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_traced(k) or _holds_traced(v) for k, v in value.items())
    return False


def _constants(args: list[Var], kwargs: dict[str, Var]) -> tuple[list, dict] | None:
    """The Python values of the arguments, or None where one is (or holds) a tensor or a
    symbolic size, whose value only exists when the graph runs."""
    try:
        values = [as_python_constant(a) for a in args]
        kw = {k: as_python_constant(v) for k, v in kwargs.items()}
    except TypeError:
        return None
    if _holds_traced(values) or _holds_traced(kw):
        return None
    return values, kw


def _defer(tx: Tracer, fn: Any, args: list, kwargs: dict, what: str) -> Var:
    tx.deferred_calls.append(DeferredCall(fn, tuple(args), kwargs, what))
    tx.changed()
    return ConstVar(None)


def _caller(tx: Tracer) -> SourceLine:
    return tx.current_frame.line()


# ---- logging ----------------------------------------------------------------------------


def replay_log(
    logger: logging.Logger, level: int, caller: SourceLine, msg: Any, extra: Any, *args: Any
) -> None:
    """Logger._log for a call the trace deferred: the record names the user's line that
    made the call (findCaller would find this function instead)."""
    if logger.isEnabledFor(level):
        record = logger.makeRecord(
            logger.name, level, caller.filename, caller.lineno, msg, args, None,
            caller.function, extra, None,
        )  # fmt: skip
        logger.handle(record)


def replay_root_log(level: int, caller: SourceLine, msg: Any, extra: Any, *args: Any) -> None:
    """logging.info(...) and the like: the root logger, configured first where it has no
    handler, as those functions do when called."""
    if not logging.root.handlers:
        logging.basicConfig()
    replay_log(logging.root, level, caller, msg, extra, *args)


def _log_call(
    tx: Tracer, name: str, logger: Var, level: int, args: list[Var], kwargs: dict, root=False
) -> Var:
    if not args:
        raise Break(f"Logger.{name}() without a message raises, in Python", "user_error")
    # %-arguments that are symbolic sizes (a step counter made a graph input) are computed
    # after the graph from the inputs; any other argument must be a constant
    sizes = [a if isinstance(a, ConstVar) and is_symbolic(a.value) else None for a in args[1:]]
    values = _constants(
        [logger, args[0], *(a for a, s in zip(args[1:], sizes) if s is None)], kwargs
    )
    if values is None or not isinstance(values[0][0], logging.Logger):
        raise Break(
            f"Logger.{name}() with a tensor or non-constant argument runs in Python", "logging"
        )
    (real, msg, *constants), kw = values
    constants.reverse()
    rest = [s if s is not None else constants.pop() for s in sizes]
    if kw.get("exc_info") or kw.get("stack_info") or kw.get("stacklevel", 1) != 1:
        raise Break(
            f"Logger.{name}() with exc_info, stack_info or a stacklevel runs in Python",
            "logging",
        )
    unknown = set(kw) - {"exc_info", "stack_info", "stacklevel", "extra"}
    if unknown:
        raise Break(f"Logger.{name}() with arguments {sorted(unknown)} runs in Python", "logging")
    replay_args = [level, _caller(tx), msg, kw.get("extra"), *rest]
    if root:
        return _defer(tx, replay_root_log, replay_args, {}, f"logging.{name}({msg!r})")
    return _defer(tx, replay_log, [real, *replay_args], {}, f"{real.name}.{name}({msg!r})")


def _level_method(name: str, level: int) -> Any:
    def handler(tx: Tracer, args: list[Var], kwargs: dict[str, Var]) -> Var:
        return _log_call(tx, name, args[0], level, args[1:], kwargs)

    return handler


def _root_level_function(name: str, level: int) -> Any:
    def handler(tx: Tracer, args: list[Var], kwargs: dict[str, Var]) -> Var:
        return _log_call(tx, name, ObjVar(logging.root), level, args, kwargs, root=True)

    return handler


def _log(tx: Tracer, args: list[Var], kwargs: dict[str, Var], root: bool = False) -> Var:
    """Logger.log(level, msg, ...), or logging.log(level, msg, ...) with `root`."""
    logger, args = (ObjVar(logging.root), args) if root else (args[0], args[1:])
    level = args[0] if args else None
    if not isinstance(level, ConstVar) or not isinstance(level.value, int):
        raise Break("Logger.log() with a level that is not a constant int", "logging")
    return _log_call(tx, "log", logger, level.value, args[1:], kwargs, root)


def _get_logger(tx: Tracer, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """`logging.getLogger(name)` with a constant name: the one logger of that name, which
    every later call returns too (made now if it is new, as the eager call makes it)."""
    values = _constants(args, kwargs)
    if values is None or kwargs or len(args) > 1 or not all(
        v is None or type(v) is str for v in values[0]
    ):
        raise Break("logging.getLogger() with a name that is not a constant str", "logging")
    return ObjVar(logging.getLogger(*values[0]))


builtin_fns.SPECIAL[logging.getLogger] = _get_logger


# Logger.exception reads the exception being handled, and Logger.warn warns about itself:
# both still run in Python.
for _name, _level in (
    ("debug", logging.DEBUG),
    ("info", logging.INFO),
    ("warning", logging.WARNING),
    ("error", logging.ERROR),
    ("critical", logging.CRITICAL),
):
    builtin_fns.SPECIAL[getattr(logging.Logger, _name)] = _level_method(_name, _level)
    builtin_fns.SPECIAL[getattr(logging, _name)] = _root_level_function(_name, _level)
builtin_fns.SPECIAL[logging.Logger.log] = _log
builtin_fns.SPECIAL[logging.log] = functools.partial(_log, root=True)


# ---- warnings.warn ----------------------------------------------------------------------


def replay_warning(message: Any, category: type, caller: SourceLine, module_globals: dict) -> None:
    """warnings.warn(message, category) as made from the user's line: the same filters, and
    the same once-per-location registry (the calling module's __warningregistry__)."""
    registry = module_globals.setdefault("__warningregistry__", {})
    module = module_globals.get("__name__", "<string>")
    warnings.warn_explicit(
        message, category, caller.filename, caller.lineno, module, registry, module_globals
    )


def _warn(tx: Tracer, args: list[Var], kwargs: dict[str, Var]) -> Var:
    values = _constants(args, kwargs)
    if values is None:
        raise Break(
            "warnings.warn() with a tensor or non-constant argument runs in Python", "logging"
        )
    try:
        bound = _bind_warn(*values[0], **values[1])
    except TypeError:  # arguments warn() rejects, or skip_file_prefixes: made for real
        bound = None
    if bound is None:
        raise Break(
            "warnings.warn() with a stacklevel, a source, skip_file_prefixes or arguments it "
            "rejects runs in Python",
            "logging",
        )
    message, category = bound
    return _defer(
        tx,
        replay_warning,
        [message, category, _caller(tx), tx.current_frame.globals],
        {},
        f"warnings.warn({str(message)!r})",
    )


def _bind_warn(
    message: Any, category: Any = None, stacklevel: int = 1, source: Any = None
) -> tuple[Any, type] | None:
    """warnings.warn's arguments, or None where the warning is not made from the calling
    line (a stacklevel above 1) or carries a source object."""
    if stacklevel != 1 or source is not None:
        return None
    if isinstance(message, Warning):
        return message, type(message)
    category = UserWarning if category is None else category
    if not (isinstance(category, type) and issubclass(category, Warning)):
        return None  # eager raises TypeError: made for real, it raises the same
    return message, category


builtin_fns.SPECIAL[warnings.warn] = _warn


# ---- functools.lru_cache ----------------------------------------------------------------

# Cached helpers that only log once (transformers' `logger.warning_once`): deferred like a
# log call, and replayed through the cache itself, which keeps them to once, as eagerly.
_LOG_ONCE = {
    ("transformers.utils.logging", "warning_once"),
    ("transformers.utils.logging", "info_once"),
    ("diffusers.utils.logging", "warning_once"),
}


def _cached(tx: Tracer, fn: ObjVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """A call of an lru_cache / cache wrapper. With constant (hashable) arguments the real
    wrapper is called once while tracing and its result baked in as a constant, recorded in
    the entry's controls: eager calls it at the same point, and later eager calls would hit
    the cache, so the compiled code, which does not call it again, makes the calls eager
    makes and sees the value eager sees (a cached function's result for given arguments
    never changes while it stays cached). With other arguments (tensors) the wrapped function
    is traced instead, as torch.compile does: eager hashes a tensor by identity, so a call on
    the fresh tensors of each step misses the cache and runs the wrapped function, which is
    what the trace does; only its cache statistics differ. A second call with the same
    arguments (the same tensor) in one call hits eager's cache: the trace gives the first
    call's value back and does not run the function again."""
    wrapper = fn.held
    wrapped = wrapper.__wrapped__
    name = f"{getattr(wrapped, '__module__', '')}.{getattr(wrapped, '__qualname__', '?')}"
    values = _constants(args, kwargs)
    if values is not None and _hashable(values):
        if (
            getattr(wrapped, "__module__", None),
            getattr(wrapped, "__qualname__", None),
        ) in _LOG_ONCE:
            return _defer(tx, wrapper, *values, f"{name}{tuple(values[0][1:])!r}")
        result = _call_once(tx, wrapper, *values, name)
        if _holds_traced(result):
            raise Break(
                f"{name}() is cached (functools.lru_cache) and returned a tensor, which each "
                "call must share as eagerly: the call runs in Python",
                "library_code",
            )
        shown = repr(result)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        control = ControlRecord(
            "lru_cache",
            name,
            f"{name}() is cached (functools.lru_cache): called once while tracing, it returned "
            f"{shown}, baked into the compiled code as a constant",
            tx.builder.line,
        )
        if control not in tx.builder.controls:
            tx.builder.controls.append(control)
        return wrap_unguarded(result)
    if not isinstance(wrapped, types.FunctionType):
        return NotImplemented
    key = (
        id(wrapper),
        tuple(operations.dict_key(a) for a in args),
        tuple((k, operations.dict_key(v)) for k, v in kwargs.items()),
    )
    if key not in tx.cached_calls:
        tx.cached_calls[key] = calls.call(tx, FunctionVar(fn=wrapped), args, kwargs)
    return tx.cached_calls[key]


def _hashable(values: tuple[list, dict]) -> bool:
    try:
        hash((tuple(values[0]), tuple(values[1].items())))
    except TypeError:
        return False
    return True


def _call_once(tx: Tracer, fn: Any, values: list, kw: dict, name: str) -> Any:
    """`fn(*values, **kw)` once per compile: a restarted trace reuses the result (tx.constants
    outlives restarts, as for compiler.assume_constant_result)."""
    for seen_fn, seen_values, seen_kw, result in tx.constants:
        if seen_fn is fn and seen_values == values and seen_kw == kw:
            return result
    try:
        result = fn(*values, **kw)
    except Exception as e:
        raise Break(
            f"{name}() raised {type(e).__name__} while tracing: the call runs in Python",
            "user_error",
        ) from None
    tx.constants.append((fn, values, kw, result))
    return result


def _bound_method(tx: Tracer, fn: ObjVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """A method whose function is not Python code but a callable handled by its type
    (`logger.warning_once`: an lru_cache wrapper set on Logger): called with `self` first."""
    method = fn.held
    func = method.__func__
    if isinstance(func, types.FunctionType) or type(func) not in calls.CALL_BY_TYPE:
        return NotImplemented
    self_src = f"{fn.source}.__self__" if fn.source else None
    self_var = wrap(tx, method.__self__, self_src) if self_src else wrap_unguarded(method.__self__)
    return calls.call_by_type(tx, ObjVar(func), [self_var, *args], kwargs)


def _operator_object(tx: Tracer, fn: ObjVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """An operator.itemgetter / attrgetter / methodcaller object, applied as the subscripts,
    attribute reads or method call it stands for (its own pickled arguments say which)."""
    if len(args) != 1 or kwargs:
        return NotImplemented
    maker, spec = fn.value.__reduce__()
    (obj,) = args
    if isinstance(fn.held, operator.methodcaller):
        name, *margs = (maker.args if isinstance(maker, functools.partial) else ()) + spec
        mkw = maker.keywords if isinstance(maker, functools.partial) else {}
        return calls.call(
            tx,
            operations.load_attr(tx, obj, name),
            [wrap_unguarded(a) for a in margs],
            {k: wrap_unguarded(v) for k, v in mkw.items()},
        )
    if isinstance(fn.held, operator.itemgetter):
        found = [operations.getitem(tx, obj, wrap_unguarded(i)) for i in spec]
    else:
        found = []
        for dotted in spec:
            value = obj
            for part in dotted.split("."):
                value = operations.load_attr(tx, value, part)
            found.append(value)
    return found[0] if len(found) == 1 else TupleVar(found)


for _getter in (operator.itemgetter, operator.attrgetter, operator.methodcaller):
    calls.CALL_BY_TYPE.setdefault(_getter, []).append(_operator_object)
calls.CALL_BY_TYPE.setdefault(functools._lru_cache_wrapper, []).append(_cached)
calls.CALL_BY_TYPE.setdefault(types.MethodType, []).append(_bound_method)
