"""Horizontal fusion: independent pointwise kernels become one combined ("combo") kernel.

An optimizer step updates every parameter in a kernel of its own: the parameters differ in
size, so vertical fusion (fusion.py) cannot join their updates, and nothing flows from one
update to another. On a GPU each of those launches costs a few microseconds of host and
launch latency while the small ones run for less: GPT-2-small's AdamW step was 72 launches
of 1.0 ms in all on the H200, where torch.compile's one combined kernel ran in 0.25 ms. The same holds for zero_grad's
fills, foreach ops and gradient scaling. So launches that are

- pointwise kernels (a reduction's rows would need their own block shape) that stream:
  every load and store is element `i` of its buffer at the kernel's flat index `i` (or one
  element for all: a learning rate), with no mask. A part that computes its addresses from
  its coordinates (padding's masked loads, a transposed read) is left alone: on the H200,
  Triton 3.6 compiled a combined kernel of 32 constant_pad_nd parts (int32; div/mod
  coordinates, masked loads) into one whose part 16 stored 25 of 375 wrong elements under
  4 or 8 warps, while the same part ran right alone at every block size and warp count and
  the interpreter ran the whole kernel right (benchmarks/combo_probe/ reproduces it).
  Optimizer steps, fills and gradient scaling, what combining is for, stream,
- independent of each other: none reads or writes what another writes, nor writes what
  another reads (the parts of one launch run in no defined order), and
- adjacent in the schedule up to other kernels they are independent of (a reduction
  between two updates does not stop them joining; nothing moves across an extern call,
  whose result may alias its arguments under another name),

join one `KernelGroup(kind="combo")` launched where its first part was (`combine` says
which one a kernel joins where several could take it). The emitter
(compiler/codegen/combo.py) gives each part a range of program ids, one per block of its
elements, so one launch covers all of them with each part's own sizes and pointers.

Caps, as TorchInductor caps its combo and foreach kernels: at most MAX_PARTS parts and
MAX_ARGS distinct buffers (pointer parameters: Inductor found PTX errors past ~370 for its
foreach kernels and keeps combo kernels at 250). Parts of one kind (the same code up to
buffers and sizes) share one body in the emitted kernel, so Triton's compile time grows with
a combined kernel's kinds, not its parts; but each of a kind's programs picks its part's
pointers with one scalar select per part, which MAX_PARTS keeps short: a GPT-2 step's 148
updates make 5 combined kernels, which compile side by side in the compile workers. A
longer run of independent kernels becomes several combined kernels.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from compiler.ir.index import contiguous_strides, flat_index
from compiler.ir.nodes import IndexValue, Layout, Load, address, iter_values
from compiler.scheduler.kernel import ExternCall, KernelGroup, Launch

MAX_PARTS = 32
MAX_ARGS = 250
MOVE_MAX_BYTES = 1 << 20  # new buffers this large are not allocated earlier than they were


@dataclass
class _Bucket:
    """Kernels that will launch as one, at position `at` of the new launch list."""

    at: int
    members: list[KernelGroup] = field(default_factory=list)
    args: set[str] = field(default_factory=set)  # distinct buffers of the members
    # buffers of every launch placed after `at` so far that came before in the schedule:
    # a kernel joining must not depend on them, nor they on it
    reads: set[str] = field(default_factory=set)
    writes: set[str] = field(default_factory=set)

    def passed(self, launch: KernelGroup) -> None:
        """`launch` runs after the combined kernel: what joins later must not depend on it."""
        self.reads.update(launch.reads)
        self.writes.update(launch.writes)

    def accepts(self, k: KernelGroup) -> bool:
        """`k` may run at `at`, in one launch with the members, unordered among them."""
        if len(self.members) >= MAX_PARTS:
            return False
        if len(self.args | set(k.reads) | set(k.writes)) > MAX_ARGS:
            return False
        return not (
            self.writes & set(k.reads) or self.writes & set(k.writes) or self.reads & set(k.writes)
        )

    def add(self, k: KernelGroup) -> None:
        self.members.append(k)
        self.args.update(k.reads, k.writes)
        self.passed(k)


def combinable(launch: Launch, layouts: dict[str, Layout]) -> bool:
    return (
        isinstance(launch, KernelGroup)
        and launch.kind == "pointwise"
        and launch.outer_numel > 0  # launches nothing: the runtime skips it as it is
        and streams(launch, layouts)
    )


def streams(k: KernelGroup, layouts: dict[str, Layout]) -> bool:
    """Every load and store of `k` is at its flat index in its buffer or at one fixed
    element, unmasked, and no index is used as a number (see the module's docstring)."""
    flat = flat_index(k.outer, contiguous_strides(tuple(v.size for v in k.outer)))
    for step in k.steps:
        for v in iter_values(step.value):
            if isinstance(v, IndexValue) and not (v.index == flat or v.index.is_constant):
                return False
            if isinstance(v, Load):
                static, dynamic = address(layouts[v.buf], v.indices)
                if v.mask is not None or dynamic or not (static == flat or static.is_constant):
                    return False
        if step.store is not None and address(layouts[step.name], step.store)[0] != flat:
            return False
    return True


def combine(launches: list[Launch], layouts: dict[str, Layout], inputs: set[str]) -> list[Launch]:
    """`launches` with independent pointwise kernels joined into combo kernels (see the
    module's docstring); a kernel that joins none stays as it is.

    A kernel joins the earliest open combined kernel it may run in: an optimizer's step
    counts, each updated just before its parameter's update, then all join one combined
    kernel and the updates (which read them) the next, where joining only the latest would
    cut a combined kernel at every count. A kernel that allocates a large new buffer
    (MOVE_MAX_BYTES) joins only a combined kernel launched right before it, so that no large
    buffer is allocated earlier than it was (its memory then held longer)."""
    out: list[Launch | None] = []
    buckets: list[_Bucket] = []  # the open ones: since the last extern call
    counter = 0  # combo kernels are numbered apart from the others (names stay unique)

    def close_all() -> None:
        nonlocal counter
        for b in buckets:
            if len(b.members) == 1:
                out[b.at] = b.members[0]
            else:
                out[b.at] = _combo(b.members, f"triton_combo_{counter}")
                counter += 1
        buckets.clear()

    for launch in launches:
        if not combinable(launch, layouts):
            out.append(launch)
            if isinstance(launch, ExternCall):
                close_all()
            else:
                for b in buckets:
                    b.passed(launch)
            continue
        assert isinstance(launch, KernelGroup)
        new = sum(
            layouts[n].storage_size() * layouts[n].dtype.itemsize
            for n in launch.writes
            if n not in inputs
        )
        # a large new buffer: only with kernels launched right before it
        last = [b for b in buckets[-1:] if b.at == len(out) - 1]
        candidates = buckets if new < MOVE_MAX_BYTES else last
        target = next((b for b in candidates if b.accepts(launch)), None)
        if target is None:
            target = _Bucket(len(out))
            buckets.append(target)
            out.append(None)  # the combined kernel's place
        target.add(launch)
        for b in buckets:  # it now runs after every earlier bucket's place
            if b.at < target.at:
                b.passed(launch)
    close_all()
    return [launch for launch in out if launch is not None]


def _combo(parts: list[KernelGroup], name: str) -> KernelGroup:
    return KernelGroup(
        name,
        "combo",
        (),
        (),
        (),
        tuple(dict.fromkeys(b for p in parts for b in p.reads)),
        tuple(dict.fromkeys(b for p in parts for b in p.writes)),
        tuple(dict.fromkeys(o for p in parts for o in p.origins)),
        tuple(n for p in parts for n in p.ir_nodes),
        (f"{len(parts)} independent pointwise kernels launched as one",),
        tuple(parts),
    )
