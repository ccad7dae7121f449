"""A graph's outputs as eager returns them: the structure they sit in (tuple, list, dict,
namedtuple, torch.return_types structseq) and, per leaf, whether it is computed, the input
itself, a view of an input or a view of an earlier output.

A compiled graph computes its outputs into memory of its own, and its functional aten graph
writes an input updated in place back at its end. Returned as they are, `return x.add_(y)`
would give a new tensor instead of `x`, a view of an input written in place would not share
the input's memory, and `y, y[1:]` would be two unrelated tensors. Described here from fake
values (the tracer's, the aot trace's, or a fake run of the graph), such outputs are
recreated after the compiled code has run, from the real tensor they alias, with eager's
sizes, strides and offset (`eager_leaves`): the inference graphs of compile_fx and
aot_eager, and the training graphs of aot/autograd.py, which do not compute them at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._pytree import TreeSpec, tree_flatten

from compiler.support.results import unflattener


@dataclass
class OutputInfo:
    """One leaf of the graph's output structure."""

    tensor: bool
    differentiable: bool = False  # requires grad in eager: gets a tangent and a backward
    size: tuple[int, ...] = ()
    stride: tuple[int, ...] = ()  # the layout the backward expects its tangent in
    dtype: torch.dtype | None = None
    value: Any = None  # the constant, for non-tensor leaves
    # a view of input `alias_of`, or of the earlier output leaf `view_of_output` (which holds
    # all of its memory): recreated from it with `stride` and `offset` (elements past the
    # base's own storage offset) instead of being computed by the graph
    alias_of: int | None = None
    view_of_output: int | None = None
    offset: int = 0
    same_object: bool = False  # that base itself (`return x.add_(y)`, `return y, y`)

    @property
    def computed(self) -> bool:
        return self.tensor and self.alias_of is None and self.view_of_output is None

    def view_of(self, base: torch.Tensor) -> torch.Tensor:
        if self.same_object:
            return base
        return base.as_strided(self.size, self.stride, base.storage_offset() + self.offset)


@dataclass
class Outputs:
    spec: TreeSpec  # the user graph's output structure
    leaves: list[OutputInfo]
    # why an output is computed although it shares memory with another one in eager (two
    # outputs share memory and neither holds all of it); None when every alias is described
    unshared: str | None = None

    @property
    def aliased(self) -> bool:
        """Some leaf is recreated from an input or another output."""
        return any(o.tensor and not o.computed for o in self.leaves)


def describe_outputs(fakes: Sequence[torch.Tensor], out: Any) -> Outputs:
    """The output `out` of a run of the graph on the fake inputs `fakes` (the same fake
    mode's tensors), described leaf by leaf."""
    leaves, spec = tree_flatten(plain_containers(out))
    by_storage: dict[StorageWeakRef, list[int]] = {}
    for i, f in enumerate(fakes):
        if isinstance(f, torch.Tensor):
            by_storage.setdefault(StorageWeakRef(f.untyped_storage()), []).append(i)
    owners: dict[StorageWeakRef, int] = {}  # computed outputs holding all of their memory
    seen: set[StorageWeakRef] = set()
    infos: list[OutputInfo] = []
    unshared = None
    for k, leaf in enumerate(leaves):
        if not isinstance(leaf, torch.Tensor):
            infos.append(OutputInfo(False, value=leaf))
            continue
        ref = StorageWeakRef(leaf.untyped_storage())
        layout = (tuple(leaf.shape), tuple(leaf.stride()), leaf.dtype)
        bases = by_storage.get(ref, [])
        same = [i for i in bases if leaf is fakes[i]]
        # With several inputs in one memory, a view is of whichever the graph took it from,
        # which the fakes do not say: it stays computed (such a call runs eagerly anyway
        # when the graph writes to one of them, runtime/aliasing.py).
        base = same[0] if same else (bases[0] if len(bases) == 1 else None)
        if base is not None:
            offset = leaf.storage_offset() - fakes[base].storage_offset()
            infos.append(
                OutputInfo(
                    True, False, *layout, alias_of=base, offset=offset, same_object=bool(same)
                )
            )
            continue
        if ref in owners:
            j = owners[ref]
            infos.append(
                OutputInfo(
                    True,
                    False,
                    *layout,
                    view_of_output=j,
                    offset=leaf.storage_offset(),
                    same_object=leaf is leaves[j],
                )
            )
            continue
        if bases:
            unshared = "an output is a view of one of several inputs that share memory"
        elif ref in seen:
            unshared = "two outputs share memory and neither holds all of it"
        seen.add(ref)
        if holds_its_memory(leaf):
            owners[ref] = k
        infos.append(
            OutputInfo(
                True,
                differentiable=leaf.requires_grad,
                size=tuple(leaf.shape),
                stride=tangent_stride(leaf),
                dtype=leaf.dtype,
            )
        )
    return Outputs(spec, infos, unshared)


