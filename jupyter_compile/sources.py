"""Where a line of user code is, named as the user knows it.

A notebook cell's code runs from a file named by IPython (`<ipython-input-5-…>` in a
terminal, `/tmp/ipykernel_…/….py` in a kernel); the user knows it as `In [5]`, the name
IPython's tracebacks use (`Cell In[5]`), found in the same place: the shell's map from file
name to execution count. jupyter_compile's own frames (the wrappers that route calls to the
compiler) are never the user's, so they are left out of every stack shown.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

from compiler.records import SourceLine

_OWN_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def is_own(filename: str) -> bool:
    """A file of this package (a frame of ours, not the user's)."""
    return os.path.abspath(filename).startswith(_OWN_DIR) if filename else False


def _cell_files() -> dict[str, int]:
    """The running shell's map from a cell's file name to its execution count."""
    try:
        from IPython import get_ipython
    except ImportError:
        return {}
    names = getattr(getattr(get_ipython(), "compile", None), "_filename_map", None)
    return names if isinstance(names, dict) else {}


def cell_number(filename: str) -> int | None:
    """The execution count of the cell whose code ran from `filename`, if it was a cell."""
    number = _cell_files().get(filename)
    return number if isinstance(number, int) else None


def place(filename: str) -> str:
    """`In [5]` for a cell's code, else the file name."""
    number = cell_number(filename)
    return f"In [{number}]" if number is not None else filename


def where(filename: str, lineno: int) -> str:
    """`In [5], line 3` for a cell, `path.py:3` for a file."""
    number = cell_number(filename)
    return f"In [{number}], line {lineno}" if number is not None else f"{filename}:{lineno}"


def line_where(line: SourceLine) -> str:
    return where(line.filename, line.lineno)


def user_lines(lines: Iterable[SourceLine]) -> list[SourceLine]:
    """The lines of a list that are the user's: ours (the call wrappers) left out."""
    return [ln for ln in lines if not is_own(ln.filename)]


def user_frames(stack: Iterable[SourceLine]) -> list[SourceLine]:
    """The frames of a stack that are the user's: ours (the call wrappers) left out."""
    return user_lines(stack)


WRAPPER = "the %%compile call wrapper"
_OWN_PLACE = re.compile(re.escape(_OWN_DIR) + r"[\w./\\-]*?\.py:\d+")


def named_places(text: str) -> str:
    """Generated code (a guard function) with its `path:line` comments named as the user knows
    them: a cell's as `In [5], line 3`, ours as the wrapper they are (the guards that check the
    wrapper's own state are real; the place is not the user's)."""
    text = _OWN_PLACE.sub(WRAPPER, text)
    for filename, number in _cell_files().items():
        if filename in text:
            pattern = re.escape(filename) + r":(\d+)"
            text = re.sub(pattern, lambda m, n=number: f"In [{n}], line {m[1]}", text)
    return text
