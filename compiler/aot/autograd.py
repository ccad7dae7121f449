"""Running a partitioned training graph: the forward's kernels inside a torch.autograd.Function
whose backward runs the backward's kernels.

`TrainingGraph(*inputs)` returns the user graph's outputs, attached to autograd: when the
user calls `loss.backward()`, autograd's engine calls `backward` below with the incoming
gradients, which runs the compiled backward on the saved tensors, and autograd routes the
results to the inputs (parameters' `.grad` accumulate exactly as in eager).

Eager semantics kept on purpose:
* inputs the forward mutates (BatchNorm's running statistics) are written back after the
  forward kernels run (the compiled forward returns their new values, so it stays free of
  side effects and can be replayed as a CUDA graph);
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

import weakref
from typing import Any, Callable, Sequence

import torch

from compiler.aot.joint import JointGraph, OutputInfo
from compiler.aot.partition import Partition
from compiler.runtime.copies import copy_many
from compiler.runtime.cudagraphs import is_handed_out
from compiler.runtime.support import unflattener


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
        # The last call's saved tensors in graph memory, while its backward may still run.
        self.pending: tuple[weakref.ref, weakref.ref] | None = None
        self.unflatten = unflattener(joint.spec)

    def __call__(self, *args: Any) -> Any:
        if torch.is_grad_enabled():
            tensors = _CompiledFunction.apply(self, *args)
        else:  # called under no_grad after all: outputs only, nothing saved
            tensors, _ = self.run_forward(list(args))
        it = iter(tensors)
        leaves: list = []
        for o in self.joint.outputs:
            if o.computed:
                leaves.append(next(it))
            elif o.alias_of is not None:
                leaves.append(o.view_of(args[o.alias_of]))
            elif o.view_of_output is not None:
                j = o.view_of_output
                leaves[j] = _holding_its_memory(leaves[j], self.joint.outputs[j])
                leaves.append(o.view_of(leaves[j]))
            else:
                leaves.append(o.value)
        return self.unflatten(leaves)

    def run_forward(self, args: list) -> tuple[tuple, tuple]:
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
        kept = iter(results[n + m :])
        saved = tuple(next(kept) if i is None else args[i] for i in self.part.saved_inputs)
        if m:
            with torch.no_grad():
                copy_many([args[i] for i in self.part.mutated], new_values, maybe_same=True)
        return outputs, saved

    def run_backward(self, saved: Sequence[torch.Tensor], grads: Sequence[Any]) -> list:
        tangents = [_in_layout(grads[i], out) for i, out in self.tangent_outputs]
        results = self.backward(*saved, *tangents)
        full: list = [None] * self.joint.num_inputs
        for i, g in zip(self.grad_inputs, results):
            full[i] = g
        return full


class _CompiledFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, graph: TrainingGraph, *args: torch.Tensor) -> tuple:
        outputs, saved = graph.run_forward(list(args))
        ctx.graph = graph
        kept = _GraphMemory.of(saved)
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
        return (None, *ctx.graph.run_backward(saved, grads))


class _GraphMemory:
    """One call's saved tensors that live in a CUDA graph's own memory, which its next
    replay overwrites. `token` stands in for them in `save_for_backward`: autograd drops it
    when their backward has run (without retain_graph) or can no longer run, so while it is
    alive the next forward must copy them out first."""

    def __init__(self, positions: list[int], tensors: list[torch.Tensor]):
        self.positions, self.tensors = positions, tensors
        self.token = torch.empty(0)

    @staticmethod
    def of(saved: Sequence[torch.Tensor]) -> "_GraphMemory | None":
        positions = [k for k, t in enumerate(saved) if is_handed_out(t)]
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


def _holding_its_memory(t: torch.Tensor, out: OutputInfo) -> torch.Tensor:
    """`t` laid out as eager's output was (dense, from the start of its own memory), so the
    views of it that eager returned can be rebuilt from it; copied if it is not."""
    whole = t.untyped_storage().nbytes() == t.numel() * t.element_size()
    if whole and t.storage_offset() == 0 and tuple(t.stride()) == out.stride:
        return t
    return torch.empty_strided(out.size, out.stride, dtype=t.dtype, device=t.device).copy_(t)


def _in_layout(grad: torch.Tensor, out: OutputInfo) -> torch.Tensor:
    """`grad` with the size, strides and dtype the compiled backward expects (autograd
    materialises a missing gradient as zeros before it gets here)."""
    if tuple(grad.stride()) == out.stride and grad.dtype == out.dtype:
        return grad
    fixed = torch.empty_strided(out.size, out.stride, dtype=out.dtype, device=grad.device)
    return fixed.copy_(grad)
