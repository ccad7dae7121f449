"""Guards: the checks an entry's inputs must pass for its graph to be reused.

Each guard is one Python expression over `L` (the frame's locals, cells and stack by name)
and `G` (the function's globals). An entry's guards are compiled once into a straight-line
function, one check per line, commented with the user line that caused it; a miss is then
explained by evaluating the guards one by one.

Where the C++ extension is built (compiler/runtime/cpp_ext.py), a tensor's
metadata checks (exact type, dtype, device, shape, strides, requires_grad) stay in the
function as comments marked [C++] and run in one call to a `TensorChecker` for many tensors,
before anything else reads those tensors; without it every check is Python, as written.
"""

from __future__ import annotations

import math
import re
import types
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import torch

from compiler.records import Guard, SourceLine
from compiler.tracer import lookups
from compiler.tracer.access import MISSING, AccessPlan, Local
from compiler.tracer.frozen import FrozenPlan, plan_frozen

try:
    import numpy
except ImportError:  # torch runs without numpy; then no value is a numpy scalar
    numpy = None

# Types whose values are compared with ==: the graph is specialised on the value itself.
# numpy scalars (`np.float32(0.5)`, `np.int64(3)`) are such values too: the graph holds them
# as constants (graph_builder.numpy_scalar).
CONSTANT_TYPES = (int, float, bool, str, bytes, complex, type(None), type(Ellipsis), range, slice)
if numpy is not None:
    CONSTANT_TYPES += (numpy.generic,)


@dataclass(frozen=True)
class TensorSpec:
    """The metadata `GuardSet.tensor` guards for one source, and the guards that check it:
    what a C++ `TensorChecker` checks in their place."""

    guards: frozenset[tuple[str, str]]  # (kind, expr) of each guard it stands for
    type: type
    dtype: torch.dtype
    device: torch.device
    sizes: tuple[int, ...] | None  # None: symbolic sizes, checked by shapes.py's guards
    strides: tuple[int, ...] | None  # None: symbolic sizes or a non-strided layout
    requires_grad: bool

    def as_tuple(self) -> tuple:
        """The spec as `TensorChecker` takes it."""
        return (self.type, self.dtype, self.device, self.sizes, self.strides, self.requires_grad)


