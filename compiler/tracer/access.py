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
  name is not in the instance's `__dict__`. A guard (compiler/tracer/lookups.py) pins the
  module's type and keeps that true: a class attribute or property of that name added later
  to the class or a base, or an entry in the instance's `__dict__`, fails it. Assignments
  through `nn.Module.__setattr__` keep the name in one table only, so a moved entry is a
  missing key: the guard fails and the function recompiles.
- `container[i]` for a Sequential or ModuleList reads `container._modules[key]`, the entry
  its `__getitem__` would return, with guards that pin the container's type and class
  lookups (its `__getitem__` and `__len__`) and the keys of its `_modules` (so the position
  of every key stays what it was). ModuleDict's `__getitem__` is itself
  `self._modules[key]`: only its type and class lookups are pinned.

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
from compiler.tracer.lookups import ClassAttributes, class_lookups

_MISSING = object()
MISSING = _MISSING  # a value that could not be read
_TABLES = ("_parameters", "_buffers", "_modules")  # nn.Module.__getattr__'s order
_RESERVED = {"L", "G", "O", "F", *dir(builtins)}

# The last step of a source as the tracer writes it: `.name`, `[int]`, `['str']`.
_LAST_STEP = re.compile(r"\.([A-Za-z_]\w*)$|\[(-?\d+|'[^'\\]*')\]$")

