"""In-place writes of mutated graph inputs: the scheduler's last pass.

The aot stage functionalizes an in-place update of a graph input `x` into a new value `v`
computed somewhere in the graph and a final `aten.copy_(x, v)`, which the lowering keeps as an
extern call: the kernel computing `v` stores it into a buffer of its own, and the copy reads
it back and writes it into `x`. An optimizer step updates every parameter and its state this
way, so each of those tensors would be written twice and read once more.

Here the kernel computing `v` stores it straight into `x` instead, and the copy goes, when
that gives eager's answer: nothing that runs between that kernel and the copy reads `x`
(it must still see the old value), and inside the kernel every read of `x` is at the point
being stored. Such stores are appended as the kernel's last steps, after every value of the
point is computed, so reads of `x` by other steps of the same kernel still see the old
value, whatever order the updates were written in (Adam's new parameter reads the old
exp_avg, and with weight decay the new exp_avg reads the old parameter). Later kernels that
read the new value read it from the input too (an optimizer's step counts: updated by one
small kernel, read by every parameter's).

A reduction kernel takes part for a value computed outside its loops (a training batch
norm's new running statistics, computed in the kernel that reduces the batch's). Its
emitters run steps in order, except that a looped Triton kernel computes each outer step
right after the last loop it needs: so the only steps that may read `x` there are those the
stored value needs (computed before it) and outer steps that need no loop (computed before
every loop).
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from torch.utils._pytree import tree_flatten

from compiler.ir.nodes import Graph, Layout, Load, Ref, TensorArg, Value, iter_values, loads
from compiler.ir.transform import rewrite
from compiler.scheduler.kernel import ExternCall, KernelGroup, Launch, Step

_COPY = "aten.copy_.default"


def write_in_place(launches: list[Launch], graph: Graph) -> list[Launch]:
    """`launches` with each copy into a graph input folded into the kernel that computes the
    copied value, where that is safe (see the module docstring)."""
    inputs = {b.name: b.layout for b in graph.inputs}
    copies = [c for c in launches if isinstance(c, ExternCall) and c.node.op == _COPY]
    targets = [_target(c, inputs) for c in copies]
    writes_to = Counter(t for t in targets if t is not None)
    # An optimizer step has a copy per parameter and state tensor, each checked against every
    # launch: the layouts and the launches reading each buffer are computed once, not per
    # copy. Positions stay put while the pass runs (a folded copy leaves a None behind).
    layouts = graph.buffer_layouts()
    out: list[Launch | None] = list(launches)
    position = {id(launch): j for j, launch in enumerate(out)}
    readers = _Readers(out)
    for copy, target in zip(copies, targets):
        if target is None or writes_to[target] != 1:
            continue
        _, src = copy.node.args[:2]
        at = position[id(copy)]
        producer = _producer(out, at, src.buf)
        if producer is None:
            continue
        k, group = producer
        step = _step(group, src, layouts)
        if step is None or not _safe(k, at, group, step, target, copy, graph, layouts, readers):
            continue
        if group.kind == "reduction" and not _ordered(group, step, target):
            continue
        needed = _read_elsewhere(k, at, src.buf, graph, readers)
        if needed and _can_redirect(out, k, at, src.buf, target, graph, layouts, readers):
            # later kernels read the input, which holds the value from kernel k on
            for j in sorted(readers.of(src.buf)):
                if j > k and out[j] is not copy:
                    out[j] = _reading(out[j], src.buf, target)
                    readers.move(j, src.buf, target)
            needed = False
        out[k] = _with_store(group, step, target, still_needed=needed)
        readers.drop(at, _reads(copy))
        out[at] = None
    return [launch for launch in out if launch is not None]


class _Readers:
    """The positions of the launches reading each buffer, kept up to date as the pass
    redirects reads and drops copies."""

    def __init__(self, launches: list[Launch | None]) -> None:
        self._at: dict[str, set[int]] = {}
        for j, launch in enumerate(launches):
            for buf in _reads(launch):
                self._at.setdefault(buf, set()).add(j)

    def of(self, buf: str) -> set[int]:
        return self._at.get(buf, set())

    def move(self, j: int, old: str, new: str) -> None:
        self._at[old].discard(j)
        self._at.setdefault(new, set()).add(j)

    def drop(self, j: int, bufs: set[str]) -> None:
        for buf in bufs:
            self._at[buf].discard(j)


def _target(copy: ExternCall, inputs: dict) -> str | None:
    """The graph input a copy writes, when it writes the whole input from a value of its
    own device (a kernel stores only into memory of its device: a transfer stays a copy)."""
    args = copy.node.args
    if len(args) < 2 or not isinstance(args[0], TensorArg) or not isinstance(args[1], TensorArg):
        return None
    dst, src = args[0], args[1]
    if dst.layout.device != src.layout.device:
        return None
    return dst.buf if inputs.get(dst.buf) == dst.layout else None


def _producer(launches: list[Launch | None], at: int, buf: str) -> tuple[int, KernelGroup] | None:
    """The last launch before `at` writing `buf`, when it is a kernel."""
    for k in range(at - 1, -1, -1):
        launch = launches[k]
        if launch is not None and buf in launch.writes:
            return (k, launch) if isinstance(launch, KernelGroup) else None
    return None


def _step(group: KernelGroup, src: TensorArg, layouts: dict[str, Layout]) -> Step | None:
    """The kernel's step storing the copied value, when the copy reads all of that buffer."""
    layout = layouts.get(src.buf)
    if layout is None or src.layout != layout:
        return None
    for s in group.steps:
        if s.name == src.buf and s.store is not None:
            return s
    return None


