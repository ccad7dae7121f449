"""Symbolic sizes: which tensor dimensions a trace keeps symbolic, and the guards that costs.

Which dimensions, as torch.compile decides them:

- `compiler.mark_static(t, d)`: static, always;
- `compiler.mark_dynamic(t, d)`: symbolic, whatever `dynamic=` says;
- `dynamic=True`: every dimension of every input tensor symbolic;
- `dynamic=None` (the default): static at the first compile of an entry point; a recompile
  that sees a tensor's size changed makes that dimension symbolic (automatic dynamic, off
  with `config.automatic_dynamic_shapes = False`);
- `dynamic=False`: only the marked dimensions.

Sizes 0 and 1 are always specialised (broadcasting and empty tensors behave differently).
Parameters, and tensors and ints read as an nn.Module's attribute or buffer, stay static
unless marked, as torch.compile keeps nn.Module state static; those on any other object (a
generation loop's KV cache and its step counter) follow the policy as arguments do. A float
read as any object's attribute stays a constant.

How: a dynamic input's fake tensor gets a SymInt per dynamic dimension, from one ShapeEnv per
trace. Torch ops on fake tensors compute symbolic output shapes; Python code that looks at a
size (`if x.shape[0] > 4`, `range(n)`) makes the ShapeEnv record the condition it relied on
(or specialise the size). At the end those become guards over the input sizes, one per line:

    L['x'].dim() == 2
    L['x'].size(1) == 16
    L['x'].stride() == (16, 1)
    L['x'].size(0) >= 2              sizes 0 and 1 are specialised
    L['x'].size(0) > 4               a condition the trace relied on (with its user line)

Python ints read from the frame follow the same rules (with `dynamic=True`, or once their
value changed between compiles, as torch.compile's automatic dynamic does for ints): an int
local that a graph break hands to the next entry does not recompile that entry per value.

A size a graph op uses (`x.view(n, -1)`, `x * n`) is a graph input: one placeholder per
symbol (`s42`), fetched from its tensor when the entry runs, with arithmetic on sizes as
operator nodes over it. Backends get the concrete sizes among their example inputs, as
torch.compile's do. A size that leaves the graph as a Python value (returned, or a local at a
graph break) is computed from the input sizes when the entry runs.
"""

from __future__ import annotations

import functools
import inspect
import math
import operator
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import sympy
import torch
from torch._guards import GuardSource, Source
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext
from torch.utils._sympy import functions as symfn
from torch.utils._sympy.printers import PythonPrinter

from compiler.records import ControlRecord, SourceLine
from compiler.tracer.breaks import Break
from compiler.tracer.guards import GuardSet

SYM_TYPES = (torch.SymInt, torch.SymFloat, torch.SymBool)


def is_symbolic(value: Any) -> bool:
    """`value` holds a symbolic size (a SymInt, or a tuple/list/Size of them)."""
    if isinstance(value, SYM_TYPES):
        return True
    if isinstance(value, (tuple, list)):
        return any(is_symbolic(v) for v in value)
    return False


def concrete(value: Any) -> Any:
    """`value` with every symbolic size replaced by its value in this trace. Python that turns
    a size into text or a hash sees a number; the ShapeEnv records the guard this needs."""
    if isinstance(value, torch.SymInt):
        return int(value)
    if isinstance(value, torch.SymFloat):
        return float(value)
    if isinstance(value, torch.SymBool):
        return bool(value)
    if isinstance(value, (tuple, list)) and is_symbolic(value):
        items = [concrete(v) for v in value]
        if isinstance(value, list):
            return items
        return torch.Size(items) if isinstance(value, torch.Size) else type(value)(items)
    return value


def python_type(value: Any) -> type:
    """The type eager code would see: a symbolic size is an int (float, bool) there."""
    if isinstance(value, torch.SymInt):
        return int
    if isinstance(value, torch.SymFloat):
        return float
    if isinstance(value, torch.SymBool):
        return bool
    return type(value)


# ---- which dimensions -----------------------------------------------------------------------

_QUOTED = re.compile(r"'[^']*'")


def is_attribute_source(source: str) -> bool:
    """`source` reads an object's attribute somewhere (a module's hyperparameter tuple, such
    as a kernel size): guarded as a constant."""
    return "." in _QUOTED.sub("", source)


