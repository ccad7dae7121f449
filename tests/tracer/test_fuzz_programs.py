"""Differential fuzzing of the tracer: random Python programs, compiled vs eager.

The programs of tests/fuzzing.py grow Python around the tensor ops: branches on shapes,
dtypes and constant arguments (guards) and on tensor data (graph breaks), `for` loops over
ranges and lists, lists, tuples and dicts built, indexed, appended to and unpacked, helper
functions called with keyword arguments, closures and lambdas, `.item()` and in-place updates
of inputs. Each program runs through `compiler.compile` with a backend that runs the captured
graphs as they are (what the tracer got right or wrong, alone), and a smaller budget with the
default `inductor` backend (the whole stack). Every call is compared with eager: outputs,
raised exceptions, the inputs after the call (mutation) and the grad mode; a second call
with new values checks the cached entries.

The case count and graph/break totals go to test-output/fuzz/<test>.json; $FUZZ_EXAMPLES
runs more cases (tests/fuzzing.py). Regression tests for what the fuzzer found are below.
"""

from __future__ import annotations

import collections
import json
import math
import re
import warnings
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import compiler
from tests.conftest import REPO_ROOT
from tests.fuzzing import Builder, Program, fuzz_settings, step
from tests.tracer.helpers import RecordingBackend, assert_same_exception

# ---- program generation ---------------------------------------------------------------------