def _safe(
    k: int,
    at: int,
    group: KernelGroup,
    step: Step,
    target: str,
    copy: ExternCall,
    graph: Graph,
    layouts: dict[str, Layout],
    readers: _Readers,
) -> bool:
    if layouts[step.name].size != layouts[target].size:
        return False
    if layouts[step.name].dtype != layouts[target].dtype:
        return False
    if any(k < j < at for j in readers.of(target)):
        return False  # a later launch reads the old value
    if target in group.reads and any(
        ld.indices != step.store or ld.mask is not None
        for s in group.steps
        for ld in loads(s.value)
        if ld.buf == target
    ):
        return False  # read at another point of the same kernel: a race with the store
    (result,) = [name for name, _ in copy.node.outputs] or [None]
    if result is not None:
        if any(o.buf == result for o in graph.outputs if isinstance(o, TensorArg)):
            return False
        if any(j > at for j in readers.of(result)):
            return False
    return True


def _ordered(group: KernelGroup, step: Step, target: str) -> bool:
    """In a reduction kernel, whether every read of `target` comes before the store that
    ends the kernel in every emitter's order (see the module docstring)."""
    if step.loop != "outer":
        return False
    steps = {s.name: s for s in group.steps}
    memo: dict[str, set[str]] = {}

    def needs(name: str) -> set[str]:
        if name not in memo:
            memo[name] = {name}
            for v in iter_values(steps[name].value):
                if isinstance(v, Ref) and v.name in steps:
                    memo[name] |= needs(v.name)
        return memo[name]

    before = needs(step.name)
    for s in group.steps:
        if s.name in before or not any(ld.buf == target for ld in loads(s.value)):
            continue
        if s.loop != "outer" or any(steps[n].reduction_type for n in needs(s.name)):
            return False
    return True


def _reads(launch: Launch) -> set[str]:
    if isinstance(launch, KernelGroup):
        return set(launch.reads)
    node = launch.node
    flat, _ = tree_flatten((node.args, [v for _, v in node.kwargs]))
    return {a.buf for a in flat if isinstance(a, TensorArg)}


def _read_elsewhere(k: int, at: int, buf: str, graph: Graph, readers: _Readers) -> bool:
    """Whether `buf` is needed after the copy goes: an output, or read by another launch."""
    if any(o.buf == buf for o in graph.outputs if isinstance(o, TensorArg)):
        return True
    return any(j not in (k, at) for j in readers.of(buf))


def _can_redirect(
    launches: list[Launch | None],
    k: int,
    at: int,
    buf: str,
    target: str,
    graph: Graph,
    layouts: dict[str, Layout],
    readers: _Readers,
) -> bool:
    """Whether every other reader of `buf` may read `target` instead: kernels after `k` (the
    input is written there and nowhere else), with the same layout to index."""
    if layouts[buf] != layouts[target]:
        return False
    if any(o.buf == buf for o in graph.outputs if isinstance(o, TensorArg)):
        return False
    return all(
        isinstance(launches[j], KernelGroup) and j > k for j in readers.of(buf) if j not in (k, at)
    )


def _reading(launch: Launch, buf: str, target: str) -> Launch:
    """`launch` loading `target` wherever it loaded `buf`."""
    if not isinstance(launch, KernelGroup) or buf not in launch.reads:
        return launch

    def on_load(ld: Load, indices: tuple, mask: Value | None) -> Value:
        return Load(target if ld.buf == buf else ld.buf, indices, ld.dtype, mask)

    steps = tuple(
        dataclasses.replace(s, value=rewrite(s.value, on_load, lambda i: i)) for s in launch.steps
    )
    reads = tuple(dict.fromkeys(target if r == buf else r for r in launch.reads))
    return dataclasses.replace(launch, steps=steps, reads=reads)


def _with_store(group: KernelGroup, step: Step, target: str, still_needed: bool) -> KernelGroup:
    """`group` storing `step`'s value into `target` as its last step (and into its own
    buffer only if something else still reads that)."""
    steps = list(group.steps)
    if not still_needed:
        steps[steps.index(step)] = dataclasses.replace(step, store=None)
    steps.append(Step(target, step.loop, Ref(step.name, step.dtype), step.dtype, None, step.store))
    writes = tuple(w for w in group.writes if still_needed or w != step.name) + (target,)
    return dataclasses.replace(group, steps=tuple(steps), writes=writes)
