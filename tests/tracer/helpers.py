"""Differential test helpers for the tracer: compiled vs eager on fresh random inputs.

The one test shape is `check(fn, *arg_factories, graphs=..., breaks=...)`: every call builds
fresh inputs from the factories, runs eager on one clone and the compiled function on another,
and compares outputs, raised exceptions and the inputs after the call (mutation). The first
call compiles, the second checks that the entry is reused on new values of the same kind.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Container, Mapping, Sequence
from typing import Any

import pytest
import torch

import compiler

# ---- the recording backend --------------------------------------------------------------


class RecordingBackend:
    """A backend that keeps every graph it is given and runs it as captured (gm.forward)."""

    __name__ = "recording"

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []
        self.example_inputs: list[list[Any]] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable:
        self.graphs.append(gm)
        self.example_inputs.append(list(example_inputs))
        return gm.forward

    @property
    def count(self) -> int:
        return len(self.graphs)

    def op_counts(self) -> list[int]:
        """Torch calls per graph (call_function/call_method/call_module nodes)."""
        return [
            sum(n.op in ("call_function", "call_method", "call_module") for n in gm.graph.nodes)
            for gm in self.graphs
        ]

    def targets(self) -> list[str]:
        """Every call target of every graph, as text, to assert what was captured."""
        return [
            str(getattr(n.target, "__name__", n.target))
            for gm in self.graphs
            for n in gm.graph.nodes
            if n.op in ("call_function", "call_method", "call_module")
        ]


# ---- input factories --------------------------------------------------------------------


def T(
    *shape: int, dtype: torch.dtype = torch.float32, grad: bool = False
) -> Callable[[], torch.Tensor]:
    """Fresh standard-normal tensor (or a [0, 10) int / random bool tensor for those dtypes)."""

    def make() -> torch.Tensor:
        if dtype == torch.bool:
            t = torch.rand(shape) > 0.5
        elif dtype.is_floating_point or dtype.is_complex:
            t = torch.randn(shape, dtype=dtype)
        else:
            t = torch.randint(0, 10, shape, dtype=dtype)
        return t.requires_grad_(grad) if grad else t

    return make


def pos(*shape: int, grad: bool = False) -> Callable[[], torch.Tensor]:
    """Fresh tensor with entries in [0.5, 1.5): sums are positive, logs and sqrts defined."""
    return lambda: (torch.rand(shape) + 0.5).requires_grad_(grad)


def neg(*shape: int) -> Callable[[], torch.Tensor]:
    """Fresh tensor with entries in (-1.5, -0.5]: sums are negative."""
    return lambda: -(torch.rand(shape) + 0.5)


def C(value: Any) -> Callable[[], Any]:
    """A constant argument (deep-copied per call), for values that are themselves callable."""
    return lambda: copy.deepcopy(value)


def make(spec: Any) -> Any:
    """Build one argument from its spec: factories are called, containers recursed into,
    anything else is a constant passed as is."""
    if isinstance(spec, (torch.Tensor, torch.nn.Module, type)):
        return spec
    if callable(spec):
        return spec()
    if isinstance(spec, list):
        return [make(s) for s in spec]
    if isinstance(spec, tuple) and not hasattr(spec, "_fields"):
        return tuple(make(s) for s in spec)
    if isinstance(spec, dict):
        return {k: make(v) for k, v in spec.items()}
    return spec


def clone(value: Any) -> Any:
    """An independent copy: tensors cloned as fresh leaves with the same strides and
    requires_grad, containers rebuilt, other values (modules too) shared. A module passed
    as an argument is the same object on both sides so its identity guard holds across
    calls; stateful modules are compared with `check_module` instead."""
    if isinstance(value, torch.Tensor):
        c = value.detach().clone()
        return c.requires_grad_(value.requires_grad) if value.is_floating_point() else c
    if isinstance(value, list):
        return [clone(v) for v in value]
    if isinstance(value, tuple):
        items = [clone(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}
    return value


# ---- comparison -------------------------------------------------------------------------


def assert_same(expected: Any, actual: Any, path: str = "out", **tol: Any) -> None:
    """Nested comparison of eager's value with the compiled one: same container types and
    keys, tensors close with the same dtype, shape, device and requires_grad, Python values
    equal and of the same type."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), (
            f"{path}: expected a tensor, got {type(actual).__name__}"
        )
        torch.testing.assert_close(
            actual, expected, equal_nan=True, msg=lambda m: f"{path}: {m}", **tol
        )
        assert actual.requires_grad == expected.requires_grad, (
            f"{path}: requires_grad {actual.requires_grad}, eager has {expected.requires_grad}"
        )
        return
    if isinstance(expected, torch.nn.Module):
        assert isinstance(actual, torch.nn.Module), f"{path}: expected a module"
        assert_same(expected.state_dict(), actual.state_dict(), f"{path}.state_dict()", **tol)
        assert expected.training == actual.training, f"{path}.training differs"
        return
    assert type(actual) is type(expected), (
        f"{path}: type {type(actual).__name__}, eager has {type(expected).__name__} ({expected!r})"
    )
    if isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), (
            f"{path}: length {len(actual)}, eager has {len(expected)}"
        )
        for i, (e, a) in enumerate(zip(expected, actual)):
            assert_same(e, a, f"{path}[{i}]", **tol)
    elif isinstance(expected, Mapping):
        assert list(actual.keys()) == list(expected.keys()), (
            f"{path}: keys {list(actual)} vs {list(expected)}"
        )
        for k in expected:
            assert_same(expected[k], actual[k], f"{path}[{k!r}]", **tol)
    elif isinstance(expected, float) and expected != expected:
        assert actual != actual, f"{path}: {actual!r}, eager has nan"
    else:
        assert actual == expected, f"{path}: {actual!r}, eager has {expected!r}"


