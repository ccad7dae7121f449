"""The alias check of graphs that write to their inputs (compiler/runtime/aliasing.py): the
extension's AliasGuard gives the Python check's answers, on aliased and distinct inputs."""

from __future__ import annotations

import random

import pytest
import torch
from torch import nn

from compiler.runtime import aliasing


def cases():
    """Inputs that share storages in many ways: the same tensor, views, empty tensors,
    numbers; with random positions written."""
    rng = random.Random(0)
    for _ in range(300):
        bases = [torch.randn(8) for _ in range(3)]
        args = []
        for _ in range(5):
            r, b = rng.random(), rng.choice(bases)
            if r < 0.25:
                args.append(b)
            elif r < 0.5:
                args.append(b[rng.randint(0, 7) :])
            elif r < 0.6:
                args.append(b.view(2, 4).t())
            elif r < 0.8:
                args.append(torch.randn(2))
            elif r < 0.9:
                args.append(torch.empty(0))
            else:
                args.append(7)
        yield args, tuple(sorted(rng.sample(range(5), rng.randint(1, 3))))


def test_alias_guard_answers_as_python(extension):
    for args, mutated in cases():
        expected = not aliasing.shares_memory(args, mutated)
        assert extension.AliasGuard(mutated)(*args) is expected, (args, mutated)


def test_alias_guard_remembers_safe_addresses_and_rechecks_new_ones(extension):
    x, y = torch.randn(4, 4), torch.randn(4)
    check = extension.AliasGuard((0,))
    assert check(x, y) is True
    assert check(x, y) is True  # the same addresses
    assert check(x, x[0]) is False  # x's address again, y's changed: checked again
    assert check(nn.Parameter(x), x) is False
    assert check(x, y.clone()) is True


def test_alias_guard_leaves_subclasses_to_python(extension):
    sub = torch.randn(3).as_subclass(type("Sub", (torch.Tensor,), {}))
    assert extension.AliasGuard((0,))(sub, torch.randn(3)) is None


@pytest.mark.parametrize("with_extension", [True, False])
def test_alias_safe_runs_aliased_calls_eagerly(monkeypatch, extension, with_extension):
    from compiler.runtime import cpp_ext

    monkeypatch.setattr(
        cpp_ext, "alias_guard_class", lambda: extension.AliasGuard if with_extension else None
    )
    calls = []
    run = aliasing.alias_safe(
        lambda *a: calls.append("compiled"), lambda *a: calls.append("eager"), [0], None
    )
    x = torch.randn(4)
    run(x, torch.randn(4))
    run(x, x[1:])
    run(x, torch.randn(4))
    assert calls == ["compiled", "eager", "compiled"]


# ---- inputs whose elements share memory ----------------------------------------------------


def test_overlaps_itself_answers_as_torch_where_torch_can_tell():
    rng = random.Random(1)
    for _ in range(300):
        base = torch.randn(4, 5, 6)
        t = base.expand(rng.choice([1, 3]), 4, 5, 6) if rng.random() < 0.3 else base
        dims = list(range(t.dim()))
        rng.shuffle(dims)
        t = t.permute(dims)
        if rng.random() < 0.5:
            t = t[tuple(slice(None, None, rng.choice([1, 2])) for _ in range(t.dim()))]
        answer = torch._debug_has_internal_overlap(t)
        if answer != 2:  # 2: torch cannot tell
            assert aliasing.overlaps_itself(t) == bool(answer), (t.shape, t.stride())


def _writes_one_row_of_an_expanded_input(a, w):
    before = torch.nn.functional.gelu(a)
    a[0].fill_(0.5)
    return before, torch.nn.functional.linear(a, w), a


@pytest.mark.parametrize("backend", ["inductor", "aot_eager"])
def test_a_written_input_that_overlaps_itself_runs_as_eager(backend):
    """A fused kernel read an element of the expanded input after writing the same memory
    through another element (a silent wrong result); aot_eager's write-back raised an
    internal overlap error that eager does not raise."""
    import compiler

    compiler.reset()
    compiled = compiler.compile(_writes_one_row_of_an_expanded_input, backend=backend)

    def fresh():
        g = torch.Generator().manual_seed(3)
        return torch.randn(1, 3, 7, generator=g).expand(8, 3, 7), torch.randn(4, 7, generator=g)

    for _ in range(2):
        expected, got = _writes_one_row_of_an_expanded_input(*fresh()), compiled(*fresh())
        for e, o in zip(expected, got):
            torch.testing.assert_close(o, e)
    notes = compiler.inspect(compiled).graphs[0].notes
    assert aliasing.OVERLAP_NOTE in notes
