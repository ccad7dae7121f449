"""Random PyTorch programs for differential fuzzing, drawn with hypothesis.

A `Builder` grows a program one statement at a time. Every candidate statement is run at once
on sample values (small CPU tensors), so what it keeps is valid for the shapes, strides and
dtypes at hand; a candidate that raises is dropped and another is drawn. The program is
plain Python source (`Program.source`), so a failure prints as a function that can be pasted
into a regression test.

tests/codegen/test_fuzz_graphs.py traces straight-line programs with torch.fx and compiles
them with compile_fx; tests/tracer/test_fuzz_programs.py adds branches, loops, containers and
helper functions and runs them through the bytecode tracer.

Budget: each fuzz test runs `examples(n)` cases, `n` scaled by $FUZZ_EXAMPLES (a count that
replaces the CI default); hypothesis is derandomised, so CI runs the same cases every time.
A long run, e.g. `FUZZ_EXAMPLES=1000 FUZZ_SHRINK=0 pytest --timeout=0 -p no:logging
tests/codegen/test_fuzz_graphs.py`, needs --timeout=0 (each fuzz test is one pytest test).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

LOW_PRECISION = (torch.float16, torch.bfloat16)
SIZES = (2, 3, 1, 4, 5, 0, 8, 7)
MAX_NUMEL = 2048
NAMESPACE = {"torch": torch, "F": F}


def examples(ci_default: int) -> int:
    """How many cases a fuzz test runs: $FUZZ_EXAMPLES if set, else the CI default."""
    return int(os.environ.get("FUZZ_EXAMPLES") or ci_default)


def fuzz_settings(ci_default: int) -> settings:
    """Seeded (derandomised), no example database, no deadline: the same cases on every run."""
    return settings(
        max_examples=examples(ci_default),
        derandomize=True,
        database=None,
        deadline=None,
        # FUZZ_SHRINK=0 reports failures as found (shrinking a slow case can take minutes)
        phases=(Phase.generate,)
        if os.environ.get("FUZZ_SHRINK") == "0"
        else (Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck),
        print_blob=False,
        report_multiple_bugs=True,
    )


# ---- inputs -------------------------------------------------------------------------------

LAYOUTS = ("contiguous", "transposed", "sliced", "expanded", "offset")


@dataclass(frozen=True)
class InputSpec:
    """A graph input: its shape, dtype, memory layout and value range, rebuilt identically
    from a seed (so eager and compiled get equal copies with equal strides)."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    layout: str = "contiguous"
    positive: bool = False  # values in [1, 5]: divisors, sizes
    grad: bool = False  # a leaf that requires grad (floating dtypes only)

    def make(self, seed: int, device: str = "cpu") -> torch.Tensor:
        t = self._make(seed, device)
        return t.detach().requires_grad_() if self.grad else t

    def _make(self, seed: int, device: str) -> torch.Tensor:
        gen = torch.Generator().manual_seed(seed)
        shape, layout = self.shape, self.layout

        def values(shape: tuple[int, ...]) -> torch.Tensor:
            return _values(shape, self, gen).to(device)  # the same values on every device

        if layout == "transposed" and len(shape) >= 2:
            return values((*shape[:-2], shape[-1], shape[-2])).transpose(-1, -2)
        if layout == "sliced" and shape:
            return values((*shape[:-1], shape[-1] * 2 + 1))[..., 1::2]
        if layout == "expanded" and any(s > 1 for s in shape):
            small = tuple(1 if i % 2 == 0 and s > 1 else s for i, s in enumerate(shape))
            if small == shape:
                small = tuple(1 if s > 1 else s for s in shape)
            return values(small).expand(shape)
        if layout == "offset":
            n = 1
            for s in shape:
                n *= s
            return values((n + 3,))[3:].view(shape)
        return values(shape)

    def __str__(self) -> str:
        extra = ", positive=True" if self.positive else ""
        extra += ", requires_grad=True" if self.grad else ""
        return f"{self.name}: {tuple(self.shape)} {self.dtype} {self.layout}{extra}"