@dataclass
class GuardSet:
    guards: list[Guard] = field(default_factory=list)
    # Objects the guard expressions refer to (dtypes, devices, types, kept-alive objects).
    namespace: dict[str, Any] = field(default_factory=dict)
    # Each tensor source's spec; None where one source was guarded as two different tensors.
    tensors: dict[str, TensorSpec | None] = field(default_factory=dict)
    _seen: set[tuple[str, str]] = field(default_factory=set)
    _names: dict[int, str] = field(default_factory=dict)

    def reference(self, obj: Any, hint: str) -> str:
        """A name the guards read `obj` by, kept in their namespace (also a source for an
        object no local or global reaches: the cell of a method found on a class)."""
        key = id(obj)
        name = self._names.get(key)
        if name is None:
            name = f"___{hint}{len(self._names)}"
            self._names[key] = name
            self.namespace[name] = obj
        return name

    def add(
        self, kind: str, source: str, expr: str, description: str, line: SourceLine | None
    ) -> None:
        key = (kind, expr)
        if key in self._seen:
            return
        self._seen.add(key)
        self.guards.append(Guard(kind, source, expr, description, line))

    # ---- the guard kinds --------------------------------------------------------------

    def tensor(
        self, source: str, t: torch.Tensor, line: SourceLine | None = None, shape: bool = True
    ) -> None:
        """The checks of a tensor input; `shape=False` for one with symbolic sizes, whose
        shape and stride checks come from compiler/tracer/shapes.py."""
        type_ref = self.reference(type(t), "type")
        dtype_ref = self.reference(t.dtype, "dtype")
        checks = [
            (f"type({source}) is {type_ref}", f"{source} is a {type(t).__name__}"),
            (f"{source}.dtype is {dtype_ref}", f"{source} has dtype {t.dtype}"),
        ]
        if t.device.type == "cpu":  # the same test as `.device == cpu`, without building a device
            checks.append((f"{source}.is_cpu", f"{source} is on cpu"))
        else:
            device_ref = self.reference(t.device, "device")
            checks.append((f"{source}.device == {device_ref}", f"{source} is on {t.device}"))
        sizes = strides = None
        if shape:
            sizes = tuple(t.shape)
            checks.append((f"{source}.shape == {sizes!r}", f"{source} has shape {list(sizes)}"))
        if shape and t.layout == torch.strided:
            strides = tuple(t.stride())
            checks.append((f"{source}.stride() == {strides!r}", f"{source} has strides {strides}"))
        rg = t.requires_grad
        checks.append((f"{source}.requires_grad is {rg}", f"{source}.requires_grad is {rg}"))
        for expr, description in checks:
            self.add("TENSOR_MATCH", source, expr, description, line)
        keys = frozenset(("TENSOR_MATCH", expr) for expr, _ in checks)
        spec = TensorSpec(keys, type(t), t.dtype, t.device, sizes, strides, rg)
        self.tensors[source] = spec if self.tensors.get(source, spec) == spec else None

    def constant(self, source: str, value: Any, line: SourceLine | None = None) -> None:
        if isinstance(value, float) and math.isnan(value):
            self.add("CONSTANT_MATCH", source, f"{source} != {source}", f"{source} is nan", line)
            return
        type_ref = self.reference(type(value), "type")
        if value is None or isinstance(value, bool):
            expr = f"{source} is {value!r}"
        elif type(value) in (int, str, bytes) or (type(value) is float and math.isfinite(value)):
            # exact types only: the repr of a subclass (a str or int Enum) is not Python
            expr = f"type({source}) is {type_ref} and {source} == {value!r}"
        else:
            ref = self.reference(value, "const")
            expr = f"type({source}) is {type_ref} and {source} == {ref}"
        self.add("CONSTANT_MATCH", source, expr, f"{source} == {value!r}", line)

    def constant_tuple(self, source: str, value: tuple, line: SourceLine | None = None) -> None:
        """A tuple of constants read from an attribute (a convolution's stride, padding and
        dilation): one check that it is the same tuple object, with its elements compared
        (exact types) only when it is another one. Per element that was a length, a read,
        a type and a value check: about a quarter of resnet18's guard function."""
        ref = self.reference(value, "const")
        self.namespace["___same_constant"] = same_constant
        self.add(
            "CONSTANT_MATCH",
            source,
            f"{source} is {ref} or ___same_constant({source}, {ref})",
            f"{source} == {value!r}",
            line,
        )

    def identity(self, source: str, obj: Any, line: SourceLine | None = None) -> None:
        label = getattr(obj, "__qualname__", None) or type(obj).__name__
        if _bound_anew(obj):
            # `Cls.apply`, `obj.method`, `x.__add__`: each read binds a new method object, so
            # `is` would fail on every call (a recompile per call, then eager for good).
            # The same method is the same function bound to the same object.
            type_ref = self.reference(type(obj), "type")
            self_ref = self.reference(obj.__self__, "obj")
            func = getattr(obj, "__func__", None)
            same_func = (
                f"{source}.__func__ is {self.reference(func, 'obj')}"
                if func is not None
                else f"{source}.__name__ == {obj.__name__!r}"
            )
            self.add(
                "METHOD_MATCH",
                source,
                f"type({source}) is {type_ref} and {source}.__self__ is {self_ref} and {same_func}",
                f"{source} is {label} bound to the same object",
                line,
            )
            return
        ref = self.reference(obj, "obj")
        self.add(
            "ID_MATCH", source, f"{source} is {ref}", f"{source} is the same {label} object", line
        )

    def same_as(
        self, source: str, first: str, what: str, line: SourceLine | None, kind: str = "ALIAS_MATCH"
    ) -> None:
        """One object reached through `source` and, earlier in the trace, through `first`:
        the trace holds one value for both, so the next call must reach one object both ways
        (no guard where both are the same source)."""
        if source != first:
            self.add(kind, source, f"{source} is {first}", f"{source} is {what}{first}", line)

    def has_attr(
        self, source: str, name: str, present: bool, line: SourceLine | None = None
    ) -> None:
        """`hasattr(source, name)` answered `present` while tracing: an attribute set or
        deleted on the object later must not reuse the branch taken for the old answer."""
        self.add(
            "HASATTR",
            source,
            f"hasattr({source}, {name!r}) is {present}",
            f"{source} {'has' if present else 'has no'} attribute {name!r}",
            line,
        )

    def type_of(self, source: str, obj: Any, line: SourceLine | None = None, why: str = "") -> None:
        ref = self.reference(type(obj), "type")
        self.add(
            "TYPE_MATCH",
            source,
            f"type({source}) is {ref}",
            f"{source} is a {type(obj).__name__}{f' ({why})' if why else ''}",
            line,
        )

    def length(self, source: str, obj: Any, line: SourceLine | None = None) -> None:
        self.type_of(source, obj, line)
        self.add(
            "LENGTH_CHECK",
            source,
            f"len({source}) == {len(obj)}",
            f"len({source}) == {len(obj)}",
            line,
        )

    def dict_keys(self, source: str, obj: dict, line: SourceLine | None = None) -> None:
        self.type_of(source, obj, line)
        keys = list(obj.keys())
        if all(isinstance(k, CONSTANT_TYPES) or is_constant_tuple(k) for k in keys):
            self.add(
                "DICT_KEYS",
                source,
                f"list({source}.keys()) == {keys!r}",
                f"{source} has keys {keys!r}",
                line,
            )
        else:
            self.length(source, obj, line)

    def grad_mode(self, enabled: bool) -> None:
        ref = self.reference(torch.is_grad_enabled, "fn")
        self.add(
            "GRAD_MODE",
            "torch.is_grad_enabled()",
            f"{ref}() is {enabled}",
            f"grad mode is {'on' if enabled else 'off'}",
            None,
        )

    def global_state(self) -> None:
        """The default dtype and autocast: a factory's dtype and the casts before a matmul
        are read from them while tracing, so an entry traced under one state is wrong under
        another (`x + torch.ones(3)` is float64 after `set_default_dtype(torch.float64)`)."""
        dtype = torch.get_default_dtype()
        get_dtype, dtype_ref = self.reference(torch.get_default_dtype, "fn"), self.reference(dtype, "dtype")
        self.add(
            "DEFAULT_DTYPE",
            "torch.get_default_dtype()",
            f"{get_dtype}() is {dtype_ref}",
            f"the default dtype is {dtype}",
            None,
        )
        any_autocast = self.reference(torch._C._is_any_autocast_enabled, "fn")
        if not torch._C._is_any_autocast_enabled():
            self.add("AUTOCAST", "autocast", f"not {any_autocast}()", "autocast is off", None)
            return
        state = autocast_state()
        ref, state_ref = self.reference(autocast_state, "fn"), self.reference(state, "state")
        shown = ", ".join(f"{d} {t}" for d, on, t in state if on)
        self.add(
            "AUTOCAST", "autocast", f"{ref}() == {state_ref}", f"autocast is on ({shown})", None
        )


