"""Dicts keyed by tensors, modules and other objects hashed by their address (torch.Tensor
and nn.Module hash by id): `d[t] = v`, `t in d`, `d.get(t)`, pop, setdefault, iteration in
insertion order, as eager's dict keyed by identity. One graph, as under torch.compile. A
tensor is the same key wherever eager returns the same tensor (`x.add_(1)`), and `is` says
so too."""

import collections

import pytest
import torch

import compiler

from .helpers import Cases, RecordingBackend, T, check, check_module

case = Cases()

# Returned dicts keyed by tensors are compared as their items: the helpers' comparison of
# mappings compares keys with ==, which for tensors is elementwise. Returned keys that are
# inputs must be the inputs themselves (check's aliasing test).


@case(T(3), T(3), graphs=1, breaks=0)
def set_and_get_by_tensor(x, y):
    d = {}
    d[x] = x.sin()
    d[y] = y.cos()
    return d[x] + d.get(y), x in d, (x + 1) in d, len(d), d.get(x * 2, 7)


@case(T(3), T(3), graphs=1, breaks=0)
def literal_iterates_in_insertion_order(x, y):
    d = {y: 2.0, x: 1.0}
    d[y] = 3.0  # an existing key keeps its place
    return [k * v for k, v in d.items()], list(d), list(d.values()), [k * 1 for k in d]


@case(T(3), graphs=1, breaks=0)
def one_tensor_is_one_key(x):
    d = {x: 1}
    same = x
    d[same] = 2
    return len(d), d[x] * x, list(d.items())


@case(T(3), graphs=1, breaks=0)
def in_place_result_is_the_same_key(x):
    d = {x: 1}
    y = x.add_(1)
    return y in d, d[y], y is x, x.contiguous() is x, x.view(3) in d, x[:] is x


@case(T(3), graphs=1, breaks=0)
def a_set_holds_one_tensor_once(x):
    s = {x, x.add_(1), x.contiguous()}
    return len(s), x in s, x * 2


@case(T(3), T(3), graphs=1, breaks=0)
def pop_setdefault_del_by_tensor(x, y):
    d = {x: x + 1, y: y + 2}
    a = d.pop(x)
    b = d.setdefault(x, x * 3)
    c = d.setdefault(y, x)
    del d[y]
    return a, b, c, list(d.items()), d.pop(y, None)


@case(T(3), graphs=1, breaks=0)
def missing_tensor_key_raises_keyerror(x):
    d = {x: 1}
    try:
        return d[x + 1]
    except KeyError:
        return x * 2


@case(T(4, 3), graphs=1, breaks=0)
def defaultdict_keyed_by_tensors(x):
    rows = list(x)
    sums = collections.defaultdict(list)
    for r in rows:
        sums[rows[0]].append(r)
        sums[r].append(r * 2)
    return [(k, torch.stack(v)) for k, v in sums.items()]


@case(T(3), T(3), graphs=1, breaks=0)
def dict_comprehension_and_merge(x, y):
    d = {t: t.sum() for t in (x, y)}
    e = d | {x: x.mean()}
    return list(e.items()), list(d.items()), x in e.keys()


@case(T(3), graphs=1, breaks=0)
def keyed_by_classes_and_functions(x):
    d = {torch.sin: 1.0, torch.nn.Linear: 2.0, len: 3.0}
    return x * d[torch.sin] + d[torch.nn.Linear], torch.cos in d, list(d.values())


class Tag:
    pass


class Named:
    def __init__(self, name):
        self.name = name

    def __eq__(self, other):
        return isinstance(other, Named) and other.name == self.name

    def __hash__(self):
        return hash(self.name)


@case(T(3), graphs=1, breaks=0)
def keyed_by_instances_built_in_the_trace(x):
    a, b = Tag(), Tag()
    d = {a: x, b: x * 2}
    return d[b] + d[a], a in d, Tag() in d


@case(T(3))
def keyed_by_instances_with_their_own_hash(x):
    d = {Named("a"): x}
    return d[Named("a")] * 2, Named("b") in d


@pytest.mark.parametrize("fn,factories,expect", case)
def test_identity_keys(fn, factories, expect):
    check(fn, *factories, **expect)


class ModuleKeyed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(3, 3), torch.nn.Linear(3, 3)

    def forward(self, x):
        weights = {self.a: 1.0, self.b: 2.0}
        out = 0
        for m, w in weights.items():
            out = out + m(x) * w
        weights[self.a] = 5.0
        return out, weights.get(self.a), self.b in weights, list(weights.values())


def test_dict_keyed_by_modules():
    check_module(ModuleKeyed, T(2, 3), graphs=1, breaks=0)


