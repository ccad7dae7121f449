"""Verify mode, `compiler.compile(fn, verify=True)`: every call is checked against eager.

Each call also runs the user's function eagerly on copies of its inputs, once in float64 and
once in the inputs' own dtypes, and the compiled result is judged as torch's accuracy checker
judges it: a result close to eager's passes; otherwise its RMSE against float64 may be at most
a small multiple of eager's own (eager is not exact either, and a fused kernel may even be
closer). On a mismatch the graphs the call ran are replayed: a graph whose outputs fail is
re-run node by node, compiling the graph cut after each candidate node with the same backend
(bisection), and the first node whose compiled value fails is reported with its user line, in
a `VerificationWarning` and in the graph's record (`GraphRecord.mismatch`), which the
inspector's Overview shows in red.

Off, it costs nothing: `compile` then neither wraps the backend nor the call. On, each call
runs the function three times (side effects of Python code around breaks happen three times)
and random ops draw the same numbers in each run (the RNG state is replayed).
"""

from __future__ import annotations

import contextvars
import copy
import linecache
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree

from compiler.records import GraphRecord, Mismatch, current_graph

# Half-precision results are judged more loosely, as torch's checker judges them.
_TOLERANCE = {torch.float16: 1e-3, torch.bfloat16: 1e-2}
_DEFAULT_TOLERANCE = 1e-4
_MULTIPLIER = 2.0
_MAX_PREFIX_COMPILES = 12  # bisection over the nodes of a graph of up to 4096 candidates


class VerificationWarning(UserWarning):
    """Verify mode found a compiled result that diverges from eager (compiler/verify.py)."""


@dataclass
class GraphRun:
    """One call of a compiled graph during a verified call: what it was given and returned."""

    gm: torch.fx.GraphModule
    record: GraphRecord | None
    backend: Callable
    inputs: list
    outputs: Any


_RUNS: contextvars.ContextVar[list[GraphRun] | None] = contextvars.ContextVar(
    "verified_graph_runs", default=None
)


def _snapshot(value: Any) -> Any:
    return pytree.tree_map(
        lambda v: v.detach().clone() if isinstance(v, torch.Tensor) else v, value
    )


