"""mode="reduce-overhead": replay the wrapper as a CUDA graph.

A captured graph reads its inputs from the addresses it was captured with. Parameters and
module buffers (support/static.py) stay at one address from call to call, so the graph is
captured on them directly and they are never copied; every other input is copied into a
static buffer of the graph's own before each replay. Copying resnet18's 102 parameters
every call cost more GPU time than its convolutions save from the launches.

The first call runs the wrapper once (warm-up: Triton compiles, cuBLAS/cuDNN pick
algorithms), then captures it. A call whose static inputs are not where the graph read them
(a parameter replaced by another tensor) captures again. Inputs the graph writes to (a
BatchNorm's running statistics in training) are written in place when static, and copied
back from the static buffer otherwise.

Outputs are returned as copies: the graph's own output memory is overwritten by the next
replay. There are two exceptions. A training backward's gradients (`hand_out` on) are handed
to autograd as aliases of the graph's memory (`_HandedOut`): the engine puts them in `.grad`
without a copy, and a `.grad` still held when the backward replays again (no zero_grad
between two backward calls, a gradient the user kept) is moved to memory of its own first.
A training forward's internal outputs (`internal_from` on) are the tensors only its
backward reads. Those are returned in the graph's own memory, and the
backward's graph is captured reading them where they are, so a training step copies none of
its saved activations. Whoever keeps them past the next replay must copy them first
(aot/autograd.py does, for a backward still pending). A later call that hands the backward
other memory than it was captured on runs the backward's kernels without the graph.

A dynamic graph is compiled per size (compiler/backends/per_size.py), each size with a
runner of its own: one CUDA graph per size, recorded at the size's first call and replayed
at its later ones (a generation loop run again records nothing). The sizes of one graph
share a `SizeGraphs`: at most `config.cudagraph_size_limit` of them are recorded, later
ones run their kernels without a graph (said in the record, warned once), and inference
graphs record into one memory pool: a replay's outputs are copied out before any other
size replays, so the sizes' intermediates can share memory (256 sizes of a GPT-2 step
would otherwise hold 256 private pools).
"""

from __future__ import annotations

import warnings
import weakref
from collections import Counter
from typing import Any, Callable, Sequence

import torch

from compiler import config
from compiler.records import CompilerWarning
from compiler.runtime import cpp_ext
from compiler.runtime.copies import clone_many, copy_many
from compiler.support.static import is_static_address

# Addresses of graph-owned memory handed out as internal outputs: a graph captured later
# reads such an input in place instead of copying it into a buffer of its own. A stale
# address here costs nothing: an input is only read in place while it is at that address.
_handed_out: set[int] = set()


def is_handed_out(t: torch.Tensor) -> bool:
    """`t` is a CUDA graph's internal output: the graph's next replay overwrites it."""
    return bool(_handed_out) and t.is_cuda and t.data_ptr() in _handed_out


def _moved(args: list, where: tuple[tuple[int, ...], tuple[int, ...]]) -> bool:
    """Some `args[i]` is not at its address (`where`: the positions, then the addresses):
    one C++ call with the C++ extension (cpp_ext.py) (~100 parameters before each replay)."""
    positions, addresses = where
    same_addresses = cpp_ext.same_addresses_function()
    if same_addresses is not None:
        same = same_addresses(args, positions, addresses)
        if same is not None:
            return not same
    return any(args[i].data_ptr() != p for i, p in zip(positions, addresses))


