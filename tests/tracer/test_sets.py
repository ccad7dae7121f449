"""Sets and frozensets in the trace (compiler/tracer/values/sets.py), differential against
eager: results, graph counts, raised exceptions and the sets changed in place. Then the
module walks torch writes with a set as its memo (`self.parameters()`, `named_parameters()`,
Hugging Face's `next(self.parameters()).dtype`), which must be one graph."""

from __future__ import annotations

import warnings

import pytest
import torch

import compiler

from .helpers import C, Cases, T, check, check_module

# ---- construction, methods, operators ------------------------------------------------------

case = Cases()


@case(T(3), graphs=1, breaks=0)
def construction(x):
    empty = set()
    one = 1
    true = True
    literal = {3, 1, 2, one, true}
    frozen = frozenset([1, 2, 2, 5])
    comprehension = {i % 3 for i in range(9)}
    from_set = set(literal)
    return x * (len(empty) + len(literal) + len(frozen) + len(comprehension) + len(from_set)), (
        sorted(literal),
        sorted(frozen),
        sorted(comprehension),
    )


@case(T(3), graphs=1, breaks=0)
def methods(x):
    s = {1, 2}
    s.add(3)
    s.add(1)
    s.discard(2)
    s.discard(10)
    s.remove(3)
    s.update([4, 5], (6,))
    popped = s.pop()
    t = s.copy()
    t.add(9)
    s.intersection_update({4, 5, 6, 7})
    s.difference_update([5])
    s.symmetric_difference_update({6, 8})
    out = (
        sorted(s), sorted(t), popped,
        sorted(s.union([20], {21})), sorted(t.intersection({9, 4})),
        sorted(t.difference({9})), sorted(t.symmetric_difference({9, 100})),
        s.issubset({1, 2, 4, 6, 8}), t.issuperset({9}), s.isdisjoint({99}),
    )  # fmt: skip
    s.clear()
    return x + len(s) + len(t), out


@case(T(3), graphs=1, breaks=0)
def operators(x):
    a, b = {1, 2, 3}, frozenset({3, 4})
    c = a.copy()
    c |= {10}
    c &= {1, 3, 10}
    c -= {1}
    c ^= {7}
    f = b
    f |= {1}
    return x * len(a | b), (
        sorted(a | b), sorted(a & b), sorted(a - b), sorted(a ^ b), type(b | a).__name__,
        a <= {1, 2, 3, 4}, a < a, a >= {1}, a > {1}, a == {3, 2, 1}, a != b, sorted(c),
        type(f).__name__, sorted(f), sorted(b),
    )  # fmt: skip


@case(T(3), graphs=1, breaks=0)
def membership_and_truth(x):
    s = {"a", "b"}
    out = x
    if "a" in s and "z" not in s and s and not set():
        out = out + 1
    return out, 3 in frozenset({3}), ("b" in s) + ("c" in s)


@case(T(3), graphs=1, breaks=0)
def iteration_order(x):
    # eager's order is the hash table's: ints by value, strings by their (per-process) hash
    total = x
    order = []
    for i in {33, 1, 10, 2, 65}:
        order.append(i)
        total = total + i
    words = list({"k", "a", "zz", "q"})
    return total, order, words, list(enumerate(frozenset({5, 3})))


@case(T(3), graphs=1, breaks=0)
def iteration_order_after_changes(x):
    # the table's layout, hence the order, depends on how the set was filled and changed
    s = {"k", "a", "zz", "q", "m", "bb", "c"}
    s.add("new")
    s.discard("a")
    s |= {"u", "v", "w", "x1", "y2", "z3"}
    letters = ["p", "q", "r", *"abcdefghij"]
    t = set(letters)
    u = frozenset({"k", "q", "zz"}) | s
    return x + 1, (
        list(s), list(t), list(u), list(s & t), list(s - t), list(s ^ t),
        list(s.union(["hh", "ii"])), list({w * 2 for w in "abcdefgh"}), list(s.copy()),
    )  # fmt: skip


@case(T(3), graphs=1, breaks=0)
def returns_sets(x):
    return x + 1, {1, 2, 3}, frozenset({"a"}), set()


@case(T(3), T(3), graphs=1, breaks=0)
def tensors_by_identity(x, y):
    # a set of tensors dedupes by identity, as torch's module walks do with parameters
    seen = set()
    out = []
    for t in [x, y, x, x * 2]:
        if t not in seen:
            seen.add(t)
            out.append(t)
    return len(seen), out, x in seen, (x + 1) in seen


@case(T(3), T(3), recompiles=True)
def iterate_set_of_tensors(x, y):
    # eager iterates them in the order of their addresses: the graph breaks
    total = 0
    for t in {x, y}:
        total = total + t
    return total


