"""Reading sources once each, by the shortest path that provably gives the same value.

A source such as `L['self'].layer1[0].conv1.weight` names a value by the Python that reads
it. Evaluated as written, every guard on it walks the whole chain again, through
`nn.Module.__getattr__` and `Sequential.__getitem__` (a linear scan): a resnet's guards cost
more than its eager forward. The guard and fetch functions instead hold every source prefix
in a local, defined once, just before its first use, from the local of the prefix before it.

Two steps take a shorter path than the source's text:

- `module.name` for a child, parameter or buffer reads `module._modules['name']`,
  `._parameters['name']` or `._buffers['name']`, the table `nn.Module.__getattr__` would
  return it from, when the module's class changes nothing in attribute lookup (no
  `__getattr__` or `__getattribute__` of its own, no class attribute of that name) and the
  name is not in the instance's `__dict__`. A guard pins the module's type, so that stays true.
  Assignments through `nn.Module.__setattr__` keep the name in one table only, so a moved entry
  is a missing key: the guard fails and the function recompiles.
- `container[i]` for a Sequential or ModuleList reads `container._modules[key]`, the entry
  its `__getitem__` would return, with guards that pin the container's type and the keys of
  its `_modules` (so the position of every key stays what it was). ModuleDict's
  `__getitem__` is itself `self._modules[key]`: only its type is pinned.

Every other step is the source's own Python with the prefix replaced by its local.
"""

from __future__ import annotations

import ast
import builtins
import keyword
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from compiler.records import Guard

_MISSING = object()
_TABLES = ("_parameters", "_buffers", "_modules")  # nn.Module.__getattr__'s order
_RESERVED = {"L", "G", "O", "F", *dir(builtins)}


@dataclass
class Local:
    """One source prefix held in a local of a generated function."""

    name: str
    expr: str  # Python over L, G and earlier locals
    source: str  # the source text it stands for (what the user reads in guard comments)
    requires: list[Guard] = field(default_factory=list)  # guards the short path relies on
    deps: list[Local] = field(default_factory=list)  # locals `expr` reads


class AccessPlan:
    """The locals for the prefixes of a set of sources, decided once against the values the
    entry was traced with. `rewrite` turns any expression over `L` and `G` into one over the
    locals, and says which locals it needs."""

    def __init__(
        self,
        sources: list[str],
        namespace: dict[str, Any],
        L: dict,
        G: dict,
        ref: Callable[[Any, str], str],
    ):
        self.namespace = namespace
        self.ref = ref
        self._env = {"L": L, "G": G}
        self._prefixes: set[str] = set()
        for src in sources:
            node = _parse(src)
            while node is not None and not isinstance(node, ast.Name):
                self._prefixes.add(ast.dump(node))
                node = _chain_base(node)
        self._locals: dict[str, Local] = {}
        self._values: dict[str, Any] = {}
        self._used_names: set[str] = set()

    def rewrite(self, expr: str) -> tuple[str, list[Local]]:
        """`expr` reading source prefixes through their locals, and those locals with all they
        depend on, each listed after its dependencies."""
        tree = _parse(expr)
        if tree is None:
            return expr, []
        used: list[Local] = []
        new = _Replace(self, used).visit(tree)
        return ast.unparse(new), _closure(used)

    # ---- deciding one local ---------------------------------------------------------------

    def local_for(self, node: ast.expr) -> Local:
        key = ast.dump(node)
        found = self._locals.get(key)
        if found is not None:
            return found
        base = _chain_base(node)
        base_local = (
            self.local_for(base) if base is not None and ast.dump(base) in self._prefixes else None
        )
        requires: list[Guard] = []
        expr = None
        if base_local is not None:
            expr = self._short_path(node, base_local, requires)
        if expr is None:
            requires = []
            expr = _with_base(node, base, base_local)
        local = Local(
            self._name_for(node),
            expr,
            ast.unparse(node),
            requires,
            [base_local] if base_local else [],
        )
        self._locals[key] = local
        self._values[local.name] = self._evaluate(local)
        return local

    def _evaluate(self, local: Local) -> Any:
        env = dict(self._env)
        for dep in local.deps:
            env[dep.name] = self._values[dep.name]
            if env[dep.name] is _MISSING:
                return _MISSING
        try:
            return eval(local.expr, self.namespace, env)
        except Exception:
            return _MISSING

    def _short_path(self, node: ast.expr, base: Local, requires: list[Guard]) -> str | None:
        value = self._values[base.name]
        if not isinstance(value, torch.nn.Module) or not _plain_lookup(type(value)):
            return None
        if isinstance(node, ast.Attribute):
            name = node.attr
            if name in value.__dict__ or _class_defines(type(value), name):
                return None
            for table in _TABLES:
                if name in value.__dict__.get(table, ()):
                    requires.append(self._type_guard(base, value))
                    return f"{base.name}.{table}[{name!r}]"
            return None
        if isinstance(node, ast.Subscript):
            key = _literal(node.slice)
            modules = value.__dict__.get("_modules")
            if modules is None or isinstance(key, bool) or not isinstance(key, (int, str)):
                return None
            getitem = type(value).__getitem__
            if isinstance(key, str):
                if getitem is not torch.nn.ModuleDict.__getitem__ or key not in modules:
                    return None
                requires.append(self._type_guard(base, value))
                return f"{base.name}._modules[{key!r}]"
            keys = list(modules)
            if not -len(keys) <= key < len(keys):
                return None
            if (
                getitem is torch.nn.Sequential.__getitem__
                and type(value).__len__ is torch.nn.Sequential.__len__
            ):
                child_key = keys[key]
            elif (
                getitem is torch.nn.ModuleList.__getitem__
                and type(value).__len__ is torch.nn.ModuleList.__len__
            ):
                child_key = str(key % len(keys))
                if child_key not in modules:
                    return None
            else:
                return None
            requires.append(self._type_guard(base, value))
            requires.append(
                Guard(
                    "DICT_KEYS",
                    f"{base.source}._modules",
                    f"list({base.source}._modules.keys()) == {keys!r}",
                    f"{base.source} has children {keys!r}",
                )
            )
            return f"{base.name}._modules[{child_key!r}]"
        return None

    def _type_guard(self, base: Local, value: Any) -> Guard:
        cls = type(value)
        ref = self.ref(cls, "type")
        return Guard(
            "TYPE_MATCH",
            base.source,
            f"type({base.source}) is {ref}",
            f"{base.source} is a {cls.__name__} (its entries are read from its tables)",
        )

    def _name_for(self, node: ast.expr) -> str:
        name = re.sub(r"\W+", "_", ast.unparse(node)).strip("_")
        if not name.isidentifier() or keyword.iskeyword(name):
            name = f"v_{name}" if f"v_{name}".isidentifier() else "v"
        unique, n = name, 1
        while unique in self._used_names or unique in self.namespace or unique in _RESERVED:
            n += 1
            unique = f"{name}_{n}"
        self._used_names.add(unique)
        return unique