def _tensor_paths(value: Any, path: str = "") -> dict[int, str]:
    """id(tensor) -> its path inside a nested argument structure."""
    if isinstance(value, torch.Tensor):
        return {id(value): path}
    found: dict[int, str] = {}
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found.update(_tensor_paths(v, f"{path}[{i}]"))
    elif isinstance(value, dict):
        for k, v in value.items():
            found.update(_tensor_paths(v, f"{path}[{k!r}]"))
    return found


def _leaves(value: Any, path: str = "out") -> list[tuple[str, Any]]:
    if isinstance(value, (list, tuple)):
        return [leaf for i, v in enumerate(value) for leaf in _leaves(v, f"{path}[{i}]")]
    if isinstance(value, dict):
        return [leaf for k, v in value.items() for leaf in _leaves(v, f"{path}[{k!r}]")]
    return [(path, value)]


def assert_same_aliasing(e_args: Any, e_out: Any, c_args: Any, c_out: Any) -> None:
    """An output that is an input tensor object in eager must be the same input in compiled."""
    e_ids = _tensor_paths(e_args)
    c_ids = _tensor_paths(c_args)
    for (path, e_leaf), (_, c_leaf) in zip(_leaves(e_out), _leaves(c_out)):
        if isinstance(e_leaf, torch.Tensor) and id(e_leaf) in e_ids:
            assert c_ids.get(id(c_leaf)) == e_ids[id(e_leaf)], (
                f"{path}: eager returns the input args{e_ids[id(e_leaf)]} itself, compiled returns "
                + (f"args{c_ids[id(c_leaf)]}" if id(c_leaf) in c_ids else "a new tensor")
            )


