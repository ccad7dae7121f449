"""mode="reduce-overhead": replay the wrapper as a CUDA graph.

The first call with a given input signature runs the wrapper once (warm-up: Triton compiles,
cuBLAS/cuDNN pick algorithms), then captures it reading from static input buffers. Every call
copies its inputs into those buffers, replays the graph, and returns copies of the outputs
(the graph's own output memory is overwritten by the next replay). A new signature (shape,
stride, dtype) captures a new graph.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch


def _signature(args: Sequence[Any]) -> tuple:
    return tuple(
        (tuple(a.shape), tuple(a.stride()), a.dtype, a.device) if isinstance(a, torch.Tensor) else a
        for a in args
    )


class CudaGraphRunner:
    def __init__(self, call: Callable[[list], Sequence[Any]]):
        self.call = call
        self.graphs: dict[
            tuple, tuple[torch.cuda.CUDAGraph, list[torch.Tensor], Sequence[Any]]
        ] = {}

    def __call__(self, args: list) -> tuple:
        key = _signature(args)
        entry = self.graphs.get(key)
        if entry is None:
            entry = self._capture(args)
            self.graphs[key] = entry
        graph, static_inputs, static_outputs = entry
        for dst, src in zip(static_inputs, args):
            if isinstance(dst, torch.Tensor):
                dst.copy_(src)
        graph.replay()
        return tuple(o.clone() if isinstance(o, torch.Tensor) else o for o in static_outputs)

    def _capture(self, args: list):
        static_inputs = [
            torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=a.device).copy_(a)
            if isinstance(a, torch.Tensor)
            else a
            for a in args
        ]
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            self.call(list(static_inputs))  # warm-up outside the graph
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_outputs = self.call(list(static_inputs))
        return graph, static_inputs, static_outputs