class _Replace(ast.NodeTransformer):
    def __init__(self, plan: AccessPlan, used: list[Local]):
        self.plan = plan
        self.used = used

    def visit(self, node: ast.AST) -> ast.AST:
        if isinstance(node, ast.expr) and ast.dump(node) in self.plan._prefixes:
            local = self.plan.local_for(node)
            self.used.append(local)
            return ast.Name(local.name, ast.Load())
        return self.generic_visit(node)


def _closure(used: list[Local]) -> list[Local]:
    out: list[Local] = []
    seen: set[str] = set()

    def add(local: Local) -> None:
        if local.name in seen:
            return
        seen.add(local.name)
        for dep in local.deps:
            add(dep)
        out.append(local)

    for local in used:
        add(local)
    return out


def _parse(text: str) -> ast.expr | None:
    try:
        return ast.parse(text, mode="eval").body
    except SyntaxError:
        return None


def _chain_base(node: ast.expr) -> ast.expr | None:
    """The prefix one step shorter than `node`, if `node` is a step of a source chain:
    `X.attr`, `X[literal]`, or `f(X)` (`type(X)`, `___iter_rest(X)`)."""
    if isinstance(node, ast.Attribute):
        return node.value
    if isinstance(node, ast.Subscript) and _literal(node.slice) is not _MISSING:
        return node.value
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and len(node.args) == 1
        and not node.keywords
    ):
        return node.args[0]
    return None


def _literal(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _MISSING


def _with_base(node: ast.expr, base: ast.expr | None, base_local: Local | None) -> str:
    """`node`'s own Python, reading its base through `base_local`."""
    if base_local is None:
        return ast.unparse(node)
    name = ast.Name(base_local.name, ast.Load())
    if isinstance(node, ast.Attribute):
        new: ast.expr = ast.Attribute(name, node.attr, ast.Load())
    elif isinstance(node, ast.Subscript):
        new = ast.Subscript(name, node.slice, ast.Load())
    else:
        new = ast.Call(node.func, [name], [])
    return ast.unparse(new)


def _plain_lookup(cls: type) -> bool:
    """Attribute lookup on instances of `cls` is object's, falling back to nn.Module's."""
    return (
        cls.__getattr__ is torch.nn.Module.__getattr__
        and cls.__getattribute__ is object.__getattribute__
        and not any(_class_defines(cls, t) for t in _TABLES)
    )


def _class_defines(cls: type, name: str) -> bool:
    return any(name in vars(klass) for klass in cls.__mro__)
