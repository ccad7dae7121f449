"""FX graph modules whose Python code is made when it is first run.

A torch.fx.GraphModule turns its graph into Python source and compiles that source at
construction and at every `recompile()`. Of the aten graphs a compile makes, none is run as
Python in the usual case: make_fx's graph is rewritten at once (remove_mutations), the
joint graph is partitioned, and the halves and the optimizer's graph are lowered to kernels;
the records only keep their source text. Making those graph modules lazy (torch.fx's
_LazyGraphModule: `recompile()` only marks the code stale) and reading their text without
compiling it saves, on a CI-class CPU, about 0.1 s of a resnet18 training step's first call
(its Adam graph alone has 1,900 nodes). Run, such a module compiles its code first.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator

import torch
import torch.fx
from torch.fx import _lazy_graph_module as lazy
from torch.fx.experimental import _config as fx_config


def graph_module(
    root: torch.nn.Module | dict, graph: torch.fx.Graph, class_name: str = "GraphModule"
) -> torch.fx.GraphModule:
    """torch.fx.GraphModule(root, graph, class_name), its code made when first needed."""
    return lazy._LazyGraphModule(root, graph, class_name)


@contextlib.contextmanager
def lazy_graph_modules() -> Iterator[None]:
    """The graph modules torch.fx makes inside (make_fx's result) are lazy."""
    with lazy._use_lazy_graph_module(True):
        yield


def graph_code(gm: torch.fx.GraphModule) -> str:
    """`gm.code` (what records show), without compiling it when `gm` is lazy and stale."""
    if isinstance(gm, lazy._LazyGraphModule) and gm._needs_recompile():
        return gm.graph.python_code(
            root_module="self", record_func=fx_config.enrich_profiler_metadata
        ).src
    return gm.code


def runnable(gm: torch.fx.GraphModule) -> Callable:
    """`gm.forward` as compiled Python: a lazy module's forward is otherwise a stub that
    checks and compiles at every call before it calls the module."""
    lazy._LazyGraphModule.force_recompile(gm)
    return gm.forward
