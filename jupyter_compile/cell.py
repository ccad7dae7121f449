"""Compiling what a `%%compile` cell defines, as the cell runs.

The cell runs through IPython's own `run_cell` (so magics inside it, the displayed result and
the user's tracebacks behave as in any cell), with one AST transformer installed for the
duration: after every top-level `def` and `class` statement it inserts

    name = __jupyter_compile_hook__(name, "name")

which rebinds the name to the compiled version before the next statement runs, so calls later
in the same cell already go through the compiler. The inserted statement takes the line
number of the definition's last line, so tracebacks and `inspect.getsource` still see the
cell exactly as typed; the hook receives the final object, after every decorator ran.

IPython files the inner run's code under the execution count, which the `%%compile` cell
itself already advanced: for the inner run the count is the `%%compile` cell's own number, so
tracebacks and the views say `In [12]` for a function defined in In [12].
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

HOOK_NAME = "__jupyter_compile_hook__"


class RebindDefinitions(ast.NodeTransformer):
    """Insert the hook call after each top-level function and class definition."""

    def visit_Module(self, node: ast.Module) -> ast.Module:
        body: list[ast.stmt] = []
        for stmt in node.body:
            body.append(stmt)
            if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
                body.append(self._rebind(stmt))
        node.body = body
        return node

    @staticmethod
    def _rebind(stmt: ast.FunctionDef | ast.ClassDef) -> ast.stmt:
        call = ast.Call(
            func=ast.Name(HOOK_NAME, ast.Load()),
            args=[ast.Name(stmt.name, ast.Load()), ast.Constant(stmt.name)],
            keywords=[],
        )
        assign = ast.Assign(targets=[ast.Name(stmt.name, ast.Store())], value=call)
        end = stmt.end_lineno or stmt.lineno
        for n in ast.walk(assign):
            n.lineno, n.end_lineno, n.col_offset, n.end_col_offset = end, end, 0, 0
        return assign


@dataclass
class CellRun:
    """The hook's log for one cell: what it compiled and what it left alone, and why."""

    compiled: dict[str, Any] = field(default_factory=dict)  # name -> Target
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (name, reason)


def run_transformed(shell: Any, cell: str, hook: Callable[[Any, str], Any]) -> Any:
    """`shell.run_cell(cell)` with the definition hook installed; returns the ExecutionResult."""
    transformer = RebindDefinitions()
    shell.ast_transformers.append(transformer)
    had_hook = HOOK_NAME in shell.user_ns
    previous = shell.user_ns.get(HOOK_NAME)
    shell.user_ns[HOOK_NAME] = hook
    shell.user_ns_hidden[HOOK_NAME] = hook
    names = getattr(getattr(shell, "compile", None), "_filename_map", None)
    # The latest name filed is the running cell's (the one holding %%compile).
    own_number = list(names.values())[-1] if isinstance(names, dict) and names else None
    count = shell.execution_count
    if isinstance(own_number, int):
        shell.execution_count = own_number  # what IPython files the inner code under
    try:
        return shell.run_cell(cell, store_history=False)
    finally:
        shell.execution_count = count
        if transformer in shell.ast_transformers:
            shell.ast_transformers.remove(transformer)
        if had_hook:
            shell.user_ns[HOOK_NAME] = previous
        else:
            shell.user_ns.pop(HOOK_NAME, None)
            shell.user_ns_hidden.pop(HOOK_NAME, None)