@case(T(3), graphs=1, breaks=0)
def keys_view(x):
    d = {"a": 1, "b": 2, "c": 3}
    return x + len(d.keys() & {"a", "z"}), sorted(d.keys() - {"b"}), sorted(d.keys() | {"q"})


@case(T(3))
def remove_missing(x):
    s = {1}
    s.remove(2)
    return x


@case(T(3))
def pop_empty(x):
    set().pop()
    return x


@case(T(3))
def frozenset_has_no_add(x):
    frozenset().add(1)
    return x


@case(T(3))
def unhashable_item(x):
    return {[1, 2]}


@case(T(3), C(frozenset({1, 2})), graphs=1, breaks=0)
def reads_argument(x, s):
    return x + len(s), 2 in s, sorted(s | {0})


@pytest.mark.parametrize("fn, factories, expect", case)
def test_sets(fn, factories, expect):
    check(fn, *factories, **expect)


def changes_argument(x, s):
    s.add(4)
    s.discard(1)
    s |= {10}
    s.update(range(3))
    return x * len(s)


def changes_argument_then_breaks(x, s):
    s.add(4)
    print("a graph break")
    s.remove(2)
    return x + len(s)


@pytest.mark.parametrize("fn", [changes_argument, changes_argument_then_breaks])
def test_set_argument_changed_in_place(fn):
    """A set from outside the graph, changed in the trace: the change is replayed on the
    real set after the graph runs, so every reference to it sees it, as in eager."""
    compiled = compiler.compile(fn)
    for contents in ({1, 2, 3}, {1, 2, 3}, {2, 7}):
        x = torch.randn(3)
        eager_set, compiled_set = set(contents), set(contents)
        expected = fn(x, eager_set)
        torch.testing.assert_close(compiled(x, compiled_set), expected)
        assert compiled_set == eager_set
    entries = compiler.inspect(compiled).entries
    breaks = sum(e.graph_break is not None for e in entries)
    assert breaks > 0 if fn is changes_argument_then_breaks else breaks == 0


# ---- nn.Module walks ------------------------------------------------------------------------


class Device(torch.nn.Module):
    """Hugging Face's PreTrainedModel: `self.device` and `self.dtype` from the first parameter."""

    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
        self.head = torch.nn.Linear(4, 2)
        self.register_buffer("scale", torch.ones(2))

    @property
    def device(self):
        return next(self.parameters()).device

    @property
    def dtype(self):
        return next(self.parameters()).dtype

    def forward(self, x):
        x = x.to(device=self.device, dtype=self.dtype)
        return self.head(self.inner(x)) * self.scale


class Walks(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 4)
        self.b.weight = self.a.weight  # tied: listed once
        self.norm = torch.nn.BatchNorm1d(4)
        self.again = self.a  # one module under two names: listed once

    def forward(self, x):
        names = [n for n, _ in self.named_parameters()]
        total = sum(p.sum() for p in self.parameters())
        own = len(list(self.parameters(recurse=False)))
        buffers = [n for n, _ in self.named_buffers(prefix="m")]
        modules = [n for n, _ in self.named_modules()]
        every = len(list(self.named_parameters(remove_duplicate=False)))
        kinds = [type(m).__name__ for m in self.modules()]
        return x * total + len(list(self.buffers())), names, own, buffers, modules, every, kinds


@pytest.mark.parametrize("module_cls", [Device, Walks])
def test_module_walks_are_one_graph(module_cls):
    check_module(module_cls, T(3, 4), graphs=1, breaks=0)


def test_module_walk_replaced_by_the_class_runs_its_code():
    class Own(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        def named_parameters(self, *args, **kwargs):
            yield "only", self.lin.weight

        def forward(self, x):
            return x @ next(self.parameters())

    check_module(Own, T(2, 3))


def test_int_that_changes_between_calls_in_a_set():
    """An int argument that changes becomes a symbolic size; in a set it hashes as its value,
    so `{n, 3}` with n == 3 has one item, as in eager (the entry is specialised on n)."""

    def fn(x, n):
        s = {n, 3}
        return x + len(s), n in s, 3 in s

    compiled = compiler.compile(fn)
    for n in (1, 2, 3, 4, 3):
        x = torch.randn(3)
        with warnings.catch_warnings():
            warnings.simplefilter("error", compiler.CompilerWarning)  # no eager fallback
            got = compiled(x, n)
        expected = fn(x, n)
        torch.testing.assert_close(got[0], expected[0])
        assert got[1:] == expected[1:]
    entries = compiler.inspect(compiled).entries
    assert entries and all(e.graph is not None and e.graph_break is None for e in entries)
