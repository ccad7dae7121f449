"""Graph breaks and the user's controls as the views show them: the break's line, its
reason, and the fix the compiler suggests for its kind (compiler/tracer/hints.py), as HTML
and as text. Shared by `%explain` and the inspector's Overview."""

from __future__ import annotations

from typing import Any

from compiler.records import BreakHint, GraphBreak, SourceLine
from jupyter_compile.html import MONO, esc, table
from jupyter_compile.sources import line_where, user_frames

HINT_COLOR = "#31708f"


def break_lines(stack: Any) -> list[SourceLine]:
    """A break's user stack as SourceLines (ours, or traceback.FrameSummary-like objects),
    jupyter_compile's own frames left out."""
    out = []
    for frame in stack or []:
        if isinstance(frame, SourceLine):
            out.append(frame)
        else:
            out.append(
                SourceLine(
                    getattr(frame, "filename", "?"),
                    getattr(frame, "lineno", 0) or 0,
                    getattr(frame, "line", "") or "",
                    getattr(frame, "name", ""),
                )
            )
    return user_frames(out)


def hint_html(hint: BreakHint | None) -> str:
    """The suggested fix: its category, the sentence, and the snippet as code."""
    if hint is None:
        return ""
    return (
        f'<div class="jc-hint" style="color: {HINT_COLOR}; margin: 2px 0;">'
        f"<b>fix</b> ({esc(hint.category)}): {esc(hint.suggestion)}"
        f'<pre style="{MONO} margin: 2px 0 0 0; padding: 3px 6px; background: #f4f8fb; '
        f'border-left: 3px solid {HINT_COLOR}; white-space: pre-wrap;">{esc(hint.snippet)}</pre>'
        "</div>"
    )


def hint_text(hint: BreakHint | None, indent: str = "    ") -> str:
    if hint is None:
        return ""
    snippet = "\n".join(indent + "    " + line for line in hint.snippet.splitlines())
    return f"{indent}fix ({hint.category}): {hint.suggestion}\n{snippet}"


def break_text(brk: GraphBreak | Any) -> str:
    stack = break_lines(getattr(brk, "user_stack", None))
    at = stack[-1] if stack else None
    where = f"\n    {line_where(at)}: {at.text.strip()}" if at else ""
    fix = hint_text(getattr(brk, "hint", None))
    return f"{getattr(brk, 'reason', brk)}{where}" + (f"\n{fix}" if fix else "")


def controls_table(controls: list[Any]) -> str:
    """ControlRecords as a table; every field is the user's text, escaped by `table`."""
    rows = [
        (
            getattr(c, "kind", ""),
            getattr(c, "target", ""),
            getattr(c, "detail", str(c)),
            c.user_line.lineno if getattr(c, "user_line", None) is not None else "",
        )
        for c in controls
    ]
    return table(["control", "applies to", "what it did", "line"], rows, mono_cols=(1,))