def autocast_state() -> tuple:
    """Whether autocast is on, and to which dtype, for each device type that has it."""
    return tuple(
        (d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in ("cpu", "cuda")
    )


@dataclass
class _Check:
    guard: Guard
    expr: str  # the guard's expression over the locals of the guard function
    source: str  # its source, the same way
    needs: list[Local]  # the locals it reads, each after the ones it depends on


@dataclass
class CompiledGuards:
    check: Callable[[dict, dict], bool]
    source: str
    guards: list[Guard]
    namespace: dict[str, Any]
    access: AccessPlan
    defined: set[str]  # locals the guard function defines (their short paths are guarded)
    checks: list[_Check]
    # The FrozenReads of the function's fast path (None without one): its name in the
    # namespace, the locals a call answers, in order, and every frozen local
    frozen: tuple[str, list[str], set[str]] | None = None
    # Locals of an exact list or tuple type whose length the function checks: `*X` reads
    # all their elements (compile_fetch)
    lengths: dict[str, int] = field(default_factory=dict)

    def failures(self, L: dict, G: dict) -> list[Guard]:
        """The guards that do not hold for these values (for recompile reasons), each
        evaluated as the guard function evaluates it."""
        env: dict[str, Any] = {"L": L, "G": G}
        return [c.guard for c in self.checks if not _holds(c.expr, c.needs, self.namespace, env)]

    def describe(self, failed: list[Guard], L: dict, G: dict) -> str:
        """One readable line per failing guard: what was expected and what came."""
        env: dict[str, Any] = {"L": L, "G": G}
        by_guard = {id(c.guard): c for c in self.checks}
        parts = []
        for g in failed[:3]:
            c = by_guard[id(g)]
            got = _value(_value_expr(g.kind, c.source, c.expr), c.needs, self.namespace, env)
            parts.append(
                f"{g.description} (value missing)"
                if got is _MISSING
                else f"{g.description} (got {short_repr(got)})"
            )
        return "; ".join(parts)


def is_constant_tuple(value: Any) -> bool:
    """A tuple (exactly) of ints, finite floats, bools, strs, None and such tuples."""
    if type(value) is not tuple:
        return False
    for v in value:
        if type(v) is tuple:
            if not is_constant_tuple(v):
                return False
        elif not (
            v is None or type(v) in (int, bool, str) or (type(v) is float and math.isfinite(v))
        ):
            return False
    return True


def same_constant(a: Any, b: Any) -> bool:
    """`a` equals the constant `b` with the same exact types, tuples element by element."""
    if type(a) is not type(b):
        return False
    if type(a) is tuple:
        return len(a) == len(b) and all(same_constant(x, y) for x, y in zip(a, b))
    return a == b


def short_repr(value: Any, limit: int = 80) -> str:
    """A value for a one-line message: a module by its class (its repr lists every layer), any
    other repr cut to its first line and `limit` characters."""
    if isinstance(value, torch.nn.Module):
        return f"a {type(value).__name__} module at {id(value):#x}"
    return concise(repr(value), limit)


def concise(text: str, limit: int = 200) -> str:
    """The first line of `text`, at most `limit` characters, for warnings and reasons."""
    lines = text.strip().splitlines() or [""]
    first = lines[0]
    if len(first) > limit or len(lines) > 1:
        return first[: limit - 3].rstrip() + "..."
    return first


def compile_guards(guard_set: GuardSet, name: str, L: dict, G: dict) -> CompiledGuards:
    """The entry's guard function: one check per line after the comment that says why, every
    source prefix read once into a local (see `access.py`) just before its first use.

    With the C++ tensor guard extension, a tensor's metadata checks are comments marked [C++]
    and the tensors wait in `pending` for one `TensorChecker` call, made before any Python
    check or local reads one of them (so a tensor's type is checked before a `.grad` or a
    `.size(0)` is read from it) and at the end.

    With it, too, the checks whose answers only depend on module attributes that cannot have
    changed (compiler/tracer/frozen.py) are skipped while a `FrozenReads` finds the dicts and
    classes they read unchanged: the function first runs the checks that read none of them,
    then, when `___frozenN()` answers, the rest of the per-call checks over the values it
    answers; otherwise every check, as without it, and `remember` at the end."""
    # imported here, not at the top: `import compiler` must not import it, so that
    # `python -m compiler.runtime.cpp_ext build` runs the module once
    from compiler.runtime import cpp_ext

    plan = AccessPlan(
        [g.source for g in guard_set.guards], guard_set.namespace, L, G, guard_set.reference
    )
    checks = _ordered_checks(guard_set, plan)
    checker = cpp_ext.checker_class()
    frozen_cls = cpp_ext.frozen_class()
    in_cpp = _cpp_tensors(guard_set, plan) if checker is not None else {}
    lengths = _guarded_lengths(checks, guard_set.namespace)
    spread = _spread_lists(guard_set, checks, in_cpp, lengths)
    frozen = None
    if frozen_cls is not None:
        triples = [(c.guard.kind, c.expr, c.needs) for c in checks]
        frozen = plan_frozen(triples, guard_set.namespace, plan.value, MISSING)
    plan.release()
    em = _Emitter(guard_set, in_cpp, checker, spread=spread)
    lines = [f"def {name}(L, G):"]
    if guard_set.tensors:
        lines.append(f"    # tensor checks: {cpp_ext.status()}")
    lines.append("    try:")
    namespace = dict(guard_set.namespace)
    namespace["___lookups_changed"] = lookups.changed
    frozen_use = None
    if frozen is None:
        lines += em.emit(checks, "        ")
    else:
        ref = "___frozen0"
        body, selection = _with_fast_path(em, checks, frozen, ref)
        namespace[ref] = frozen_cls(*frozen.spec(selection))
        frozen_use = (ref, selection, frozen.names)
        lines += body
    lines.append("    except Exception:  # a value is missing or of another kind")
    lines.append("        return False")
    lines.append("    return True")
    source = "\n".join(lines) + "\n"
    namespace.update(em.checkers)
    exec(compile(source, f"<guards {name}>", "exec"), namespace)
    guards = [c.guard for c in checks]
    return CompiledGuards(
        namespace[name], source, guards, namespace, plan, em.defined, checks, frozen_use, lengths
    )


def _with_fast_path(
    em: _Emitter, checks: list[_Check], frozen: FrozenPlan, ref: str
) -> tuple[list[str], list[str]]:
    """The function's body with the FrozenReads `ref`, and the locals a call of it answers:
    the checks that read no frozen local, then the fast path (the per-call checks over the
    answered values), then the other checks and `remember`."""
    names = frozen.names
    first = [c for c in checks if not any(n.name in names for n in c.needs)]
    later = [(i, c) for i, c in enumerate(checks) if any(n.name in names for n in c.needs)]
    per_call = [c for i, c in later if i not in frozen.skip and i not in frozen.types]
    lines = em.emit(first, "        ")
    fast = _Emitter(em.guard_set, em.in_cpp, em.checker, em.defined, names, em.checkers, em.spread)
    fast_lines = fast.emit(per_call, "            ")
    lines += [
        f"        # the {len(frozen.reads)} reads below from modules pinned above are those of"
        f" the last call that passed ({ref}: no dict or class they read has changed since):",
        f"        # {len(frozen.skip)} checks of what they read hold again, {len(frozen.types)}"
        f" exact types are checked in C++, the {len(per_call)} others run below",
        f"        ___cached = {ref}()",
        "        if ___cached is not None:",
    ]
    if fast.selection:
        lines.append(f"            {', '.join(fast.selection)}, = ___cached")
    lines += [*fast_lines, "            return True"]
    lines += em.emit([c for _, c in later], "        ")
    lines.append(f"        {ref}.remember(")
    lines.extend(f"            {value}," for value in frozen.remembered())
    lines.append("        )")
    return lines, fast.selection


def _ordered_checks(guard_set: GuardSet, plan: AccessPlan) -> list[_Check]:
    """Every guard as the function checks it, in order: the guards a local's short path
    relies on (`Local.requires`) come before the first check that reads the local."""
    present = {(g.kind, g.expr) for g in guard_set.guards}
    defined: set[str] = set()
    checks: list[_Check] = []

    def add(g: Guard) -> None:
        expr, needs = plan.rewrite(g.expr, g.source)
        for local in needs:
            if local.name in defined:
                continue
            for req in local.requires:
                if (req.kind, req.expr) not in present:
                    present.add((req.kind, req.expr))
                    add(replace(req, user_line=g.user_line))
            defined.add(local.name)
        checks.append(_Check(g, expr, plan.rewrite(g.source, g.source)[0], needs))

    for g in guard_set.guards:
        add(g)
    return checks


class _Emitter:
    """Writes checks as lines of a guard function, each local read just before its first
    use; `cached` locals come from `FrozenReads` instead (those used are in `selection`)."""

    def __init__(
        self,
        guard_set: GuardSet,
        in_cpp: dict[str, str],
        checker: type | None,
        defined: set[str] = frozenset(),
        cached: set[str] = frozenset(),
        checkers: dict[str, Any] | None = None,
        spread: _Spread | None = None,
    ):
        self.guard_set = guard_set
        self.in_cpp = in_cpp
        self.checker = checker
        self.spread = spread if spread is not None else _Spread({}, {})
        self.defined = set(defined)
        self.cached = cached
        self.selection: list[str] = []
        self.checkers = checkers if checkers is not None else {}  # ___tensorsN -> TensorChecker
        self.pending: dict[str, tuple[str, TensorSpec]] = {}  # local -> (source, spec), in order
        self.lines: list[str] = []
        self.indent = ""

    def emit(self, checks: list[_Check], indent: str) -> list[str]:
        self.lines, self.indent = [], indent
        for c in checks:
            self.check(c)
        self.flush()
        return self.lines

    def check(self, c: _Check) -> None:
        g, ind = c.guard, self.indent
        local = self.in_cpp.get(g.source)
        spec = self.guard_set.tensors.get(g.source)
        in_cpp_now = local is not None and spec is not None and (g.kind, g.expr) in spec.guards
        if any(
            n.name in self.pending and n.name != (local if in_cpp_now else None) for n in c.needs
        ):
            self.flush()
        self.define(c.needs)
        where = (
            f"  ({g.user_line.filename}:{g.user_line.lineno})" if g.user_line is not None else ""
        )
        self.lines.append(f"{ind}# {g.description}{where}")
        if in_cpp_now:
            assert local is not None and spec is not None
            self.pending[local] = (g.source, spec)
            self.lines.append(f"{ind}# [C++ ___tensors{len(self.checkers)}] {c.expr}")
            return
        self.lines.append(f"{ind}if not ({c.expr}):")
        self.lines.append(f"{ind}    return False")

    def define(self, needs: list[Local]) -> None:
        for local in needs:
            if local.name in self.defined:
                continue
            self.defined.add(local.name)
            if local.name in self.spread.elements:
                continue  # only the checker reads it, from its list (`flush`)
            if local.name in self.cached:
                self.selection.append(local.name)
            else:
                self.lines.append(f"{self.indent}{local.name} = {local.expr}")

    def flush(self) -> None:
        """The call that checks the pending tensors."""
        if not self.pending:
            return
        from compiler.runtime import cpp_ext

        assert self.checker is not None
        ind, ref = self.indent, f"___tensors{len(self.checkers)}"
        specs = tuple(spec.as_tuple() for _, spec in self.pending.values())
        self.checkers[ref] = self.checker(specs, cpp_ext.CHECKED_TYPES)
        self.lines.append(
            f"{ind}# the {len(self.pending)} tensors marked [C++ {ref}] above: exact type, dtype,"
            " device, shape, strides, requires_grad"
        )
        self.lines.append(f"{ind}if not {ref}(")
        self.lines.extend(f"{ind}    {arg}," for arg in self.spread.arguments(list(self.pending)))
        self.lines.append(f"{ind}):")
        self.lines.append(f"{ind}    return False")
        self.pending.clear()


@dataclass
class _Spread:
    """Lists whose elements are all tensors that only the C++ checker reads: the checker
    takes them as `*X` (its arguments in order) instead of one local per element, which
    saves a subscript, a store and a load per tensor (an Adam step's guard function passes
    four lists of one tensor per parameter)."""

    elements: dict[str, tuple[str, int]]  # element local -> (list local, index)
    lengths: dict[str, int]  # list local -> its guarded length

    def arguments(self, locals_: list[str]) -> list[str]:
        """The checker's arguments for `locals_`, a whole list in order as `*X`; an element
        outside such a run (a flush in between) as `X[i]`, which its guards make safe."""
        args: list[str] = []
        i = 0
        while i < len(locals_):
            where = self.elements.get(locals_[i])
            if where is not None and where[1] == 0:
                n = self.lengths[where[0]]
                run = locals_[i : i + n]
                if len(run) == n and all(
                    self.elements.get(x) == (where[0], k) for k, x in enumerate(run)
                ):
                    args.append(f"*{where[0]}")
                    i += n
                    continue
            args.append(locals_[i] if where is None else f"{where[0]}[{where[1]}]")
            i += 1
        return args


_LEN = re.compile(r"^len\((\w+)\) == (\d+)$")
_EXACT_TYPE = re.compile(r"^type\((\w+)\) is (___type\d+)$")
_ITEM = re.compile(r"^(\w+)\[(\d+)\]$")


def _guarded_lengths(checks: list[_Check], namespace: dict) -> dict[str, int]:
    """The locals the checks pin as an exact list or tuple of a given length."""
    exact = {
        m.group(1)
        for c in checks
        if c.guard.kind == "TYPE_MATCH"
        and (m := _EXACT_TYPE.match(c.expr))
        and namespace.get(m.group(2)) in (list, tuple)
    }
    return {
        m.group(1): int(m.group(2))
        for c in checks
        if c.guard.kind == "LENGTH_CHECK" and (m := _LEN.match(c.expr)) and m.group(1) in exact
    }


def list_item(local: Local, lengths: dict[str, int]) -> tuple[str, int] | None:
    """(X, i) where `local` is `X[i]` of a list or tuple local in `lengths`."""
    m = _ITEM.match(local.expr)
    return (m.group(1), int(m.group(2))) if m is not None and m.group(1) in lengths else None


def _spread_lists(
    guard_set: GuardSet, checks: list[_Check], in_cpp: dict[str, str], lengths: dict[str, int]
) -> _Spread:
    """The lists (exact list or tuple, length guarded) each of whose elements is a tensor
    checked in C++ and read by no other check, nor by another local."""
    cpp_locals = set(in_cpp.values())
    items: dict[str, tuple[str, int]] = {}
    excluded: set[str] = set()
    for c in checks:
        g = c.guard
        spec = guard_set.tensors.get(g.source)
        own = in_cpp.get(g.source)
        in_cpp_now = own is not None and spec is not None and (g.kind, g.expr) in spec.guards
        for local in c.needs:
            if local.name not in cpp_locals:
                continue
            if not in_cpp_now or local.name != own:
                excluded.add(local.name)
            elif (where := list_item(local, lengths)) is not None:
                items[local.name] = where
    by_list: dict[str, set[int]] = {}
    for name, (lst, index) in items.items():
        if name not in excluded:
            by_list.setdefault(lst, set()).add(index)
    whole = {lst for lst, found in by_list.items() if found == set(range(lengths[lst]))}
    elements = {name: where for name, where in items.items() if where[0] in whole}
    return _Spread(elements, {lst: lengths[lst] for lst in whole})


def _cpp_tensors(guard_set: GuardSet, plan: AccessPlan) -> dict[str, str]:
    """The tensor sources whose metadata the C++ checker can check, each with the local of
    the guard function that holds it: an exact torch.Tensor or nn.Parameter (a subclass may
    answer attribute reads its own way) whose source the plan reads into a local."""
    from compiler.runtime import cpp_ext

    found = {}
    for source, spec in guard_set.tensors.items():
        if spec is None or spec.type not in cpp_ext.CHECKED_TYPES:
            continue
        expr, needs = plan.rewrite(source, source)
        if any(n.name == expr for n in needs):
            found[source] = expr
    return found


_MISSING = object()


def _value(expr: str, needs: list[Local], namespace: dict, env: dict) -> Any:
    """`expr` evaluated over the guard function's locals (defined in `env` as needed), or
    _MISSING where a step raises."""
    for local in needs:
        if local.name not in env:
            try:
                env[local.name] = eval(local.expr, namespace, env)
            except Exception:
                env[local.name] = _MISSING
        if env[local.name] is _MISSING:
            return _MISSING
    try:
        return eval(expr, namespace, env)
    except Exception:
        return _MISSING


def _holds(expr: str, needs: list[Local], namespace: dict, env: dict) -> bool:
    value = _value(expr, needs, namespace, env)
    try:
        return value is not _MISSING and bool(value)
    except Exception:
        return False


def _value_expr(kind: str, source: str, expr: str) -> str:
    if kind == "CONSTANT_MATCH":
        return source
    if expr == f"{source}.is_cpu":
        return f"{source}.device"
    for prop in (".dtype", ".device", ".shape", ".stride()", ".requires_grad"):
        if expr.startswith(source + prop):
            return source + prop
    if kind == "SHAPE_ENV":  # over a tensor's sizes, or a symbolic int
        return f"getattr({source}, 'shape', {source})"
    if expr.startswith((f"{source}.size(", f"{source}.dim()")):
        return f"{source}.shape"
    if expr.startswith("len("):
        return f"len({source})"
    if expr.startswith("type("):
        return f"type({source}).__name__"
    if kind == "GRAD_MODE":
        return "__import__('torch').is_grad_enabled()"
    if kind == "CLASS_LOOKUPS":  # `___lookupsN(X)` or a class's `___attributesN()`
        check = expr[: expr.index("(")]
        obj = "None" if expr.endswith("()") else source
        return f"___lookups_changed({check}, {obj})"
    return source


_BOUND_TYPES = (types.MethodType, types.BuiltinMethodType, types.MethodWrapperType)


def _bound_anew(obj: Any) -> bool:
    """`obj` is a method bound at each attribute read (a builtin function's `__self__` is
    its module, read from the module's dict as one object: not such a method)."""
    return type(obj) in _BOUND_TYPES and not isinstance(
        getattr(obj, "__self__", None), (types.ModuleType, type(None))
    )
