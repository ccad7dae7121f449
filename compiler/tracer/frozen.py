"""Which guard checks a call may skip because the module attributes they read cannot have
changed: the plan for the C++ extension's `FrozenReads` (compiler/runtime/csrc/frozen_reads.h).

A module's guard function mostly reads attributes and table entries of modules it pins by
identity (`L_self is ___obj4`, then `L_self._modules['conv1']`, `L_self_conv1.padding_mode`)
and checks values that stay the same objects as long as those reads do. Such a read is
*frozen*: `base.name` where base is pinned (a root) or frozen itself, base's attribute lookup
is object's (nn.Module's `__getattr__` only as a fallback) and the name is in base's
`__dict__` or a plain class attribute; or `table[key]` on an exact dict. `FrozenReads` pins each
one with its dict's version tag and its type's version tag, which CPython changes on every
write to the dict and every change to the class or a base; a call that finds them unchanged
gets the frozen values back without reading them.

The checks then split three ways:
- `skip`: hold whenever the frozen reads are unchanged: an identity check of a frozen value
  (`X is ___obj7`, `X is None`), or its comparison with an immutable constant of an exact
  type (`type(X) is ___type9 and X == 'zeros'`, a constant tuple);
  the keys of a `_modules` table read by key (`list(X._modules.keys()) == ['0', '1']`);
  a module's class lookups (`___lookupsN(X)`, compiler/tracer/lookups.py) where an attribute
  read from X is frozen (its watch pins X's type, the type's version tag and X's `__dict__`);
- `types`: `type(X) is ___typeN` of a frozen value (`obj.__class__ = ...` changes no dict):
  checked by `FrozenReads` on every call;
- everything else runs every call, tensors' metadata included, on the frozen values where
  it reads them (`per_call`), in the guard function's order.
"""

from __future__ import annotations

import ast
import re
import types
from dataclasses import dataclass, field
from typing import Any, Callable

from compiler.tracer.access import Local

_ID = re.compile(r"^(\w+) is (___\w+|None|True|False)$")
_EQ = re.compile(r"^type\((\w+)\) is (___type\d+) and \1 == (.+)$")
_TUPLE = re.compile(r"^(\w+) is (___const\d+) or ___same_constant\(\1, \2\)$")
_TYPE = re.compile(r"^type\((\w+)\) is (___type\d+)$")
_LOOKUPS = re.compile(r"^___lookups\d+\((\w+)\)$")
_KEYS = re.compile(r"^list\((\w+\._modules)\.keys\(\)\) == \[[^\]]*\]$")
_IMMUTABLE = (int, float, str, bytes)  # `==` on exact values of these reads nothing else

# One check as the plan sees it: its guard kind, its expression over the guard function's
# locals, and the locals it reads (each after its dependencies).
Check = tuple[str, str, list[Local]]


@dataclass
class FrozenPlan:
    roots: list[str]  # locals pinned by identity before the reads, and namespace dicts
    # (name, base, is an attribute, key): name is the guard function's local, or for a step
    # inside one local's short path (`L_self._modules` of `L_self._modules['conv1']`) its text
    reads: list[tuple[str, str, bool, Any]]
    names: set[str]  # the guard function's locals that are frozen reads
    skip: set[int] = field(default_factory=set)  # positions of the checks a call skips
    types: dict[int, tuple[str, type]] = field(default_factory=dict)  # position -> (local, type)

    def remembered(self) -> list[str]:
        """`FrozenReads.remember`'s arguments, as Python over the guard function's locals."""
        return [*self.roots, *(name for name, _, _, _ in self.reads)]

    def spec(self, selection: list[str]) -> tuple:
        """`FrozenReads`' arguments, answering the locals in `selection` on a call."""
        slots = {name: i for i, name in enumerate(self.remembered())}
        reads = tuple((slots[base], attr, key) for _, base, attr, key in self.reads)
        checked = tuple((slots[name], t) for name, t in self.types.values())
        return (len(self.roots), reads, checked, tuple(slots[n] for n in selection))


