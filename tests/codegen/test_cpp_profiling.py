"""C++ kernels show up in torch.profiler under their own names (what the inspector's Kernels
tab times), and only while a profiler runs."""

from __future__ import annotations

import torch
from torch.profiler import ProfilerActivity, profile

from compiler.backends.inductor import compile_fx
from compiler.records import GraphRecord, compiling_graph


def test_cpp_kernels_are_profiled_by_name():
    gm = torch.fx.symbolic_trace(lambda a: (a.sin() * 2).sum(-1).exp())
    x = torch.randn(64, 256)
    record = GraphRecord(gm, gm.code, len(gm.graph.nodes))
    with compiling_graph(record):
        compiled = compile_fx(gm, [x])
    names = {k.name for k in record.kernels if k.language == "cpp"}
    assert names
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        compiled(x)
    assert names <= {e.key for e in prof.key_averages()}