# The last step of a source: `.name` or `[key]` (a key may be a quoted string with brackets).
_LAST_STEP = re.compile(r"(\.\w+|\[(?:'[^']*'|\"[^\"]*\"|[^\]]*)\])$")
_MODULE_TABLES = ("._parameters", "._buffers")


def owner_source(source: str) -> str | None:
    """The source of the object `source` reads from (`L['self'].bn` for
    `L['self'].bn.running_mean` and for `L['self'].bn._buffers['running_mean']`), or None."""
    found = _LAST_STEP.search(source)
    if found is None or found.start() == 0:
        return None
    owner = source[: found.start()]
    for table in _MODULE_TABLES:
        if owner.endswith(table):
            return owner[: -len(table)]
    return owner


@dataclass
class DynamicPolicy:
    """The dynamic-size decisions of one entry point of a function, across its compiles."""

    dynamic: bool | None  # compile(..., dynamic=...)
    seen: dict[str, tuple[int | None, ...]]  # source -> sizes at earlier compiles (None: varied)
    automatic: bool = True  # config.automatic_dynamic_shapes
    observed: dict[str, tuple[int, ...]] = field(default_factory=dict)  # this compile's sizes

    def dims(self, tensor: torch.Tensor, source: str, module_state: bool) -> dict[int, str]:
        """The dimensions of `tensor` (read from `source`; `module_state`: as an attribute or
        buffer of an nn.Module) to trace symbolically, each with why; sizes 0 and 1 are left
        out (always specialised)."""
        shape = tuple(tensor.shape)
        self.observed[source] = shape
        marked: dict[int, bool] = getattr(tensor, "_compiler_dynamic_dims", {})
        static = getattr(tensor, "_compiler_static_dims", ())
        prior = self.seen.get(source)
        if prior is not None and len(prior) != len(shape):
            prior = None
        state_like = isinstance(tensor, torch.nn.Parameter) or module_state
        dims: dict[int, str] = {}
        for d, size in enumerate(shape):
            if d in static or size in (0, 1):
                continue
            if d in marked:
                dims[d] = "marked with compiler.mark_dynamic"
            elif state_like:
                continue
            elif self.dynamic is True:
                dims[d] = "dynamic=True"
            elif self.dynamic is None and self.automatic and prior is not None:
                if prior[d] is None:
                    dims[d] = "its size changed between earlier compiles (automatic dynamic)"
                elif prior[d] != size:
                    dims[d] = (
                        f"its size changed from {prior[d]} to {size} since the last compile "
                        "(automatic dynamic, dynamic=None)"
                    )
        return dims

    def int_dynamic(self, value: int, source: str, module_state: bool) -> str | None:
        """Why the Python int read from `source` is traced as a symbol, or None to specialise
        on its value: with dynamic=True, or once it changed between compiles (an int local
        that a graph break hands on, a size passed as an argument, a counter on a cache
        object). Ints read as an nn.Module's attribute (its hyperparameters,
        `module_state`) stay constants, as torch.compile keeps module state static."""
        key = f"int {source}"
        self.observed[key] = (value,)
        if module_state:
            return None
        if self.dynamic is True:
            return "dynamic=True"
        prior = self.seen.get(key)
        if self.dynamic is None and self.automatic and prior is not None:
            if prior[0] is None:
                return "its value changed between earlier compiles (automatic dynamic)"
            if prior[0] != value:
                return (
                    f"its value changed from {prior[0]} to {value} since the last compile "
                    "(automatic dynamic, dynamic=None)"
                )
        return None

    def float_dynamic(self, value: float, source: str) -> str | None:
        """Why the Python float read from `source` is traced as a symbol, or None to
        specialise on its value: once it changed between compiles, as int_dynamic decides
        for ints (a `.item()` that a graph break hands on, a scale passed as an argument).
        A float read as any object's attribute (a hyperparameter) stays a constant.
        dynamic=True alone does not make floats symbolic: it names sizes."""
        key = f"float {source}"
        self.observed[key] = (value,)
        if is_attribute_source(source) or not self.automatic or self.dynamic is False:
            return None
        prior = self.seen.get(key)
        if prior is None:
            return None
        if prior[0] is None:
            return "its value changed between earlier compiles (automatic dynamic)"
        if prior[0] != value:
            return f"its value changed from {prior[0]} to {value} since the last compile"
        return None

    def remember(self) -> None:
        """Fold this compile's sizes into what the next compile compares with."""
        for source, shape in self.observed.items():
            prior = self.seen.get(source)
            if prior is None or len(prior) != len(shape):
                self.seen[source] = shape
            else:
                self.seen[source] = tuple(
                    None if p is None or p != s else s for p, s in zip(prior, shape)
                )


