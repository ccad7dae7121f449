"""torch.inference_mode() inside a compiled function, as a block or a decorator: one graph,
its region computed without autograd, as torch.compile captures it (the graph broke at the
call, and again at the block)."""

import pytest
import torch

from .helpers import Cases, T, check

case = Cases()


@torch.inference_mode()
def _predict(x):
    return x.relu() + 1


@torch.inference_mode(mode=False)
def _not_inference(x):
    return x * 2


@case(T(4, grad=True), graphs=1, breaks=0)
def inference_mode_block(x):
    with torch.inference_mode():
        y = x * 2
    return y, x * 3, torch.is_grad_enabled()


@case(T(4, grad=True), graphs=1, breaks=0)
def inference_mode_decorator(x):
    return _predict(x) * 3, torch.is_grad_enabled()


@case(T(4, grad=True), graphs=1, breaks=0)
def inference_mode_false_changes_nothing(x):
    with torch.inference_mode(False):
        y = x + 1
    return y, _not_inference(x)


@case(T(4, grad=True))
def enable_grad_inside_inference_mode_runs_in_python(x):
    # eager records no autograd there either: the block runs in real inference mode
    with torch.inference_mode():
        with torch.enable_grad():
            y = x * x
        z = x + 1
    return y, z


@pytest.mark.parametrize("fn,factories,expect", case)
def test_inference_mode(fn, factories, expect):
    check(fn, *factories, **expect)


def test_a_graph_break_inside_inference_mode_runs_the_block_in_python():
    # the rest of the block would run outside inference mode: the block runs for real
    def fn(x):
        with torch.inference_mode():
            y = x * 2
            print("", end="")
            z = y + 1
        return z, z.is_inference()

    check(fn, T(4, grad=True))


@case(T(4, grad=True))
def is_inference_after_an_inference_region(x):
    # the graph computes the region as no_grad would: it runs in Python for this answer
    with torch.inference_mode():
        y = x * 2
    return y, y.is_inference(), x.is_inference()