def run(
    fn: Callable, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> tuple[Any, BaseException | None]:
    try:
        return fn(*args, **kwargs), None
    except Exception as e:  # compared with the compiled side below
        return None, e


def assert_same_exception(expected: BaseException | None, actual: BaseException | None) -> None:
    if expected is None:
        if actual is not None:
            raise AssertionError(
                f"compiled raised {type(actual).__name__}: {actual}; eager did not"
            ) from actual
        return
    assert actual is not None, (
        f"eager raised {type(expected).__name__}: {expected}; compiled returned"
    )
    assert type(actual) is type(expected), (
        f"compiled raised {type(actual).__name__}: {actual}\n"
        f"eager raised {type(expected).__name__}: {expected}"
    )
    assert str(actual) == str(expected), (
        f"message differs:\ncompiled: {actual}\neager:    {expected}"
    )


def _matches(expected: int | Container[int] | None, got: int) -> bool:
    if expected is None:
        return True
    return got == expected if isinstance(expected, int) else got in expected


# ---- the differential check -------------------------------------------------------------


def check(
    fn: Callable,
    *arg_factories: Any,
    kwargs: Mapping[str, Any] | None = None,
    graphs: int | Container[int] | None = None,
    breaks: int | Container[int] | None = None,
    calls: int = 2,
    recompiles: bool = False,
    backward: bool = False,
    **tol: Any,
) -> RecordingBackend:
    """Compare `compiler.compile(fn)` with eager over `calls` calls on fresh inputs.

    graphs/breaks: the counts on one call (an int, or a container of allowed counts), checked
    on the recording backend after the first call and with `compiler.explain` on a fresh
    compile. Later calls must reuse the first call's graphs unless `recompiles` is set.
    backward: also compare gradients of sum(outputs) w.r.t. the inputs that require grad.
    """
    kwargs = kwargs or {}
    backend = RecordingBackend()
    compiled = compiler.compile(fn, backend=backend)
    after_first = 0
    for call in range(calls):
        args, kw = make(list(arg_factories)), make(dict(kwargs))
        e_args, c_args = clone(args), clone(args)
        e_kw, c_kw = clone(kw), clone(kw)
        grad_mode = torch.is_grad_enabled()
        e_out, e_err = run(fn, e_args, e_kw)
        e_mode = torch.is_grad_enabled()
        torch.set_grad_enabled(grad_mode)
        c_out, c_err = run(compiled, c_args, c_kw)
        c_mode = torch.is_grad_enabled()
        torch.set_grad_enabled(grad_mode)
        where = f"call {call}"
        assert c_mode == e_mode, (
            f"{where}: grad mode is {c_mode} after the compiled call, {e_mode} after eager"
        )
        assert_same_exception(e_err, c_err)
        if e_err is None:
            assert_same(e_out, c_out, f"{where}: out", **tol)
            assert_same_aliasing(e_args, e_out, c_args, c_out)
        assert_same(e_args, c_args, f"{where}: args after the call (mutation)", **tol)
        assert_same(e_kw, c_kw, f"{where}: kwargs after the call (mutation)", **tol)
        if backward and e_err is None:
            _check_backward(e_out, c_out, e_args, c_args, where, **tol)
        if call == 0:
            after_first = backend.count
            assert _matches(graphs, after_first), (
                f"{after_first} graphs compiled on the first call, expected {graphs}"
            )
        elif not recompiles:
            assert backend.count == after_first, (
                f"{where} with fresh inputs of the same kind compiled "
                f"{backend.count - after_first} "
                "more graph(s): the first call's entries should have been reused"
            )
    if graphs is not None or breaks is not None:
        assert_explain(fn, arg_factories, kwargs, graphs=graphs, breaks=breaks)
    return backend


def assert_explain(
    fn: Callable,
    arg_factories: Sequence[Any],
    kwargs: Mapping[str, Any] | None = None,
    *,
    graphs: int | Container[int] | None,
    breaks: int | Container[int] | None,
) -> Any:
    compiler.reset()
    out = compiler.explain(fn)(*make(list(arg_factories)), **make(dict(kwargs or {})))
    reasons = "\n".join(f"  break: {r.reason} at {r.user_stack[-1:]}" for r in out.break_reasons)
    assert _matches(graphs, out.graph_count), (
        f"explain: graph_count {out.graph_count}, expected {graphs}\n{reasons}"
    )
    assert _matches(breaks, out.graph_break_count), (
        f"explain: graph_break_count {out.graph_break_count}, expected {breaks}\n{reasons}"
    )
    assert len(out.break_reasons) == out.graph_break_count, "one break reason per break"
    return out


def _check_backward(
    e_out: Any, c_out: Any, e_args: Any, c_args: Any, where: str, **tol: Any
) -> None:
    e_ts = [v for _, v in _leaves(e_out) if isinstance(v, torch.Tensor) and v.requires_grad]
    c_ts = [v for _, v in _leaves(c_out) if isinstance(v, torch.Tensor) and v.requires_grad]
    assert e_ts, "backward=True needs an output that requires grad"
    sum(t.sum() for t in e_ts).backward()
    sum(t.sum() for t in c_ts).backward()
    e_leaves = [v for _, v in _leaves(e_args) if isinstance(v, torch.Tensor)]
    c_leaves = [v for _, v in _leaves(c_args) if isinstance(v, torch.Tensor)]
    for i, (e, c) in enumerate(zip(e_leaves, c_leaves)):
        if e.grad is None:
            assert c.grad is None, f"{where}: input {i} got a grad in compiled only"
        else:
            assert c.grad is not None, f"{where}: input {i} has no grad in compiled"
            torch.testing.assert_close(
                c.grad, e.grad, msg=lambda m, i=i: f"{where}: grad of input {i}: {m}", **tol
            )


def check_module(
    make_module: Callable[[], torch.nn.Module],
    *arg_factories: Any,
    graphs: int | Container[int] | None = None,
    breaks: int | Container[int] | None = None,
    calls: int = 2,
    train: bool | None = None,
    backward: bool = False,
    **tol: Any,
) -> RecordingBackend:
    """Like `check` for a module compiled with `compiler.compile(module)`: the same weights on
    both sides, outputs and the module state (parameters, buffers) compared after each call."""
    eager_mod = make_module()
    if train is not None:
        eager_mod.train(train)
    fresh = copy.deepcopy(eager_mod)
    comp_mod = copy.deepcopy(eager_mod)
    backend = RecordingBackend()
    compiled = compiler.compile(comp_mod, backend=backend)
    after_first = 0
    for call in range(calls):
        args = make(list(arg_factories))
        e_args, c_args = clone(args), clone(args)
        e_out, e_err = run(eager_mod, e_args, {})
        c_out, c_err = run(compiled, c_args, {})
        assert_same_exception(e_err, c_err)
        where = f"call {call}"
        if e_err is None:
            assert_same(e_out, c_out, f"{where}: out", **tol)
        assert_same(e_args, c_args, f"{where}: args after the call", **tol)
        assert_same(eager_mod.state_dict(), comp_mod.state_dict(), f"{where}: module state", **tol)
        if backward:
            _check_backward(
                e_out,
                c_out,
                list(eager_mod.parameters()),
                list(comp_mod.parameters()),
                where,
                **tol,
            )
            eager_mod.zero_grad()
            comp_mod.zero_grad()
        if call == 0:
            after_first = backend.count
            assert _matches(graphs, after_first), (
                f"{after_first} graphs on the first call, expected {graphs}"
            )
        else:
            assert backend.count == after_first, (
                f"{where} recompiled: {backend.count - after_first} more graph(s)"
            )
    if graphs is not None or breaks is not None:
        assert_explain(fresh, arg_factories, graphs=graphs, breaks=breaks)
    return backend


class Cases(list):
    """The differential cases of one test module; the module parametrises one test over it.

    case = Cases()

    @case(T(3), graphs=1, breaks=0)
    def add_one(x):
        return x + 1
    """

    def __call__(
        self, *arg_factories: Any, xfail: str | None = None, **expect: Any
    ) -> Callable[[Callable], Callable]:
        marks = [pytest.mark.xfail(reason=xfail, strict=True)] if xfail else []

        def add(fn: Callable) -> Callable:
            self.append(pytest.param(fn, arg_factories, expect, id=fn.__name__, marks=marks))
            return fn

        return add
