"""A call that finds a module's dicts and classes unchanged skips the checks of what it read
from them (compiler/tracer/frozen.py, `FrozenReads` in compiler/runtime/csrc/frozen_reads.h); every change
that eager would see still fails a guard: the function recompiles (or reruns the check in
full) and gives eager's answer. Each test runs with the C++ guards and all in Python."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import compiler
from compiler.runtime import cpp_ext

from .helpers import RecordingBackend, assert_same

pytestmark = pytest.mark.usefixtures("guard_path")

_ns: dict = {"K": 2.0}
exec("def scaled(x):\n    return x * K\n", _ns)  # a callee with globals of its own
SCALED = _ns["scaled"]


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.scale = 0.5
        self.offsets = [1.0, 2.0]  # a list: its items are no dict's entries
        self.act = nn.ReLU()

    def forward(self, x):
        y = self.act(self.lin(x)) * self.scale + self.offsets[0]
        return SCALED(y)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(Block(), Block())

    def forward(self, x):
        return self.body(x)


class Tanh(nn.Tanh):
    pass


def entries(compiled):
    return compiler.inspect(compiled).functions[0].entries


def check(eager, compiled, x):
    assert_same(eager(x), compiled(x))


def compiled_net():
    net = Net()
    compiled = compiler.compile(net, backend=RecordingBackend())
    x = torch.randn(2, 4)
    for _ in range(3):  # the second and third calls take the fast path with C++ guards
        check(net, compiled, x)
    assert len(entries(compiled)) == 1
    return net, compiled, x


def test_fast_path_is_in_the_guard_source(guard_path):
    _, compiled, _ = compiled_net()
    source = entries(compiled)[0].guard_source
    # the C++ guards' fast path, where this Python has dict version tags (3.11, 3.12)
    assert ("___cached = ___frozen0()" in source) == (cpp_ext.frozen_class() is not None)


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda net: setattr(net.body[0], "scale", 2.0), id="float attribute"),
        pytest.param(lambda net: net.body[1].eval(), id="training flag"),
        pytest.param(lambda net: setattr(net.body[1], "act", Tanh()), id="child module"),
        pytest.param(lambda net: net.body[0].offsets.__setitem__(0, 5.0), id="list item"),
        pytest.param(lambda net: net.body.append(Block()), id="sequential grows"),
        pytest.param(lambda net: _ns.__setitem__("K", 3.0), id="callee global"),
        pytest.param(lambda net: setattr(net.body[0], "__class__", _Block2), id="__class__"),
        pytest.param(
            lambda net: setattr(net.body[0], "__dict__", {**vars(net.body[0]), "scale": -1.0}),
            id="__dict__ replaced",
        ),
        pytest.param(
            lambda net: setattr(net.body[0].lin, "weight", nn.Parameter(torch.randn(4, 4))),
            id="parameter replaced",
        ),
        pytest.param(lambda net: net.body[0].lin.weight.requires_grad_(False), id="requires_grad"),
    ],
)
def test_a_change_is_seen_after_fast_calls(change):
    net, compiled, x = compiled_net()
    try:
        change(net)
        for _ in range(2):
            check(net, compiled, x)
    finally:
        _ns["K"] = 2.0


class _Block2(Block):
    def forward(self, x):
        return super().forward(x) * 3


def test_class_attribute_that_shadows_the_instance():
    net, compiled, x = compiled_net()
    # a data descriptor on the class wins over the instance's __dict__ in eager
    Block.scale = property(lambda self: 4.0)
    try:
        check(net, compiled, x)
        check(net, compiled, x)
        assert len(entries(compiled)) == 2
    finally:
        del Block.scale


def test_unchanged_module_called_many_times_keeps_one_entry():
    net, compiled, x = compiled_net()
    with torch.no_grad():  # new values in the same parameters: no guard reads them
        for p in net.parameters():
            p.mul_(-1)
    check(net, compiled, x)
    assert len(entries(compiled)) == 1


def test_a_failed_guard_after_fast_calls_gives_a_reason():
    net, compiled, x = compiled_net()
    net.body[0].scale = 3.0
    check(net, compiled, x)
    found = entries(compiled)
    assert len(found) == 2
    assert "scale" in found[1].recompile_reason
