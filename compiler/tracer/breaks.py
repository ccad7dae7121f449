"""Why tracing stops: graph breaks, restarts and the error `fullgraph=True` raises."""

from __future__ import annotations

from typing import Any

from compiler.records import BreakHint, SourceLine


class Break(Exception):
    """Raised by an instruction handler that cannot trace this instruction: the graph ends
    before it and the instruction runs for real. `kind` keys the fix suggested to the user
    (hints.py); a break that names none is a construct the tracer does not handle yet."""

    def __init__(self, reason: str, kind: str = "unsupported"):
        super().__init__(reason)
        self.reason = reason
        self.kind = kind


class InlineBreak(Exception):
    """A break inside an inlined call: the trace restarts and breaks at the root-frame call."""

    def __init__(self, reason: str, user_stack: list[SourceLine], kind: str = "unsupported"):
        super().__init__(reason)
        self.reason = reason
        self.user_stack = user_stack
        self.kind = kind


class Restart(Exception):
    """The trace must start again and end its graph before the root-frame instruction `pc`,
    an instruction already traced (one that made a generator: generators.py)."""

    def __init__(self, pc: int, reason: str, kind: str = "generator"):
        super().__init__(reason)
        self.pc = pc
        self.reason = reason
        self.kind = kind


class Raised(Exception):
    """Traced code raised a Python exception (`exc`, an ExceptionVar). The frame's exception
    table sends it to a handler in the trace; where none catches it, the graph ends before
    the root-frame instruction it came from, which then raises it for real."""

    def __init__(self, exc: Any):
        super().__init__(exc)
        self.exc = exc
        self.user_stack: list[SourceLine] | None = None  # where it was raised, set when caught


class Unsupported(RuntimeError):
    """Raised with `fullgraph=True` (or by `export`) where the graph would break."""

    def __init__(
        self,
        reason: str,
        user_stack: list[SourceLine] | None = None,
        hint: BreakHint | None = None,
        kind: str = "unsupported",
    ):
        self.reason = reason
        self.user_stack = user_stack or []
        self.hint = hint
        self.kind = kind  # the break's key in hints.HINTS, for callers that name it (export)
        where = ""
        if self.user_stack:
            line = self.user_stack[-1]
            where = f'\n  File "{line.filename}", line {line.lineno}, in {line.function}\n    {line.text.strip()}'
        if hint is not None:
            snippet = "\n".join(f"      {code}" for code in hint.snippet.splitlines())
            where += f"\n  fix ({hint.category}): {hint.suggestion}\n{snippet}"
        super().__init__(f"graph break: {reason}{where}")


class CompilerInternalError(RuntimeError):
    """A bug in the compiler, as opposed to an error in the user's code."""
