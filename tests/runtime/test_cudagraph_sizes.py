"""mode="reduce-overhead" on a dynamic graph (compiler/runtime/cudagraphs.py, SizeGraphs): one
CUDA graph per size, recorded once and replayed after, at most config.cudagraph_size_limit
of them, the rest run without a graph and said so. The bookkeeping is tested here on any
machine; the graphs themselves on the GPU (`gpu` tests), against eager."""

from __future__ import annotations

import warnings

import pytest
import torch

import compiler
from compiler.records import CompilerWarning, GraphRecord
from compiler.runtime import cudagraphs
from compiler.runtime.cudagraphs import CudaGraphRunner, SizeGraphs


def _record() -> GraphRecord:
    gm = torch.fx.symbolic_trace(lambda x: x + 1)
    return GraphRecord(gm, gm.code, len(gm.graph.nodes))


def test_sizes_of_one_record_share_a_cap_and_a_note():
    record = _record()
    with compiler.config.patch(cudagraph_size_limit=2):
        forward = SizeGraphs.of(record, "", record.notes)
        assert SizeGraphs.of(record, "", record.notes) is forward  # every size's runner
        backward = SizeGraphs.of(record, "backward graph: ", record.notes)
        assert backward is not forward
        assert forward.admit() and forward.admit()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert not forward.admit() and not forward.admit()
    assert len([w for w in caught if issubclass(w.category, CompilerWarning)]) == 1  # once
    (note,) = [n for n in record.notes if n.startswith("CUDA graphs per size")]
    assert note == (
        "CUDA graphs per size: 2 recorded (limit 2, config.cudagraph_size_limit); "
        "2 later sizes run their kernels without a graph"
    )
    assert backward.admit()  # the backward's sizes count apart
    key = (id(record), "")
    del record, forward, backward
    assert key not in cudagraphs._size_graphs  # forgotten with the record


def test_a_size_past_the_cap_runs_its_kernels_without_a_graph():
    record = _record()
    calls = []
    with compiler.config.patch(cudagraph_size_limit=0):
        sizes = SizeGraphs.of(record, "", record.notes)
        runner = CudaGraphRunner(lambda args: calls.append(args) or (args[0] + 1,), sizes=sizes)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CompilerWarning)
            (out,) = runner([torch.ones(2)])  # on the CPU: no capture is tried
    torch.testing.assert_close(out, torch.full((2,), 2.0))
    assert runner.graph is None and runner.ungraphed_calls == 1 and len(calls) == 1


# ---- on the GPU ---------------------------------------------------------------------------


class Decoder(torch.nn.Module):
    """A generation step's shape: the new token attends to a KV cache that grows by one."""

    def __init__(self, d: int = 64):
        super().__init__()
        self.q, self.kv = torch.nn.Linear(d, d), torch.nn.Linear(d, 2 * d)
        self.ln = torch.nn.LayerNorm(d)

    def forward(self, x, cache):
        k, v = self.kv(self.ln(x)).chunk(2, -1)
        cache = torch.cat([cache, torch.stack([k, v])], dim=1)
        att = (self.q(x) @ cache[0].t()).softmax(-1)
        return x + att @ cache[1], cache


def _loop(compiled, model, tokens: int, start: int = 5):
    cache = torch.randn(2, start, 64, device="cuda")
    x = torch.randn(1, 64, device="cuda")
    for _ in range(tokens):
        out, new = compiled(x, cache)
        expected, expected_cache = model(x, cache)
        torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(new, expected_cache)
        x, cache = out, new


@pytest.mark.gpu
def test_a_generation_loop_records_one_graph_per_size_and_replays_them(monkeypatch):
    compiler.reset()
    captures = []
    original = CudaGraphRunner._capture

    def counting(self, args):
        original(self, args)
        captures.append(tuple(args[0].shape) if args else ())

    monkeypatch.setattr(CudaGraphRunner, "_capture", counting)
    model = Decoder().cuda().eval()
    compiled = compiler.compile(model, mode="reduce-overhead")
    with torch.no_grad():
        _loop(compiled, model, 12)
        first = len(captures)
        _loop(compiled, model, 12)  # the same sizes again: replays only
    assert first >= 10 and len(captures) == first
    notes = [n for g in compiler.inspect(compiled).graphs for n in g.notes]
    assert any(n.startswith("CUDA graphs per size: ") and "recorded" in n for n in notes)


@pytest.mark.gpu
def test_sizes_past_the_cap_run_without_graphs_and_say_so():
    compiler.reset()
    model = Decoder().cuda().eval()
    with compiler.config.patch(cudagraph_size_limit=3):
        compiled = compiler.compile(model, mode="reduce-overhead")
        with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _loop(compiled, model, 10)
    assert any("cudagraph_size_limit" in str(w.message) for w in caught)
    notes = [n for g in compiler.inspect(compiled).graphs for n in g.notes]
    assert any("later sizes run their kernels without a graph" in n for n in notes)