def checking_backend(backend: Callable) -> Callable:
    """`backend`, with each compiled graph noting its inputs and outputs while a verified call
    runs (and only then)."""

    def compile_checked(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        reference = _graph_copy(gm)  # a backend may rewrite the graph it is handed
        compiled = backend(gm, example_inputs)
        record = current_graph()

        def run(*args: Any) -> Any:
            runs = _RUNS.get()
            if runs is None:
                return compiled(*args)
            inputs = _snapshot(list(args))
            out = compiled(*args)
            runs.append(GraphRun(reference, record, backend, inputs, _snapshot(out)))
            return out

        return run

    return compile_checked


def _graph_copy(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    return torch.fx.GraphModule(gm, graph)


# ---- the eager references --------------------------------------------------------------------


def _copy(value: Any, dtype: torch.dtype | None) -> Any:
    """A copy of a call's argument, floating tensors (and modules) cast to `dtype` if given."""

    def one(v: Any) -> Any:
        if isinstance(v, torch.nn.Module):
            m = copy.deepcopy(v)
            return m.to(dtype) if dtype is not None else m
        if not isinstance(v, torch.Tensor):
            return v
        out = v.detach().clone()
        if dtype is not None and out.is_floating_point():
            out = out.to(dtype)
        return out.requires_grad_(v.requires_grad) if out.is_leaf and v.is_leaf else out

    return pytree.tree_map(one, value)


_FAILED = object()


def _eager(fn: Callable, args: Any, kwargs: dict, dtype: torch.dtype | None, rng: Any) -> Any:
    torch.set_rng_state(rng)
    try:
        return _snapshot(fn(*_copy(list(args), dtype), **_copy(kwargs, dtype)))
    except Exception:  # no reference (eager raises, or float64 is not supported): no check
        return _FAILED


# ---- the judgement ---------------------------------------------------------------------------


def _rmse(ref: torch.Tensor, res: torch.Tensor) -> float:
    diff = res.detach().to(torch.float64) - ref.detach().to(torch.float64)
    finite = torch.isfinite(diff)
    if not bool(finite.all()):
        same = torch.isnan(res) == torch.isnan(ref)
        if not bool(same.all()):
            return math.inf
        diff = torch.where(finite, diff, torch.zeros_like(diff))
    return float(torch.sqrt(torch.mean(diff * diff))) if diff.numel() else 0.0


@dataclass
class Verdict:
    compiled_rmse: float
    eager_rmse: float
    detail: str


def judge(res: Any, ref: Any, ref64: Any) -> Verdict | None:
    """None when `res` passes against eager's `ref` and float64's `ref64`; else the numbers."""
    res_leaves, ref_leaves = pytree.tree_leaves(res), pytree.tree_leaves(ref)
    ref64_leaves = pytree.tree_leaves(ref64) if ref64 is not _FAILED else [None] * len(ref_leaves)
    if len(res_leaves) != len(ref_leaves) or len(ref64_leaves) != len(ref_leaves):
        return Verdict(math.inf, 0.0, "the outputs differ in structure")
    for i, (a, b, c) in enumerate(zip(res_leaves, ref_leaves, ref64_leaves)):
        found = _judge_leaf(a, b, c)
        if found is not None:
            found.detail = f"output {i}: {found.detail}"
            return found
    return None


def _judge_leaf(res: Any, ref: Any, ref64: Any) -> Verdict | None:
    if not isinstance(ref, torch.Tensor):
        if isinstance(ref, float) and isinstance(res, float):
            same = math.isclose(res, ref, rel_tol=1e-6, abs_tol=1e-9) or res == ref
        else:
            same = res == ref
        return None if same else Verdict(math.inf, 0.0, f"{res!r} where eager has {ref!r}")
    if not isinstance(res, torch.Tensor) or res.shape != ref.shape:
        got = tuple(res.shape) if isinstance(res, torch.Tensor) else type(res).__name__
        return Verdict(math.inf, 0.0, f"shape {got} where eager has {tuple(ref.shape)}")
    if not ref.is_floating_point() and not ref.is_complex():
        return None if torch.equal(res, ref) else Verdict(math.inf, 0.0, "values differ")
    tol = _TOLERANCE.get(ref.dtype, _DEFAULT_TOLERANCE)
    if torch.allclose(res.to(ref.dtype), ref, rtol=tol, atol=tol, equal_nan=True):
        return None
    if not isinstance(ref64, torch.Tensor):
        return Verdict(math.inf, 0.0, "values differ and no float64 reference ran")
    compiled_rmse, eager_rmse = _rmse(ref64, res), _rmse(ref64, ref)
    if compiled_rmse <= _MULTIPLIER * eager_rmse + tol / 10:
        return None
    return Verdict(compiled_rmse, eager_rmse, "values differ beyond eager's own error")


# ---- a verified call -------------------------------------------------------------------------


def run_verified(run: Callable, ctx: Any, fn: Callable, args: Any, kwargs: dict) -> Any:
    """`run(ctx, fn, args, kwargs)` (the frame evaluator), checked against eager."""
    rng = torch.get_rng_state()
    ref = _eager(fn, args, kwargs, None, rng)
    ref64 = _eager(fn, args, kwargs, torch.float64, rng) if ref is not _FAILED else _FAILED
    torch.set_rng_state(rng)
    token = _RUNS.set([])
    try:
        out = run(ctx, fn, args, kwargs)
    finally:
        runs = _RUNS.get() or []
        _RUNS.reset(token)
    for graph_run in runs:
        if graph_run.record is not None:
            graph_run.record.verified_runs += 1
    if ref is _FAILED:
        return out
    verdict = judge(out, ref, ref64)
    if verdict is not None:
        _report(fn, verdict, runs)
    return out


def _report(fn: Callable, verdict: Verdict, runs: list[GraphRun]) -> None:
    name = getattr(fn, "__qualname__", getattr(fn, "__name__", "the function"))
    found = locate(runs)
    if found is None:
        warnings.warn(
            f"{name}: the compiled result diverges from eager ({verdict.detail}: RMSE "
            f"{verdict.compiled_rmse:.3g} against float64, eager's {verdict.eager_rmse:.3g}); "
            "no single graph's result does (the difference is in Python code between graphs)",
            VerificationWarning,
            stacklevel=4,
        )
        return
    record, mismatch = found
    if record is not None:
        record.mismatch = mismatch
    line = mismatch.user_line
    if line is None:
        warnings.warn(f"{name}: {mismatch}", VerificationWarning, stacklevel=4)
        return
    # Shown at the user's line, where the diverging value is computed; the warning's display
    # prints that line from linecache, and the message carries it where linecache has none.
    text = "" if linecache.getline(line.filename, line.lineno) else f"\n    {line.text.strip()}"
    warnings.warn_explicit(
        f"{name}: {mismatch}{text}",
        VerificationWarning,
        line.filename,
        line.lineno,
    )


# ---- finding the node ------------------------------------------------------------------------


class _Recorder(torch.fx.Interpreter):
    """Runs a graph eagerly and keeps every node's value."""

    def __init__(self, gm: torch.fx.GraphModule):
        super().__init__(gm)
        self.values: dict[torch.fx.Node, Any] = {}

    def run_node(self, n: torch.fx.Node) -> Any:
        value = super().run_node(n)
        self.values[n] = value
        return value


def _interpret(gm: torch.fx.GraphModule, inputs: list, dtype: torch.dtype | None) -> Any:
    recorder = _Recorder(gm)
    try:
        with torch.no_grad():
            recorder.run(*_copy(inputs, dtype))
    except Exception:
        return None
    return recorder


def _candidates(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [
        n
        for n in gm.graph.nodes
        if n.op in ("call_function", "call_method", "call_module")
        and isinstance(n.meta.get("example_value"), torch.Tensor)
    ]


def _cut_after(gm: torch.fx.GraphModule, last: torch.fx.Node) -> torch.fx.GraphModule:
    """The graph up to `last`, returning its value: the same inputs, fewer nodes."""
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            env[node] = graph.node_copy(node, lambda n: env[n])
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output"):
            continue
        env[node] = graph.node_copy(node, lambda n: env[n])
        if node is last:
            break
    graph.output((env[last],))
    return torch.fx.GraphModule(gm, graph)


def _node_fails(run: GraphRun, node: torch.fx.Node, ref: Any, ref64: Any) -> Verdict | None:
    try:
        cut = _cut_after(run.gm, node)
        compiled = run.backend(cut, _copy(run.inputs, None))
        with torch.no_grad():
            value = compiled(*_copy(run.inputs, None))
    except Exception:  # this cut does not compile on its own: no evidence either way
        return None
    value = value[0] if isinstance(value, (tuple, list)) else value
    return _judge_leaf(value, ref.values[node], ref64.values.get(node) if ref64 else None)


def locate(runs: list[GraphRun]) -> tuple[GraphRecord | None, Mismatch] | None:
    """The first graph run whose outputs fail, and in it the first node that fails."""
    for run in runs:
        ref = _interpret(run.gm, run.inputs, None)
        if ref is None:
            continue
        ref64 = _interpret(run.gm, run.inputs, torch.float64)
        output = next(n for n in run.gm.graph.nodes if n.op == "output")
        expected = torch.fx.node.map_arg(output.args[0], ref.values.__getitem__)
        expected64 = (
            torch.fx.node.map_arg(output.args[0], ref64.values.__getitem__) if ref64 else _FAILED
        )
        if judge(run.outputs, expected, expected64) is None:
            continue
        nodes = _candidates(run.gm)
        lo, hi, found = 0, len(nodes) - 1, None
        for _ in range(_MAX_PREFIX_COMPILES):  # the first failing node, if failures persist
            if lo > hi:
                break
            mid = (lo + hi) // 2
            verdict = _node_fails(run, nodes[mid], ref, ref64)
            if verdict is None:
                lo = mid + 1
            else:
                found, hi = (nodes[mid], verdict), mid - 1
        if found is None:
            continue
        node, verdict = found
        return run.record, Mismatch(
            node=node.name,
            target=_target_name(node),
            user_line=node.meta.get("source_line"),
            compiled_rmse=verdict.compiled_rmse,
            eager_rmse=verdict.eager_rmse,
            detail=verdict.detail,
        )
    return None


def _target_name(node: torch.fx.Node) -> str:
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    target = node.target
    module = getattr(target, "__module__", "") or ""
    name = getattr(target, "__name__", str(target))
    return f"torch.{name}" if module.startswith("torch") else name
