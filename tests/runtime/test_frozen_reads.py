"""FrozenReads on its own (compiler/runtime/frozen_reads.h): after `remember`, a call answers
the remembered values until a dict or class a read went through changes, then None; reads
it cannot pin are refused. Through the guard functions: tests/tracer/test_frozen_reads.py."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from torch import nn

# slots: 0 the root Sequential; 1 its _modules; 2 _modules['0'] (a Conv2d); 3 conv.stride;
# 4 conv._parameters; 5 _parameters['weight']
READS = (
    (0, True, "_modules"),
    (1, False, "0"),
    (2, True, "stride"),
    (2, True, "_parameters"),
    (4, False, "weight"),
)


@pytest.fixture
def setup(extension):
    if not extension.DICT_VERSIONS:
        pytest.skip("this Python has no dict version tags")
    conv = nn.Conv2d(3, 4, 3)
    seq = nn.Sequential(conv)
    frozen = extension.FrozenReads(1, READS, ((2, nn.Conv2d),), (2, 5))
    values = lambda: [seq, seq._modules, conv, conv.stride, conv._parameters, conv.weight]  # noqa: E731
    assert frozen() is None  # nothing remembered yet
    assert frozen.remember(*values()) is True
    answer = frozen()
    assert answer[0] is conv and answer[1] is conv.weight
    return frozen, seq, conv, values


class _Conv(nn.Conv2d):
    pass


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda seq, conv: setattr(conv, "stride", (2, 2)), id="attribute"),
        pytest.param(lambda seq, conv: conv.eval(), id="training"),
        pytest.param(
            lambda seq, conv: setattr(conv, "weight", nn.Parameter(torch.randn(4, 3, 3, 3))),
            id="parameter",
        ),
        pytest.param(lambda seq, conv: seq.append(nn.ReLU()), id="child added"),
        pytest.param(lambda seq, conv: setattr(conv, "__class__", _Conv), id="__class__"),
        pytest.param(lambda seq, conv: setattr(conv, "__dict__", dict(vars(conv))), id="__dict__"),
        pytest.param(lambda seq, conv: setattr(nn.Conv2d, "stride", 5), id="class attribute"),
        pytest.param(lambda seq, conv: setattr(nn.Module, "stride", 5), id="base class"),
    ],
)
def test_a_change_means_none(setup, change):
    frozen, seq, conv, values = setup
    try:
        change(seq, conv)
        assert frozen() is None
        assert frozen() is None  # forgotten, not answered again
    finally:
        for cls in (nn.Conv2d, nn.Module):
            if "stride" in vars(cls):
                delattr(cls, "stride")


def test_in_place_tensor_changes_are_not_its_business(setup):
    frozen, seq, conv, values = setup
    with torch.no_grad():
        conv.weight.mul_(2)  # the guard's tensor checks look at tensors, on every call
    assert frozen() is not None


def test_reads_it_cannot_pin_are_refused(extension):
    if not extension.DICT_VERSIONS:
        pytest.skip("this Python has no dict version tags")

    class WithProperty(nn.Module):
        @property
        def p(self):
            return 1

    m = WithProperty()
    assert extension.FrozenReads(1, ((0, True, "p"),), (), (1,)).remember(m, 1) is False
    lst = [1, 2]
    assert extension.FrozenReads(1, ((0, False, 0),), (), (1,)).remember(lst, 1) is False
    # a value other than what the read gives
    d = {"a": 1}
    assert extension.FrozenReads(1, ((0, False, "a"),), (), (1,)).remember(d, 2) is False


def test_it_lets_go_of_what_it_held(extension):
    if not extension.DICT_VERSIONS:
        pytest.skip("this Python has no dict version tags")
    conv = nn.Conv2d(3, 4, 3)
    ref = weakref.ref(conv)
    frozen = extension.FrozenReads(1, ((0, True, "_parameters"),), (), (1,))
    assert frozen.remember(conv, conv._parameters)
    cycle = [frozen]
    conv.frozen = cycle  # a cycle through the extension's object: the collector breaks it
    del conv, frozen, cycle
    gc.collect()
    assert ref() is None


def test_misuse_raises(extension):
    with pytest.raises(ValueError, match="out of range"):
        extension.FrozenReads(1, ((1, True, "a"),), (), ())  # a read from itself
    frozen = extension.FrozenReads(1, ((0, True, "a"),), (), ())
    with pytest.raises(TypeError, match="takes 2 values"):
        frozen.remember(1)
    with pytest.raises(TypeError):
        frozen(1)


def test_remembering_backs_off_while_every_state_changes_before_use(setup):
    frozen, seq, conv, values = setup

    def change():
        conv.stride = (conv.stride[0] + 1, 1)
        assert frozen() is None

    for _ in range(3):  # remembered, and changed again before any call used it
        change()
        assert frozen.remember(*values()) is True
    change()
    assert [frozen.remember(*values()) for _ in range(3)] == [False, False, True]
    assert frozen() is not None  # used: remembered on every full call again
    change()
    assert frozen.remember(*values()) is True
