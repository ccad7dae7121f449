"""Running a partitioned training graph: the forward's kernels inside a torch.autograd.Function
whose backward runs the backward's kernels.

`TrainingGraph(*inputs)` returns the user graph's outputs, attached to autograd: when the
user calls `loss.backward()`, autograd's engine calls `backward` below with the incoming
gradients, which runs the compiled backward on the saved tensors, and autograd routes the
results to the inputs (parameters' `.grad` accumulate exactly as in eager).

Only the inputs that require grad are arguments of the autograd.Function: those are what
autograd connects the outputs to. The others (the batch, BatchNorm's buffers, ~360 of
densenet121's ~730 inputs) reach its forward inside one non-tensor argument, which autograd
passes through untouched, so its per-argument work (~0.2 µs a tensor on a CI-class CPU) is
not paid for them; the saved ones among them still go through `save_for_backward` (their
version counters are checked at the backward as in eager).

Eager semantics kept on purpose:
* inputs the forward mutates (BatchNorm's running statistics) are written back after the
  forward kernels run (the compiled forward returns their new values, so it stays free of
  side effects and can be replayed as a CUDA graph); which of those new values arrive as
  the input's own memory, and the copies' groups by dtype, are learned at the first call;
* outputs that do not require grad in eager are marked non-differentiable; outputs that
  are views of an input or of another output are recreated from it outside the Function
  (autograd then routes their gradient through that base);
* a gradient that arrives with other strides than the backward was compiled for (an
  expanded `ones` from `.sum()`, a transposed view) is copied into the expected layout, and
  a missing one (an output that did not reach the loss) arrives as zeros;
* saved tensors go through `save_for_backward`, so a second backward without
  `retain_graph=True` and an in-place change of a saved tensor fail as they do in eager;
  those a CUDA graph returns in its own memory (mode="reduce-overhead") are kept aside
  instead, with a token tensor in `save_for_backward` in their place, and copied out before
  the forward replays again if that token says their backward may still run;
  double backward (`create_graph=True` through this graph) raises a clear error instead of
  silently returning gradients without history.
"""

from __future__ import annotations

import operator
import weakref
from typing import Any, Callable, Sequence

import torch

from compiler.aot.joint import JointGraph
from compiler.aot.outputs import OutputInfo, eager_leaves
from compiler.aot.partition import Partition
from compiler.runtime.copies import same_memory
from compiler.runtime.cudagraphs import is_handed_out
from compiler.support.results import unflattener


class TrainingGraph:
    """One compiled training graph for one input signature. `forward(*inputs)` and
    `backward(*saved, *tangents)` are the compiled halves (flat tuples out)."""

    def __init__(
        self,
        joint: JointGraph,
        part: Partition,
        forward: Callable[..., Sequence[Any]],
        backward: Callable[..., Sequence[Any]],
    ):
        self.joint, self.part = joint, part
        self.forward, self.backward = forward, backward
        outputs = joint.tensor_outputs
        self.non_differentiable = [i for i, o in enumerate(outputs) if not o.differentiable]
        self.tangent_outputs = [(i, o) for i, o in enumerate(outputs) if o.differentiable]
        self.grad_inputs = [i for i, rg in enumerate(joint.requires_grad) if rg]
        self.grad_args = _picker(self.grad_inputs)
        # the saved tensors the forward returns (the others are inputs): only those can be
        # a CUDA graph's own memory
        self.internal_saved = [k for k, i in enumerate(part.saved_inputs) if i is None]
        # the saved tensors out of (*inputs, *the forward's results), whose results end with
        # its internal outputs in the order of `part.saved_inputs`
        first = joint.num_inputs + part.num_outputs + len(part.mutated)
        where = dict(zip(self.internal_saved, range(first, first + len(self.internal_saved))))
        self.pick_saved = _picker(
            [i if i is not None else where[k] for k, i in enumerate(part.saved_inputs)]
        )
        self.write_back: _WriteBack | None = None  # made at the first call
        # The last call's saved tensors in graph memory, while its backward may still run.
        self.pending: tuple[weakref.ref, weakref.ref] | None = None
        self.unflatten = unflattener(joint.spec)

    def __call__(self, *args: Any) -> Any:
        if torch.is_grad_enabled():
            tensors = _CompiledFunction.apply(self, args, *self.grad_args(args))
        else:  # called under no_grad after all: outputs only, nothing saved
            tensors, _ = self.run_forward(args)
        leaves = eager_leaves(iter(tensors), self.joint.outputs, args)
        return self.unflatten(leaves)

    def run_forward(self, args: Sequence[torch.Tensor]) -> tuple[tuple, tuple]:
        if self.pending is not None:
            token, kept = self.pending
            if token() is not None and kept() is not None:
                kept().copy_out_of_graph_memory()
            self.pending = None
        results = tuple(self.forward(*args))
        n, m = self.part.num_outputs, len(self.part.mutated)
        # A view of a buffer of ours would be a view created inside an autograd.Function,
        # which autograd forbids modifying in place; eager's results allow it.
        outputs = tuple(o.clone() if o._base is not None else o for o in results[:n])
        new_values = results[n : n + m]
        saved = self.pick_saved((*args, *results))
        if m:
            if self.write_back is None:
                self.write_back = _WriteBack(self.part.mutated, args, new_values)
            with torch.no_grad():
                self.write_back(args, new_values)
        return outputs, saved

    def run_backward(self, saved: Sequence[torch.Tensor], grads: Sequence[Any]) -> list:
        tangents = [_in_layout(grads[i], out) for i, out in self.tangent_outputs]
        return list(self.backward(*saved, *tangents))  # one per input that requires grad


