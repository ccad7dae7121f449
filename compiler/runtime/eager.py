"""Running a captured graph with torch ops, with errors reported at the user's line.

When compiled code raises, the graph runs again eagerly (compile_fx decides from that
whether the error is the user's). A user's error raised there (an index out of range, a
division by zero) must read as eager's: the same exception, with a traceback ending at the
line of user code the failing op came from, not at the generated `forward` of the graph.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.fx

from compiler.records import SourceLine


class _AtUserLines(torch.fx.Interpreter):
    def __init__(self, gm: torch.fx.GraphModule):
        super().__init__(gm)
        self.extra_traceback = False  # keep the exception's message as torch wrote it

    def run_node(self, n: torch.fx.Node) -> Any:
        try:
            return super().run_node(n)
        except Exception as exc:
            line = n.meta.get("source_line")
            if isinstance(line, SourceLine) and line.lineno > 0:
                raise_at(exc, line)
            raise


def run_eagerly(gm: torch.fx.GraphModule, args: Sequence[Any]) -> Any:
    """`gm(*args)`, node by node; an op's error is raised from its user line."""
    return _AtUserLines(gm).run(*args)


def raise_at(exc: BaseException, line: SourceLine) -> None:
    """Raise `exc` from a frame with the user's file, line and function name."""
    code = compile("\n" * (line.lineno - 1) + "raise ___exc", line.filename, "exec")
    code = code.replace(co_name=line.function or "<graph>")
    exec(code, {"___exc": exc})
