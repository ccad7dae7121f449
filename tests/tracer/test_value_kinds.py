"""Python as users write it, each a local change in one value module of
compiler/tracer/values/, differential against eager (results, graph counts, exceptions,
arguments changed in place): collections.defaultdict (containers.py), id() and the operator
and attribute methods of user classes (user_objects.py), and a ModelOutput-like OrderedDict
subclass (keys, items, to_tuple)."""

from __future__ import annotations

import collections
import dataclasses
import functools
from typing import Optional

import pytest
import torch

import compiler

from .helpers import Cases, T, check

case = Cases()

# ---- collections.defaultdict ----------------------------------------------------------------


@case(T(3), graphs=1, breaks=0)
def defaultdict_grouping(x):
    groups = collections.defaultdict(list)
    for i, key in enumerate(["a", "b", "a", "c", "b"]):
        groups[key].append(x * i)
    counts = collections.defaultdict(int)
    for key in "abcab":
        counts[key] += 1
    return [sum(v) for v in groups.values()], dict(counts), "z" in groups, counts.get("z")


@case(T(3), graphs=1, breaks=0)
def defaultdict_returned(x):
    d = collections.defaultdict(lambda: 7, {"a": 1})
    d["b"]
    nested = collections.defaultdict(lambda: collections.defaultdict(int))
    nested["x"]["y"] += 2
    return x + d["a"], d, nested, d.default_factory() + 1, d.copy()


@case(T(3), graphs=1, breaks=0)
def defaultdict_without_factory(x):
    d = collections.defaultdict(None, a=1)
    try:
        d["missing"]
    except KeyError:
        return x + d["a"]
    return x


@case(T(3))
def defaultdict_factory_not_callable(x):
    return collections.defaultdict(3)


@case(T(3), graphs=1, breaks=0)
def defaultdict_fromkeys(x):
    # a classmethod of defaultdict: no default_factory, so a missing key raises KeyError
    d = collections.defaultdict.fromkeys("ab", "b")
    d["a"] = 1
    d.setdefault("c", 10)
    try:
        d["missing"]
    except KeyError:
        x = x - 1
    return x + d["c"] + d["a"], d, d.default_factory


# ---- torch.Size, slices and tensor predicates (containers.py, tensors.py) ----------------------


@case(T(3), graphs=1, breaks=0)
def size_methods_keep_the_size_type(x):
    # torch.Size's +, * and slices give a torch.Size (they gave a plain tuple)
    s = torch.Size([2, 3])
    grown = s + (4,)
    return (
        x + s.numel(), grown.numel(), grown, s * 2, s[1:], (1, x.shape[0]) + s, x.shape.numel(),
    )  # fmt: skip


@case(T(4), graphs=1, breaks=0)
def slice_attributes(x):
    s = slice(1, 3)
    return x[s], s.start, s.stop, s.step, x[slice(None, None, 2)]


@case(T(3), graphs=1, breaks=0)
def containers_lack_what_their_class_lacks(x):
    # `t.zzz` on a list, tuple, dict or set built in the trace raises AttributeError, as
    # eager: hasattr() answered True and the except branch was skipped (a wrong result)
    t, lst, d, s = (1, x), [x], {"a": x}, {1}
    try:
        _ = lst.zzz
    except AttributeError as e:
        x = x - 1
        message = str(e)
    return (
        x, message, hasattr(t, "_fields"), hasattr(t, "count"), hasattr(t, "zzz"),
        hasattr(d, "keys"), hasattr(d, "nope"), hasattr(s, "add"), hasattr(s, "nope"),
    )  # fmt: skip


@case(T(3, grad=True), graphs=1, breaks=0)
def requires_grad_that_changes_nothing(x):
    y = x.detach().requires_grad_(False) * 2
    return y, x.clone().requires_grad_(True).requires_grad, y.requires_grad_(requires_grad=False)


@dataclasses.dataclass
class _Output:
    logits: torch.Tensor
    extra: object = None


@case(T(3), graphs=1, breaks=0)
def dataclass_asdict_and_astuple(x):
    # the library's own Python, traced: fields, lists, tuples and dicts recursed into, the
    # rest deep-copied (a tensor cloned); it broke the graph
    o = _Output(x * 2, [x, (1, "a"), {"k": x + 1}])
    d = dataclasses.asdict(o)
    return d, dataclasses.astuple(o), d["extra"][0] is x, dataclasses.asdict(_Output(x, (1, 2)))


