"""jupyter_compile: the IPython extension of the `compiler` package.

    %load_ext jupyter_compile

adds `%%compile` (compile what a cell defines, with a live inspector under the cell) and
`%explain fn(args)`. Loading twice is harmless; `%unload_ext` removes the magics, the records
subscription and the post-cell refresh.
"""

from __future__ import annotations

from typing import Any

from jupyter_compile.inspector import Inspector, mark_stale, refresh_stale, static_report
from jupyter_compile.magics import CompileMagics

__all__ = ["Inspector", "load_ipython_extension", "static_report", "unload_ipython_extension"]

# Per shell: what load_ipython_extension installed, so that reloads and unloads are exact.
_installed: dict[int, dict[str, Any]] = {}


def load_ipython_extension(ipython: Any) -> None:
    from compiler import records

    if id(ipython) in _installed:
        return
    magics = CompileMagics(ipython)
    ipython.register_magics(magics)
    ipython.events.register("post_run_cell", refresh_stale)
    unsubscribe = records.subscribe(mark_stale)
    _installed[id(ipython)] = {"magics": magics, "unsubscribe": unsubscribe}


def unload_ipython_extension(ipython: Any) -> None:
    state = _installed.pop(id(ipython), None)
    if state is None:
        return
    state["unsubscribe"]()
    try:
        ipython.events.unregister("post_run_cell", refresh_stale)
    except ValueError:
        pass
    for inspector in state["magics"].inspectors.values():
        inspector.detach()
    magics_manager = ipython.magics_manager
    magics_manager.magics["cell"].pop("compile", None)
    magics_manager.magics["line"].pop("explain", None)
