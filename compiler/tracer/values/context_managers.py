"""Context managers made by `contextlib.contextmanager`: the decorated generator function is
run a step at a time, as contextlib's _GeneratorContextManager runs it. `with cm():` runs the
generator up to its yield (__enter__, its value is the `as` target), the block, and then the
rest of the generator (__exit__), or throws the block's exception in at the yield, where the
generator's own except and finally clauses see it; an exception the generator does not raise
again is suppressed, as eager's __exit__ returns True.

A generator paused at its yield lives only in the trace: where the graph ends with one open
or reachable (a break inside the block, the context manager returned), the trace restarts
and breaks at the instruction that made it, which then runs in Python."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from compiler.tracer import builtin_fns, calls
from compiler.tracer.breaks import Break, Raised
from compiler.tracer.context import SymFrame
from compiler.tracer.values.table import VALUE_OPS, ValueOps
from compiler.tracer.variables import ConstVar, ExceptionVar, FunctionVar, Var

if TYPE_CHECKING:
    from compiler.tracer.context import Tracer


@dataclass(eq=False)
class ContextFactoryVar(Var):
    """A generator function decorated with @contextmanager: calling it makes the manager."""

    func: FunctionVar


@dataclass(eq=False)
class GeneratorContextVar(Var):
    """`gen_fn(*args, **kwargs)` of a @contextmanager function, before, in or after its
    `with` block: the generator's frame once entered."""

    func: FunctionVar
    args: list[Var]
    kwargs: dict[str, Var]
    created_at: int  # the root-frame instruction that made it
    frame: SymFrame | None = None
    done: bool = False


@dataclass(eq=False)
class GeneratorExitVar(Var):
    """The __exit__ that BEFORE_WITH leaves on the stack for a @contextmanager's block."""

    cm: GeneratorContextVar = field(default=None)  # type: ignore[assignment]


def _contextmanager_helper_code():
    @contextlib.contextmanager
    def probe():
        yield

    return probe.__code__


# Every @contextmanager function is one closure of contextlib's `helper`, over the function.
_HELPER_CODE = _contextmanager_helper_code()


def _decorated(tx: Tracer, fn: FunctionVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """A call of a @contextmanager function made before the trace (`helper`)."""
    wrapped = fn.fn.__wrapped__
    source = f"{fn.source}.__wrapped__" if fn.source else None
    return _make(tx, FunctionVar(fn=wrapped, source=source), args, kwargs)


def _make(tx: Tracer, func: Var, args: list[Var], kwargs: dict[str, Var]) -> Var:
    if not isinstance(func, FunctionVar) or not func.get_code().co_flags & 0x20:
        raise Break("a @contextmanager over something other than a generator function")
    return GeneratorContextVar(func, list(args), dict(kwargs), tx.root_pc)


def _contextmanager(tx: Tracer, args: list[Var], kwargs: dict[str, Var]) -> Var:
    """`contextlib.contextmanager(gen_fn)` called in the trace (a decorator on a nested
    function)."""
    if len(args) != 1 or kwargs or not isinstance(args[0], FunctionVar):
        raise Break("contextlib.contextmanager over something other than a function")
    return ContextFactoryVar(args[0])


def _enter(tx: Tracer, cm: GeneratorContextVar) -> tuple[Var, Var]:
    if cm.frame is not None:
        raise Break("a @contextmanager's context manager entered twice runs in Python")
    cm.frame = tx.start_frame(cm.func, cm.args, cm.kwargs)
    yielded, value = tx.resume(cm.frame)
    if not yielded:
        cm.done = True
        raise Raised(ExceptionVar(RuntimeError, [ConstVar("generator didn't yield")]))
    return GeneratorExitVar(cm=cm), value


def _exit(tx: Tracer, ex: GeneratorExitVar, args: list[Var], kwargs: dict[str, Var]) -> Var:
    cm = ex.cm
    exc = args[1] if len(args) == 3 and not kwargs else None
    if exc is None:
        raise Break("a @contextmanager's __exit__ called with other arguments")
    if cm.done or cm.frame is None:
        raise Break("a @contextmanager's __exit__ called twice runs in Python")
    if isinstance(exc, ConstVar) and exc.value is None:
        yielded, _ = tx.resume(cm.frame)
        cm.done = not yielded
        if yielded:
            raise Raised(ExceptionVar(RuntimeError, [ConstVar("generator didn't stop")]))
        return ConstVar(False)
    if not isinstance(exc, ExceptionVar) or issubclass(exc.cls, (StopIteration, RuntimeError)):
        # contextlib tells these apart from the generator's own StopIteration and
        # RuntimeError by identity and __cause__: not modelled
        raise Break("a @contextmanager's block raised StopIteration or RuntimeError")
    try:
        yielded, _ = tx.resume(cm.frame, exc)
    except Raised as r:
        cm.done = True
        if r.exc is exc:
            return ConstVar(False)  # raised again: the with statement re-raises it
        raise
    cm.done = not yielded
    if yielded:
        message = ConstVar("generator didn't stop after throw()")
        raise Raised(ExceptionVar(RuntimeError, [message]))
    return ConstVar(True)  # the generator caught it and finished: suppressed


def _unrebuildable(em, v: Var) -> str:
    raise TypeError("a @contextmanager's generator made in the trace is not rebuilt")


VALUE_OPS[ContextFactoryVar] = ValueOps(
    describe=lambda v: "a @contextmanager function",
    call=lambda tx, f, args, kwargs: _make(tx, f.func, args, kwargs),
    truth=lambda tx, v: True,
)
VALUE_OPS[GeneratorContextVar] = ValueOps(
    describe=lambda v: f"the context manager {v.func.get_code().co_name}()",
    enter=_enter,
    truth=lambda tx, v: True,
    rebuild=_unrebuildable,
    made_at=lambda v: v.created_at,
)
VALUE_OPS[GeneratorExitVar] = ValueOps(
    describe=lambda v: "a @contextmanager's __exit__",
    call=_exit,
    rebuild=_unrebuildable,
    made_at=lambda v: v.cm.created_at,
)
calls.CALL_BY_CODE[_HELPER_CODE] = _decorated
builtin_fns.SPECIAL[contextlib.contextmanager] = _contextmanager