# ---- the symbols of one trace ---------------------------------------------------------------


# torch 2.14 reads a Source's name and guard source as properties; older releases (the GPU
# machine's 2.11) call them as methods.
_PROPERTIES = isinstance(
    inspect.getattr_static(Source, "name"), (property, functools.cached_property)
)


@dataclass(frozen=True)
class _Source(Source):
    """The ShapeEnv names a symbol after where it came from; ours are the tracer's sources."""

    text: str

    if _PROPERTIES:

        @property
        def _name_template(self) -> str:
            return self.text

        @functools.cached_property
        def guard_source(self) -> GuardSource:
            return GuardSource.LOCAL

    else:

        def name(self) -> str:
            return self.text

        def guard_source(self) -> GuardSource:
            return GuardSource.LOCAL


@dataclass
class _Symbol:
    tensor: str  # the source of the input it belongs to, "L['x']" (an int's own source)
    text: str  # how to read it, "L['x'].size(0)"
    value: torch.SymInt
    kind: str  # "size", "stride", "offset" or "int"
    line: SourceLine | None
    others: list[str] = field(default_factory=list)  # other places with the same symbol


@dataclass
class _DynamicInput:
    source: str
    fake: torch.Tensor
    dims: dict[int, str]
    strict: set[int]  # dims marked with mark_dynamic: a specialisation is warned about


class _Printer(PythonPrinter):
    def __init__(self, names: dict[sympy.Symbol, str]) -> None:
        super().__init__()
        self.names = names

    def _print_Symbol(self, expr: sympy.Symbol) -> str:
        name = self.names.get(expr)
        if name is None:
            raise Break(f"a size condition refers to {expr}, which no input defines")
        return name


# Size arithmetic as graph nodes, by sympy function.
_UNARY_OPS: dict[type, Callable] = {
    symfn.ToFloat: torch.sym_float,
    symfn.TruncToInt: torch.sym_int,
    symfn.FloorToInt: math.floor,
    symfn.CeilToInt: math.ceil,
}
_BINARY_OPS: dict[type, Callable] = {
    sympy.Pow: operator.pow,
    symfn.FloatPow: operator.pow,
    symfn.FloorDiv: operator.floordiv,
    symfn.PythonMod: operator.mod,
    symfn.Mod: operator.mod,
    symfn.PowByNatural: operator.pow,
    symfn.IntTrueDiv: operator.truediv,
    symfn.FloatTrueDiv: operator.truediv,
    symfn.Max: torch.sym_max,
    symfn.Min: torch.sym_min,
}


