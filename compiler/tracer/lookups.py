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

The tracer's handlers ask the same of a class while tracing: the function it writes in Python
for a name (python_method), which they inline.
"""

from __future__ import annotations

import types
from typing import Any

_MISSING = object()


def python_method(cls: type, name: str) -> types.FunctionType | None:
    """The function `cls` (or a base before the builtin ones) defines for `name` in Python."""
    for klass in cls.__mro__:
        if name in klass.__dict__:
            attr = klass.__dict__[name]
            return attr if isinstance(attr, types.FunctionType) else None
    return None


def lookup(cls: type, name: str) -> Any:
    """What attribute lookup on an instance of `cls` finds for `name` on its class (the
    object before any `__get__`), or MISSING."""
    for klass in cls.__mro__:
        found = klass.__dict__.get(name, _MISSING)
        if found is not _MISSING:
            return found
    return _MISSING


MISSING = _MISSING


class ClassAttributes:
    """`ClassAttributes(cls)()`: each name `add`ed is found on `cls` as it was then (the same
    object, or still nothing): the check without the C++ extension, one per class of an
    entry's modules (a call walks the MRO, so it is shared by all modules of the class; their
    exact types and `__dict__`s are checked one by one)."""

    def __init__(self, cls: type):
        self.type = cls
        self.mro = cls.__mro__
        self.found: dict[str, Any] = {}
        self._absent: list[tuple[Any, tuple[str, ...]]] = []
        self._owned: list[tuple[Any, str, Any]] = []

    def add(self, names: tuple[str, ...]) -> None:
        for name in names:
            self.found.setdefault(name, lookup(self.type, name))
        # per class of the MRO, the names it must not define (those found later or nowhere),
        # and the classes that define a found name (it must be the same object there)
        owners = {}
        for name in self.found:
            owners[name] = next(
                (i for i, k in enumerate(self.mro) if name in vars(k)), len(self.mro)
            )
        self._absent = [
            (vars(k).keys(), tuple(n for n, at in owners.items() if at > i))
            for i, k in enumerate(self.mro)
        ]
        self._absent = [(keys, names) for keys, names in self._absent if names]
        self._owned = [
            (vars(self.mro[at]), n, self.found[n]) for n, at in owners.items() if at < len(self.mro)
        ]

    def __call__(self) -> bool:
        if self.type.__mro__ is not self.mro:
            return False
        for keys, names in self._absent:
            if not keys.isdisjoint(names):
                return False
        for klass_dict, name, value in self._owned:
            if klass_dict.get(name, _MISSING) is not value:
                return False
        return True

    def __repr__(self) -> str:
        return f"<ClassAttributes of {self.type.__qualname__}: {sorted(self.found)}>"


def class_lookups(cls: type, names: tuple[str, ...], instance: tuple[str, ...]) -> Any:
    """The C++ extension's `ClassLookups` for one module of class `cls`: each of `names`
    found on `cls` as it is now (or still not at all), none of `instance` in the module's
    `__dict__`; None where the tensor checks are not in C++ (then `ClassAttributes`)."""
    from compiler.runtime import cpp_ext

    make = cpp_ext.lookups_class()
    if make is None:
        return None
    found = {name: lookup(cls, name) for name in names}
    absent = tuple(name for name, v in found.items() if v is _MISSING)
    present = tuple((name, v) for name, v in found.items() if v is not _MISSING)
    return make(cls, absent, present, instance)


def changed(check: Any, obj: Any = None) -> str:
    """What a `ClassLookups` finds changed on `obj`, or a `ClassAttributes` on its class, for
    a recompile reason."""
    if isinstance(check, ClassAttributes):
        cls, instance = check.type, ()
        expected = check.found
    else:
        cls, instance = type(obj), check.instance
        if cls is not check.type:
            return f"a {cls.__name__}, not a {check.type.__name__}"
        expected = dict.fromkeys(check.absent, _MISSING) | dict(check.present)
    parts = []
    for name, value in expected.items():
        now = lookup(cls, name)
        if now is not value:
            parts.append(
                f"{cls.__name__} now defines {name!r}"
                if value is _MISSING
                else f"{cls.__name__}.{name} was replaced"
            )
    held = getattr(obj, "__dict__", {})
    parts += [f"{n!r} is in its __dict__" for n in instance if n in held]
    return "; ".join(parts) or "unchanged"