# Integer inputs of the narrow dtypes span their whole range, so sums and products wrap.
INTEGER_RANGE = {
    torch.uint8: (0, 255),
    torch.int8: (-128, 127),
    torch.int16: (-32768, 32767),
    torch.int32: (-(2**20), 2**20),
}


def _values(shape: tuple[int, ...], spec: InputSpec, gen: torch.Generator) -> torch.Tensor:
    if spec.dtype == torch.bool:
        return torch.rand(shape, generator=gen) > 0.5
    if spec.positive:
        return torch.randint(1, 6, shape, generator=gen).to(spec.dtype)
    if not spec.dtype.is_floating_point:
        lo, hi = INTEGER_RANGE.get(spec.dtype, (-5, 5))
        return torch.randint(lo, hi + 1, shape, generator=gen).to(spec.dtype)
    return torch.randn(shape, generator=gen).to(spec.dtype)


# ---- programs -----------------------------------------------------------------------------


@dataclass
class Program:
    inputs: list[InputSpec]
    lines: list[str]  # the body, indented by four spaces per level beyond the function's
    outputs: list[str]
    helpers: list[str] = field(default_factory=list)  # module-level helper functions
    scalars: dict[str, Any] = field(default_factory=dict)  # Python arguments after the tensors
    device: str = "cpu"  # of the input tensors

    def params(self) -> list[str]:
        return [s.name for s in self.inputs] + list(self.scalars)

    def source(self, name: str = "fn") -> str:
        body = "\n".join(f"    {line}" for line in self.lines)
        ret = f"    return ({', '.join(self.outputs)},)"
        head = f"def {name}({', '.join(self.params())}):"
        return "\n\n".join([*self.helpers, f"{head}\n{body}\n{ret}" if body else f"{head}\n{ret}"])

    def function(self, name: str = "fn") -> Callable:
        namespace = dict(NAMESPACE)
        exec(compile(self.source(name), f"<fuzz {name}>", "exec"), namespace)
        return namespace[name]

    def contiguous(self) -> Program:
        """The program on contiguous inputs of the same shapes and dtypes."""
        inputs = [dataclasses.replace(s, layout="contiguous") for s in self.inputs]
        return dataclasses.replace(self, inputs=inputs)

    def on(self, device: str) -> Program:
        """The program with its inputs on `device`."""
        return dataclasses.replace(self, device=device)

    def returning_everything(self) -> Program:
        """The program returning every value it assigns: where eager raises and the compiled
        program did not, this tells a removed dead computation (the compiled variant
        raises too; torch.compile also drops dead code) from a swallowed error."""
        names = [m for line in self.lines if (m := _assigned(line))]
        everything = list(dict.fromkeys([*names, *self.outputs]))
        return dataclasses.replace(self, outputs=everything)

    def make_inputs(self, seed: int) -> list[Any]:
        tensors = [s.make(seed * 101 + i, self.device) for i, s in enumerate(self.inputs)]
        return [*tensors, *self.scalars.values()]


def _assigned(line: str) -> str | None:
    name, sep, _ = line.strip().partition(" = ")
    return name if sep and name.isidentifier() and name.startswith("v") else None


