"""Horizontal fusion: independent pointwise kernels become one combined ("combo") kernel.

An optimizer step updates every parameter in a kernel of its own: the parameters differ in
size, so vertical fusion (fusion.py) cannot join their updates, and nothing flows from one
update to another. On a GPU each of those launches costs a few microseconds of host and
launch latency while the small ones run for less: GPT-2-small's AdamW step was 72 launches
of 1.0 ms in all where one combined kernel runs in 0.25 ms. The same holds for zero_grad's
fills, foreach ops and gradient scaling. So launches that are

- pointwise kernels (a reduction's rows would need their own block shape),
- independent of each other: none reads or writes what another writes, nor writes what
  another reads (the parts of one launch run in no defined order), and
- adjacent in the schedule up to other kernels they are independent of (a reduction
  between two updates does not stop them joining; nothing moves across an extern call,
  whose result may alias its arguments under another name),

join one `KernelGroup(kind="combo")` launched where its first part was. The emitter
(compiler/codegen/combo.py) gives each part a range of program ids, one per block of its
elements, so one launch covers all of them with each part's own sizes and pointers.

Caps, as TorchInductor caps its combo and foreach kernels: at most MAX_PARTS parts (every
part is code of its own in the kernel: more parts, longer compiles) and MAX_ARGS distinct
buffers (pointer parameters: Inductor found PTX errors past ~370 for its foreach kernels
and keeps combo kernels at 250). A longer run of independent kernels becomes several
combined kernels.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from compiler.scheduler.kernel import ExternCall, KernelGroup, Launch

MAX_PARTS = 64
MAX_ARGS = 250


@dataclass
class _Bucket:
    """Kernels that will launch as one, at position `at` of the new launch list."""

    at: int
    members: list[KernelGroup] = field(default_factory=list)
    args: set[str] = field(default_factory=set)  # distinct buffers of the members
    reads: set[str] = field(default_factory=set)  # of every launch since `at`
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


def combinable(launch: Launch) -> bool:
    return (
        isinstance(launch, KernelGroup)
        and launch.kind == "pointwise"
        and launch.outer_numel > 0  # launches nothing: the runtime skips it as it is
    )


def combine(launches: list[Launch]) -> list[Launch]:
    """`launches` with each run of independent pointwise kernels as one combo kernel (see
    the module's docstring); a kernel that joins none stays as it is."""
    out: list[Launch | None] = []
    bucket: _Bucket | None = None
    buckets: list[_Bucket] = []
    for launch in launches:
        if combinable(launch):
            assert isinstance(launch, KernelGroup)
            if bucket is None or not bucket.accepts(launch):
                bucket = _Bucket(len(out))
                buckets.append(bucket)
                out.append(None)  # the combined kernel's place
            bucket.add(launch)
            continue
        out.append(launch)
        if isinstance(launch, ExternCall):
            bucket = None
        elif bucket is not None:
            bucket.passed(launch)
    counter = 0  # combo kernels are numbered apart from the others (names stay unique)
    for b in buckets:
        if len(b.members) == 1:
            out[b.at] = b.members[0]
        else:
            out[b.at] = _combo(b.members, f"triton_combo_{counter}")
            counter += 1
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
