"""Python's `random` module in a compiled function (values/python_random.py): the calls are
made for real just before the graph, in order, so the numbers, the result and the global
random state after the call are eager's under the same `random.seed`, and one entry serves
every call. Each broke the graph before ("call to Random.random runs in Python")."""

from __future__ import annotations

import random

import pytest
import torch

import compiler
from tests.tracer.helpers import RecordingBackend, assert_same


def scales(x):
    return x * random.random() + random.randint(0, 10)


def draws_in_a_loop(x):
    for _ in range(3):
        x = x + random.uniform(-1.0, 1.0)
    return x, random.gauss(0.0, 1.0)


def returns_the_numbers(x):
    a = random.random()
    n = random.randrange(2, 9)
    return x + 1, a, n, a * 2


def seeds_then_draws(x):
    random.seed(7)
    return x * random.random()


def drops_sometimes(x):
    # a branch on the number: decided after the guards, so the graph breaks there
    if random.random() < 0.5:
        return x * 2
    return x - 1


def draws_around_a_break(x):
    a = random.random()
    print("a graph break between two draws")
    return x * a + random.random()


CASES = [
    (scales, 1, 0),
    (draws_in_a_loop, 1, 0),
    (returns_the_numbers, 1, 0),
    (seeds_then_draws, 1, 0),
    (drops_sometimes, None, None),
    (draws_around_a_break, 1, 1),  # the part before the break has no op
]


def _eager_and_compiled(fn, compiled, seed):
    x = torch.randn(4)
    random.seed(seed)
    expected = fn(x.clone())
    expected_state = random.getstate()
    random.seed(seed)
    actual = compiled(x.clone())
    assert_same(expected, actual)
    assert random.getstate() == expected_state, "the global random state differs from eager's"


@pytest.mark.parametrize(("fn", "graphs", "breaks"), CASES, ids=[c[0].__name__ for c in CASES])
def test_python_random_draws_eager_numbers(fn, graphs, breaks, capsys):
    compiler.reset()
    backend = RecordingBackend()
    compiled = compiler.compile(fn, backend=backend)
    for seed in range(5):
        _eager_and_compiled(fn, compiled, seed)
    if graphs is not None:
        compiler.reset()
        random.seed(0)
        explained = compiler.explain(fn)(torch.randn(4))
        assert (explained.graph_count, explained.graph_break_count) == (graphs, breaks)
        if not breaks:  # (a number handed across a break is a local that changed: 2 compiles)
            # every call drew new numbers, yet the entry was compiled once
            assert backend.count == graphs


def test_the_default_backend_takes_the_numbers_as_inputs():
    compiler.reset()
    compiled = compiler.compile(scales)
    for seed in range(3):
        _eager_and_compiled(scales, compiled, seed)


def test_a_draw_the_eager_call_raises_on_is_raised():
    def bad(x):
        return x * random.randint(5, 1)

    compiled = compiler.compile(bad)
    with pytest.raises(ValueError):
        bad(torch.ones(2))
    with pytest.raises(ValueError):
        compiled(torch.ones(2))


# ---- random.Random(seed) made in the function (values/random_instances.py) ---------------------


def seeded_instance(x):
    r = random.Random(0)
    a, b = r.random(), r.randint(1, 9)
    picked = r.choice([x, x * 2, x * 3])
    return x * a + b + picked, r.gauss(0.0, 1.0)


def seeded_instance_returned(x):
    r = random.Random("seed")
    return x * r.uniform(0.0, 2.0), r


def test_a_seeded_instance_made_in_the_function_is_one_graph():
    # its numbers are constants of the entry (the seed is): it broke the graph three times
    compiler.reset()
    backend = RecordingBackend()
    compiled = compiler.compile(seeded_instance, backend=backend)
    state = random.getstate()
    for _ in range(3):
        x = torch.randn(4)
        assert_same(seeded_instance(x), compiled(x))
    assert random.getstate() == state  # the global state is untouched, as in eager
    assert backend.count == 1
    explained = compiler.explain(seeded_instance)(torch.randn(4))
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)


def test_a_seeded_instance_that_outlives_the_call_has_eager_state():
    x = torch.randn(3)
    expected, eager_r = seeded_instance_returned(x)
    actual, compiled_r = compiler.compile(seeded_instance_returned)(x)
    assert_same(expected, actual)
    assert type(compiled_r) is random.Random
    assert [compiled_r.random() for _ in range(3)] == [eager_r.random() for _ in range(3)]


def test_an_instance_seeded_from_the_clock_runs_in_python():
    def fn(x):
        return x * random.Random().random()

    explained = compiler.explain(fn)(torch.randn(2))
    assert explained.graph_break_count >= 1


def test_export_refuses_a_function_that_draws_from_python_random():
    # the draws are made before the graph, which an exported graph would not make
    with pytest.raises(compiler.Unsupported, match="random"):
        compiler.export(scales, torch.randn(4))
