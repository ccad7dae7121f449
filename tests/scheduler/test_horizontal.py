"""Horizontal fusion's choice of kernels (compiler/scheduler/horizontal.py): which launches
join one combined kernel, where it runs, and the caps. Kernels here are bare KernelGroups
(their buffers alone matter); tests/codegen/test_triton_combo.py runs real ones."""

from __future__ import annotations

import pytest
import torch

from compiler.ir.index import make_vars
from compiler.ir.nodes import Layout
from compiler.scheduler import horizontal
from compiler.scheduler.kernel import ExternCall, KernelGroup


def kernel(name: str, reads=(), writes=(), kind: str = "pointwise", numel: int = 8):
    return KernelGroup(
        name, kind, make_vars("x", (numel,)), (), (), tuple(reads), tuple(writes), (name,), ()
    )


class _Layouts(dict):
    """Every buffer a small float32 vector unless set."""

    def __missing__(self, name: str) -> Layout:
        return Layout.contiguous((8,), torch.float32, torch.device("cpu"))


def combine(launches, layouts=None, inputs=()):
    return horizontal.combine(launches, layouts or _Layouts(), set(inputs))


def shape(launches) -> list:
    """Each launch's name, a combo's as the list of its parts' names."""
    return [[p.name for p in k.parts] if getattr(k, "parts", ()) else k.name for k in launches]


def test_independent_kernels_join_one():
    ks = [kernel(f"k{i}", [f"a{i}", "lr"], [f"p{i}"]) for i in range(4)]
    (combo,) = combine(ks)
    assert combo.kind == "combo" and combo.name == "triton_combo_0"
    assert shape([combo]) == [["k0", "k1", "k2", "k3"]]
    assert combo.reads == ("a0", "lr", "a1", "a2", "a3")  # a shared buffer once
    assert combo.writes == ("p0", "p1", "p2", "p3")
    assert combo.origins == ("k0", "k1", "k2", "k3")


@pytest.mark.parametrize(
    "second",
    [
        kernel("k1", ["p0"], ["q"]),  # reads what k0 writes
        kernel("k1", ["b"], ["a"]),  # writes what k0 reads
        kernel("k1", ["b"], ["p0"]),  # writes what k0 writes
    ],
    ids=["read-after-write", "write-after-read", "write-after-write"],
)
def test_dependent_kernels_stay_apart(second):
    first = kernel("k0", ["a"], ["p0"])
    third = kernel("k2", ["c"], ["r"])
    # k1 stays apart (after k0); the independent k2 joins k0
    assert shape(combine([first, second, third])) == [["k0", "k2"], "k1"]


def test_step_counts_and_updates_interleaved_make_two_combined_kernels():
    """An optimizer's loop: count the step of parameter i, then update it (reading the
    count): the counts join one combined kernel, the updates the next."""
    ks = []
    for i in range(6):
        ks.append(kernel(f"count{i}", [f"step{i}"], [f"step{i}"], numel=1))
        ks.append(kernel(f"update{i}", [f"p{i}", f"g{i}", f"step{i}", "lr"], [f"p{i}"]))
    assert shape(combine(ks)) == [
        [f"count{i}" for i in range(6)],
        [f"update{i}" for i in range(6)],
    ]


def test_a_large_new_buffer_is_not_allocated_earlier():
    big = Layout.contiguous((1 << 19,), torch.float32, torch.device("cpu"))  # 2 MiB
    layouts = _Layouts(out=big)
    ks = [
        kernel("k0", ["a"], ["p0"]),
        kernel("k1", ["p0"], ["p1"]),  # depends on k0: a second combined kernel
        kernel("k2", ["b"], ["out"]),  # independent of both, but allocates 2 MiB
    ]
    assert shape(combine(ks, layouts)) == ["k0", ["k1", "k2"]]
    # written in place into a graph input, it allocates nothing: it joins the first
    assert shape(combine(ks, layouts, inputs=["out"])) == [["k0", "k2"], "k1"]
    # nor across a reduction launched since the combined kernel's place
    red = kernel("red", ["c"], ["s"], kind="reduction")
    assert shape(combine([ks[0], red, ks[2]], layouts)) == ["k0", "red", "k2"]
    assert shape(combine([ks[0], ks[2]], layouts)) == [["k0", "k2"]]


def test_kernel_joins_across_an_independent_reduction_only():
    red = kernel("red", ["a0"], ["s"], kind="reduction")
    ks = [kernel("k0", ["a0"], ["p0"]), red, kernel("k1", ["a1"], ["p1"])]
    # the combined kernel runs where k0 ran, before the reduction
    assert shape(combine(ks)) == [["k0", "k1"], "red"]
    after = kernel("k1", ["s"], ["p1"])  # needs the reduction's result: stays after it
    assert shape(combine([ks[0], red, after])) == ["k0", "red", "k1"]
    before = kernel("k1", ["a1"], ["s"])  # would overwrite what the reduction writes
    assert shape(combine([ks[0], red, before])) == ["k0", "red", "k1"]
    # the reduction reads what k1 writes (k1 must run after it)
    late = kernel("k1", ["a1"], ["a0"])
    assert shape(combine([ks[0], red, late])) == ["k0", "red", "k1"]


def test_nothing_moves_across_an_extern_call():
    # its result may be a view of any buffer under another name: the kernels keep their side
    ks = [kernel("k0", ["a0"], ["p0"]), kernel("k1", ["a1"], ["p1"])]
    assert shape(combine([ks[0], _Extern(), ks[1]])) == ["k0", "extern", "k1"]


class _Extern(ExternCall):
    """An extern call that reads and writes nothing the kernels touch."""

    def __init__(self):
        pass

    @property
    def name(self) -> str:
        return "extern"

    @property
    def writes(self) -> tuple[str, ...]:
        return ("e",)


def test_reductions_and_empty_kernels_are_left_alone():
    ks = [
        kernel("r0", ["a"], ["s0"], kind="reduction"),
        kernel("r1", ["b"], ["s1"], kind="reduction"),
        kernel("e0", ["c"], ["p0"], numel=0),
        kernel("e1", ["d"], ["p1"], numel=0),
    ]
    assert shape(combine(ks)) == ["r0", "r1", "e0", "e1"]


def test_caps_on_parts_and_arguments(monkeypatch):
    ks = [kernel(f"k{i}", [f"a{i}", "lr"], [f"p{i}"]) for i in range(7)]
    monkeypatch.setattr(horizontal, "MAX_PARTS", 3)
    assert shape(combine(ks)) == [["k0", "k1", "k2"], ["k3", "k4", "k5"], "k6"]
    monkeypatch.setattr(horizontal, "MAX_PARTS", 64)
    monkeypatch.setattr(horizontal, "MAX_ARGS", 7)  # lr + 2 per kernel: 3 kernels fit
    combos = combine(ks)
    assert shape(combos) == [["k0", "k1", "k2"], ["k3", "k4", "k5"], "k6"]
    assert [c.name for c in combos[:2]] == ["triton_combo_0", "triton_combo_1"]
    assert all(len(set(c.reads) | set(c.writes)) <= 7 for c in combos)
    assert [p.outer_numel for p in combos[0].parts] == [8, 8, 8]  # each part kept whole
