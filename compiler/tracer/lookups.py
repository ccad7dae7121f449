"""The guard behind a module's short paths (compiler/tracer/access.py): attribute lookup on the
module still ends in nn.Module.__getattr__'s tables, as it did when the entry was traced.

`module.w` reads `module._parameters['w']` only because no class of the module's MRO defines
`w` and its `__dict__` has no `w`: eager's lookup finds a class attribute, a property (on the
class or any base) or an instance entry first. Any of them can be added after compiling
(`type(m).w = ...`, `object.__setattr__(m, 'w', ...)`); the guard pins the type exactly, the
names absent from its MRO, the class attributes the lookup itself goes through
(`__getattr__`, `__getattribute__`, `__getitem__`, ...) as the same objects, and the names
absent from the instance's `__dict__`.

With the C++ guard extension the check is its `ClassLookups`, which redoes the class lookups
only when the type's version tag changed (any write to the class or a base renews it); in
Python every call walks the MRO.
"""

from __future__ import annotations

from typing import Any

_MISSING = object()


def lookup(cls: type, name: str) -> Any:
    """What attribute lookup on an instance of `cls` finds for `name` on its class (the
    object before any `__get__`), or MISSING."""
    for klass in cls.__mro__:
        found = klass.__dict__.get(name, _MISSING)
        if found is not _MISSING:
            return found
    return _MISSING


MISSING = _MISSING


class ClassLookups:
    """`ClassLookups(type, absent, present, instance)(obj)`: obj's exact type is `type`, no
    class of its MRO defines a name of `absent`, each (name, value) of `present` is found as
    that same object, and no name of `instance` is in obj's `__dict__` (the C++ extension's
    class of the same name, without its version tag shortcut)."""

    __slots__ = ("type", "absent", "present", "instance")

    def __init__(self, type: type, absent: tuple, present: tuple, instance: tuple):
        self.type = type
        self.absent = absent
        self.present = present
        self.instance = instance

    def __call__(self, obj: Any) -> bool:
        cls = type(obj)
        if cls is not self.type:
            return False
        for klass in cls.__mro__:
            names = klass.__dict__.keys()
            if not names.isdisjoint(self.absent):
                return False
        for name, value in self.present:
            if lookup(cls, name) is not value:
                return False
        if self.instance:
            found = getattr(obj, "__dict__", None)
            if found is not None and not found.keys().isdisjoint(self.instance):
                return False
        return True

    def __repr__(self) -> str:
        return (
            f"<ClassLookups of {self.type.__qualname__}: absent {self.absent!r},"
            f" not in __dict__ {self.instance!r}>"
        )


def class_lookups(cls: type, names: tuple[str, ...], instance: tuple[str, ...]) -> Any:
    """The check that each of `names` is found on `cls` as it is now (or still not at all),
    and no name of `instance` is in the `__dict__`: the C++ extension's `ClassLookups` where
    the tensor checks are in C++, else this module's."""
    from compiler.runtime import tensor_guards

    found = {name: lookup(cls, name) for name in names}
    absent = tuple(name for name, v in found.items() if v is _MISSING)
    present = tuple((name, v) for name, v in found.items() if v is not _MISSING)
    make = tensor_guards.lookups_class() or ClassLookups
    return make(cls, absent, present, instance)


def changed(check: Any, obj: Any) -> str:
    """What a `ClassLookups` finds changed on `obj`, for a recompile reason."""
    cls = type(obj)
    if cls is not check.type:
        return f"a {cls.__name__}, not a {check.type.__name__}"
    parts = [
        f"{cls.__name__} now defines {n!r}" for n in check.absent if lookup(cls, n) is not _MISSING
    ]
    parts += [
        f"{cls.__name__}.{n} was replaced" for n, v in check.present if lookup(cls, n) is not v
    ]
    held = getattr(obj, "__dict__", {})
    parts += [f"{n!r} is in its __dict__" for n in check.instance if n in held]
    return "; ".join(parts) or "unchanged"
