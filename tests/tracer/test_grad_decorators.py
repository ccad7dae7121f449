"""`@torch.no_grad()` / `@torch.enable_grad()` on a function defined inside the compiled one
(values/grad_decorators.py): inlined with the grad mode switched around it, one graph, as
under torch.compile. It broke the graph four times ("calling gradmode is not traced")."""

import pytest
import torch

import compiler

from .helpers import T, check


def no_grad_inner(x):
    @torch.no_grad()
    def inner(t):
        return t * 2

    return inner(x) + x, torch.is_grad_enabled()


def enable_grad_inner_under_no_grad(x):
    @torch.enable_grad()
    def inner(t):
        return t.sin()

    with torch.no_grad():
        y = inner(x)
        z = x * 3
    return y, z


def decorated_twice_and_called_in_a_loop(x):
    scale = torch.no_grad()(lambda t: t * 0.5)
    out = x
    for _ in range(3):
        out = out + scale(x)
    return out


def returns_the_decorated_function(x):
    @torch.no_grad()
    def inner(t):
        return t - 1

    return inner(x), inner


@pytest.mark.parametrize(
    "fn",
    [no_grad_inner, enable_grad_inner_under_no_grad, decorated_twice_and_called_in_a_loop],
)
def test_a_grad_decorator_made_in_the_trace_is_one_graph(fn):
    check(fn, T(4, grad=True), graphs=1, breaks=0, backward=fn is not enable_grad_inner_under_no_grad)


def test_the_grad_mode_is_restored_when_the_decorated_function_raises():
    def fn(x):
        @torch.no_grad()
        def inner(t):
            raise ValueError("inside")

        try:
            inner(x)
        except ValueError:
            pass
        return x * 2, torch.is_grad_enabled()

    check(fn, T(3, grad=True), graphs=1, breaks=0)


def test_a_returned_decorated_function_keeps_its_grad_mode():
    out, inner = compiler.compile(returns_the_decorated_function)(torch.randn(3, requires_grad=True))
    assert not out.requires_grad
    y = inner(torch.randn(3, requires_grad=True))
    assert not y.requires_grad and torch.is_grad_enabled()