# A chain key: (name,) for a root name, else (base key, step, part) with step "." (part: the
# attribute), "[]" (part: the index's repr) or "()" (part: the function's name).
Key = tuple


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
        self._env: dict | None = {"L": L, "G": G}
        self._keys: dict[str, Key | None] = {}  # source text -> its chain key
        self._prefixes: set[Key] = set()
        self._children: dict[Key, list[tuple[str, str]]] = {}  # key -> (step, part) after it
        roots: set[str] = set()
        for src in set(sources):
            key = self._key_of(src)
            while key is not None and len(key) > 1:
                if key not in self._prefixes:
                    self._children.setdefault(key[0], []).append(key[1:])
                self._prefixes.add(key)
                key = key[0]
            if key is not None:
                roots.add(key[0])
        # A name that starts a source chain, as a whole word: where one is left in a guard
        # after its own source is taken out, the guard reads another source too.
        self._other_chain = re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(roots))) + r")\b")
        self._locals: dict[Key, Local] = {}
        self._lookup_guards: dict[str, list[Guard]] = {}  # a module's local -> its guards
        self._class_attributes: dict[type, ClassAttributes] = {}  # without the C++ extension
        self._values: dict[str, Any] = {}
        self._used_names: set[str] = set()
        self._rewritten: dict[tuple[str, str | None], tuple[str, list[Local]]] = {}

    def rewrite(self, expr: str, source: str | None = None) -> tuple[str, list[Local]]:
        """`expr` reading source prefixes through their locals, and those locals with all they
        depend on, each listed after its dependencies. `source`, where given, is the one the
        expression was written about (a guard's source): the common case of an expression
        that reads nothing else is rewritten without parsing it."""
        done = self._rewritten.get((expr, source))
        if done is None:
            done = self._rewrite_by_text(expr, source) or self._rewrite_by_ast(expr)
            self._rewritten[(expr, source)] = done
        return done

    def release(self) -> None:
        """Drop the traced frame's values (the entry must not keep its first inputs alive);
        prefixes first seen after this take their plain path."""
        self._env = None
        self._values.clear()

    def _rewrite_by_text(self, expr: str, source: str | None) -> tuple[str, list[Local]] | None:
        """`source`'s text replaced by its local, when that is certainly the same as replacing
        the expression node: every occurrence stands alone (no name, number or `.` touches
        it), no quote is left outside the occurrences (so none sits in a string literal), and
        nothing left starts another source chain."""
        key = self._keys.get(source) if source is not None else None
        if key not in self._prefixes:
            return None
        rest = expr.replace(source, " ")
        if "'" in rest or '"' in rest or self._other_chain.search(rest):
            return None
        at = expr.find(source)
        while at >= 0:
            end = at + len(source)
            before = expr[at - 1] if at else " "
            after = expr[end] if end < len(expr) else " "
            if _joins(before) or before == "." or _joins(after):
                return None
            at = expr.find(source, end)
        local = self._local_for(key)
        return expr.replace(source, local.name), _closure([local])

    def _rewrite_by_ast(self, expr: str) -> tuple[str, list[Local]]:
        tree = _parse(expr)
        if tree is None or tree.end_lineno != 1:
            return expr, []
        text = expr.encode()  # AST offsets count UTF-8 bytes
        spans: list[tuple[int, int, str]] = []
        used: list[Local] = []
        todo: list[ast.AST] = [tree]
        keys: dict[int, Key | None] = {}
        while todo:
            node = todo.pop()
            key = _node_key(node, keys) if isinstance(node, ast.expr) else None
            if key in self._prefixes:
                local = self._local_for(key)
                used.append(local)
                spans.append((node.col_offset, node.end_col_offset, local.name))
            else:
                todo.extend(reversed(list(ast.iter_child_nodes(node))))
        for start, end, name in sorted(spans, reverse=True):
            text = text[:start] + name.encode() + text[end:]
        return text.decode(), _closure(used)

    def _key_of(self, source: str) -> Key | None:
        """The chain key of a source's text: its last step read off the end when it is one
        the tracer writes (most sources extend another by one step), else parsed."""
        if source in self._keys:
            return self._keys[source]
        m = _LAST_STEP.search(source)
        if m is not None and m.start() > 0:
            base = self._key_of(source[: m.start()])
            if m.group(1) is not None:
                key = (base, ".", m.group(1)) if base is not None else None
            else:
                index = m.group(2)
                value = index[1:-1] if index.startswith("'") else int(index)
                key = (base, "[]", repr(value)) if base is not None else None
        elif source.isidentifier():
            key = (source,)
        else:
            node = _parse(source)
            key = _node_key(node, {}) if node is not None else None
        self._keys[source] = key
        return key

    # ---- deciding one local ---------------------------------------------------------------

    def _local_for(self, key: Key) -> Local:
        found = self._locals.get(key)
        if found is not None:
            return found
        base_key, step, part = key
        base = self._local_for(base_key) if base_key in self._prefixes else None
        base_text = base.name if base is not None else _text(base_key)
        requires: list[Guard] = []
        expr = self._short_path(base, base_key, step, part, requires) if base is not None else None
        if expr is None:
            requires = []
            expr = _step_text(base_text, step, part)
        deps = [base] if base is not None else []
        name = self._name_for(base.name if base is not None else base_key[0].strip("_"), step, part)
        local = Local(name, expr, _text(key), requires, deps)
        self._locals[key] = local
        return local

    def value(self, local: Local) -> Any:
        """The value `local` held when the entry was traced, or MISSING (read once, as the
        guard function reads it, until `release`)."""
        return self._value(local)

    def _value(self, local: Local) -> Any:
        """The value `local` held when the entry was traced (_MISSING where reading it raised);
        read only for the prefixes whose next step needs a decision."""
        if self._env is None:
            return _MISSING
        if local.name not in self._values:
            env = dict(self._env)
            for dep in local.deps:
                env[dep.name] = self._value(dep)
            if any(env[dep.name] is _MISSING for dep in local.deps):
                self._values[local.name] = _MISSING
            else:
                try:
                    self._values[local.name] = eval(local.expr, self.namespace, env)
                except Exception:
                    self._values[local.name] = _MISSING
        return self._values[local.name]

    def _short_path(
        self, base: Local, base_key: Key, step: str, part: str, requires: list[Guard]
    ) -> str | None:
        value = self._value(base)
        if not isinstance(value, torch.nn.Module) or not _plain_lookup(type(value)):
            return None
        if step == ".":
            if part in value.__dict__ or _class_defines(type(value), part):
                return None
            for table in _TABLES:
                if part in value.__dict__.get(table, ()):
                    requires.extend(self._lookups_guard(base, base_key, value))
                    return f"{base.name}.{table}[{part!r}]"
            return None
        if step != "[]":
            return None
        index = ast.literal_eval(part)
        modules = value.__dict__.get("_modules")
        if modules is None or isinstance(index, bool) or not isinstance(index, (int, str)):
            return None
        getitem = type(value).__getitem__
        if isinstance(index, str):
            if getitem is not torch.nn.ModuleDict.__getitem__ or index not in modules:
                return None
            requires.extend(self._lookups_guard(base, base_key, value))
            return f"{base.name}._modules[{index!r}]"
        keys = list(modules)
        if not -len(keys) <= index < len(keys):
            return None
        if (
            getitem is torch.nn.Sequential.__getitem__
            and type(value).__len__ is torch.nn.Sequential.__len__
        ):
            child_key = keys[index]
        elif (
            getitem is torch.nn.ModuleList.__getitem__
            and type(value).__len__ is torch.nn.ModuleList.__len__
        ):
            child_key = str(index % len(keys))
            if child_key not in modules:
                return None
        else:
            return None
        requires.extend(self._lookups_guard(base, base_key, value))
        requires.append(
            Guard(
                "DICT_KEYS",
                f"{base.source}._modules",
                f"list({base.source}._modules.keys()) == {keys!r}",
                f"{base.source} has children {keys!r}",
            )
        )
        return f"{base.name}._modules[{child_key!r}]"

    def _lookups_guard(self, base: Local, base_key: Key, value: torch.nn.Module) -> list[Guard]:
        """The guards every short path from `base` relies on: its exact type, and attribute
        lookup on it still ending in the tables for each name read from them (no class
        attribute, property or `__dict__` entry of that name since), through the same
        `__getattr__`, `__getattribute__` (and `__getitem__`, `__len__` where it is indexed).
        With the C++ extension one `ClassLookups` call checks it all; in Python the class's
        lookups are one check per class, the type and `__dict__` one per module."""
        found = self._lookup_guards.get(base.name)
        if found is not None:
            return found
        cls = type(value)
        steps = self._children.get(base_key, [])
        tables = [value.__dict__.get(t, ()) for t in _TABLES]
        names = tuple(
            part
            for step, part in steps
            if step == "."
            and part not in value.__dict__
            and not _class_defines(cls, part)
            and any(part in table for table in tables)
        )
        special = ("__getattr__", "__getattribute__", *_TABLES)
        if any(step == "[]" for step, _ in steps):
            special += ("__getitem__", "__len__")
        if names:
            shown = ", ".join(map(repr, names))
            why = f"no class attribute or __dict__ entry hides {shown} (read from its tables)"
        else:
            why = "with the __getitem__ and __len__ it was traced with"
        src = base.source
        check = class_lookups(cls, special + names, names)
        if check is not None:
            guards = [
                Guard(
                    "CLASS_LOOKUPS",
                    src,
                    f"{self.ref(check, 'lookups')}({src})",
                    f"{src} is a {cls.__name__}, {why}",
                )
            ]
        else:
            attributes = self._class_attributes.get(cls)
            if attributes is None:
                attributes = self._class_attributes[cls] = ClassAttributes(cls)
            attributes.add(special + names)
            expr = f"type({src}) is {self.ref(cls, 'type')}"
            if len(names) == 1:
                expr += f" and {names[0]!r} not in {src}.__dict__"
            elif names:
                expr += f" and {src}.__dict__.keys().isdisjoint({names!r})"
            guards = [
                Guard(
                    "CLASS_LOOKUPS",
                    f"type({src})",
                    f"{self.ref(attributes, 'attributes')}()",
                    f"{cls.__name__} and its bases define what they did when traced (nothing"
                    " that hides what its modules read from their tables)",
                ),
                Guard("TYPE_MATCH", src, expr, f"{src} is a {cls.__name__}, {why}"),
            ]
        self._lookup_guards[base.name] = guards
        return guards

    def _name_for(self, base: str, step: str, part: str) -> str:
        """A readable name for a chain's local: L['self'].layer1[0] -> L_self_layer1_0."""
        part = re.sub(r"\W+", "_", part).strip("_")
        name = f"{part}_{base}" if step == "()" else f"{base}_{part}"
        if not name.isidentifier() or keyword.iskeyword(name):
            name = f"v_{name}" if f"v_{name}".isidentifier() else "v"
        unique, n = name, 1
        while unique in self._used_names or unique in self.namespace or unique in _RESERVED:
            n += 1
            unique = f"{name}_{n}"
        self._used_names.add(unique)
        return unique


