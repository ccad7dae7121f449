"""compiler/support/gc_pause.py: the cyclic garbage collector is off while a function
compiles (its passes over the compile's live objects found nothing and cost a sixth of a
resnet18 training step's first call) and as the user left it afterwards."""

from __future__ import annotations

import gc

import pytest
import torch

import compiler


@pytest.fixture(autouse=True)
def restore_gc():
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


def _compile_seeing_gc() -> list[bool]:
    seen: list[bool] = []

    def backend(gm, example_inputs):
        seen.append(gc.isenabled())
        return gm.forward

    compiled = compiler.compile(lambda x: (x.sin() + 1,), backend=backend)
    compiled(torch.randn(3))
    return seen


def test_collector_is_off_while_compiling_and_back_on_after():
    gc.enable()
    assert _compile_seeing_gc() == [False]
    assert gc.isenabled()


def test_a_collector_the_user_turned_off_stays_off():
    gc.disable()
    assert _compile_seeing_gc() == [False]
    assert not gc.isenabled()


def test_the_collector_comes_back_when_a_compile_fails():
    gc.enable()

    def backend(gm, example_inputs):
        raise RuntimeError("a backend that fails")

    compiled = compiler.compile(lambda x: (x.cos(),), backend=backend)
    with pytest.warns(Warning):
        compiled(torch.randn(3))
    assert gc.isenabled()