def _same_kind(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and a.requires_grad == b.requires_grad
    return type(a) is type(b)


class ProgramBuilder(Builder):
    """Straight-line steps plus Python structure around them."""

    def __init__(self, data: st.DataObject, dtypes: tuple[torch.dtype, ...]):
        super().__init__(data, dtypes=dtypes, mutation=True, grad=True)
        self.helpers: list[str] = []
        self.depth = 0

    def program(self, outputs: list[str]) -> Program:
        prog = super().program(outputs)
        prog.helpers = list(self.helpers)
        return prog

    def float_tensor(self) -> str | None:
        return self.tensor(lambda t: t.dtype.is_floating_point)

    def alternative(self, expr: str, like: Any) -> str | None:
        """An expression over what `expr` reads whose value has the kind of `like`."""
        if not isinstance(like, torch.Tensor):
            return None
        options = [f"({expr}) * 2", f"({expr}) + 1", f"-({expr})", f"({expr}).clone()"]
        if like.dtype == torch.bool:
            options = [f"~({expr})", f"({expr}) & ({expr})"]
        for _ in range(2):
            other = self.choice(options)
            try:
                if _same_kind(self.evaluate(other), like):
                    return other
            except Exception:
                pass
        return None

    # -- the structures ---------------------------------------------------------------------

    def branch(self) -> str | None:
        """if/else assigning one name in both arms: on a shape, a dtype, a constant argument
        (a guard), or on tensor data (a graph break)."""
        x = self.tensor()
        if x is None:
            return None
        t = self.values[x]
        conditions = [
            f"{x}.dim() == {t.dim()}",
            f"{x}.dtype == torch.float32",
            f"{x}.is_contiguous()",
        ]
        if t.dim():
            conditions.append(f"{x}.shape[0] > {self.choice((1, 2, 3))}")
        if t.numel() and t.dtype.is_floating_point:
            conditions += [f"{x}.sum() > 0", f"bool(({x} > 0.5).any())", f"{x}.max().item() > 0.3"]
        if self.scalars:
            k = self.choice(list(self.scalars))
            conditions.append(
                f"{k} > 1" if not isinstance(self.scalars[k], str) else f"{k} == 'relu'"
            )
        cond = self.choice(conditions)
        try:
            taken = bool(self.evaluate(cond))
        except Exception:
            return None
        start = len(self.lines)
        self.line(f"if {cond}:")
        self.indent += 1
        inputs = len(self.inputs)
        name = step(self, ("unary", "binary", "reduction", "view"))
        self.indent -= 1
        if (
            name is None
            or len(self.lines) != start + 2
            or not self.lines[-1].strip().startswith(f"{name} =")
            or len(self.inputs) != inputs  # the arm drew a new input, read before its line
        ):
            del self.lines[start:]
            return None
        expr = self.lines[-1].split(" = ", 1)[1]
        other = self.alternative(expr, self.values[name])
        if other is None:
            del self.lines[start:]
            return None
        self.line("else:")
        self.line(f"    {name} = {other}")
        if not taken:  # the sample follows the arm the sample inputs take
            self.values[name] = self.evaluate(other)
        return name

    def loop(self) -> str | None:
        """An accumulation over `range(n)` (n constant or an argument), a list, `enumerate`,
        `zip`, or a `while` with a counter."""
        x = self.tensor(lambda t: t.dtype != torch.bool)
        if x is None:
            return None
        acc = self.assign(f"{x} * 1", [x])
        if acc is None:
            return None
        ints = [
            k for k, v in self.scalars.items() if isinstance(v, int) and not isinstance(v, bool)
        ]
        others = self.tensors(lambda t: t.shape == self.values[acc].shape) or [acc]
        items = ", ".join(self.choice(others) for _ in range(self.choice((1, 2, 3))))
        count = self.choice(ints) if ints and self.coin() else str(self.choice((1, 2, 3)))
        kind = self.choice(("range", "list", "enumerate", "zip", "while"))
        head, update = {
            "range": (
                f"for i in range({count}):",
                self.choice(("{a} * 0.5 + i", "{a} + i * {a}", "torch.sin({a}) + {a}", "{a} - i")),
            ),
            "list": (
                f"for t in [{items}]:",
                self.choice(("{a} + t", "torch.maximum({a}, t)", "{a} * 0.5 - t")),
            ),
            "enumerate": (f"for i, t in enumerate([{items}]):", "{a} + t * i"),
            "zip": (f"for t, i in zip([{items}], range(1, 9)):", "{a} - t / i"),
            "while": (f"i = 0\nwhile i < {count}:", "{a} * 0.5 + i; i += 1"),
        }[kind]
        body = update.format(a=acc)
        probe = re.sub(r"\bt\b", acc, re.sub(r"\bi\b", "1", body.split(";")[0]))
        try:
            value = self.evaluate(probe)
        except Exception:
            return acc
        if not _same_kind(value, self.values[acc]):
            return acc
        *before, head = head.split("\n")
        for line in before:
            self.line(line)
        self.line(head)
        first, *rest = body.split("; ")
        self.line(f"    {acc} = {first}")
        for statement in rest:
            self.line(f"    {statement}")
        return acc

    def container(self) -> str | None:
        """A list, tuple or dict built from values, then read in one of several ways."""
        names = self.tensors()
        if not names:
            return None
        picked = [self.choice(names) for _ in range(self.choice((1, 2, 3)))]
        kind = self.choice(("list", "dict", "tuple"))
        c = self.new_name("c")
        if kind == "list":
            self.line(f"{c} = [{', '.join(picked)}]")
            if self.coin(0.5):
                extra = self.choice(names)
                self.line(f"{c}.append({extra})")
                picked.append(extra)
            self.values[c] = [self.values[n] for n in picked]
            reads = [
                f"{c}[-1] * len({c})",
                f"sum(t.sum() for t in {c})",
                f"torch.cat([t.flatten() for t in {c}])",
                f"torch.stack({c})",
                f"[t * 2 for t in {c}][0]",
            ]
        elif kind == "dict":
            keys = [f"'k{i}'" for i in range(len(picked))]
            self.line(f"{c} = {{{', '.join(f'{k}: {n}' for k, n in zip(keys, picked))}}}")
            self.values[c] = {k.strip("'"): self.values[n] for k, n in zip(keys, picked)}
            reads = [
                f"{c}[{keys[0]}] + 1",
                f"{c}.get('missing', {picked[0]}) * 2",
                f"sum(v.float().sum() for v in {c}.values())",
                f"[k for k in {c}][0] == 'k0'",
            ]
        else:
            self.line(f"{c} = ({', '.join(picked)},)")
            self.values[c] = tuple(self.values[n] for n in picked)
            first, *_ = picked
            reads = [f"{c}[0] - {c}[-1]", f"len({c}) * {first}", f"{c}[::-1][0]"]
        return self.assign(self.choice(reads), picked)

    def call(self) -> str | None:
        """A call of a module-level helper (keyword argument, default), a closure or a lambda."""
        x = self.tensor()
        if x is None:
            return None
        how = self.choice(("helper", "closure", "lambda"))
        inner = Builder(self.data, dtypes=self.dtypes, mutation=False)
        inner.values = {"p": self.values[x], "scale": 2.0}
        inner.rounded = {"p"} if x in self.rounded else set()
        body = step(inner, ("unary", "binary", "reduction", "view"))
        if body is None or not inner.lines or inner.inputs:
            return None
        expr = inner.lines[-1].split(" = ", 1)[1]
        if (
            isinstance(inner.values[body], torch.Tensor)
            and inner.values[body].dtype.is_floating_point
        ):
            expr = f"({expr}) * scale"
        scale = self.choice((2.0, 0.5))
        if how == "helper":
            h = self.new_name("helper")
            self.helpers.append(f"def {h}(p, scale=2.0):\n    q = {expr}\n    return q")
            call = f"{h}({x}, scale={scale})" if self.coin() else f"{h}({x})"
            scale = scale if "scale=" in call else 2.0
        elif how == "closure":  # `scale` is a local of the enclosing function: a free variable
            h = self.new_name("inner")
            self.line(f"scale = {scale}")
            self.line(f"def {h}(p):")
            self.line(f"    return {expr}")
            call = f"{h}({x})"
        else:
            h = self.new_name("f")
            self.line(f"{h} = lambda p, scale={scale}: {expr}")
            call = f"{h}({x})"
        try:
            value = eval(
                expr,
                {"torch": torch, "F": torch.nn.functional, "p": self.values[x], "scale": scale},
            )
        except Exception:
            return None  # the definition stays, unused
        name = self.new_name()
        self.bind(name, value, expr, [x])
        self.line(f"{name} = {call}")
        return name

    def python_scalar(self) -> str | None:
        """Python numbers from tensors: sizes (constants under guards) and `.item()` (a
        graph break), used in later tensor math."""
        x = self.tensor(lambda t: t.dim() >= 1)
        if x is None:
            return None
        options = [
            f"{x}.shape[-1] * 2 + 1",
            f"{x}.size(0) - {x}.dim()",
            f"{x}.numel() // 2",
            f"max({x}.shape) + len({x})",
            f"sum(s for s in {x}.shape[1:]) - 1",
        ]
        if self.values[x].numel() and self.values[x].dtype.is_floating_point:
            options.append(f"round({x}.sum().item(), 3)")
        s = self.assign(self.choice(options), [x])
        y = self.tensor()
        if s is None or y is None:
            return s
        return self.assign(f"{y} * {s}", [y])

    def setitem(self) -> str | None:
        """Subscript assignment and augmented assignment, on intermediates and inputs."""
        x = self.tensor(lambda t: t.dim() >= 1 and not t.requires_grad)
        if x is None:
            return None
        t = self.values[x]
        value = "1.5" if t.dtype.is_floating_point else "True" if t.dtype == torch.bool else "3"
        options = [f"{x}[0] = {value}", f"{x}[..., -1] = {value}"]
        if t.dtype != torch.bool:
            options.append(f"{x} += {value}")
        return x if self.mutate(self.choice(options), x) else None

    def no_grad(self) -> str | None:
        x = self.float_tensor()
        if x is None:
            return None
        self.line("with torch.no_grad():")
        self.indent += 1
        name = self.assign(f"{x} * 2", [x])
        self.indent -= 1
        if name is None:
            self.lines.pop()
            return None
        self.values[name] = self.values[name].detach()
        return name


STRUCTURES = ("step", "branch", "loop", "container", "call", "python_scalar", "setitem", "no_grad")


def random_program(
    data: st.DataObject, dtypes: tuple[torch.dtype, ...], max_steps: int = 7
) -> Program:
    b = ProgramBuilder(data, dtypes)
    for _ in range(b.draw(st.integers(1, 2))):
        b.new_input()
    if b.coin(0.5):
        b.new_scalar(b.choice((2, 3, "relu", 1.5, "tanh")))
    made: list[str] = []
    for _ in range(b.draw(st.integers(1, max_steps))):
        kind = b.choice(STRUCTURES)
        name = step(b) if kind == "step" else getattr(b, kind)()
        if name is not None and name not in made:
            made.append(name)
    outputs = made[-1:] + [n for n in made[:-1] if b.coin(0.3)]
    return b.program(outputs or [b.inputs[0].name])


# ---- the differential run -------------------------------------------------------------------


def assert_close(expected: Any, actual: Any, path: str, tol: float) -> None:
    """Eager's value vs compiled: same structure and types, tensors (dtype, shape,
    requires_grad) and floats within `tol`."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"{path}: got {type(actual).__name__}"
        assert actual.requires_grad == expected.requires_grad, f"{path}: requires_grad differs"
        torch.testing.assert_close(
            actual, expected, rtol=tol, atol=tol, equal_nan=True, msg=lambda m: f"{path}: {m}"
        )
        return
    assert type(actual) is type(expected), (
        f"{path}: {type(actual).__name__}, eager {type(expected).__name__}"
    )
    if isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), f"{path}: length differs"
        for i, (e, a) in enumerate(zip(expected, actual)):
            assert_close(e, a, f"{path}[{i}]", tol)
    elif isinstance(expected, dict):
        assert list(actual) == list(expected), f"{path}: keys differ"
        for k in expected:
            assert_close(expected[k], actual[k], f"{path}[{k!r}]", tol)
    elif isinstance(expected, float):
        assert math.isclose(actual, expected, rel_tol=tol, abs_tol=tol) or (
            math.isnan(actual) and math.isnan(expected)
        ), f"{path}: {actual!r}, eager {expected!r}"
    else:
        assert actual == expected, f"{path}: {actual!r}, eager {expected!r}"


class Stats:
    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self.warnings: collections.Counter[str] = collections.Counter()
        self.examples: dict[str, str] = {}  # warning -> the first program that gave it

    def dump(self, name: str) -> None:
        out = {
            **self.counts,
            "compiler warnings": dict(self.warnings.most_common()),
            "warning examples": self.examples,
        }
        path = REPO_ROOT / "test-output" / "fuzz" / f"{name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(out, indent=2))
        print(f"\n{name}: {json.dumps(out, indent=2)}")


def _call(fn: Any, args: list) -> tuple[Any, BaseException | None]:
    try:
        return fn(*args), None
    except Exception as e:  # compared between eager and compiled
        return None, e


def check_program(
    program: Program, backend: Any, stats: Stats | None = None, tol: float = 1e-5
) -> None:
    fn = program.function()
    compiled = compiler.compile(fn, backend=backend)
    grad_mode = torch.is_grad_enabled()
    for seed in (0, 1):
        e_args, c_args = program.make_inputs(seed), program.make_inputs(seed)
        e_out, e_err = _call(fn, e_args)
        e_mode = torch.is_grad_enabled()
        torch.set_grad_enabled(grad_mode)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            c_out, c_err = _call(compiled, c_args)
        c_mode = torch.is_grad_enabled()
        torch.set_grad_enabled(grad_mode)
        assert c_mode == e_mode, (
            f"call {seed}: grad mode {c_mode} after the compiled call, {e_mode} after eager"
        )
        if e_err is not None and c_err is None and _raises_when_live(program, backend, seed, e_err):
            if stats is not None:
                stats.counts["errors of dead code not raised (as torch.compile)"] += 1
            continue
        assert_same_exception(e_err, c_err)
        if e_err is None:
            assert_close(e_out, c_out, f"call {seed}: out", tol)
        assert_close(e_args, c_args, f"call {seed}: inputs after the call", tol)
        if stats is not None:
            for w in caught:
                if "compiler" in str(w.message) or "eagerly" in str(w.message):
                    message = str(w.message).splitlines()[0][:200]
                    stats.warnings[message] += 1
                    stats.examples.setdefault(message, describe(program))
    if stats is not None:
        report = compiler.inspect(compiled)
        stats.counts["cases"] += 1
        stats.counts["graphs"] += len(report.graphs)
        stats.counts["graph breaks"] += sum(len(f.breaks) for f in report.functions)
        stats.counts["recompiles"] += sum(1 for e in report.entries if e.recompile_reason)
        stats.counts["cases where eager raised"] += e_err is not None
        stats.counts["kernels"] += len(report.kernels)


def _raises_when_live(program: Program, backend: Any, seed: int, error: BaseException) -> bool:
    """Whether the compiled program raises eager's error once every value is returned: then
    the error came from a computation whose result was unused, which was removed."""
    compiler.reset()
    compiled = compiler.compile(program.returning_everything().function(), backend=backend)
    _, err = _call(compiled, program.make_inputs(seed))
    return type(err) is type(error) and str(err) == str(error)


def describe(program: Program) -> str:
    inputs = "\n".join(f"#   {s}" for s in program.inputs)
    scalars = "".join(f"\n#   {k} = {v!r}" for k, v in program.scalars.items())
    return f"# inputs:\n{inputs}{scalars}\n{program.source()}"


def _check_or_explain(program: Program, backend: Any, stats: Stats, tol: float = 1e-5) -> None:
    compiler.reset()
    try:
        check_program(program, backend, stats, tol)
    except Exception as exc:
        raise AssertionError(f"{exc}\n{describe(program)}") from exc


RECORDING_STATS = Stats()
INDUCTOR_STATS = Stats()


@given(data=st.data())
@fuzz_settings(ci_default=200)
def test_fuzz_tracer(data):
    dtypes = (torch.float32, torch.float32, torch.float16, torch.int64, torch.bool)
    _check_or_explain(random_program(data, dtypes), RecordingBackend(), RECORDING_STATS)


@given(data=st.data())
@fuzz_settings(ci_default=30)
def test_fuzz_tracer_and_inductor(data, monkeypatch, tmp_path_factory):
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "fuzz-cache"))
    program = random_program(data, (torch.float32, torch.int64, torch.bool), max_steps=5)
    _check_or_explain(program, "inductor", INDUCTOR_STATS, tol=1e-4)


@pytest.fixture(scope="module", autouse=True)
def write_stats():
    yield
    for name, stats in (("tracer_recording", RECORDING_STATS), ("tracer_inductor", INDUCTOR_STATS)):
        if stats.counts["cases"]:
            stats.dump(name)