def _closure(used: list[Local]) -> list[Local]:
    """`used` with every local they depend on, each after its dependencies."""
    if len(used) == 1:
        return _chain(used[0])
    out: list[Local] = []
    seen: set[str] = set()
    for local in used:
        for step in _chain(local):
            if step.name not in seen:
                seen.add(step.name)
                out.append(step)
    return out


def _chain(local: Local) -> list[Local]:
    """`local` after the locals it is read from, root first."""
    chain = [local]
    while chain[-1].deps:
        chain.append(chain[-1].deps[0])
    return chain[::-1]


def _joins(ch: str) -> bool:
    """`ch` would continue a name or a number written next to it."""
    return ch.isalnum() or ch == "_"


def _parse(text: str) -> ast.expr | None:
    try:
        return ast.parse(text, mode="eval").body
    except SyntaxError:
        return None


def _node_key(node: ast.expr, memo: dict[int, Key | None]) -> Key | None:
    """The chain key of an expression node: `X.attr`, `X[literal]`, `f(X)` (`type(X)`,
    `___iter_rest(X)`) over a chain, or a name; None for anything else."""
    if id(node) in memo:
        return memo[id(node)]
    key: Key | None = None
    if isinstance(node, ast.Name):
        key = (node.id,)
    elif isinstance(node, ast.Attribute):
        base = _node_key(node.value, memo)
        key = (base, ".", node.attr) if base is not None else None
    elif isinstance(node, ast.Subscript):
        index = _literal(node.slice)
        base = _node_key(node.value, memo) if index is not _MISSING else None
        key = (base, "[]", repr(index)) if base is not None else None
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and len(node.args) == 1
        and not node.keywords
    ):
        base = _node_key(node.args[0], memo)
        key = (base, "()", node.func.id) if base is not None else None
    memo[id(node)] = key
    return key


def _literal(node: ast.expr) -> Any:
    """The value of an index as sources write it (a constant, a negative number, a tuple of
    those), or _MISSING."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = _literal(node.operand)
        return -value if type(value) in (int, float, complex) else _MISSING
    if isinstance(node, ast.Tuple):
        items = tuple(_literal(e) for e in node.elts)
        return _MISSING if _MISSING in items else items
    return _MISSING


def _step_text(base: str, step: str, part: str) -> str:
    if step == ".":
        return f"{base}.{part}"
    if step == "[]":
        return f"{base}[{part}]"
    return f"{part}({base})"


def _text(key: Key) -> str:
    """The Python a chain key stands for, as the tracer writes sources."""
    if len(key) == 1:
        return key[0]
    base, step, part = key
    return _step_text(_text(base), step, part)


def _plain_lookup(cls: type) -> bool:
    """Attribute lookup on instances of `cls` is object's, falling back to nn.Module's."""
    return (
        cls.__getattr__ is torch.nn.Module.__getattr__
        and cls.__getattribute__ is object.__getattribute__
        and not any(_class_defines(cls, t) for t in _TABLES)
    )


def _class_defines(cls: type, name: str) -> bool:
    return any(name in vars(klass) for klass in cls.__mro__)
