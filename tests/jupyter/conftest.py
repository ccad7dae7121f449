"""A real IPython shell with the extension loaded, and a helper running a cell with its
outputs captured."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import CapturedIO, capture_output

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class CellOutput:
    result: Any  # IPython's ExecutionResult
    io: CapturedIO

    @property
    def stdout(self) -> str:
        return _ANSI.sub("", self.io.stdout)

    @property
    def stderr(self) -> str:
        return _ANSI.sub("", self.io.stderr)

    def bundles(self) -> list[dict]:
        return [o.data for o in self.io.outputs]

    def html(self) -> str:
        return "\n".join(b.get("text/html", "") for b in self.bundles())

    def twins(self) -> list[str]:
        """The static twins of the inspectors `%%compile` showed (outputs of their own)."""
        return [
            b["text/html"] for b in self.bundles() if 'class="jc-twin-' in b.get("text/html", "")
        ]

    def texts(self) -> str:
        return "\n".join(b.get("text/plain", "") for b in self.bundles())


def run(shell: InteractiveShell, source: str) -> CellOutput:
    with capture_output() as io:
        result = shell.run_cell(source, store_history=True)
    return CellOutput(result, io)


@pytest.fixture
def ipython() -> Iterator[InteractiveShell]:
    shell = InteractiveShell.instance()
    before = set(shell.user_ns)
    shell.run_line_magic("load_ext", "jupyter_compile")
    yield shell
    shell.run_line_magic("unload_ext", "jupyter_compile")
    for name in set(shell.user_ns) - before:
        del shell.user_ns[name]