class Shapes:
    """The ShapeEnv of one trace and what it knows: the symbols of the dynamic inputs, where
    each is read from, and the guards and graph nodes the sizes need."""

    def __init__(self, policy: DynamicPolicy | None, controls: list[ControlRecord]) -> None:
        self.policy = policy
        self.controls = controls
        # Data-dependent sizes (nonzero, item) stay graph breaks, as without a ShapeEnv.
        self.env = ShapeEnv(allow_dynamic_output_shape_ops=False, allow_scalar_outputs=False)
        self.symbols: dict[sympy.Symbol, _Symbol] = {}
        self.inputs: list[_DynamicInput] = []
        self.guard_lines: dict[int, SourceLine | None] = {}  # env.guards index -> user line
        # the sources of the nn.Modules the trace read: what is read from them is module state
        self.module_sources: set[str] = set()
        self._nodes: dict[sympy.Expr, tuple[Any, Any]] = {}
        # symbols of numbers drawn from Python's random module while the entry runs
        # (values/python_random.py): known only after the guards, so none may depend on them
        self.drawn: set[sympy.Symbol] = set()

    # ---- inputs -------------------------------------------------------------------------

    def module_state(self, source: str) -> bool:
        """`source` reads an attribute, parameter or buffer of an nn.Module the trace read:
        kept static (unless marked), as torch.compile keeps module state. A tensor or number
        on any other object (a generation loop's KV cache, its step counter) follows the
        dynamic policy as an argument does."""
        owner = owner_source(source)
        return owner is not None and owner in self.module_sources

    def fake_input(
        self, mode: Any, tensor: torch.Tensor, source: str, line: SourceLine | None
    ) -> tuple[torch.Tensor, bool]:
        """The fake tensor for an input, and whether it has symbolic sizes."""
        dims = (
            self.policy.dims(tensor, source, self.module_state(source))
            if self.policy is not None
            else {}
        )
        if not dims:
            return mode.from_tensor(tensor, static_shapes=True), False
        n = tensor.dim()
        context = StatelessSymbolicContext(
            dynamic_sizes=[
                DimDynamic.DYNAMIC if d in dims else DimDynamic.STATIC for d in range(n)
            ],
            constraint_sizes=[None] * n,
        )
        fake = mode.from_tensor(tensor, source=_Source(source), symbolic_context=context)
        for d, size in enumerate(fake.shape):
            self._symbol(size, source, f"{source}.size({d})", "size", line)
        for d, stride in enumerate(fake.stride()):
            self._symbol(stride, source, f"{source}.stride({d})", "stride", line)
        self._symbol(fake.storage_offset(), source, f"{source}.storage_offset()", "offset", line)
        strict = {d for d, warn in getattr(tensor, "_compiler_dynamic_dims", {}).items() if warn}
        self.inputs.append(_DynamicInput(source, fake, dims, strict))
        for d, why in dims.items():
            size = fake.shape[d]
            self.controls.append(
                ControlRecord(
                    "dynamic",
                    f"{source}.size({d})",
                    f"traced as the symbol {size} (size {tensor.shape[d]} in this call): {why}",
                    line,
                )
            )
        return fake, True

    def int_input(self, value: int, source: str, line: SourceLine | None) -> torch.SymInt | None:
        """A symbolic int for a Python int input the policy makes dynamic, else None."""
        why = (
            self.policy.int_dynamic(value, source, self.module_state(source))
            if self.policy is not None
            else None
        )
        if why is None:
            return None
        sym = self.env.create_unspecified_symint_and_symbol(
            value, _Source(source), DimDynamic.DYNAMIC
        )
        if not isinstance(sym, torch.SymInt):
            return None
        return self._scalar_input(sym, value, source, "int", why, line)

    def float_input(
        self, value: float, source: str, line: SourceLine | None
    ) -> torch.SymFloat | None:
        """A symbolic float for a Python float input the policy makes dynamic, else None:
        an input of the graph (a 0-d tensor for backends that generate code,
        backends/scalars.py), guarded only by what the trace relied on."""
        why = (
            self.policy.float_dynamic(value, source)
            if self.policy is not None
            else None
        )
        if why is None:
            return None
        expr = self.env.create_unspecified_symbol(value, _Source(source), DimDynamic.DYNAMIC)
        sym = self.env.create_symfloatnode(expr, hint=value, source=_Source(source))
        if not isinstance(sym, torch.SymFloat):
            return None
        return self._scalar_input(sym, value, source, "float", why, line)

    def drawn_input(self, value: int | float, source: str, line: SourceLine | None) -> Any:
        """A symbolic int or float for a number the entry draws before its graph runs (read
        from `source` then): never specialised, as it changes on every call."""
        expr = self.env.create_symbol(
            value, _Source(source), DimDynamic.DYNAMIC, positive=None,
            do_not_specialize_zero_one=True,
        )  # fmt: skip
        if isinstance(value, int):
            sym = self.env.create_symintnode(expr, hint=value, source=_Source(source))
        else:
            sym = self.env.create_symfloatnode(expr, hint=value, source=_Source(source))
        self._symbol(sym, source, source, type(value).__name__, line)
        self.drawn.add(expr)
        return sym

    def _scalar_input(
        self, sym: Any, value: Any, source: str, kind: str, why: str, line: SourceLine | None
    ) -> Any:
        """`sym`, the symbol of a Python number read from `source`, recorded with its guard
        text and the control that made it dynamic."""
        self._symbol(sym, source, source, kind, line)
        self.controls.append(
            ControlRecord(
                "dynamic", source, f"traced as the symbol {sym} ({value} in this call): {why}", line
            )
        )
        return sym

    def _symbol(
        self, value: Any, tensor: str, text: str, kind: str, line: SourceLine | None
    ) -> None:
        if not isinstance(value, (torch.SymInt, torch.SymFloat)):
            return
        expr = value.node.expr
        if not isinstance(expr, sympy.Symbol):
            return  # a stride computed from sizes: its guard reads the sizes
        found = self.symbols.get(expr)
        if found is None:
            self.symbols[expr] = _Symbol(tensor, text, value, kind, line)
        else:
            found.others.append(text)

    # ---- guards -------------------------------------------------------------------------

    def text(self, value: Any) -> str:
        """Python over `L` and `G` computing a symbolic size (or a plain number) at run time."""
        if isinstance(value, SYM_TYPES):
            expr = value.node.expr
            if expr.is_number:
                return repr(concrete(value))
            return _Printer({s: sym.text for s, sym in self.symbols.items()}).doprint(expr)
        return repr(value)

    def tensor_guards(
        self, guards: GuardSet, source: str, fake: torch.Tensor, line: SourceLine | None
    ) -> None:
        """The shape and stride checks of a dynamic input, in place of `shape == (...)`."""
        n = fake.dim()
        guards.add("TENSOR_MATCH", source, f"{source}.dim() == {n}", f"{source} has {n} dims", line)
        for d, size in enumerate(fake.shape):
            if not isinstance(size, torch.SymInt):
                guards.add(
                    "TENSOR_MATCH",
                    source,
                    f"{source}.size({d}) == {size}",
                    f"{source} has size {size} in dim {d} (static)",
                    line,
                )
        strides = [self.text(s) for s in fake.stride()]
        text = f"({', '.join(strides)}{',' if n == 1 else ''})"
        guards.add(
            "TENSOR_MATCH",
            source,
            f"{source}.stride() == {text}",
            f"{source} has strides {text}",
            line,
        )

    def note_guards(self, count_before: int, line: SourceLine | None) -> None:
        """The conditions recorded since `count_before` came from user line `line`."""
        for i in range(count_before, len(self.env.guards)):
            if self.env.guards[i].expr.free_symbols & self.drawn:
                raise Break(
                    "a number drawn from Python's random module decides what the trace does: "
                    "it is drawn when the entry runs, after its guards"
                )
            self.guard_lines.setdefault(i, line)

    def finish(self, guards: GuardSet) -> list[str]:
        """Add the guards the symbolic sizes need; returns warnings for dims the user marked
        dynamic that the trace had to specialise."""
        # printed size expressions may call torch.sym_float, math.floor, ...: the guard,
        # fetch and rebuild functions all run in this namespace
        guards.namespace.setdefault("torch", torch)
        guards.namespace.setdefault("math", math)
        for expr, sym in self.symbols.items():
            for other in sym.others:
                guards.add(
                    "SHAPE_ENV",
                    sym.tensor,
                    f"{other} == {sym.text}",
                    f"{other} equals {sym.text} (one symbol, {expr})",
                    sym.line,
                )
            if sym.kind == "size" and not self.env.replace(expr).is_number:
                guards.add(
                    "SHAPE_ENV",
                    sym.tensor,
                    f"{sym.text} >= 2",
                    f"{sym.text} is at least 2 (sizes 0 and 1 are specialised)",
                    sym.line,
                )
        for i, shape_guard in enumerate(self.env.guards):
            text = self.text_of(shape_guard.expr)
            free = shape_guard.expr.free_symbols
            owner = next((sym.tensor for s, sym in self.symbols.items() if s in free), "L")
            guards.add(
                "SHAPE_ENV", owner, text, f"the trace relied on {text}", self.guard_lines.get(i)
            )
        return self._specialised_marks()

    def text_of(self, expr: sympy.Expr) -> str:
        return _Printer({s: sym.text for s, sym in self.symbols.items()}).doprint(expr)

    def _specialised_marks(self) -> list[str]:
        warnings = []
        for inp in self.inputs:
            for d in sorted(inp.dims):
                size = inp.fake.shape[d]
                value = self.env.replace(size.node.expr) if isinstance(size, torch.SymInt) else size
                if not getattr(value, "is_number", True):
                    continue
                marked = "marked dynamic" if d in inp.strict else f"dynamic ({inp.dims[d]})"
                msg = (
                    f"{inp.source}.size({d}) was {marked}, but the trace specialised it to "
                    f"{int(value)} (a guard or an op needed its value)"
                )
                self.controls.append(ControlRecord("dynamic", f"{inp.source}.size({d})", msg))
                if d in inp.strict:
                    warnings.append(msg)
        return warnings

    # ---- sizes leaving the trace --------------------------------------------------------

    def python_text(self, value: Any, ref: Callable[[Any, str], str]) -> str:
        """Python rebuilding `value` (a size, or a tuple/list/Size of sizes) when the entry
        runs; `ref` names objects the text needs."""
        if isinstance(value, SYM_TYPES):
            return f"({self.text(value)})"
        if isinstance(value, (tuple, list)):
            items = ", ".join(self.python_text(v, ref) for v in value)
            if isinstance(value, torch.Size):
                return f"{ref(torch.Size, 'cls')}([{items}])"
            if isinstance(value, list):
                return f"[{items}]"
            if type(value) is not tuple:
                return f"{ref(type(value), 'cls')}({items})"
            return f"({items}{',' if len(value) == 1 else ''})"
        if type(value) in (int, bool, str) or value is None:
            return repr(value)
        if type(value) is float and math.isfinite(value):
            return repr(value)
        return ref(value, "c")

    # ---- sizes as graph values ----------------------------------------------------------

    def graph_arg(self, value: Any, new_input: Callable, new_node: Callable) -> Any:
        """`value` as an FX argument: each symbolic size a node computing it from the size
        placeholders. `new_input(name, source, value)` adds a placeholder,
        `new_node(op, args, value)` a call_function node."""
        if isinstance(value, SYM_TYPES):
            expr = value.node.expr
            if expr.is_number:
                return concrete(value)
            return self._node(expr, new_input, new_node)[0]
        if isinstance(value, (tuple, list)):
            items = [self.graph_arg(v, new_input, new_node) for v in value]
            return items if isinstance(value, list) else tuple(items)
        return value

    def _node(self, expr: sympy.Expr, new_input: Callable, new_node: Callable) -> tuple[Any, Any]:
        """(FX node or number, its SymInt value) for a size expression, built once."""
        done = self._nodes.get(expr)
        if done is not None:
            return done
        if expr.is_Integer:
            return int(expr), int(expr)
        if expr.is_Float:
            return float(expr), float(expr)
        if isinstance(expr, sympy.Symbol):
            sym = self.symbols.get(expr)
            if sym is None:
                raise Break(f"a graph op needs the size {expr}, which no input defines")
            out = (new_input(str(expr), sym.text, sym.value), sym.value)
        elif isinstance(expr, (sympy.Add, sympy.Mul)):
            op = operator.add if isinstance(expr, sympy.Add) else operator.mul
            parts = [self._node(a, new_input, new_node) for a in expr.args]
            node, value = parts[0]
            for arg, arg_value in parts[1:]:
                value = op(value, arg_value)
                node = new_node(op, (node, arg), value)
            out = (node, value)
        elif type(expr) in _UNARY_OPS and len(expr.args) == 1:
            op = _UNARY_OPS[type(expr)]
            a, av = self._node(expr.args[0], new_input, new_node)
            value = op(av)
            out = (new_node(op, (a,), value), value)
        elif type(expr) in _BINARY_OPS and len(expr.args) == 2:
            op = _BINARY_OPS[type(expr)]
            (a, av), (b, bv) = (self._node(x, new_input, new_node) for x in expr.args)
            value = op(av, bv)
            out = (new_node(op, (a, b), value), value)
        else:
            raise Break(f"the size expression {expr} is not put in the graph")
        self._nodes[expr] = out
        return out