def _is_small(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return value.numel() <= MAX_NUMEL and value.dim() <= 4
    if isinstance(value, (tuple, list)):
        return all(_is_small(v) for v in value)
    return True


class Builder:
    """Grows a program statement by statement, keeping sample values for every name."""

    def __init__(
        self,
        data: st.DataObject,
        *,
        dtypes: Sequence[torch.dtype],
        mutation: bool,
        grad: bool = False,
    ):
        self.data = data
        self.dtypes = list(dtypes)
        self.mutation = mutation
        self.grad = grad  # inputs may require grad
        self.values: dict[str, Any] = {}
        self.rounded: set[str] = set()  # computed in half precision: eager rounds each op
        self.inputs: list[InputSpec] = []
        self.lines: list[str] = []
        self.scalars: dict[str, Any] = {}
        self.indent = 0
        self._count = 0

    # -- drawing ------------------------------------------------------------------------

    def draw(self, strategy: st.SearchStrategy) -> Any:
        return self.data.draw(strategy)

    def choice(self, options: Sequence[Any]) -> Any:
        return self.draw(st.sampled_from(list(options)))

    def coin(self, p_true: float = 0.5) -> bool:
        return self.draw(st.integers(0, 99)) < p_true * 100

    def shape(self, max_rank: int = 3) -> tuple[int, ...]:
        rank = self.choice([r for r in (2, 1, 3, 0) if r <= max_rank])
        return tuple(self.choice(SIZES) for _ in range(rank))

    # -- names --------------------------------------------------------------------------

    def new_name(self, prefix: str = "v") -> str:
        name = f"{prefix}{self._count}"
        self._count += 1
        return name

    def new_input(
        self,
        shape: tuple[int, ...] | None = None,
        dtype: torch.dtype | None = None,
        positive: bool = False,
    ) -> str:
        shape = self.shape() if shape is None else shape
        dtype = self.choice(self.dtypes) if dtype is None else dtype
        layout = self.choice(LAYOUTS) if not positive else "contiguous"
        grad = self.grad and dtype.is_floating_point and self.coin(0.3)
        spec = InputSpec(self.new_name("a"), tuple(shape), dtype, layout, positive, grad)
        self.inputs.append(spec)
        self.values[spec.name] = spec.make(len(self.inputs))
        return spec.name

    def new_scalar(self, value: Any) -> str:
        name = self.new_name("k")
        self.scalars[name] = value
        self.values[name] = value
        return name

    def tensors(self, pred: Callable[[torch.Tensor], bool] = lambda t: True) -> list[str]:
        return [n for n, v in self.values.items() if isinstance(v, torch.Tensor) and pred(v)]

    def tensor(self, pred: Callable[[torch.Tensor], bool] = lambda t: True) -> str | None:
        names = self.tensors(pred)
        return self.choice(names) if names else None

    def exact(self, name: str) -> bool:
        """Safe under a discontinuous op (floor, comparisons, argmax, casts to int): not a
        half-precision result that eager rounded op by op and the kernel did not."""
        return name not in self.rounded

    # -- statements ---------------------------------------------------------------------

    def line(self, text: str) -> None:
        self.lines.append("    " * self.indent + text)

    def evaluate(self, expr: str) -> Any:
        """`expr`'s value on the samples; raises if it fails or is not a small value."""
        value = eval(expr, NAMESPACE, dict(self.values))
        if not _is_small(value) or callable(value):
            raise ValueError("too large or a callable")
        return value

    def bind(self, name: str, value: Any, expr: str, uses: Sequence[str]) -> None:
        """Record `name`'s new sample; a half-precision result of arithmetic (not a view) on
        anything, or of anything on rounded values, is rounded."""
        self.values[name] = value
        if (_half(value) and not _is_view_expr(expr)) or any(u in self.rounded for u in uses):
            self.rounded.add(name)
        else:
            self.rounded.discard(name)

    def assign(self, expr: str, uses: Sequence[str] = (), name: str | None = None) -> str | None:
        """Evaluate `expr` on the samples; keep `name = expr` if it works. `uses`: the names
        it reads."""
        try:
            value = self.evaluate(expr)
        except Exception:
            return None
        name = name or self.new_name()
        self.bind(name, value, expr, uses)
        self.line(f"{name} = {expr}")
        return name

    def aliases_input(self, name: str) -> bool:
        """Whether the sample shares memory with an input (is one, or a view of one)."""
        storage = self.values[name].untyped_storage().data_ptr()
        return any(self.values[s.name].untyped_storage().data_ptr() == storage for s in self.inputs)

    def mutate(self, statement: str, target: str) -> bool:
        """Run an in-place statement on the samples (views share memory with their bases,
        as in the program); keep it if it works. torch checks an in-place op's arguments
        before writing, so a statement that raises has changed nothing."""
        try:
            exec(statement, NAMESPACE, self.values)
        except Exception:
            return False
        self.line(statement)
        if _half(self.values[target]):
            self.rounded.add(target)
        return True

    def program(self, outputs: list[str]) -> Program:
        return Program(list(self.inputs), list(self.lines), outputs, scalars=dict(self.scalars))


def _half(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype in LOW_PRECISION


def _is_view_expr(expr: str) -> bool:
    return any(word in expr for word in VIEW_WORDS) and not any(c in expr for c in "+-*/")


# ---- the op families ----------------------------------------------------------------------
# Each takes the builder and adds at most one statement, returning its name (or None).

FLOAT_UNARY = [
    "torch.sin({x})", "torch.cos({x})", "torch.exp({x})", "torch.tanh({x})",
    "torch.sigmoid({x})", "torch.relu({x})", "torch.abs({x})", "-{x}",
    "torch.sqrt(torch.abs({x}))", "torch.log({x})", "torch.reciprocal({x})", "torch.rsqrt({x})",
    "torch.erf({x})", "torch.expm1({x})", "torch.log1p({x})", "torch.atan({x})",
    "{x}.clamp(-0.5, 0.5)", "{x}.clamp(min=0.1)", "{x} ** 2", "{x}.pow(3)", "F.gelu({x})",
    "F.silu({x})", "F.leaky_relu({x}, 0.1)", "F.hardtanh({x})", "torch.isnan({x})",
    "{x}.to(torch.float32)", "{x}.to(torch.float16)", "{x}.to(torch.bfloat16)",
    "torch.sin({x} + 10)",
]  # fmt: skip
DISCONTINUOUS_UNARY = [
    "torch.floor({x})", "torch.ceil({x})", "torch.round({x})", "torch.trunc({x})",
    "torch.sign({x})", "{x} > 0", "{x}.to(torch.int64)", "{x}.to(torch.bool)",
    "({x} * 40).to(torch.uint8)",
]  # fmt: skip
INT_UNARY = [
    "-{x}", "torch.abs({x})", "~{x}", "torch.sign({x})", "{x}.to(torch.float32)", "{x} * 3",
    "{x}.to(torch.bool)", "{x} + 200", "{x} // -3", "{x} % -3", "torch.fmod({x}, 3)",
    "{x}.to(torch.uint8)", "{x}.to(torch.int8)", "{x}.to(torch.float16)", "{x} * 2.5",
    "{x} >> 1", "{x} << 2",
]  # fmt: skip
BOOL_UNARY = [
    "~{x}", "torch.logical_not({x})", "{x}.to(torch.float32)", "{x}.to(torch.int64)",
    "{x} + 1", "{x} * 2.5", "torch.sign({x})", "{x}.to(torch.uint8)", "{x}.to(torch.float16)",
]  # fmt: skip


def unary(b: Builder) -> str | None:
    x = b.tensor()
    if x is None:
        return None
    dtype = b.values[x].dtype
    if dtype == torch.bool:
        options = BOOL_UNARY
    elif dtype.is_floating_point:
        options = FLOAT_UNARY + (DISCONTINUOUS_UNARY if b.exact(x) else [])
    else:
        options = INT_UNARY
    return b.assign(b.choice(options).format(x=x), [x])


FLOAT_BINARY = [
    "{a} + {b}", "{a} - {b}", "{a} * {b}", "{a} / {b}", "torch.maximum({a}, {b})",
    "torch.minimum({a}, {b})", "torch.atan2({a}, {b})", "torch.where({a} > 0, {a}, {b})",
    "torch.add({a}, {b}, alpha=2)", "torch.lerp({a}, {b}, 0.25)",
]  # fmt: skip
DISCONTINUOUS_BINARY = [
    "{a} < {b}", "{a} >= {b}", "{a} == {b}", "{a} != {b}", "torch.remainder({a}, {b})",
    "torch.fmod({a}, {b})", "torch.floor_divide({a}, {b})",
    "torch.div({a}, {b}, rounding_mode='trunc')",
]  # fmt: skip
INT_BINARY = [
    "{a} + {b}", "{a} - {b}", "{a} * {b}", "{a} // {b}", "{a} % {b}", "{a} / {b}",
    "torch.maximum({a}, {b})", "torch.minimum({a}, {b})", "{a} & {b}", "{a} | {b}", "{a} ^ {b}",
    "{a} < {b}", "{a} == {b}", "torch.fmod({a}, {b})",
    "torch.div({a}, {b}, rounding_mode='floor')", "torch.remainder({a}, {b})", "{a} > {b}",
]  # fmt: skip
BOOL_BINARY = [
    "{a} & {b}", "{a} | {b}", "{a} ^ {b}", "torch.logical_and({a}, {b})", "{a} == {b}",
    "{a} + {b}", "{a} * {b}", "torch.maximum({a}, {b})", "torch.minimum({a}, {b})",
]  # fmt: skip
SCALARS = {"float": ["2.5", "-1.0", "0.5", "3"], "int": ["2", "-3", "1", "0"], "bool": ["True"]}


def _kind(t: torch.Tensor) -> str:
    return "bool" if t.dtype == torch.bool else "float" if t.dtype.is_floating_point else "int"


def _broadcastable_shape(b: Builder, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts against `shape`: trailing dims kept or set to 1."""
    keep = b.draw(st.integers(0, len(shape)))
    out = [s if b.coin(0.7) else 1 for s in shape[len(shape) - keep :]]
    if b.coin(0.2):
        out.insert(0, b.choice((1, 2)))
    return tuple(out)


def operand(b: Builder, a: str, kind: str | None = None) -> str | None:
    """A second operand for `a`: a constant, an existing tensor, or a new input that
    broadcasts against it."""
    t = b.values[a]
    how = b.choice(("tensor", "scalar", "input"))
    if how == "scalar":
        return b.choice(SCALARS[kind or _kind(t)])
    if how == "tensor":
        other = b.tensor(lambda v: v is not t)
        if other is not None:
            return other
    dtype = b.choice(b.dtypes) if kind is None else t.dtype
    return b.new_input(_broadcastable_shape(b, tuple(t.shape)), dtype)


def binary(b: Builder) -> str | None:
    a = b.tensor()
    if a is None:
        return None
    kind = _kind(b.values[a])
    other = operand(b, a)
    if other is None:
        return None
    exact = b.exact(a) and b.exact(other)
    options = {
        "float": FLOAT_BINARY + (DISCONTINUOUS_BINARY if exact else []),
        "int": INT_BINARY,
        "bool": BOOL_BINARY,
    }[kind]
    template = b.choice(options)
    if b.coin(0.3) and "{a} " in template:
        a, other = other, a  # the tensor on the right, a scalar on the left
    return b.assign(template.format(a=a, b=other), [a, other])


def _dims(b: Builder, ndim: int) -> str:
    if ndim == 0:
        return "None"
    how = b.choice(("one", "none", "two"))
    if how == "none":
        return "None"
    first = b.draw(st.integers(-ndim, ndim - 1))
    if how == "two" and ndim >= 2:
        second = (first + b.draw(st.integers(1, ndim - 1))) % ndim
        return f"({first % ndim}, {second})"
    return str(first)


def reduction(b: Builder) -> str | None:
    x = b.tensor(lambda t: t.dim() >= 1)
    if x is None:
        return None
    t = b.values[x]
    ndim, kind = t.dim(), _kind(t)
    dims, keep = _dims(b, ndim), b.coin(0.3)
    dim = b.draw(st.integers(-ndim, ndim - 1))
    options = [
        f"{x}.sum({dims}, keepdim={keep})" if dims != "None" else f"{x}.sum()",
        f"torch.amax({x}, {dims if dims != 'None' else dim}, keepdim={keep})",
        f"torch.amin({x}, {dim})",
        f"{x}.prod({dim})",
        f"{x}.any({dim})",
        f"{x}.all()",
    ]
    if kind == "float":
        options += [
            f"{x}.mean({dims}, keepdim={keep})" if dims != "None" else f"{x}.mean()",
            f"{x}.var({dim}, keepdim={keep})",
            f"{x}.std({dim}, correction=0)",
            f"torch.softmax({x}, {dim})",
            f"torch.log_softmax({x}, {dim})",
            f"torch.logsumexp({x}, {dim})",
            f"torch.cumsum({x}, {dim})",
            f"torch.max({x}, {dim})[0]",
        ]
    if kind != "bool" and b.exact(x):
        options += [f"{x}.argmax({dim})", f"{x}.argmin()", f"torch.min({x}, {dim}, True)[1]"]
    return b.assign(b.choice(options), [x])


def _reshape_target(b: Builder, shape: tuple[int, ...]) -> tuple[int, ...]:
    n = 1
    for s in shape:
        n *= s
    factors = [f for f in (2, 3, 4, 5) if n and n % f == 0]
    if not factors or b.coin(0.3):
        return (n,) if b.coin(0.5) else (1, n)
    f = b.choice(factors)
    return (f, -1) if b.coin(0.5) else (n // f, 1, f)


def view(b: Builder) -> str | None:
    x = b.tensor()
    if x is None:
        return None
    t = b.values[x]
    ndim = t.dim()
    d = b.draw(st.integers(-max(ndim, 1), max(ndim, 1) - 1)) if ndim else 0
    options = [f"{x}.unsqueeze({d if ndim else 0})", f"{x}.reshape({_reshape_target(b, t.shape)})"]
    if ndim:
        perm = b.draw(st.permutations(range(ndim)))
        start = b.draw(st.integers(-3, 3))
        step = b.choice((1, 2, 3))
        size = b.values[x].shape[d]
        options += [
            f"{x}.permute{tuple(perm)}",
            f"{x}.transpose({d}, {b.draw(st.integers(0, ndim - 1))})",
            f"{x}.view({_reshape_target(b, t.shape)})",
            f"{x}.flatten()",
            f"{x}.squeeze({d})",
            f"{x}.narrow({d}, 0, {max(size - 1, 0)})",
            f"{x}.select({d}, {b.draw(st.integers(-1, 0))})",
            f"{x}[{':, ' * (d % ndim)}{start}::{step}]",
            f"{x}.contiguous()",
            f"{x}.chunk(2, {d})[0]",
            f"{x}.unbind({d})[-1]",
            f"{x}.movedim({d}, 0)",
            f"{x}.expand({(2, *t.shape)})",
            f"{x}.expand({tuple(b.choice((1, 3)) if s == 1 else -1 for s in t.shape)})",
        ]
        if ndim <= 2:
            options.append(f"{x}.t()")
    return b.assign(b.choice(options), [x])


def concat(b: Builder) -> str | None:
    x = b.tensor(lambda t: t.dim() >= 1)
    if x is None:
        return None
    t = b.values[x]
    d = b.draw(st.integers(0, t.dim() - 1))
    shape = list(t.shape)
    shape[d] = b.choice((1, 2, 3, 0))
    how = b.choice(("input", "self", "stack"))
    if how == "self":
        return b.assign(f"torch.cat([{x}, {x} * 2], {d})", [x])
    if how == "stack":
        return b.assign(f"torch.stack([{x}, {x} + 1], {d})", [x])
    other = b.new_input(tuple(shape), t.dtype)
    return b.assign(f"torch.cat([{x}, {other}], dim={d})", [x, other])


def matmul(b: Builder) -> str | None:
    x = b.tensor(lambda t: 1 <= t.dim() <= 3 and t.dtype.is_floating_point)
    if x is None:
        return None
    t = b.values[x]
    k, n = t.shape[-1], b.choice((3, 1, 4, 0))
    how = b.choice(("matmul", "linear", "mm", "bmm"))
    if how == "linear":
        w = b.new_input((n, k), t.dtype)
        bias = b.new_input((n,), t.dtype) if b.coin() else None
        return b.assign(f"F.linear({x}, {w}{', ' + bias if bias else ''})", [x, w])
    if how == "mm" and t.dim() == 2:
        return b.assign(f"torch.mm({x}, {b.new_input((k, n), t.dtype)})", [x])
    if how == "bmm" and t.dim() == 3:
        return b.assign(f"torch.bmm({x}, {b.new_input((t.shape[0], k, n), t.dtype)})", [x])
    w = b.new_input((k, n) if b.coin(0.8) else (k,), t.dtype)
    return b.assign(f"{x} @ {w}", [x, w])


def inplace(b: Builder) -> str | None:
    """An in-place update of an intermediate or (when allowed) of an input or a view of one."""
    x = b.tensor()
    if x is None or (not b.mutation and b.aliases_input(x)):
        return None
    t = b.values[x]
    kind = _kind(t)
    if kind == "float":
        options = [
            f"{x}.add_(1.5)", f"{x}.mul_(-2)", f"{x}.clamp_(-1, 1)", f"{x}.relu_()",
            f"{x}[0].fill_(0.5)", f"{x}.copy_({x} * 3)", f"{x}.sub_({x}.sum())",
        ]  # fmt: skip
    elif kind == "int":
        options = [f"{x}.add_(2)", f"{x}.mul_(3)", f"{x}[..., 0].fill_(7)"]
    else:
        options = [f"{x}.logical_not_()", f"{x}[0].fill_(True)"]
    return x if b.mutate(b.choice(options), x) else None


FAMILIES: dict[str, Callable[[Builder], str | None]] = {
    "unary": unary,
    "binary": binary,
    "reduction": reduction,
    "view": view,
    "concat": concat,
    "matmul": matmul,
    "inplace": inplace,
}


def step(b: Builder, families: Sequence[str] = tuple(FAMILIES)) -> str | None:
    """One statement of a family drawn from `families`; a few tries before giving up."""
    for _ in range(4):
        name = FAMILIES[b.choice(families)](b)
        if name is not None:
            return name
    return None


VIEW_WORDS = (
    ".permute", ".transpose", ".view(", ".reshape", ".unsqueeze", ".squeeze", ".flatten",
    ".narrow", ".select", "[", ".t()", ".chunk", ".unbind", ".movedim", ".expand",
    ".contiguous",
)  # fmt: skip


def straight_line(
    data: st.DataObject,
    *,
    dtypes: Sequence[torch.dtype],
    families: Sequence[str] = tuple(FAMILIES),
    max_steps: int = 8,
    mutation: bool = True,
) -> Program:
    """A straight-line program over one to three inputs; returns some of its values."""
    b = Builder(data, dtypes=dtypes, mutation=mutation)
    for _ in range(b.draw(st.integers(1, 3))):
        b.new_input()
    made: list[str] = []
    for _ in range(b.draw(st.integers(1, max_steps))):
        name = step(b, families)
        if name is not None and name not in made:
            made.append(name)
    outputs = made[-1:] + [n for n in made[:-1] if b.coin(0.3)]
    if not outputs:
        outputs = [b.inputs[0].name + " * 1"]
    return b.program(outputs)
