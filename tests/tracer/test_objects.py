"""Instances of Python classes in the trace, differential against eager: dataclasses over
OrderedDict (transformers' ModelOutput), dunders written in Python, attribute lookup
overrides (transformers' configs), attribute writes to real objects, dict subclasses."""

import copy
import dataclasses
import functools
import inspect
from collections import OrderedDict
from collections.abc import Sequence

import pytest
import torch

from .helpers import Cases, RecordingBackend, T, check

case = Cases()


# ---- a ModelOutput: a dataclass over OrderedDict, its fields both attributes and items -------


class Output(OrderedDict):
    def __post_init__(self):
        for f in dataclasses.fields(self):
            value = self.__dict__.get(f.name)
            if value is not None:
                self[f.name] = value

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        super().__setattr__(key, value)

    def __setattr__(self, name, value):
        if name in {f.name for f in dataclasses.fields(self)} and value is not None:
            super().__setitem__(name, value)
        super().__setattr__(name, value)

    def __getitem__(self, k):
        if isinstance(k, str):
            return dict(self.items())[k]
        return self.to_tuple()[k]

    def to_tuple(self):
        return tuple(self[k] for k in self.keys())

    def update(self, *args, **kwargs):
        raise Exception("update is not allowed")


@dataclasses.dataclass
class HiddenOutput(Output):
    hidden: torch.Tensor = None
    pooled: torch.Tensor = None
    extra: tuple = None


@case(T(2, 3), graphs=1, breaks=0)
def model_output_built_and_returned(x):
    out = HiddenOutput(hidden=x * 2, pooled=x.sum(0))
    return out


@case(T(2, 3), graphs=1, breaks=0)
def model_output_read_back(x):
    out = HiddenOutput(hidden=x * 2, pooled=x.sum(0))
    first, second = out.to_tuple()
    return out[0] + first, out["pooled"] + second, out.extra, len(out), list(out.keys())


@case(T(2, 3), graphs=1, breaks=0)
def model_output_field_set_later(x):
    out = HiddenOutput(hidden=x)
    out.pooled = x + 1
    out["hidden"] = x - 1
    return out, "pooled" in out, out.hidden


# ---- dunders, lookup overrides, descriptors -------------------------------------------------


class Table:
    """Indexing and lookup written in Python, as transformers' attention interfaces are."""

    _shared = {"relu": torch.relu}

    def __init__(self):
        self._local = {"sin": torch.sin}

    def __getitem__(self, key):
        if key in self._local:
            return self._local[key]
        return self._shared[key]

    def __contains__(self, key):
        return key in self._local or key in self._shared

    def __len__(self):
        return len(self._local) + len(self._shared)

    def get(self, key, default=None):
        try:
            return self[key]
        except KeyError:
            return default


TABLE = Table()


@case(T(3), graphs=1, breaks=0)
def python_dunders_of_a_global(x):
    fn = TABLE["relu"]
    missing = TABLE.get("tanh", torch.cos)
    return fn(x) + TABLE["sin"](x) + missing(x), "sin" in TABLE, len(TABLE)


class Renaming:
    """A config whose attribute reads and writes go through a name map (`attribute_map`)."""

    attribute_map = {"layers": "num_layers"}

    def __init__(self):
        self.num_layers = 3
        self.scale = 0.5

    def __getattribute__(self, key):
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)

    def __setattr__(self, key, value):
        if key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        super().__setattr__(key, value)


CONFIG = Renaming()


@case(T(3), graphs=1, breaks=0)
def getattribute_written_in_python(x):
    return x * CONFIG.layers + CONFIG.scale


@case(T(3), graphs=1, breaks=0)
def setattr_written_in_python_is_replayed(x):
    CONFIG.layers = 7
    return x * CONFIG.num_layers, CONFIG.layers


class Lazy:
    def __init__(self):
        self.calls = 0

    def __getattr__(self, name):
        if name.startswith("scale_"):
            return float(name[len("scale_") :])
        raise AttributeError(name)

    @property
    def double(self):
        return 2.0


@case(T(3), graphs=1, breaks=0)
def getattr_fallback_and_property(x):
    obj = Lazy()
    return x * obj.scale_3 + obj.double, hasattr(obj, "missing"), getattr(obj, "other", 1.5)


class Plain:
    def __init__(self, x):
        self.x = x
        self.tmp = x * 2


@case(T(3), graphs=1, breaks=0)
def delete_attribute_of_new_object(x):
    obj = Plain(x)
    del obj.tmp
    try:
        missing = obj.tmp is None
    except AttributeError:
        missing = True
    return obj.x + 1, vars(obj).keys() == {"x"}, missing, hasattr(obj, "tmp")


# ---- attributes written to real objects -------------------------------------------------------


class State:
    def __init__(self):
        self.value = None
        self.active = False


STATE = State()


def _set_state(v):
    STATE.value = v
    STATE.active = True


@case(T(3), graphs=1, breaks=0)
def writes_to_a_global_object_replayed(x):
    _set_state(x * 2)
    y = STATE.value + 1
    STATE.count = 1
    del STATE.count
    return y, STATE.active


