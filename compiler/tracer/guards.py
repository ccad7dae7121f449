"""Guards: the checks an entry's inputs must pass for its graph to be reused.

Each guard is one Python expression over `L` (the frame's locals, cells and stack by name)
and `G` (the function's globals). An entry's guards are compiled once into a straight-line
function, one check per line, commented with the user line that caused it; a miss is then
explained by evaluating the guards one by one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from compiler.records import Guard, SourceLine

# Types whose values are compared with ==: the graph is specialised on the value itself.
CONSTANT_TYPES = (int, float, bool, str, bytes, complex, type(None), type(Ellipsis), range, slice)


@dataclass
class GuardSet:
    guards: list[Guard] = field(default_factory=list)
    # Objects the guard expressions refer to (dtypes, devices, types, kept-alive objects).
    namespace: dict[str, Any] = field(default_factory=dict)
    _seen: set[tuple[str, str]] = field(default_factory=set)
    _names: dict[int, str] = field(default_factory=dict)

    def _ref(self, obj: Any, hint: str) -> str:
        key = id(obj)
        name = self._names.get(key)
        if name is None:
            name = f"___{hint}{len(self._names)}"
            self._names[key] = name
            self.namespace[name] = obj
        return name

    def add(self, kind: str, source: str, expr: str, description: str, line: SourceLine | None) -> None:
        key = (kind, expr)
        if key in self._seen:
            return
        self._seen.add(key)
        self.guards.append(Guard(kind, source, expr, description, line))

    # ---- the guard kinds --------------------------------------------------------------

    def tensor(self, source: str, t: torch.Tensor, line: SourceLine | None = None) -> None:
        type_ref = self._ref(type(t), "type")
        dtype_ref = self._ref(t.dtype, "dtype")
        self.add("TENSOR_MATCH", source, f"type({source}) is {type_ref}", f"{source} is a {type(t).__name__}", line)
        self.add("TENSOR_MATCH", source, f"{source}.dtype is {dtype_ref}", f"{source} has dtype {t.dtype}", line)
        device_ref = self._ref(t.device, "device")
        self.add("TENSOR_MATCH", source, f"{source}.device == {device_ref}", f"{source} is on {t.device}", line)
        shape = tuple(t.shape)
        self.add("TENSOR_MATCH", source, f"{source}.shape == {shape!r}", f"{source} has shape {list(shape)}", line)
        if t.layout == torch.strided:
            stride = tuple(t.stride())
            self.add(
                "TENSOR_MATCH", source, f"{source}.stride() == {stride!r}", f"{source} has strides {stride}", line
            )
        self.add(
            "TENSOR_MATCH",
            source,
            f"{source}.requires_grad is {t.requires_grad}",
            f"{source}.requires_grad is {t.requires_grad}",
            line,
        )

    def constant(self, source: str, value: Any, line: SourceLine | None = None) -> None:
        if isinstance(value, float) and math.isnan(value):
            self.add("CONSTANT_MATCH", source, f"{source} != {source}", f"{source} is nan", line)
            return
        type_ref = self._ref(type(value), "type")
        if value is None or isinstance(value, bool):
            expr = f"{source} is {value!r}"
        elif isinstance(value, (int, str, bytes)) or (isinstance(value, float) and math.isfinite(value)):
            expr = f"type({source}) is {type_ref} and {source} == {value!r}"
        else:
            ref = self._ref(value, "const")
            expr = f"type({source}) is {type_ref} and {source} == {ref}"
        self.add("CONSTANT_MATCH", source, expr, f"{source} == {value!r}", line)

    def identity(self, source: str, obj: Any, line: SourceLine | None = None) -> None:
        ref = self._ref(obj, "obj")
        label = getattr(obj, "__qualname__", None) or type(obj).__name__
        self.add("ID_MATCH", source, f"{source} is {ref}", f"{source} is the same {label} object", line)

    def type_of(self, source: str, obj: Any, line: SourceLine | None = None) -> None:
        ref = self._ref(type(obj), "type")
        self.add("TYPE_MATCH", source, f"type({source}) is {ref}", f"{source} is a {type(obj).__name__}", line)

    def length(self, source: str, obj: Any, line: SourceLine | None = None) -> None:
        self.type_of(source, obj, line)
        self.add("LENGTH_CHECK", source, f"len({source}) == {len(obj)}", f"len({source}) == {len(obj)}", line)

    def dict_keys(self, source: str, obj: dict, line: SourceLine | None = None) -> None:
        self.type_of(source, obj, line)
        keys = list(obj.keys())
        if all(isinstance(k, CONSTANT_TYPES) for k in keys):
            self.add("DICT_KEYS", source, f"list({source}.keys()) == {keys!r}", f"{source} has keys {keys!r}", line)
        else:
            self.length(source, obj, line)

    def grad_mode(self, enabled: bool) -> None:
        ref = self._ref(torch.is_grad_enabled, "fn")
        self.add("GRAD_MODE", "torch.is_grad_enabled()", f"{ref}() is {enabled}", f"grad mode is {'on' if enabled else 'off'}", None)


@dataclass
class CompiledGuards:
    check: Callable[[dict, dict], bool]
    source: str
    guards: list[Guard]
    namespace: dict[str, Any]

    def failures(self, L: dict, G: dict) -> list[Guard]:
        """The guards that do not hold for these values (for recompile reasons)."""
        failed = []
        for g in self.guards:
            try:
                ok = eval(g.expr, self.namespace, {"L": L, "G": G})
            except Exception:
                ok = False
            if not ok:
                failed.append(g)
        return failed


def compile_guards(guard_set: GuardSet, name: str) -> CompiledGuards:
    lines = [f"def {name}(L, G):", "    try:"]
    for g in guard_set.guards:
        if g.user_line is not None:
            lines.append(f"        # {g.description}  ({g.user_line.filename}:{g.user_line.lineno})")
        else:
            lines.append(f"        # {g.description}")
        lines.append(f"        if not ({g.expr}):")
        lines.append("            return False")
    lines.append("    except Exception:  # a value is missing or of another kind")
    lines.append("        return False")
    lines.append("    return True")
    source = "\n".join(lines) + "\n"
    namespace = dict(guard_set.namespace)
    exec(compile(source, f"<guards {name}>", "exec"), namespace)
    return CompiledGuards(namespace[name], source, list(guard_set.guards), namespace)


def describe_failure(failed: list[Guard], L: dict, G: dict, namespace: dict) -> str:
    """One readable line per failing guard: what was expected and what came."""
    parts = []
    for g in failed[:3]:
        try:
            got = eval(_value_expr(g), namespace, {"L": L, "G": G})
            parts.append(f"{g.description} (got {got!r})")
        except Exception:
            parts.append(f"{g.description} (value missing)")
    return "; ".join(parts)


def _value_expr(g: Guard) -> str:
    if g.kind == "CONSTANT_MATCH":
        return g.source
    expr = g.expr
    for prop in (".dtype", ".device", ".shape", ".stride()", ".requires_grad"):
        if expr.startswith(g.source + prop):
            return g.source + prop
    if expr.startswith("len("):
        return f"len({g.source})"
    if expr.startswith("type("):
        return f"type({g.source}).__name__"
    if g.kind == "GRAD_MODE":
        return "__import__('torch').is_grad_enabled()"
    return g.source