@case(T(3), T(3), graphs=1, breaks=0)
def tensor_type_names_and_conversions(a, b):
    # Tensor.type() is its legacy type's name; .type(name, legacy type or dtype) converts
    half = a.to(torch.float16)
    return (
        b.type(half.type()), a.type(torch.HalfTensor), a.type("torch.DoubleTensor"), a.type(),
        a.type(torch.float64),
    )  # fmt: skip


@case(T(3), graphs=1, breaks=0)
def backend_flags_are_read_and_guarded(x):
    if torch.backends.cuda.matmul.allow_tf32:
        return x.sin()
    return x.cos() + torch.backends.cudnn.allow_tf32 + torch.backends.cudnn.deterministic


_Pair = collections.namedtuple("_Pair", "a b")


@case(T(3), graphs=1, breaks=0)
def namedtuple_make(x):
    p = _Pair._make([x, 2])
    q = _Pair._make(iter((x * 2, 3)))
    try:
        _Pair._make([1])
    except TypeError as e:
        message = str(e)
    return p.a + q.a * p.b, q, message


@case(T(3), graphs=1, breaks=0)
def tensor_methods_read_from_the_class(x):
    # `torch.Tensor.add(x, 3)` is x.add(3): each broke the graph ("call to TensorBase.add")
    return (
        torch.Tensor.add(x, 3), torch.Tensor.sum(x), torch.Tensor.__add__(x, 1),
        functools.partial(torch.Tensor.add, other=3)(x), list(map(torch.Tensor.relu, [x, x])),
    )  # fmt: skip


@case(T(3), graphs=1, breaks=0)
def tensor_predicates_as_methods(x):
    y = x + 1
    return y * 2, y.is_complex(), torch.is_complex(y), y.is_floating_point(), y.is_signed()


# ---- id() ---------------------------------------------------------------------------------------

LINEAR = torch.nn.Linear(3, 3)


@case(T(3), graphs=1, breaks=0)
def id_as_a_key(x):
    memo = {id(LINEAR): 2}
    return x * memo[id(LINEAR)], id(None) == id(None), id(LINEAR) == id(torch)


@case(T(3), breaks=1)
def id_of_a_tensor(x):
    return x + (id(x) > 0)


# ---- user classes with operator and attribute methods ----------------------------------------


class Vec:
    def __init__(self, t):
        self.t = t

    def __add__(self, other):
        return Vec(self.t + (other.t if isinstance(other, Vec) else other))

    def __radd__(self, other):
        return Vec(other + self.t)

    def __mul__(self, other):
        return Vec(self.t * other)

    def __rmul__(self, other):
        return Vec(other * self.t)

    def __sub__(self, other):
        return NotImplemented

    def __rsub__(self, other):
        return Vec(other - self.t)

    def __lt__(self, other):
        return bool(self.t.shape[0] < other)

    def __iadd__(self, other):
        self.t = self.t + 100 * other
        return self

    def __getitem__(self, i):
        return self.t[i]

    def __len__(self):
        return self.t.shape[0]

    def __getattr__(self, name):
        if name == "double":
            return self.t * 2
        raise AttributeError(name)


@case(T(3), graphs=1, breaks=0)
def dunders_of_an_object_built_in_the_trace(x):
    v = Vec(x)
    w = 2 * ((v + v) * 3) + 1
    u = v
    u += 1
    return w.t, (1 + v).t, (5 - v).t, v[0], len(v), v.double, v < 5, u is v, v.t


@case(T(3), graphs=1, breaks=0)
def missing_attribute_through_getattr(x):
    v = Vec(x)
    try:
        _ = v.nothing
    except AttributeError:
        return x - 1
    return x


SHARED = Vec(torch.ones(3))


@case(T(3), graphs=1, breaks=0)
def dunders_of_a_real_object(x):
    return (SHARED + x).t, SHARED[1], len(SHARED), SHARED.double, (3 * SHARED).t


@case(T(3))
def unsupported_operand(x):
    return Vec(x) @ 2