def test_writes_to_a_global_object_are_visible_after_the_call():
    import compiler

    STATE.value, STATE.active = None, False
    out = compiler.compile(writes_to_a_global_object_replayed, backend="eager")(torch.ones(3))
    torch.testing.assert_close(STATE.value, torch.full((3,), 2.0))
    assert STATE.active is True and not hasattr(STATE, "count")
    torch.testing.assert_close(out[0], torch.full((3,), 3.0))


# ---- dict subclasses, slices, signatures, numbers --------------------------------------------


class Registry(dict):
    def get(self, key):
        return super().get(str(key)) or {}


REGISTRY = Registry({"3": {"scale": 2.0}})


@case(T(3), graphs=1, breaks=0)
def dict_subclass_with_python_get(x):
    return x * REGISTRY.get(3)["scale"], REGISTRY.get(4)


class Layers(Sequence):
    """An ABC subclass (empty __slots__ in its bases) built in the trace."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i >= self.n:
            raise IndexError(i)
        return i * 10


@case(T(3), graphs=1, breaks=0)
def sequence_abc_instance(x):
    layers = Layers(3)
    return x + sum(layers), list(layers), layers[1]


class Stack(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(3))

    def forward(self, x, n: int):
        for layer in self.layers[:n]:
            x = layer(x)
        return x, isinstance(self.layers[1:], torch.nn.ModuleList), len(self.layers[::2])


STACK = Stack()


def _chunk(hidden):
    return hidden * 2


@case(T(2, 4), graphs=1, breaks=0)
def module_list_slice(x):
    return STACK(x, 2)


@case(T(3), graphs=1, breaks=0)
def signature_of_a_function(x):
    return x * len(inspect.signature(_chunk).parameters)


@case(T(3), graphs=1, breaks=0)
def number_augmented_by_tensor(x):
    total = 0
    total += x * 2
    total -= 1
    return total


@dataclasses.dataclass
class Point:
    x: int
    y: int


@case(T(3), graphs=1, breaks=0)
def dataclass_equality_uses_its_eq(t):
    a, b, c = Point(1, 2), Point(1, 2), Point(2, 2)
    return t * (a == b) + (a != c) * 2, a == c, a != b, a == 3


# ---- descriptors: written in Python, functools.cached_property, property setters ----------------


class _Positive:
    """A data descriptor: before the instance's __dict__ on reads and on writes."""

    def __set_name__(self, owner, name):
        self.name = "_" + name

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return getattr(obj, self.name)

    def __set__(self, obj, value):
        setattr(obj, self.name, value.abs() if isinstance(value, torch.Tensor) else abs(value))


class _TimesTen:
    """A non-data descriptor: the instance's __dict__ comes first."""

    def __get__(self, obj, objtype=None):
        return obj.k * 10


class _Described:
    v = _Positive()
    s = _TimesTen()

    def __init__(self, v):
        self.v = v
        self.k = 2
        self.calls = 0

    @functools.cached_property
    def total(self):
        self.calls += 1
        return self.v * 2

    @property
    def p(self):
        return self._p

    @p.setter
    def p(self, value):
        self._p = value + 1


@case(T(3), graphs=1, breaks=0)
def descriptors_get_and_set_as_eager(x):
    w = _Described(-x)
    w.p = 3
    s = w.s
    w.s = 5  # shadows the non-data descriptor
    return w.v, s, w.s, w.total, w.total, w.calls, w.p, vars(w)


@case(T(3), graphs=1, breaks=0)
def cached_property_is_computed_once_and_stored(x):
    w = _Described(x)
    first = w.total
    w.v = x * 3  # the cached value stays
    return first, w.total, w.calls, "total" in vars(w), vars(w)


# ---- __slots__ ---------------------------------------------------------------------------------


class _Slots:
    __slots__ = ("a", "b", "__private")

    def __init__(self, a):
        self.a = a
        self.b = a * 2
        self.__private = 1

    def private(self):
        return self.__private


class _SlotsWithDict(_Slots):  # no __slots__ of its own: its instances have a __dict__ too
    def __init__(self, a):
        super().__init__(a)
        self.c = 3


def _slots_program(x):
    s, t = _Slots(x), _SlotsWithDict(2)
    del s.b
    s.b = 5
    return x + s.a + s.b + t.c + s.private(), hasattr(s, "z"), copy.copy(s).a, s, t


@case(T(3), graphs=1, breaks=0)
def slots_are_read_written_and_deleted_as_eager(x):
    return _slots_program(x)[:3]


def test_slots_instances_are_rebuilt_with_their_slots():
    import compiler

    x = torch.randn(3)
    backend = RecordingBackend()
    *_, s, t = compiler.compile(_slots_program, backend=backend)(x)
    assert len(backend.graphs) == 1
    assert compiler.explain(_slots_program)(x).graph_break_count == 0
    torch.testing.assert_close(s.a, x)
    assert (s.b, s.private(), t.a, t.b, t.c, vars(t)) == (5, 1, 2, 4, 3, {"c": 3})


@case(T(3))
def slots_write_of_an_undeclared_attribute_raises_as_eager(x):
    s = _Slots(x)
    s.z = 1
    return s.a


@case(T(3))
def slots_read_of_an_unset_slot_raises_as_eager(x):
    s = _Slots(x)
    del s.a
    return s.a


@pytest.mark.parametrize("fn,factories,expect", case)
def test_objects(fn, factories, expect):
    check(fn, *factories, **expect)
