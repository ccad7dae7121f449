"""hasattr() and getattr(obj, name, default) answer from the object at trace time; a guard
keeps that answer honest when the attribute appears or disappears later (found by helper
optimhost: `a.n = getattr(a, "n", 0) + 1` used to leave `a.n` at 1 on every call)."""

from __future__ import annotations

import torch

import compiler


class _Box:
    pass


def test_getattr_default_counts_up():
    def f(x, a):
        a.n = getattr(a, "n", 0) + 1
        return x + 1

    a, b = _Box(), _Box()
    compiled = compiler.compile(f)
    x = torch.randn(3)
    for _ in range(4):
        compiled(x, a)
        f(x, b)
    assert a.n == b.n == 4


def test_hasattr_branch_follows_the_object():
    def g(x, a):
        if hasattr(a, "m"):
            a.m += 1
            return x * 2
        a.m = 1
        return x * 3

    a = _Box()
    compiled = compiler.compile(g)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x, a), x * 3)
    torch.testing.assert_close(compiled(x, a), x * 2)
    assert a.m == 2
    del a.m
    torch.testing.assert_close(compiled(x, a), x * 3)
    assert a.m == 1


def test_module_attribute_set_later():
    class M(torch.nn.Module):
        def forward(self, x):
            return x + (self.bias_value if hasattr(self, "bias_value") else 0.0)

    m, x = M(), torch.randn(3)
    compiled = compiler.compile(m)
    torch.testing.assert_close(compiled(x), x)
    m.bias_value = 2.0
    torch.testing.assert_close(compiled(x), x + 2.0)


def test_attribute_on_a_tensor_input():
    def h(t):
        return t + (1 if hasattr(t, "tag") else 2)

    t = torch.randn(3)
    compiled = compiler.compile(h)
    torch.testing.assert_close(compiled(t), t + 2)
    t.tag = "set"
    torch.testing.assert_close(compiled(t), t + 1)
    del t.tag
    torch.testing.assert_close(compiled(t), t + 2)
