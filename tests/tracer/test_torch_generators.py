"""A torch.Generator made in the compiled function (values/torch_generators.py): made for
real just before the graph with the same seed and draws, the tensors drawn are graph
inputs, so every call gives eager's numbers and a generator that outlives the call is in
eager's state. It broke the graph four times."""

import pytest
import torch

import compiler

from .helpers import RecordingBackend, assert_same


def draws_from_its_own_generator(x):
    g = torch.Generator().manual_seed(0)
    noise = torch.randn(4, generator=g)
    picks = torch.randint(0, 10, (4,), generator=g)
    order = torch.randperm(4, generator=g)
    return x * noise + picks, order, g.initial_seed()


def returns_its_generator(x):
    g = torch.Generator()
    g.manual_seed(3)
    return x + torch.rand(4, generator=g), g


def test_a_generator_made_in_the_function_is_one_graph():
    backend = RecordingBackend()
    compiled = compiler.compile(draws_from_its_own_generator, backend=backend)
    for _ in range(3):
        x = torch.randn(4)
        expected = draws_from_its_own_generator(x)
        global_state = torch.get_rng_state()
        assert_same(expected, compiled(x))
        assert torch.equal(torch.get_rng_state(), global_state)  # the global one untouched
    assert backend.count == 1
    compiler.reset()
    explained = compiler.explain(draws_from_its_own_generator)(torch.randn(4))
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)


def test_a_generator_that_outlives_the_call_is_in_eager_state():
    compiled = compiler.compile(returns_its_generator)
    x = torch.randn(4)
    expected, eager_g = returns_its_generator(x)
    for _ in range(2):
        actual, compiled_g = compiled(x)
        assert_same(expected, actual)
        assert type(compiled_g) is torch.Generator and compiled_g is not eager_g
        assert torch.equal(compiled_g.get_state(), eager_g.get_state())
    assert torch.equal(torch.rand(2, generator=compiled_g), torch.rand(2, generator=eager_g))


def test_the_global_generator_still_draws_as_before():
    def fn(x):
        torch.manual_seed(1)
        return x + torch.randn(4), torch.rand(2, generator=None)

    compiled = compiler.compile(fn)
    x = torch.randn(4)
    assert_same(fn(x), compiled(x))


def test_export_refuses_a_function_that_makes_its_own_generator():
    with pytest.raises(compiler.Unsupported, match="torch.Generator"):
        compiler.export(returns_its_generator, torch.randn(4))