class _CompiledFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, graph: TrainingGraph, args: tuple, *grad_args: torch.Tensor) -> tuple:
        # `args`: all the graph's inputs, `grad_args` among them (the same tensor objects)
        outputs, saved = graph.run_forward(args)
        ctx.graph = graph
        kept = _GraphMemory.of(saved, graph.internal_saved)
        if kept is None:
            ctx.save_for_backward(*saved)
        else:
            ctx.kept = kept
            ctx.save_for_backward(*kept.tracked(saved))
            graph.pending = (weakref.ref(kept.token), weakref.ref(kept))
        ctx.mark_non_differentiable(*(outputs[i] for i in graph.non_differentiable))
        return outputs

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> tuple:
        saved = ctx.saved_tensors  # raises after a backward without retain_graph, as in eager
        kept = getattr(ctx, "kept", None)
        if kept is not None:
            saved = kept.merged(saved)
        if torch.is_grad_enabled():  # autograd turns grad mode on only for create_graph=True
            raise RuntimeError(
                "double backward through a compiled training graph is not supported: "
                "backward(create_graph=True) / autograd.grad(create_graph=True) needs the "
                "backward's own graph, which compiled kernels do not record; run this "
                "function eagerly (compiler.compile(..., backend='eager')) for it"
            )
        return (None, None, *ctx.graph.run_backward(saved, grads))


class _GraphMemory:
    """One call's saved tensors that live in a CUDA graph's own memory, which its next
    replay overwrites. `token` stands in for them in `save_for_backward`: autograd drops it
    when their backward has run (without retain_graph) or can no longer run, so while it is
    alive the next forward must copy them out first."""

    def __init__(self, positions: list[int], tensors: list[torch.Tensor]):
        self.positions, self.tensors = positions, tensors
        self.token = torch.empty(0)

    @staticmethod
    def of(saved: Sequence[torch.Tensor], candidates: list[int]) -> "_GraphMemory | None":
        """The saved tensors at `candidates` (the forward's own outputs) in graph memory."""
        positions = [k for k in candidates if is_handed_out(saved[k])]
        if not positions:
            return None
        return _GraphMemory(positions, [saved[k] for k in positions])

    def tracked(self, saved: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        inside = set(self.positions)
        return [t for k, t in enumerate(saved) if k not in inside] + [self.token]

    def merged(self, tracked: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        rest = iter(tracked[:-1])  # the token last
        mine = dict(zip(self.positions, self.tensors))
        total = len(tracked) - 1 + len(self.positions)
        return [mine[k] if k in mine else next(rest) for k in range(total)]

    def copy_out_of_graph_memory(self) -> None:
        self.tensors = [t.clone() for t in self.tensors]


class _WriteBack:
    """Copies the forward's new values of the inputs it mutates into them. At the first call
    it learns which new values are the input's own memory (nothing to copy; rechecked at
    each call, since only those could stop being so) and groups the others by dtype and
    device, one `_foreach_copy_` each: checking and grouping each pair at each call was
    ~0.8 ms of densenet121's RO training step on an H100's host (363 BatchNorm buffers).
    A signature's inputs and the graph's outputs keep their dtypes and devices, and were a
    group mixed, `_foreach_copy_` would still copy it, only slower."""

    def __init__(self, mutated: list[int], args: Sequence[Any], new_values: Sequence[Any]):
        self.same: list[tuple[int, int]] = []  # (input position, new value position)
        groups: dict[tuple, tuple[list[int], list[int]]] = {}
        for k, (i, new) in enumerate(zip(mutated, new_values)):
            old = args[i]
            if old is new or same_memory(old, new):
                self.same.append((i, k))
                continue
            key = (old.dtype, old.device, new.dtype, new.device)
            group = groups.setdefault(key, ([], []))
            group[0].append(i)
            group[1].append(k)
        self.groups = [(_picker(dsts), _picker(srcs)) for dsts, srcs in groups.values()]

    def __call__(self, args: Sequence[Any], new_values: Sequence[Any]) -> None:
        for dsts, srcs in self.groups:
            torch._foreach_copy_(dsts(args), srcs(new_values))
        for i, k in self.same:
            old, new = args[i], new_values[k]
            if old is not new and not same_memory(old, new):
                old.copy_(new)


def _picker(positions: list[int]) -> Callable[[Sequence[Any]], tuple]:
    """`lambda xs: tuple(xs[i] for i in positions)`, in C where itemgetter returns a tuple."""
    if len(positions) > 1:
        return operator.itemgetter(*positions)
    return lambda xs: tuple(xs[i] for i in positions)


def _in_layout(grad: torch.Tensor, out: OutputInfo) -> torch.Tensor:
    """`grad` with the size, strides and dtype the compiled backward expects (autograd
    materialises a missing gradient as zeros before it gets here)."""
    if tuple(grad.stride()) == out.stride and grad.dtype == out.dtype:
        return grad
    fixed = torch.empty_strided(out.size, out.stride, dtype=out.dtype, device=grad.device)
    return fixed.copy_(grad)
