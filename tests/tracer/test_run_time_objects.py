"""Objects made at run time (a model's output record returned by a call at a graph break, a
user's dataclass) are guarded by their type and by what the trace reads of them, not by
their identity: each call makes a new one, and an identity guard recompiled every call
(GPT-2's training step recompiled at every step until the cache limit, then ran eagerly).
What the trace decided from the object itself (`a is b` between objects, a class attribute
an instance could shadow) is still guarded."""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from dataclasses import dataclass

import torch

import compiler
from tests.tracer.helpers import RecordingBackend, assert_same


@dataclass
class Output:
    loss: torch.Tensor
    logits: torch.Tensor
    cache: object = None


class Record(OrderedDict):
    """A ModelOutput-like record: a dict subclass with attributes too."""

    def __init__(self, **kw):
        super().__init__(**kw)
        for k, v in kw.items():
            setattr(self, k, v)


class Scaled:
    scale = 2.0


def _model(x):
    print("a graph break: the record below is made at run time")
    return Output(loss=(x * 2).sum(), logits=x + 1)


def uses_record(x):
    out = _model(x)
    if out.cache is None:
        return out.loss * out.logits
    return out.logits


def uses_dict_record(x):
    print("break")
    r = Record(hidden=x * 3, extra=None)
    print("break")
    return r.hidden + 1 if r.extra is None else r.hidden


def _entries(compiled):
    return [e for f in compiler.inspect(compiled).functions for e in f.entries]


def test_a_record_made_at_run_time_does_not_recompile(capsys):
    backend = RecordingBackend()
    compiled = compiler.compile(uses_record, backend=backend)
    for _ in range(6):
        x = torch.randn(5)
        assert_same(uses_record(x), compiled(x))
    reasons = [e.recompile_reason for e in _entries(compiled)]
    assert reasons and all(r is None for r in reasons), reasons


def test_a_dict_record_made_at_run_time_does_not_recompile(capsys):
    compiled = compiler.compile(uses_dict_record)
    for _ in range(5):
        x = torch.randn(4)
        assert_same(uses_dict_record(x), compiled(x))
    assert all(e.recompile_reason is None for e in _entries(compiled))


def test_identity_the_trace_used_is_still_guarded(capsys):
    first, second = Output(torch.ones(1), torch.ones(1)), Output(torch.ones(1), torch.ones(1))
    chosen = {"obj": first}

    def pick():
        print("break")
        return chosen["obj"]

    def same_as_first(x):
        o = pick()
        return x + 1 if o is first else x - 1

    compiled = compiler.compile(same_as_first)
    x = torch.zeros(2)
    assert_same(same_as_first(x), compiled(x))
    chosen["obj"] = second
    assert_same(same_as_first(x), compiled(x))
    chosen["obj"] = first
    assert_same(same_as_first(x), compiled(x))


def test_an_instance_attribute_shadowing_the_class_one_recompiles(capsys):
    objs = [Scaled(), Scaled()]
    objs[1].scale = 5.0

    def make(i):
        print("break")
        return objs[i]

    def scaled(x, i):
        return x * make(i).scale

    compiled = compiler.compile(scaled)
    x = torch.ones(3)
    for i in (0, 1, 0, 1):
        assert_same(scaled(x, i), compiled(x, i))


def test_attributes_written_between_calls_are_read_anew(capsys):
    holder = Output(torch.zeros(1), torch.zeros(1))

    def get():
        print("break")
        return holder

    def read(x):
        o = get()
        return x * o.loss + o.logits

    compiled = compiler.compile(read)
    for v in (1.0, 2.0, 3.0):
        holder.loss, holder.logits = torch.full((1,), v), torch.full((1,), -v)
        x = torch.randn(3)
        assert_same(read(x), compiled(x))


@dataclass
class Point:
    x: torch.Tensor
    scale: float = 2.0

    def total(self):
        return self.x * self.scale


def calls_a_method(p):
    return p.total() + 1


def writes_an_attribute(p):
    p.scale = p.scale + 1.0
    return p.total()


def reads_its_class(p):
    # type(), dataclasses.fields / is_dataclass read the class, which the type guard pins
    names = [f.name for f in dataclasses.fields(p)]
    return p.x * len(names) + (type(p) is Point) + dataclasses.is_dataclass(p), names


class _Holder:
    def __init__(self):
        self.scale = 1.0


def test_a_new_argument_object_per_call_reuses_the_entry():
    # calling a method of the object, or writing one of its attributes (replayed through its
    # source), pinned the object itself: a recompile on every call until the cache limit
    for fn in (calls_a_method, writes_an_attribute, reads_its_class):
        compiler.reset()
        compiled = compiler.compile(fn, backend=RecordingBackend())
        for _ in range(4):
            x = torch.randn(3)
            eager_p, compiled_p = Point(x.clone(), 1.5), Point(x.clone(), 1.5)
            assert_same(fn(eager_p), compiled(compiled_p))
            assert compiled_p.scale == eager_p.scale
        reasons = [e.recompile_reason for e in _entries(compiled)]
        assert reasons == [None], (fn.__name__, reasons)


class Box:
    pass


def test_an_attribute_written_to_a_fresh_argument_object_compiles_once():
    # `obj = Box(); f(obj, x)` each call: the write is replayed through the argument, so the
    # entry holds for any Box (it recompiled on every call, then ran eagerly)
    def fn(obj, x):
        obj.y = x * 2
        return obj.y + 1

    backend = RecordingBackend()
    compiled = compiler.compile(fn, backend=backend)
    for _ in range(6):
        x = torch.randn(3)
        eager_obj, compiled_obj = Box(), Box()
        assert_same(fn(eager_obj, x), compiled(compiled_obj, x))
        assert_same(eager_obj.y, compiled_obj.y)
    assert backend.count == 1
    assert [e.recompile_reason for e in _entries(compiled)] == [None]


def _written_through_p_read_through_q(x, p, q):
    p.scale = 5.0
    return x * q.scale


def _written_through_a_list_read_through_q(x, ps, q):
    ps[0].scale = ps[0].scale * 3
    return x * q.scale + ps[0].scale


def _written_through_both(x, p, q):
    p.scale = 2.0
    q.scale = q.scale + 1.0
    return x * p.scale


def test_an_attribute_written_through_one_reference_is_read_through_another_as_eager():
    # writes are kept by object: what the trace read through `q` holds only while the two
    # references are the same object (or distinct) as at the trace, which is guarded
    cases = [
        (_written_through_p_read_through_q, lambda a, b: (a, b)),
        (_written_through_a_list_read_through_q, lambda a, b: ([a], b)),
        (_written_through_both, lambda a, b: (a, b)),
    ]
    for fn, args in cases:
        compiler.reset()
        compiled = compiler.compile(fn, backend=RecordingBackend())
        x = torch.ones(2)
        for same in (True, False, True, False):
            a, b = _Holder(), _Holder()
            ea, eb = _Holder(), _Holder()
            out = compiled(x, *args(a, a if same else b))
            assert_same(fn(x, *args(ea, ea if same else eb)), out)
            assert (a.scale, b.scale) == (ea.scale, eb.scale), fn.__name__
        # one entry for each aliasing, however many new objects are passed
        assert len(_entries(compiled)) == 2, fn.__name__