def plan_frozen(
    checks: list[Check], namespace: dict[str, Any], value: Callable[[Local], Any], missing: Any
) -> FrozenPlan | None:
    """The frozen reads and the checks they let a call skip, or None when there are none.
    `value(local)` is the value a local held when the entry was traced (`missing` if none)."""
    locals_: dict[str, Local] = {}
    for _, _, needs in checks:
        for local in needs:
            locals_.setdefault(local.name, local)
    pinned = {
        m.group(1)
        for kind, expr, _ in checks
        if kind == "ID_MATCH" and (m := _ID.match(expr)) and m.group(2).startswith("___")
    }
    plan = FrozenPlan([], [], set())
    texts: set[str] = set()
    for local in locals_.values():
        steps = _steps(local.expr)
        if steps is None:
            continue
        root, steps = steps
        if root not in plan.names and root not in plan.roots:
            if not _pinned_base(root, pinned, locals_, plan.names, namespace):
                continue
        base = value(locals_[root]) if root in locals_ else namespace[root]
        reads, text = [], root
        for attr, key in steps:
            if base is missing or not _plain_read(base, attr, key):
                break
            step_text = f"{text}.{key}" if attr else f"{text}[{key!r}]"
            reads.append((step_text, text, attr, key))
            base, text = _read(base, attr, key), step_text
        else:
            if root not in plan.names and root not in plan.roots:
                plan.roots.append(root)
            *inner, (_, base_text, attr, key) = reads
            plan.reads += [r for r in inner if r[0] not in texts]
            texts.update(r[0] for r in inner)
            plan.reads.append((local.name, base_text, attr, key))
            plan.names.add(local.name)
    tables = {base for _, base, attr, _ in plan.reads if not attr}  # dicts read by key
    watched = {base for _, base, attr, _ in plan.reads if attr}  # objects read attributes of
    for i, (kind, expr, _) in enumerate(checks):
        if _skippable(kind, expr, namespace) in plan.names:
            plan.skip.add(i)
        elif kind == "CLASS_LOOKUPS" and (m := _LOOKUPS.match(expr)) and m.group(1) in watched:
            plan.skip.add(i)  # its type, the type's version and its __dict__ are pinned
        elif kind == "DICT_KEYS" and (m := _KEYS.match(expr)) and m.group(1) in tables:
            plan.skip.add(i)  # the keys of a dict whose version is pinned
        elif kind == "TYPE_MATCH" and (m := _TYPE.match(expr)) and m.group(1) in plan.names:
            plan.types[i] = (m.group(1), namespace[m.group(2)])
    return plan if plan.skip else None


def _steps(expr: str) -> tuple[str, list[tuple[bool, Any]]] | None:
    """The name `expr` starts from and its steps, (True, attribute) or (False, key), for a
    chain of `.attr` and `[literal]` steps from a name, else None."""
    try:
        node = ast.parse(expr, mode="eval").body
    except SyntaxError:
        return None
    steps: list[tuple[bool, Any]] = []
    while not isinstance(node, ast.Name):
        if isinstance(node, ast.Attribute):
            steps.append((True, node.attr))
            node = node.value
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.slice, ast.Constant)
            and type(node.slice.value) in (int, str)
        ):
            steps.append((False, node.slice.value))
            node = node.value
        else:
            return None
    return (node.id, steps[::-1]) if steps else None


_NOTHING = object()


def _pinned_base(
    base: str, pinned: set[str], locals_: dict[str, Local], frozen: set[str], namespace: dict
) -> bool:
    """`base` is the same object on every call that gets as far as reading it: a local the
    guard function pins by identity (read without any frozen step), or a dict in its
    namespace (a module's globals)."""
    if base in locals_:
        chain = [locals_[base]]
        while chain[-1].deps:
            chain.append(chain[-1].deps[0])
        return base in pinned and not any(c.name in frozen for c in chain)
    return type(namespace.get(base)) is dict


def _plain_read(base: Any, attr: bool, key: Any) -> bool:
    """Reading `key` from `base` is one `FrozenReads` can pin (it checks again when it
    remembers: this only keeps the function from planning reads it would refuse)."""
    if not attr:
        return type(base) is dict and key in base
    cls = type(base)
    if cls is not types.ModuleType and cls.__getattribute__ is not object.__getattribute__:
        return False
    descr = next((k.__dict__[key] for k in cls.__mro__ if key in k.__dict__), _NOTHING)
    data_descriptor = hasattr(type(descr), "__set__") or hasattr(type(descr), "__delete__")
    if descr is not _NOTHING and data_descriptor:
        return False
    in_dict = key in getattr(base, "__dict__", {})
    return in_dict or (descr is not _NOTHING and not hasattr(type(descr), "__get__"))


def _read(base: Any, attr: bool, key: Any) -> Any:
    """The value of a read `_plain_read` accepted, without running any user code."""
    if not attr:
        return base[key]
    found = getattr(base, "__dict__", {})
    if key in found:
        return found[key]
    return next(k.__dict__[key] for k in type(base).__mro__ if key in k.__dict__)


def _skippable(kind: str, expr: str, namespace: dict) -> str | None:
    """The local a check is about when its answer depends only on that local's identity."""
    if kind == "ID_MATCH" or kind == "CONSTANT_MATCH":
        m = _ID.match(expr) or _TUPLE.match(expr)
        if m is not None:
            return m.group(1)
    if kind == "CONSTANT_MATCH":
        m = _EQ.match(expr)
        if m is not None and namespace.get(m.group(2)) in _IMMUTABLE:
            return m.group(1)
    return None
