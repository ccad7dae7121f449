"""Values made at run time are not guarded as constants. A `.item()` result handed on by its
graph break was guarded by its exact value (`L['__stack0'] == 1.856...`), and a numpy array
made inside the function by its identity, so every call recompiled: 8 recompiles, then
eager for good. Now a float that changed between calls is a symbolic input of the graph (a
0-d tensor for the code generator), an array is guarded by its type, and a function called
20 times with new values compiles each of its graphs at most twice, right every time."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import compiler

BACKENDS = ["eager", "aot_eager", "inductor"]


def _item_scale(x):
    s = x.sum().item()
    return x * s + 1


def _numpy_and_item(x):
    a = np.arange(3.0) * x.shape[0]
    s = x.mean().item()
    w = np.linspace(0, 1, 4)[1] * s  # a numpy float64 made from the item
    return x * float(a.sum()) - s * x + w, torch.relu(x) / (2.0 * s - 1.0)


def _item_on_integer_tensor(x, n):
    s = n.float().mean().item()
    return n * s, x**s  # an int tensor with a float: computed in the default dtype


def _item_sizes_a_tensor(x):
    n = int(x.abs().sum().item()) % 3 + 2
    return torch.ones(n) * 2, x + n


def _branch_on_item(x):
    s = x.sum().item()
    if s > 0:
        return x * s
    return x - s


# (function, arguments of call i, recompiles allowed per entry point)
CASES = [
    (_item_scale, lambda i: [torch.randn(4) * (i + 1)], 1),
    (_numpy_and_item, lambda i: [torch.randn(5) + i], 1),
    (_item_on_integer_tensor, lambda i: [torch.rand(3) + 0.5, torch.arange(4) + i], 1),
    (_item_sizes_a_tensor, lambda i: [torch.randn(4) * (i + 1)], 1),
    # the symbolic float's graph is guarded by `s > 0`: the other branch is one more graph
    (_branch_on_item, lambda i: [torch.randn(4) + (i % 2) * 10 - 5], 2),
]


def _recompiles_per_line(fn) -> dict[int, int]:
    """Recompiles of each entry point, by its line (an entry point compiled once and again
    once has one; a line may hold two entry points, before and after a break)."""
    counts: dict[int, int] = {}
    for entry in compiler.inspect(fn).entries:
        counts.setdefault(entry.start_line, 0)
        if entry.recompile_reason is not None:
            counts[entry.start_line] += 1
    return counts


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn,make,recompiles", CASES, ids=[c[0].__name__ for c in CASES])
def test_twenty_new_values_compile_at_most_twice(fn, make, recompiles, backend):
    compiled = compiler.compile(fn, backend=backend)
    for i in range(20):
        args = make(i)
        expected, actual = fn(*args), compiled(*args)
        torch.testing.assert_close(actual, expected)
        for e, a in zip(expected, actual) if isinstance(expected, tuple) else ():
            assert a.dtype == e.dtype
    counts = _recompiles_per_line(compiled)
    assert max(counts.values()) <= recompiles, counts
    assert not [w for f in compiler.inspect(compiled).functions for w in f.warnings]


def test_record_says_why_the_float_is_an_input():
    compiled = compiler.compile(_item_scale, backend="eager")
    for i in range(3):
        compiled(torch.randn(4) + i)
    record = compiler.inspect(compiled)
    texts = [c.detail for c in record.controls if c.kind == "dynamic"]
    assert any("changed from" in t for t in texts), texts
    last = record.entries[-1]
    assert not any("__stack0'] ==" in g.expr for g in last.guards), last.guard_source


def test_inductor_generates_code_once_for_a_new_float():
    compiled = compiler.compile(_item_scale)
    for i in range(6):
        x = torch.randn(4) + i
        torch.testing.assert_close(compiled(x), _item_scale(x))
    notes = [n for g in compiler.inspect(compiled).graphs for n in g.notes]
    assert any("float inputs are 0-d tensors" in n for n in notes), notes
    assert not any("specialised per size" in n for n in notes), notes


def test_a_numpy_array_from_the_frame_is_read_by_type_only():
    """An array handed on by a break: not identity-guarded, never folded into the graph."""

    def f(x):
        a = np.arange(4.0) + x.shape[0]  # np.arange breaks; `a` is a new array every call
        return x * a.size, a

    compiled = compiler.compile(f, backend="eager")
    for _ in range(5):
        x = torch.randn(3)
        (e, ea), (c, ca) = f(x), compiled(x)
        torch.testing.assert_close(c, e)
        np.testing.assert_array_equal(ca, ea)
    assert max(_recompiles_per_line(compiled).values()) == 0


@pytest.mark.gpu
def test_float_input_on_cuda_is_a_cuda_scalar():
    """The 0-d tensor goes on the graph's device: a Triton kernel cannot read a host one."""
    compiled = compiler.compile(_item_scale)
    for i in range(4):
        x = torch.randn(1000, device="cuda") + i
        torch.testing.assert_close(compiled(x), _item_scale(x))
    assert max(_recompiles_per_line(compiled).values()) <= 1