# ---- an OrderedDict subclass: transformers' ModelOutput -------------------------------------


class ModelOutput(collections.OrderedDict):
    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is not None:
                self[f.name] = v

    def __getitem__(self, k):
        if isinstance(k, str):
            return dict(self.items())[k]
        return self.to_tuple()[k]

    def __setattr__(self, name, value):
        if name in self.keys() and value is not None:
            super().__setitem__(name, value)
        super().__setattr__(name, value)

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        super().__setattr__(key, value)

    def to_tuple(self):
        return tuple(self[k] for k in self.keys())


@dataclasses.dataclass
class Output(ModelOutput):
    logits: Optional[torch.Tensor] = None
    hidden: Optional[torch.Tensor] = None
    loss: Optional[torch.Tensor] = None


@case(T(3), graphs=1, breaks=0)
def model_output(x):
    out = Output(logits=x + 1, hidden=x * 2)
    out.loss = x.sum()
    return (
        out.to_tuple(), list(out.keys()), [k for k, _ in out.items()], out[0], out["hidden"],
        len(out), "loss" in out, out,
    )  # fmt: skip


@pytest.mark.parametrize("fn, factories, expect", case)
def test_value_kinds(fn, factories, expect):
    check(fn, *factories, **expect)


def test_defaultdict_argument_changed_in_place():
    """A defaultdict from outside the graph: a missing key read in the trace makes its value
    from the real default_factory, and the new items are there after the call, as in eager."""

    def fn(x, d):
        d["a"].append(2)
        d["b"].append(3)
        return x + len(d)

    compiled = compiler.compile(fn)
    for _ in range(2):
        x = torch.randn(3)
        eager_d = collections.defaultdict(list, {"a": [1]})
        compiled_d = collections.defaultdict(list, {"a": [1]})
        torch.testing.assert_close(compiled(x, compiled_d), fn(x, eager_d))
        assert compiled_d == eager_d and compiled_d.default_factory is list
    record = compiler.inspect(compiled)
    assert len(record.graphs) == 1
    assert all(e.graph_break is None for e in record.entries)


def test_a_backend_flag_changed_between_calls_is_seen():
    def fn(x):
        return x.sin() if torch.backends.cuda.matmul.allow_tf32 else x.cos()

    compiled = compiler.compile(fn)
    before = torch.backends.cuda.matmul.allow_tf32
    try:
        for flag in (False, True, False):
            torch.backends.cuda.matmul.allow_tf32 = flag
            x = torch.randn(3)
            torch.testing.assert_close(compiled(x), fn(x))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


class _TensorDict(collections.abc.MutableMapping):
    def __init__(self):
        self._d = {}

    def __getitem__(self, k):
        return self._d[k]

    def __setitem__(self, k, v):
        self._d[k] = v

    def __delitem__(self, k):
        del self._d[k]

    def __iter__(self):
        return iter(self._d)

    def __len__(self):
        return len(self._d)


class _OwnKeys:
    def keys(self):
        return ["a", "b"]

    def __getitem__(self, k):
        return 3 if k == "a" else 4


class _NotAMapping:
    pass


def _scaled(x, a=1, b=0):
    return x * a + b


_GLOBAL_TENSOR_DICT = _TensorDict()
_GLOBAL_TENSOR_DICT["a"] = torch.ones(3) * 2


def unpacks_user_mappings(x):
    # `**m` and dict(m) of a user's mapping read its keys() and items (the one made in the
    # trace gave its attributes as keywords: `_d=...`, a TypeError eager does not raise)
    m = _TensorDict()
    m["a"], m["b"] = x, 2
    return (
        _scaled(x, **m), dict(m), _scaled(x, **_GLOBAL_TENSOR_DICT), _scaled(x, **_OwnKeys()),
        dict(_GLOBAL_TENSOR_DICT)["a"] + 1,
    )  # fmt: skip


def unpacks_what_is_not_a_mapping(x):
    return _scaled(x, **_NotAMapping())


def test_user_mappings_unpacked_as_eager():
    check(unpacks_user_mappings, T(3), graphs=1, breaks=0)
    check(unpacks_what_is_not_a_mapping, T(3))  # eager's TypeError