def run_fake(gm: torch.fx.GraphModule, inputs: Sequence[torch.Tensor]) -> tuple[list, Any]:
    """Fake inputs like `inputs` and `gm`'s output on them, computed with grad on as eager's
    run is. Where the tracer recorded that run already (`recorded`), its values are read
    instead of running the graph again (densenet121's forward: 0.76 s cold on a CI-class
    CPU)."""
    values = recorded(gm, inputs)
    if values is not None:
        return values
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    fakes = [mode.from_tensor(t) if isinstance(t, torch.Tensor) else t for t in inputs]
    with mode, torch.enable_grad():
        return fakes, torch.fx.Interpreter(gm).run(*fakes)


def recorded(gm: torch.fx.GraphModule, inputs: Sequence[torch.Tensor]) -> tuple | None:
    """The fake values our tracer recorded on `gm`'s nodes (meta "val", computed with grad
    on as eager's run is) as run_fake's run gives them: the inputs' fakes and the output
    structure's. None unless every input's is a FakeTensor of static sizes, of one fake
    mode, with the input's metadata, and every output has one (graphs of symbolic_trace or
    of dynamic shapes run)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    fakes = [n.meta.get("val") for n in placeholders]
    if len(fakes) != len(inputs) or not all(isinstance(f, FakeTensor) for f in fakes):
        return None
    modes = {id(f.fake_mode) for f in fakes}
    for f, t in zip(fakes, inputs):
        if not _static(f) or _metadata(f) != _metadata(t):
            return None
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    if any("val" not in n.meta for n in output.all_input_nodes):
        return None
    out = torch.fx.map_arg(output.args[0], lambda n: n.meta["val"])
    for leaf in tree_flatten(out)[0]:
        if isinstance(leaf, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return None
        if isinstance(leaf, torch.Tensor):
            if not isinstance(leaf, FakeTensor) or not _static(leaf):
                return None
            modes.add(id(leaf.fake_mode))
    return (fakes, out) if len(modes) <= 1 else None


def _static(t: torch.Tensor) -> bool:
    return all(type(d) is int for d in (*t.shape, *t.stride(), t.storage_offset()))


def _metadata(t: torch.Tensor) -> tuple:
    return (
        tuple(t.shape), t.stride(), t.storage_offset(), t.dtype, t.device, t.requires_grad,
    )  # fmt: skip


def plain_containers(out: Any) -> Any:
    """FX keeps output lists and dicts as immutable_list/dict; the user's code returned plain
    ones. Tuples keep their class (namedtuples, torch.return_types' structseqs), which
    pytree rebuilds."""
    if isinstance(out, list):
        return [plain_containers(o) for o in out]
    if isinstance(out, dict):
        return {k: plain_containers(v) for k, v in out.items()}
    if type(out) is tuple:
        return tuple(plain_containers(o) for o in out)
    if isinstance(out, tuple):
        items = [plain_containers(o) for o in out]
        return type(out)(*items) if hasattr(type(out), "_fields") else type(out)(items)
    return out


def eager_leaves(
    computed: Iterator[Any], infos: Sequence[OutputInfo], args: Sequence[Any]
) -> list[Any]:
    """The output leaves as eager returns them: the compiled graph's values of the computed
    ones (`computed`, in order), the others recreated from the input (`args`) or earlier
    output they alias, and constants."""
    leaves: list[Any] = []
    for o in infos:
        if o.computed:
            leaves.append(next(computed))
        elif o.alias_of is not None:
            leaves.append(o.view_of(args[o.alias_of]))
        elif o.view_of_output is not None:
            j = o.view_of_output
            leaves[j] = holding_its_memory(leaves[j], infos[j])
            leaves.append(o.view_of(leaves[j]))
        else:
            leaves.append(o.value)
    return leaves


def holding_its_memory(t: torch.Tensor, out: OutputInfo) -> torch.Tensor:
    """`t` laid out as eager's output was (dense, from the start of its own memory), so the
    views of it that eager returned can be rebuilt from it; copied if it is not."""
    whole = t.untyped_storage().nbytes() == t.numel() * t.element_size()
    if whole and t.storage_offset() == 0 and tuple(t.stride()) == out.stride:
        return t
    return torch.empty_strided(out.size, out.stride, dtype=t.dtype, device=t.device).copy_(t)


def holds_its_memory(t: torch.Tensor) -> bool:
    """Dense, from the start of its storage to its end: every view of that storage can be
    rebuilt from it with as_strided."""
    dense = tuple(t.stride()) == tangent_stride(t)
    whole = t.untyped_storage().nbytes() == t.numel() * t.element_size()
    return dense and whole and t.storage_offset() == 0


def tangent_stride(t: torch.Tensor) -> tuple[int, ...]:
    """The output's own strides when they are dense (channels-last stays channels-last, as
    eager's incoming gradients usually are), contiguous otherwise."""
    dims = sorted((st, s) for s, st in zip(t.shape, t.stride()) if s != 1)
    expected = 1
    for st, s in dims:
        if st != expected:
            return _contiguous_stride(tuple(t.shape))
        expected *= s
    return tuple(t.stride())


def _contiguous_stride(size: tuple[int, ...]) -> tuple[int, ...]:
    """torch.empty(size).stride(), computed without a tensor: describe_outputs runs inside
    make_fx's trace, which would record a factory call as a graph node."""
    stride, step = [], 1
    for s in reversed(size):
        stride.append(step)
        step *= max(s, 1)
    return tuple(reversed(stride))


def returning_as_eager(
    call: Callable[[list], Sequence[Any]], outputs: Outputs | None, spec: TreeSpec
) -> Callable[..., Any]:
    """`fn(*args)` returning the user graph's output, from `call(list(args))`, which returns
    the flat leaves (structure `spec`) of a functional graph computing every output. With
    `outputs` (that graph's description), eager's structure and the aliases it describes;
    without, or if it does not match `spec`, `spec` as it is."""
    if outputs is None or outputs.spec.num_leaves != spec.num_leaves:
        unflatten = unflattener(spec)
        return lambda *args: unflatten(list(call(list(args))))
    unflatten = unflattener(outputs.spec)
    if not outputs.aliased:
        return lambda *args: unflatten(list(call(list(args))))
    infos = outputs.leaves
    computed = [k for k, o in enumerate(infos) if o.computed]
    checked = False

    def run(*args: Any) -> Any:
        nonlocal checked
        flat = call(list(args))
        leaves = eager_leaves((flat[k] for k in computed), infos, args)
        if not checked:
            _check_recreated(leaves, flat, infos)
            checked = True
        return unflatten(leaves)

    return run


class AliasMismatch(RuntimeError):
    """An output recreated as a view holds other values than the graph computed for it."""


def _check_recreated(leaves: list, flat: Sequence[Any], infos: Sequence[OutputInfo]) -> None:
    """At the first call: each recreated view holds the values the graph computed for it.
    A description that did not match the real tensors would return wrong values silently;
    raised here, the caller runs the graph eagerly instead (compile_fx's first-call check)."""
    for leaf, value, o in zip(leaves, flat, infos):
        if o.tensor and not o.computed and not _same_values(leaf, value):
            raise AliasMismatch(
                "an output recreated as a view of an input or another output differs from "
                "the value the graph computed"
            )


def _same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
        return False
    if a.is_floating_point() or a.is_complex():
        return torch.allclose(a, b, rtol=0, atol=0, equal_nan=True)
    return torch.equal(a, b)