def test_returned_dict_has_the_tensors_as_keys():
    def fn(x, y):
        z = x * 2
        d = {x: y, z: x}
        d[y] = z
        return d, z

    x, y = torch.randn(3), torch.randn(3)
    d, z = compiler.compile(fn)(x, y)
    keys = list(d)
    assert keys[0] is x and keys[1] is z and keys[2] is y
    assert d[x] is y and d[z] is x and d[y] is z


def test_an_outside_dict_gets_tensor_keys():
    def fn(x, d):
        d[x] = x.sin()
        d[x * 2] = x
        return len(d)

    x, d = torch.randn(3), {"n": 1}
    assert compiler.compile(fn)(x, d) == 3
    keys = list(d)
    assert keys[0] == "n" and keys[1] is x and keys[2].shape == (3,)
    torch.testing.assert_close(d[x], x.sin())
    torch.testing.assert_close(keys[2], x * 2)


def test_a_dict_argument_keyed_by_classes_is_one_graph():
    # its keys are read through `list(t.keys())[i]` and guarded as the very objects, as
    # torch.compile guards them; before, the graph broke there
    table = {torch.nn.Linear: 2.0, torch.nn.ReLU: 3.0}

    def fn(x, t):
        y = x + 1
        return y * t[torch.nn.Linear], torch.nn.Tanh in t

    check(fn, T(3), lambda: table, graphs=1, breaks=0)


def test_a_dict_argument_keyed_by_tensors_is_one_graph():
    keys = [torch.randn(2), torch.randn(2)]
    table = {keys[0]: torch.ones(2), keys[1]: 2.0}

    def fn(x, d):
        return x + d[keys[1]] + len(d), d[keys[0]] * x, x in d, list(d.values())

    check(fn, T(2), lambda: dict(table), graphs=1, breaks=0)


def test_tensor_keys_survive_a_graph_break():
    def fn(x, y):
        d = {x: x.sin(), y: 1.0}
        print("a graph break")
        return d[x] + d[y], list(d.values())

    # the dict is read from the frame after the break, made anew on every call with new
    # keys: they are graph inputs, not pinned (the dict broke the graph again before)
    check(fn, T(3), T(3), graphs=2, breaks=1, calls=4)


def test_a_key_reached_only_through_a_dict_made_before_a_graph_break():
    def fn(x):
        k = x + 1
        d = {k: 3.0, x: 2.0}
        print("a graph break")
        return [key * v for key, v in d.items()], d[x], x in d

    check(fn, T(3), graphs=2, breaks=1, calls=4)


def test_tensor_keys_after_a_graph_break_are_guarded_by_their_aliasing():
    # a lookup in the trace compares keys by identity: whether a key is another input
    # must hold as at the trace (here y is the key in the second and fourth calls)
    def fn(x, y):
        d = {x: 1.0}
        print("a graph break")
        return x * d.get(y, 0.0), y in d

    compiled = compiler.compile(fn, backend=RecordingBackend())
    for same in (False, True, False, True):
        x = torch.randn(3)
        y = x if same else torch.randn(3)
        expected, actual = fn(x, y), compiled(x, y)
        torch.testing.assert_close(actual[0], expected[0])
        assert actual[1] == expected[1]


_KEYS = [torch.randn(2), torch.randn(2)]
_TABLE = {_KEYS[0]: 1.0, _KEYS[1]: 2.0}
_CLASSES = {torch.nn.Linear: 2.0, torch.nn.ReLU: 3.0}


def test_a_global_dict_keyed_by_tensors_is_one_graph():
    # its keys are read through `list(d.keys())[i]` and guarded as the very objects (a
    # lookup with another tensor of the trace is answered by identity); the graph broke
    def fn(x):
        s = 0
        for k, v in _TABLE.items():
            s = s + k * v
        return x + s + _TABLE[_KEYS[0]] + len(_TABLE), _KEYS[1] in _TABLE

    check(fn, T(2), graphs=1, breaks=0)


def test_a_global_dict_keyed_by_classes_is_one_graph():
    def fn(x):
        return x * _CLASSES[torch.nn.Linear], torch.nn.Tanh in _CLASSES

    check(fn, T(3), graphs=1, breaks=0)


def test_a_global_dict_keyed_by_tensors_is_guarded_by_its_keys():
    table = {torch.ones(2): 1.0}
    backend = RecordingBackend()

    def fn(x):
        return x + sum(k * v for k, v in table.items())

    compiled = compiler.compile(fn, backend=backend)
    x = torch.randn(2)
    torch.testing.assert_close(compiled(x), fn(x))
    table.clear()
    table[torch.full((2,), 3.0)] = 2.0  # another key object: the entry is not reused
    torch.testing.assert_close(compiled(x), fn(x))
