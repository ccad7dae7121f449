"""A module's parameter, buffer or child is read from its table (`_parameters['w']`, see
compiler/tracer/access.py) only while attribute lookup would still reach the table: a class
attribute, a property (on the class or a base) or an instance `__dict__` entry of that name
added after compiling wins in eager, so it must fail a guard, and the function recompiles and
reads what eager reads. Removing it again brings the table back. Each test runs with the C++
guards (and their FrozenReads fast path) and all in Python."""

from __future__ import annotations

import sys
from typing import Callable

import pytest
import torch
from torch import nn

import compiler

from .helpers import RecordingBackend, assert_same

pytestmark = pytest.mark.usefixtures("guard_path")


def classes() -> tuple[type, type]:
    """A fresh base and module class per test: the tests change classes."""

    class Base(nn.Module):
        pass

    class Mod(Base):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(3))
            self.register_buffer("b", torch.randn(3))
            self.child = nn.Tanh()

        def forward(self, x):
            return self.child(x * self.w + self.b)

    return Base, Mod


class Outer(nn.Module):
    """The changed module as a child (read from `_modules`, then its own tables)."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x) * 2


def entries(compiled) -> list:
    return compiler.inspect(compiled).functions[0].entries


def run_calls(eager: nn.Module, compiled: Callable, x: torch.Tensor, calls: int = 3) -> None:
    for _ in range(calls):  # later calls take the FrozenReads fast path with C++ guards
        with torch.no_grad():
            assert_same(eager(x), compiled(x))


def value(k: float) -> torch.Tensor:
    return torch.full((3,), k)


# Each change gives `Mod` (or its base) or the instance a `w`, `b` or `child` that eager finds
# before nn.Module.__getattr__ looks in the tables.
CHANGES = {
    "class attribute over a parameter": lambda base, cls, m: setattr(cls, "w", value(5.0)),
    "class attribute over a buffer": lambda base, cls, m: setattr(cls, "b", value(-2.0)),
    "class attribute over a child": lambda base, cls, m: setattr(cls, "child", nn.ReLU()),
    "property over a parameter": lambda base, cls, m: setattr(
        cls, "w", property(lambda self: value(7.0))
    ),
    "property over a buffer": lambda base, cls, m: setattr(
        cls, "b", property(lambda self: value(3.0))
    ),
    "property on a base class": lambda base, cls, m: setattr(
        base, "w", property(lambda self: value(9.0))
    ),
    "class attribute on a base class": lambda base, cls, m: setattr(base, "b", value(4.0)),
    "instance __dict__ over a parameter": lambda base, cls, m: object.__setattr__(
        m, "w", value(6.0)
    ),
    "instance __dict__ over a buffer": lambda base, cls, m: object.__setattr__(m, "b", value(8.0)),
    "instance __dict__ over a child": lambda base, cls, m: object.__setattr__(
        m, "child", nn.Sigmoid()
    ),
    "__getattribute__ on the class": lambda base, cls, m: setattr(
        cls,
        "__getattribute__",
        lambda self, name: value(1.5) if name == "w" else nn.Module.__getattribute__(self, name),
    ),
}


@pytest.mark.parametrize("nested", [False, True], ids=["root", "child"])
@pytest.mark.parametrize("change", list(CHANGES.values()), ids=list(CHANGES))
def test_a_name_that_shadows_a_table_entry_recompiles(change, nested):
    base, cls = classes()
    m = cls()
    eager = Outer(m) if nested else m
    compiled = compiler.compile(eager, backend=RecordingBackend())
    x = torch.randn(3)
    run_calls(eager, compiled, x)
    assert len(entries(compiled)) == 1
    change(base, cls, m)
    run_calls(eager, compiled, x)
    found = entries(compiled)  # an own __getattribute__ breaks the graph: more than one new
    assert len(found) >= 2 and "Mod" in found[1].recompile_reason


@pytest.mark.parametrize("nested", [False, True], ids=["root", "child"])
@pytest.mark.parametrize("where", ["class", "base"])
def test_a_class_attribute_removed_again_reads_the_table(where, nested):
    base, cls = classes()
    m = cls()
    eager = Outer(m) if nested else m
    owner = cls if where == "class" else base
    compiled = compiler.compile(eager, backend=RecordingBackend())
    x = torch.randn(3)
    run_calls(eager, compiled, x)
    owner.w = value(5.0)
    run_calls(eager, compiled, x)
    del owner.w
    run_calls(eager, compiled, x)
    owner.w = property(lambda self: value(-1.0))
    run_calls(eager, compiled, x)
    del owner.w
    run_calls(eager, compiled, x)


def test_an_instance_entry_removed_again_reads_the_table():
    _, cls = classes()
    m = cls()
    compiled = compiler.compile(m, backend=RecordingBackend())
    x = torch.randn(3)
    run_calls(m, compiled, x)
    object.__setattr__(m, "b", value(3.0))
    run_calls(m, compiled, x)
    del m.__dict__["b"]
    run_calls(m, compiled, x)
    assert len(entries(compiled)) == 2  # the first entry holds again


def test_an_unrelated_class_change_keeps_the_entry():
    base, cls = classes()
    m = cls()
    compiled = compiler.compile(m, backend=RecordingBackend())
    x = torch.randn(3)
    run_calls(m, compiled, x)
    cls.unrelated = 1.0  # renews the class's version tag, shadows nothing read
    base.other = property(lambda self: 2.0)
    run_calls(m, compiled, x)
    assert len(entries(compiled)) == 1


def test_a_container_getitem_replaced_later_recompiles(request, guard_path):
    if sys.version_info >= (3, 13) and guard_path == "cpp":
        # After the guard tests and the tracer files before them (about 1,100 tests), eager
        # itself goes wrong here on CPython 3.13.0: a specialised subscript keeps calling
        # Seq's replaced __getitem__ (the classes have used up their version tags, and the
        # interpreter's per-class cache of __getitem__ is then not cleared). The guards see
        # the replacement (the entry recompiles) and the tracer indexes with
        # operator.getitem, so the compiled result is the new method's while eager's is not.
        request.applymarker(
            pytest.mark.xfail(reason="CPython 3.13.0 keeps a replaced __getitem__ (eager)")
        )

    class Seq(nn.Sequential):
        pass

    class Indexing(nn.Module):
        def __init__(self):
            super().__init__()
            self.seq = Seq(nn.Tanh(), nn.ReLU())

        def forward(self, x):
            return self.seq[0](x) - self.seq[1](x)

    m = Indexing()
    compiled = compiler.compile(m, backend=RecordingBackend())
    x = torch.randn(3)
    run_calls(m, compiled, x)
    Seq.__getitem__ = lambda self, i: list(self._modules.values())[1 - i]  # swapped
    run_calls(m, compiled, x)
    assert len(entries(compiled)) >= 2