def _split(pairs: list[tuple[int, int]]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return (tuple(i for i, _ in pairs), tuple(p for _, p in pairs))


class SizeGraphs:
    """The CUDA graphs of one graph's sizes (one per runner): how many are recorded, the
    cap, the memory pool of those that may share one, and the record's note about them."""

    def __init__(self, notes: list[str] | None, label: str) -> None:
        self.notes = notes
        self.label = label
        self.recorded = 0
        self.ungraphed_sizes = 0
        self.limit = config.cudagraph_size_limit
        self._pool: Any = None

    @staticmethod
    def of(owner: Any, label: str, notes: list[str] | None) -> "SizeGraphs":
        """The SizeGraphs of `owner` (a graph's record, shared by its sizes' compiles) for
        the part `label` names (a training graph's forward and backward apart)."""
        key = (id(owner), label)
        found = _size_graphs.get(key)
        if found is None:
            found = _size_graphs[key] = SizeGraphs(notes, label)
            weakref.finalize(owner, _size_graphs.pop, key, None)
        return found

    def admit(self) -> bool:
        """Whether one more size may record a graph (counted when it may)."""
        if self.recorded < self.limit:
            self.recorded += 1
            self._note()
            return True
        self.ungraphed_sizes += 1
        if self.ungraphed_sizes == 1:
            warnings.warn(
                f"compiler: {self.label}CUDA graphs were recorded for {self.limit} sizes "
                "(config.cudagraph_size_limit); later sizes run their kernels without a graph",
                CompilerWarning,
                stacklevel=4,
            )
        self._note()
        return False

    def pool(self) -> Any:
        """The memory pool the sizes' inference graphs record into."""
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        return self._pool

    def _note(self) -> None:
        if self.notes is None:
            return
        head = f"{self.label}CUDA graphs per size: "
        note = f"{head}{self.recorded} recorded (limit {self.limit}, config.cudagraph_size_limit)"
        if self.ungraphed_sizes:
            note += f"; {self.ungraphed_sizes} later sizes run their kernels without a graph"
        self.notes[:] = [n for n in self.notes if not n.startswith(head)] + [note]


_size_graphs: dict[tuple[int, str], SizeGraphs] = {}


class CudaGraphRunner:
    """Runs `call(list of tensors) -> tuple` as a CUDA graph, for one input signature."""

    def __init__(
        self,
        call: Callable[[list], Sequence[Any]],
        mutated: Sequence[int] = (),
        internal_from: int | None = None,
        hand_out: bool = False,
        notes: list[str] | None = None,
        label: str = "",
        sizes: SizeGraphs | None = None,
    ):
        self.call = call
        self.sizes = sizes
        # Whether this size may record a graph: asked of `sizes` at the first call
        self.admitted: bool | None = None if sizes is not None else True
        self.notes = notes  # the graph's record: what a replay copies is said there
        self.label = label  # "forward graph: " in a training graph's record
        self.hand_out = hand_out
        self.handed_outputs: _HandedOut | None = None
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
        if self.admitted is None:
            self.admitted = self.sizes.admit()
        if not self.admitted:  # past the graph's cap of sizes: no graph for this one
            self.ungraphed_calls += 1
            return tuple(self.call(list(args)))
        if self.handed_outputs is not None:
            self.handed_outputs.move_held()  # before anything below writes the graph's memory
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
        if self.handed_outputs is not None:
            for i, alias in zip(self.handed_outputs.positions, self.handed_outputs.aliases):
                outputs[i] = alias
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
        # An inference graph's sizes share a pool: every output is copied out after a replay
        # (nothing of the pool stays in use but the outputs, which stay allocated)
        shared = self.sizes is not None and self.internal_from is None and not self.hand_out
        with torch.cuda.graph(graph, pool=self.sizes.pool() if shared else None):
            self.outputs = self.call(inputs)
        self.graph = graph
        self.captures += 1
        if self.handed_outputs is not None:
            self.handed_outputs.release()  # the old graph's memory stays with whoever holds it
        cut = len(self.outputs) if self.internal_from is None else self.internal_from
        self.cloned = [i for i, o in enumerate(self.outputs[:cut]) if isinstance(o, torch.Tensor)]
        self.handed_outputs = _HandedOut.of(self.outputs, inputs) if self.hand_out else None
        if self.handed_outputs is not None:
            handed = set(self.handed_outputs.positions)
            self.cloned = [i for i in self.cloned if i not in handed]
        if self.notes is not None:
            self._note_copies(args)
        if self.internal_from is not None:
            _handed_out.update(
                o.data_ptr()
                for o in self.outputs[self.internal_from :]
                if isinstance(o, torch.Tensor)
            )

    def _note_copies(self, args: list) -> None:
        """Say in the record what each replay copies: a reduce-overhead step that is slower
        than expected usually copies inputs the graph could have read where they are."""

        def mib(tensors) -> str:
            return f"{sum(t.numel() * t.element_size() for t in tensors) / 2**20:.1f} MiB"

        owned = [args[i] for i, _ in self.owned]
        cloned = [self.outputs[i] for i in self.cloned]
        head = f"{self.label}CUDA graph (capture "
        note = (
            f"{head}{self.captures}): reads {len(self.borrowed)} inputs where "
            f"they are (parameters, buffers) and {len(self.handed)} another graph left in its "
            f"memory; each replay copies {len(owned)} inputs in ({mib(owned)}), "
            f"{len(self.copy_back)} of them back, and returns {len(cloned)} outputs as "
            f"copies ({mib(cloned)})"
        )
        self.notes[:] = [n for n in self.notes if not n.startswith(head)]
        self.notes.append(note)


class _HandedOut:
    """A backward graph's outputs handed out as aliases of its own memory: each alias is a
    tensor on a storage of its own (`torch.from_dlpack` of the output, which keeps the
    output's memory alive) that the runner keeps from replay to replay.

    Autograd's engine takes a gradient into `.grad` without copying it only when nothing else
    holds the tensor; the runner's own reference is discounted by registering the aliases as
    cached tensors (torch's mechanism for exactly this). `.grad` then shares the alias's
    storage, so the storage's reference count says whether anything outside the runner still
    holds the memory: `move_held` copies each such alias to fresh memory and swaps the
    storages' memory (C++, graph_outputs.h), every view following, and makes a new alias for
    the graph's output. Outputs that share memory with an input or with another output are
    copied as before.

    One difference from eager remains: a gradient still in graph memory cannot be resized
    (`p.grad.resize_()` to a larger size raises; a moved one can)."""

    def __init__(self, outputs: Sequence[Any], positions: list[int], moves: tuple):
        self.outputs = outputs
        self.positions = positions
        self.aliases = [_alias(outputs[i]) for i in positions]
        self.live_storages, self.adopt_storage = moves
        self.moved = 0  # aliases moved out before a replay (a count the tests read)
        # torch's cached-tensor registry keeps each alias's TensorImpl allocated until removed
        weakref.finalize(self, _unregister, self.aliases)

    @staticmethod
    def of(outputs: Sequence[Any], inputs: Sequence[Any]) -> "_HandedOut | None":
        moves = cpp_ext.storage_moves()
        if moves is None:
            return None
        taken = {a.untyped_storage().data_ptr() for a in inputs if isinstance(a, torch.Tensor)}
        bases = {
            i: o.untyped_storage().data_ptr()
            for i, o in enumerate(outputs)
            if isinstance(o, torch.Tensor)
        }
        seen = Counter(bases.values())
        positions = [
            i
            for i, base in bases.items()
            if type(outputs[i]) is torch.Tensor
            and outputs[i].numel() > 0
            and base not in taken
            and seen[base] == 1
        ]
        return _HandedOut(outputs, positions, moves) if positions else None

    def release(self) -> None:
        _unregister(self.aliases)

    def move_held(self) -> None:
        torch._C._set_cached_tensors_enabled(True)  # idempotent; something may turn it off
        held = self.live_storages(self.aliases)
        if held is None:  # not exact tensors: never the case for our own aliases
            raise RuntimeError("CUDA graph outputs handed out are not plain tensors")
        for k in held:
            alias = self.aliases[k]
            fresh = torch.empty_strided(
                alias.shape, alias.stride(), dtype=alias.dtype, device=alias.device
            )
            fresh.copy_(alias)
            self.adopt_storage(alias, fresh)  # the holders now read `fresh`'s memory
            torch._C._remove_cached_tensor(alias)
            self.aliases[k] = _alias(self.outputs[self.positions[k]])
            self.moved += 1


def _unregister(aliases: list[torch.Tensor]) -> None:
    for alias in aliases:
        torch._C._remove_cached_tensor(alias)
    aliases.clear()


def _alias(t: torch.Tensor) -> torch.Tensor:
    alias = torch.from_dlpack(t)
    torch._C._set_cached_tensors_enabled(True)
    torch._C._add_cached_tensor(alias)
    _handed_out.add(alias.data_ptr())  # a graph captured on it (the optimizer's) reads it in place
    return alias
