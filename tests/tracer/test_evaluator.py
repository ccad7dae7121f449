"""The frame evaluator binds a call's arguments as Python does: the same names, values and
order as `inspect.getcallargs`, and the same TypeError for a wrong call."""

import inspect
import itertools

import pytest

from compiler.tracer.evaluator import _bind


def method(self, x, mask=None, *, scale=1.0):
    pass


def positional_only(a, b, /, c=3, *, d, e=5):
    pass


def defaults(a, b=2, c=3):
    pass


def no_arguments():
    pass


def variadic(a, *args, k=1, **kw):
    pass


CALLS = [
    (fn, tuple(range(n)), kwargs)
    for fn, n, kwargs in itertools.product(
        [method, positional_only, defaults, no_arguments, variadic],
        range(5),
        [{}, {"x": 1}, {"mask": 2}, {"scale": 3}, {"d": 4}, {"c": 9}, {"b": 1}, {"a": 1},
         {"e": 0, "d": 1}, {"unknown": 1}, {"k": 2}],
    )
]  # fmt: skip


def outcome(bind, fn, args, kwargs):
    try:
        bound = bind(fn, args, kwargs)
    except TypeError as e:
        return "TypeError", str(e)
    return list(bound.items()), None


@pytest.mark.parametrize("fn, args, kwargs", CALLS)
def test_bind_matches_getcallargs(fn, args, kwargs):
    expected = outcome(lambda f, a, k: inspect.getcallargs(f, *a, **k), fn, args, kwargs)
    assert outcome(_bind, fn, args, kwargs) == expected
