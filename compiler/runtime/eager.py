"""Running a captured graph with torch ops, with errors reported at the user's line.

When compiled code raises, the graph runs again eagerly (compile_fx decides from that
whether the error is the user's). A user's error raised there (an index out of range, a
division by zero) must read as eager's: the same exception, with a traceback ending at the
line of user code the failing op came from, not at the generated `forward` of the graph.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.fx

from compiler.records import SourceLine

# An aot half (a functional aten graph) can be given tensors in other strides than it was
# traced with: the compiled forward lays some saved tensors out channels-last for the
# backward's kernels. Its views then cannot always be views, and in a functional graph a view
# means what a reshape computes, so there they run as reshapes instead of raising an error
# that eager's own code never raised (torchvision's swin_b train step on the H100).
_ATEN_VIEWS = (torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default)


class _AtUserLines(torch.fx.Interpreter):
    def __init__(self, gm: torch.fx.GraphModule):
        super().__init__(gm)
        self.extra_traceback = False  # keep the exception's message as torch wrote it

    def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
        if target in _ATEN_VIEWS and isinstance(args[0], torch.Tensor):
            try:
                return target(*args, **kwargs)
            except RuntimeError:
                return torch.ops.aten.reshape.default(*args, **kwargs)
        return super().call_function(target, args, kwargs)

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


def forward_at_user_lines(
    gm: torch.fx.GraphModule,
    forward: Callable[..., Any],
    lines: Mapping[str, SourceLine] | None = None,
) -> Callable[..., Any]:
    """`forward` (gm's, compiled), with an op's error raised from its user line: the frame of
    the graph's generated code is mapped back to the node that raised (fx's line map), so a
    graph run as it is (the eager backend) fails as eager does, without running an op twice.
    `lines`: node name -> user line, where the nodes do not carry theirs (an aten graph)."""
    code = forward.__code__

    def run(*args: Any) -> Any:
        try:
            return forward(*args)
        except Exception as exc:
            line = _failing_line(gm, code, exc, lines)
            if line is None:
                raise
            raise_at(exc.with_traceback(None), line)
            raise  # not reached: raise_at raises

    return run


def _failing_line(
    gm: torch.fx.GraphModule,
    code: Any,
    exc: BaseException,
    lines: Mapping[str, SourceLine] | None,
) -> SourceLine | None:
    tb = exc.__traceback__
    lineno = None
    while tb is not None:
        if tb.tb_frame.f_code is code:
            lineno = tb.tb_lineno
        tb = tb.tb_next
    lineno_map = getattr(gm, "_lineno_map", None)
    if lineno is None or not lineno_map:
        return None
    index = lineno_map.get(lineno - getattr(gm, "_prologue_start", 0))
    if index is None:
        return None
    node = list(gm.graph.nodes)[index]
    line = node.meta.get("source_line") if lines is None else lines.get(node.name)
    return line if isinstance(line, SourceLine) and line.lineno > 0 else None
