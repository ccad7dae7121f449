"""ClassLookups on its own (compiler/runtime/class_lookups.h), next to its Python counterpart
ClassAttributes (compiler/tracer/lookups.py): each answers False once a class attribute, a
property on a base or a `__dict__` entry would hide a name, and True again when it is gone;
a change that hides nothing (a new class version tag, a new `__dict__` entry of another
name) keeps True. Through the guard functions: tests/tracer/test_shadowed_tables.py."""

from __future__ import annotations

from typing import Callable

import pytest
import torch
from torch import nn

from compiler.tracer.lookups import MISSING, ClassAttributes, lookup

SPECIAL = ("__getattr__", "__getattribute__", "_parameters", "_buffers", "_modules")


def fresh() -> tuple[type, nn.Module]:
    class Base(nn.Module):
        pass

    class Mod(Base):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(2))

    return Mod, Mod()


def cpp(extension, cls: type) -> Callable[[nn.Module], bool]:
    names = (*SPECIAL, "w")
    found = {n: lookup(cls, n) for n in names}
    absent = tuple(n for n, v in found.items() if v is MISSING)
    present = tuple((n, v) for n, v in found.items() if v is not MISSING)
    return extension.ClassLookups(cls, absent, present, ("w",))


def python(extension, cls: type) -> Callable[[nn.Module], bool]:
    attributes = ClassAttributes(cls)
    attributes.add((*SPECIAL, "w"))
    return lambda m: type(m) is cls and attributes() and "w" not in m.__dict__


@pytest.fixture(params=[cpp, python], ids=["cpp", "python"])
def make(request, extension):
    return lambda cls: request.param(extension, cls)


def test_unchanged_and_unrelated_changes_hold(make):
    cls, m = fresh()
    check = make(cls)
    assert check(m) and check(m)
    cls.other = 1  # a new version tag, nothing hidden
    type(m).__mro__[1].other_too = property(lambda self: 1)
    m.plain = 3  # a new __dict__ entry of another name
    assert check(m) and check(m)


@pytest.mark.parametrize(
    "hide, unhide",
    [
        (lambda cls, m: setattr(cls, "w", 1.0), lambda cls, m: delattr(cls, "w")),
        (
            lambda cls, m: setattr(cls.__mro__[1], "w", property(lambda self: 2)),
            lambda cls, m: delattr(cls.__mro__[1], "w"),
        ),
        (lambda cls, m: object.__setattr__(m, "w", 3.0), lambda cls, m: m.__dict__.pop("w")),
        (
            lambda cls, m: setattr(cls, "__getattr__", lambda self, n: 4),
            lambda cls, m: delattr(cls, "__getattr__"),
        ),
        (lambda cls, m: setattr(nn.Module, "w", 5.0), lambda cls, m: delattr(nn.Module, "w")),
    ],
    ids=["class", "base property", "__dict__", "__getattr__", "nn.Module"],
)
def test_hiding_fails_and_unhiding_holds_again(make, hide, unhide):
    cls, m = fresh()
    check = make(cls)
    assert check(m)
    hide(cls, m)
    try:
        assert not check(m) and not check(m)
    finally:
        unhide(cls, m)
    assert check(m)


def test_another_type_or_dict_fails(make, extension):
    cls, m = fresh()
    check = make(cls)
    assert not check(nn.Linear(2, 2))
    m.__dict__ = {**m.__dict__, "w": 1.0}  # a new dict: not the one last checked
    assert not check(m)


def test_cpp_misuse_raises(extension):
    with pytest.raises(TypeError):
        extension.ClassLookups(nn.Linear, ("w",), (("x",),), ())
    with pytest.raises(TypeError):
        extension.ClassLookups(nn.Linear, (1,), (), ())
    check = extension.ClassLookups(nn.Linear, ("w",), (), ("w",))
    with pytest.raises(TypeError):
        check()
    assert "absent ('w',)" in repr(check)
