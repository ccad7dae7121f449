"""mode="reduce-overhead": replay the wrapper as a CUDA graph.

A captured graph reads its inputs from the addresses it was captured with. Parameters and
module buffers (runtime/static.py) stay at one address from call to call, so the graph is
captured on them directly and they are never copied; every other input is copied into a
static buffer of the graph's own before each replay. Copying resnet18's 102 parameters
every call cost more GPU time than its convolutions save from the launches.

The first call runs the wrapper once (warm-up: Triton compiles, cuBLAS/cuDNN pick
algorithms), then captures it. A call whose static inputs are not where the graph read them
(a parameter replaced by another tensor) captures again. Inputs the graph writes to (a
BatchNorm's running statistics in training) are written in place when static, and copied
back from the static buffer otherwise.

Outputs are returned as copies: the graph's own output memory is overwritten by the next
replay. The exception is a training forward's internal outputs (`internal_from` on): the
tensors only its backward reads. Those are returned in the graph's own memory, and the
backward's graph is captured reading them where they are, so a training step copies none of
its saved activations. Whoever keeps them past the next replay must copy them first
(aot/autograd.py does, for a backward still pending). A later call that hands the backward
other memory than it was captured on runs the backward's kernels without the graph.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from compiler.runtime import tensor_guards
from compiler.runtime.copies import clone_many, copy_many
from compiler.runtime.static import is_static_address

# Addresses of graph-owned memory handed out as internal outputs: a graph captured later
# reads such an input in place instead of copying it into a buffer of its own. A stale
# address here costs nothing: an input is only read in place while it is at that address.
_handed_out: set[int] = set()


def is_handed_out(t: torch.Tensor) -> bool:
    """`t` is a CUDA graph's internal output: the graph's next replay overwrites it."""
    return bool(_handed_out) and t.is_cuda and t.data_ptr() in _handed_out


def _moved(args: list, where: tuple[tuple[int, ...], tuple[int, ...]]) -> bool:
    """Some `args[i]` is not at its address (`where`: the positions, then the addresses):
    one C++ call with the tensor_guards extension (~100 parameters before each replay)."""
    positions, addresses = where
    same_addresses = tensor_guards.same_addresses_function()
    if same_addresses is not None:
        same = same_addresses(args, positions, addresses)
        if same is not None:
            return not same
    return any(args[i].data_ptr() != p for i, p in zip(positions, addresses))


def _split(pairs: list[tuple[int, int]]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return (tuple(i for i, _ in pairs), tuple(p for _, p in pairs))


class CudaGraphRunner:
    """Runs `call(list of tensors) -> tuple` as a CUDA graph, for one input signature."""

    def __init__(
        self,
        call: Callable[[list], Sequence[Any]],
        mutated: Sequence[int] = (),
        internal_from: int | None = None,
    ):
        self.call = call
        self.mutated = set(mutated)
        self.internal_from = internal_from
        self.graph: torch.cuda.CUDAGraph | None = None
        self.borrowed: list[tuple[int, int]] = []  # (input position, address captured on)
        self.handed: list[tuple[int, int]] = []  # the same, for another graph's outputs
        self.borrowed_at = self.handed_at = _split([])  # both as (positions, addresses)
        self.owned: list[tuple[int, torch.Tensor]] = []  # (input position, static buffer)
        self.copy_back: list[tuple[int, torch.Tensor]] = []
        self.outputs: Sequence[Any] = ()
        self.cloned: list[int] = []  # the outputs returned as copies
        self.captures = 0
        self.ungraphed_calls = 0

    def __call__(self, args: list) -> tuple:
        if self.graph is None or _moved(args, self.borrowed_at):
            self._capture(args)
        elif _moved(args, self.handed_at):
            # Another graph's output, now copied elsewhere (a backward that waited while its
            # forward ran again): the memory the graph reads holds newer values.
            self.ungraphed_calls += 1
            return tuple(self.call(list(args)))
        elif self.owned:
            copy_many([buf for _, buf in self.owned], [args[i] for i, _ in self.owned])
        self.graph.replay()
        if self.copy_back:
            copy_many([args[i] for i, _ in self.copy_back], [buf for _, buf in self.copy_back])
        outputs = list(self.outputs)
        copies = clone_many([outputs[i] for i in self.cloned])
        for i, c in zip(self.cloned, copies):
            outputs[i] = c
        return tuple(outputs)

    def _capture(self, args: list) -> None:
        inputs = list(args)
        self.borrowed, self.handed, self.owned = [], [], []
        for i, a in enumerate(args):
            if is_static_address(a):
                self.borrowed.append((i, a.data_ptr()))
            elif a.data_ptr() in _handed_out and i not in self.mutated:
                self.handed.append((i, a.data_ptr()))
            else:
                buf = torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=a.device)
                inputs[i] = buf.copy_(a)
                self.owned.append((i, buf))
        self.copy_back = [(i, buf) for i, buf in self.owned if i in self.mutated]
        self.borrowed_at, self.handed_at = _split(self.borrowed), _split(self.handed)
        if self.graph is None:
            # The warm-up call must not write twice to the inputs the graph mutates: it runs
            # on copies of them (a BatchNorm would count one batch twice in its statistics).
            warm = [a.clone() if i in self.mutated else a for i, a in enumerate(inputs)]
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                self.call(warm)
            torch.cuda.current_stream().wait_stream(stream)
        # Capturing runs nothing, so the replay below is the call's only write.
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.outputs = self.call(inputs)
        self.graph = graph
        self.captures += 1
        cut = len(self.outputs) if self.internal_from is None else self.internal_from
        self.cloned = [i for i, o in enumerate(self.outputs[:cut]) if isinstance(o, torch.Tensor)]
        if self.internal_from is not None:
            _handed_out.update(
                o.data_ptr()
                for o in self.outputs[self.internal_from :]
                if isinstance(o, torch.Tensor)
            )
