"""The OpInfo differential suite's machinery: which OpInfos reach our lowering table, how
their samples are compiled and judged, and the per-dtype summary.

Run as a script for the summary table (no pytest): `python -m tests.codegen.opinfo_cases`
(`OPINFO_FULL=1` for every sample, `--device cuda` for Triton on a GPU). The pytest suite
is tests/codegen/test_opinfo_differential.py; the skips are in SKIPS below, in one list.

Selection: an OpInfo is in the suite when the aten graph of its first sample, traced with
our decomposition table (what the code generator's aot stage sees), has at least one op
that `LOWERINGS` has a rule for; OpInfos whose graphs are all extern calls run aten's own
kernels and are left out (their names are in `excluded_ops()`).

Each (OpInfo, dtype) is one case. Its samples are compiled together, as one generated
function that calls the op once per sample, so the case costs one C++ build; when that
graph falls back to eager or raises where eager does not, each sample is compiled alone to
say which one did. Samples for which eager raises are always compiled alone: ours must
raise the same exception type. Outcomes per sample:

    passed     compiled by our code generator (no fallback, no graph break), outputs equal
               to eager's (values within torch's per-dtype tolerances, same dtypes and
               shapes, same structure) and inputs left as eager leaves them; or eager
               raised and ours raised the same exception type
    fell_back  the compiler ran part or all of it eagerly (a graph break, or a graph whose
               code generation failed), with the reason: not a pass of the code generator
    skipped    matched by an entry of SKIPS (the reason is printed)
    failed     a wrong value, dtype, shape or structure, a different exception, or a
               crash of compiled code; the message says which

Values that assert_close (torch's tolerances for the dtype) finds apart from eager's are
judged against a more precise reference, eager on the inputs upcast: float32 for float16
and bfloat16, float64 for float32. An element then passes when its error against the
reference is within twice eager's error plus the dtype's tolerance, or the tensor's
root-mean-square error is (Inductor's own accuracy check); so computing in float32 inside
a kernel, closer to the truth than eager's rounding after every op, passes.
"""

from __future__ import annotations

import fnmatch
import functools
import itertools
import linecache
import math
import os
import sys
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import torch
from torch.testing._internal.opinfo.core import OpInfo, SampleInput
from torch.utils._pytree import tree_flatten, tree_map

import compiler
from tests.precision import closer_by_rmse

# ---- the skip list: every case not run, with why ------------------------------------------
#
# (OpInfo full name pattern, dtype name pattern or "*", sample pattern or "*", reason).
# Patterns are fnmatch patterns; the sample pattern matches the sample's description
# (`describe_sample`). A skipped sample counts as skipped, never as passed; a case skipped
# whole counts as one skipped sample. No entry is needed for out= semantics: the suite calls
# each OpInfo's functional op (`op.op`), and OpInfo's samples pass no `out=`.

_RANDOM = "random or uninitialised values: eager itself differs between two runs"

SKIPS: list[tuple[str, str, str, str]] = [
    # Random and nondeterministic ops: no two runs agree, compiled or not.
    ("nn.functional.dropout*", "*", "*", _RANDOM),
    ("nn.functional.alpha_dropout", "*", "*", _RANDOM),
    ("nn.functional.feature_alpha_dropout*", "*", "*", _RANDOM),
    ("nn.functional.rrelu", "*", "*", _RANDOM),
    ("bernoulli", "*", "*", _RANDOM),
    ("multinomial", "*", "*", _RANDOM),
    ("normal*", "*", "*", _RANDOM),
    ("uniform", "*", "*", _RANDOM),
    ("cauchy", "*", "*", _RANDOM),
    ("exponential", "*", "*", _RANDOM),
    ("geometric", "*", "*", _RANDOM),
    ("log_normal", "*", "*", _RANDOM),
    ("rand*", "*", "*", _RANDOM),  # rand, randn, randint and their _like forms
    ("empty*", "*", "*", _RANDOM),
    ("new_empty*", "*", "*", _RANDOM),
    ("nn.functional.fractional_max_pool*", "*", "*", _RANDOM),
    ("torch.ops.aten._efficient_attention_forward", "*", "*", _RANDOM),
    ("nn.functional.scaled_dot_product_attention", "*", "*dropout_p=0.5*", _RANDOM + " (dropout)"),
    ("nn.functional.multi_head_attention_forward", "*", "*training=True*", _RANDOM + " (dropout)"),
    # float32 sum of 125 integer-derived terms off eager's by 6e-6 relative (assert_close
    # allows 1.3e-6), a summation order; integer inputs have no upcast reference to judge by.
    ("nn.functional.poisson_nll_loss", "int*", "*reduction='sum'*", "float32 summation order"),
]


def skip_reason(op_name: str, dtype: torch.dtype, sample: str = "") -> str | None:
    """The reason SKIPS gives for this case (or sample), None when it runs."""
    dname = dtype_name(dtype)
    for op_pat, dt_pat, sample_pat, reason in SKIPS:
        if not fnmatch.fnmatchcase(op_name, op_pat) or not fnmatch.fnmatchcase(dname, dt_pat):
            continue
        if sample_pat == "*" or (sample and fnmatch.fnmatchcase(sample, sample_pat)):
            return reason
    return None


def whole_case_skip(op_name: str, dtype: torch.dtype) -> str | None:
    """A reason when SKIPS skips every sample of the case (its sample pattern is `*`)."""
    dname = dtype_name(dtype)
    for op_pat, dt_pat, sample_pat, reason in SKIPS:
        if (
            sample_pat == "*"
            and fnmatch.fnmatchcase(op_name, op_pat)
            and fnmatch.fnmatchcase(dname, dt_pat)
        ):
            return reason
    return None


# ---- which OpInfos, which dtypes, which samples -------------------------------------------

# The dtypes the issue asks for; OpInfo's complex dtypes are outside the code generator.
DTYPES: tuple[torch.dtype, ...] = (
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
)

# The dtype of the reference each floating dtype is judged against (see the docstring).
REFERENCE_DTYPE = {
    torch.float16: torch.float32,
    torch.bfloat16: torch.float32,
    torch.float32: torch.float64,
}

# The CI subset: the first CI_SAMPLES samples of each case (OpInfo generates them in a fixed
# order from a fixed seed). OPINFO_FULL=1 runs every sample. The cost is the C++ builds,
# which grow with the kernels, one or more per sample: one sample per case keeps CI's run
# near 5 minutes on an idle 2-core CPU.
CI_SAMPLES = 1
SEED = 0


def full_run() -> bool:
    return os.environ.get("OPINFO_FULL", "") not in ("", "0")


def shard() -> tuple[int, int]:
    """OPINFO_SHARD=i/n: this process runs the i-th of n interleaved slices of the OpInfos
    (the full run takes hours on 2 cores: run n processes on n cores, or n machines)."""
    text = os.environ.get("OPINFO_SHARD", "0/1")
    index, count = (int(v) for v in text.split("/"))
    if not 0 <= index < count:
        raise ValueError(f"OPINFO_SHARD={text}: expected i/n with 0 <= i < n")
    return index, count


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@functools.lru_cache(maxsize=None)
def op_db() -> tuple:
    # Importing torch's OpInfo database takes ~3 s; only when the suite runs.
    from torch.testing._internal.common_methods_invocations import op_db as db

    return tuple(db)


@functools.lru_cache(maxsize=None)
def _lowerings() -> frozenset:
    from compiler.lowering import core, externs, indexing, pointwise, reductions, views  # noqa: F401

    return frozenset(core.LOWERINGS)


@functools.lru_cache(maxsize=None)
def _aten_ops(op_name: str) -> tuple[str, ...] | str:
    """The aten ops of the OpInfo's first sample, traced with our decompositions (a string
    saying why when that trace fails)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from compiler.aot.decompositions import decomposition_table

    op = opinfo(op_name)
    dtypes = op.supported_dtypes("cpu")
    dtype = torch.float32 if torch.float32 in dtypes else min(dtypes, key=str, default=None)
    if dtype is None:
        return "no CPU dtype"
    try:
        torch.manual_seed(SEED)
        sample = next(iter(op.sample_inputs("cpu", dtype, requires_grad=False)))
        call, tensors, _ = _bind(op, [sample])
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gm = make_fx(call, decomposition_table=decomposition_table())(*tensors)
    except Exception as exc:  # data-dependent (item, equal), CUDA-only (jiterator), sparse
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
    return tuple(n.target for n in gm.graph.nodes if n.op == "call_function")


def opinfo(name: str) -> Any:
    return _by_name()[name]


@functools.lru_cache(maxsize=None)
def _by_name() -> dict[str, Any]:
    return {op.full_name: op for op in op_db()}


def lowered_ops(sharded: bool = True) -> list[str]:
    """OpInfo full names whose aten graph has an op with a lowering rule, in op_db order
    (this process's shard of them, see `shard`, unless `sharded` is False)."""
    rules = _lowerings()
    index, count = shard() if sharded else (0, 1)
    out = []
    for position, op in enumerate(op_db()):
        if position % count != index:
            continue
        ops = _aten_ops(op.full_name)
        if not isinstance(ops, str) and any(t in rules for t in ops):
            out.append(op.full_name)
    return out


def excluded_ops() -> dict[str, str]:
    """OpInfos outside the suite and why (all extern calls, or untraceable)."""
    rules = _lowerings()
    out = {}
    for op in op_db():
        ops = _aten_ops(op.full_name)
        if isinstance(ops, str):
            out[op.full_name] = f"not traceable: {ops}"
        elif not any(t in rules for t in ops):
            out[op.full_name] = "all extern calls: " + ", ".join(sorted({str(t) for t in ops}))
    return out


def case_dtypes(op_name: str, device: str) -> list[torch.dtype]:
    supported = opinfo(op_name).supported_dtypes(device)
    return [d for d in DTYPES if d in supported]


def cases(device: str = "cpu") -> list[tuple[str, torch.dtype]]:
    return [(name, dt) for name in lowered_ops() for dt in case_dtypes(name, device)]


def samples(op_name: str, dtype: torch.dtype, device: str) -> list[Any]:
    op = opinfo(op_name)
    torch.manual_seed(SEED)  # OpInfo's make_tensor draws from the global generator
    if type(op).sample_inputs is OpInfo.sample_inputs:
        # What OpInfo.sample_inputs iterates, without its wrapper, which crawls the stack
        # with inspect.stack() for a test name (~0.07 s a call, minutes over the suite).
        gen = op.sample_inputs_func(op, device, dtype, False)
    else:
        gen = op.sample_inputs(device, dtype, requires_grad=False)
    limit = None if full_run() else CI_SAMPLES
    return list(itertools.islice(gen, limit))


def describe_sample(sample: Any) -> str:
    def one(x: Any) -> str:
        if isinstance(x, torch.Tensor):
            return f"T{list(x.shape)}" + ("" if x.is_contiguous() else "nc")
        if isinstance(x, (list, tuple)):
            inner = ", ".join(one(v) for v in x)
            return f"[{inner}]" if isinstance(x, list) else f"({inner})"
        return repr(x)

    parts = [one(sample.input), *(one(a) for a in sample.args)]
    parts += [f"{k}={one(v)}" for k, v in sample.kwargs.items()]
    return ", ".join(parts)


# ---- one generated function for a group of samples -----------------------------------------

_LITERALS = (int, bool, str, type(None))


def _bind(op: Any, group: Sequence[Any]) -> tuple[Callable, list[torch.Tensor], list[list[int]]]:
    """A straight-line function `fn(t0, t1, ...)` calling the op once per sample of `group`
    (its tensors as parameters, one per distinct tensor so aliases stay aliases; other
    arguments as literals or constants), those tensors, and per sample the positions of its
    own tensors among them (in the order it first uses them). Straight-line so that the
    tracer sees the op's own code, not a pytree rebuild of the arguments."""
    params: dict[int, str] = {}
    tensors: list[torch.Tensor] = []
    consts: dict[str, Any] = {"_op": op.op}
    uses: list[list[int]] = []

    def render(x: Any) -> str:
        if isinstance(x, torch.Tensor):
            key = id(x)
            if key not in params:
                params[key] = f"t{len(tensors)}"
                tensors.append(x)
            pos = int(params[key][1:])
            if pos not in uses[-1]:
                uses[-1].append(pos)
            return params[key]
        if type(x) in (list, tuple):
            inner = ", ".join(render(v) for v in x)
            return f"[{inner}]" if type(x) is list else f"({inner}{',' if len(x) == 1 else ''})"
        if type(x) in _LITERALS or (type(x) is float and math.isfinite(x)):
            return repr(x)
        name = f"_c{len(consts)}"
        consts[name] = x
        return name

    lines = []
    storages: set[int] = set()
    for k, s in enumerate(group):
        uses.append([])
        s = _own_memory(s, storages)
        args = [render(s.input), *(render(a) for a in s.args)]
        args += [f"{key}={render(v)}" for key, v in s.kwargs.items()]
        lines.append(f"    r{k} = _op({', '.join(args)})")
    names = ", ".join(f"t{k}" for k in range(len(tensors)))
    results = ", ".join(f"r{k}" for k in range(len(group)))
    source = f"def opinfo_case({names}):\n" + "\n".join(lines) + f"\n    return ({results},)\n"
    filename = f"<opinfo {op.full_name} #{next(_counter)}>"
    # The tracer reads source lines for its records; linecache serves the generated ones.
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = dict(consts)
    exec(compile(source, filename, "exec"), namespace)
    return namespace["opinfo_case"], tensors, uses


_counter = itertools.count()


def _own_memory(sample: Any, seen: set[int]) -> Any:
    """`sample`, with copies of its tensors (aliases among them kept) when one shares memory
    with a tensor of an earlier sample of the group (OpInfo reuses a batch norm's running
    statistics across samples): run one by one, eager never sees one sample's writes in
    another's inputs, and neither may the group's function."""
    flat, spec = tree_flatten((sample.input, sample.args, sample.kwargs))
    tensors = [t for t in flat if isinstance(t, torch.Tensor)]
    mine = {t.untyped_storage().data_ptr() for t in tensors if t.numel()}
    if mine & seen:
        copies = iter(_clone(tensors))
        flat = [next(copies) if isinstance(t, torch.Tensor) else t for t in flat]
        inp, args, kwargs = spec.unflatten(flat)
        sample = SampleInput(inp, args=args, kwargs=kwargs)
        tensors = [t for t in flat if isinstance(t, torch.Tensor)]
    seen.update(t.untyped_storage().data_ptr() for t in tensors if t.numel())
    return sample


# ---- judging --------------------------------------------------------------------------------


@dataclass
class Outcome:
    sample: str
    status: str  # "passed", "fell_back", "skipped", "failed"
    detail: str = ""


@dataclass
class CaseResult:
    op: str
    dtype: torch.dtype
    device: str
    outcomes: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0

    def count(self) -> Counter:
        return Counter(o.status for o in self.outcomes)

    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == "failed"]


class _Raised:
    """An exception a run raised, kept as a result."""

    def __init__(self, exc: BaseException):
        self.exc = exc

    def __repr__(self) -> str:
        return f"{type(self.exc).__name__}: {str(self.exc)[:200]}"


def _clone(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Fresh copies with the same strides (and the same storage sharing among them)."""
    storages: dict[int, torch.Tensor] = {}
    out = []
    for t in tensors:
        key = t.untyped_storage().data_ptr() if t.numel() else id(t)
        base = storages.get(key)
        if base is None:
            base = torch.empty(0, dtype=torch.uint8, device=t.device)
            base.set_(t.untyped_storage().clone())
            storages[key] = base
        out.append(
            torch.empty(0, dtype=t.dtype, device=t.device).set_(
                base.untyped_storage(), t.storage_offset(), t.shape, t.stride()
            )
        )
    return out


def _run(fn: Callable, tensors: Sequence[torch.Tensor]) -> tuple[Any, list[torch.Tensor]]:
    inputs = _clone(tensors)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(*inputs), inputs
    except Exception as exc:
        return _Raised(exc), inputs


def _fallback_reason(compiled: Callable) -> str | None:
    """Why part of the compiled function ran eagerly, None when none did."""
    report = compiler.inspect(compiled)
    reasons = []
    for f in report.functions:
        reasons += f.warnings
        for e in f.entries:
            if e.graph_break is not None:
                reasons.append(f"graph break: {e.graph_break.reason}")
            if e.graph is not None and e.graph.fallback:
                reasons.append(f"graph ran eagerly: {e.graph.fallback}")
    if not report.graphs:
        reasons.append("no graph was compiled")
    return "; ".join(dict.fromkeys(reasons))[:400] or None


def _tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """torch.testing.assert_close's default (rtol, atol) for the dtype."""
    from torch.testing._comparison import default_tolerances

    return default_tolerances(dtype)


def _compare_tensor(
    actual: torch.Tensor, expected: torch.Tensor, reference: Callable[[], torch.Tensor | None]
) -> str | None:
    if actual.dtype != expected.dtype:
        return f"dtype {actual.dtype}, eager {expected.dtype}"
    if actual.shape != expected.shape:
        return f"shape {tuple(actual.shape)}, eager {tuple(expected.shape)}"
    if actual.device != expected.device:
        return f"device {actual.device}, eager {expected.device}"
    try:
        torch.testing.assert_close(actual, expected, equal_nan=True, check_stride=False)
        return None
    except AssertionError as exc:
        message = str(exc).strip().replace("\n", " ")
    ref = reference() if expected.dtype in REFERENCE_DTYPE else None
    if not isinstance(ref, torch.Tensor) or ref.shape != expected.shape:
        return message
    # Within twice eager's error against the precise reference, plus the dtype's tolerance:
    # element by element, or else as Inductor's own accuracy check judges a tensor, by the
    # root-mean-square errors (an element rounded to the other side of eager's by a
    # sharply peaked softmax or a long sum is no error of the code generator).
    rtol, atol = _tolerance(expected.dtype)
    a, e, r = actual.double(), expected.double(), ref.double()
    same = (a == e) | (a.isnan() & e.isnan())
    ok = same | ((a - r).abs() <= 2 * (e - r).abs() + atol + rtol * r.abs())
    if bool(ok.all()):
        return None
    if closer_by_rmse(a, e, r, atol):
        return None
    bad = (~ok).nonzero()[0].tolist()
    at = tuple(bad)
    return (
        f"{int((~ok).sum())} elements off the {dtype_name(ref.dtype)} reference by more than "
        f"twice eager's error, first at {at}: ours {a[at].item()}, eager {e[at].item()}, "
        f"reference {r[at].item()}"
    )


def _compare(actual: Any, expected: Any, reference: Callable[[], Any] | None = None) -> str | None:
    """None when `actual` matches eager's `expected`, else what differs. `reference()` gives
    eager's outputs on upcast inputs, asked for only when values differ."""
    if isinstance(expected, _Raised) or isinstance(actual, _Raised):
        if isinstance(expected, _Raised) and isinstance(actual, _Raised):
            if type(actual.exc) is type(expected.exc):
                return None
            return f"raised {actual!r}, eager raised {expected!r}"
        if isinstance(expected, _Raised):
            return f"returned, eager raised {expected!r}"
        return f"raised {actual!r}, eager returned"
    a_flat, a_spec = tree_flatten(actual)
    e_flat, e_spec = tree_flatten(expected)
    if a_spec != e_spec:
        return f"structure {a_spec}, eager {e_spec}"
    references: list = []

    def reference_of(k: int) -> Callable[[], Any]:
        def get() -> Any:
            if not references:
                out = reference() if reference is not None else None
                flat = tree_flatten(out)[0] if out is not None else []
                references.extend(flat if len(flat) == len(e_flat) else [None] * len(e_flat))
            return references[k]

        return get

    for k, (a, e) in enumerate(zip(a_flat, e_flat)):
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                return f"output {k}: {type(a).__name__}, eager a tensor"
            why = _compare_tensor(a, e, reference_of(k))
            if why:
                return f"output {k}: {why}"
        elif type(a) is not type(e):
            return f"output {k}: {type(a).__name__}, eager {type(e).__name__}"
        elif a != e and not (isinstance(e, float) and math.isnan(e) and math.isnan(a)):
            return f"output {k}: {a!r}, eager {e!r}"
    return None


def _reference(op: Any, sample: Any, dtype: torch.dtype) -> Any:
    """Eager on the sample with its `dtype` tensors, and `dtype` arguments of factories
    (`linspace(..., dtype=torch.float16)`), upcast to REFERENCE_DTYPE[dtype] (None when
    eager raises)."""
    wider = REFERENCE_DTYPE.get(dtype)
    if wider is None:  # integer and bool inputs: nothing to upcast
        return None

    def up(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.dtype == dtype:
            return x.to(wider)
        return wider if x is dtype else x

    upcast = SampleInput(
        tree_map(up, sample.input),
        args=tree_map(up, sample.args),
        kwargs=tree_map(up, sample.kwargs),
    )
    call, tensors, _ = _bind(op, [upcast])
    out, _ = _run(call, tensors)
    return None if isinstance(out, _Raised) else out[0]


def _judge_group(
    op: Any, group: Sequence[Any], expected: Sequence[Any], dtypes: Sequence[torch.dtype]
) -> tuple[list[Outcome] | None, str | None]:
    """Compile the group as one function: its outcomes, or (None, why) when the group must
    be split (it fell back, or raised where eager did not)."""
    call, tensors, uses = _bind(op, group)
    compiled = compiler.compile(call)
    actual, inputs_after = _run(compiled, tensors)
    fallback = _fallback_reason(compiled)
    names = [describe_sample(s) for s in group]
    if len(group) > 1 and (fallback or isinstance(actual, _Raised)):
        return None, fallback or repr(actual)
    if isinstance(actual, _Raised):
        actual = (actual,)
    outcomes = []
    eager_inputs = [e[1] for e in expected]
    for k, name in enumerate(names):
        exp_out = expected[k][0]
        dtype = dtypes[k]
        ref = functools.partial(_reference, op, group[k], dtype)
        ref = ref if dtype in REFERENCE_DTYPE else None
        why = _compare(actual[k], exp_out, ref)
        if why is None:  # side effects: the sample's inputs after the call
            mine = tuple(inputs_after[p] for p in uses[k])
            why = _compare(mine, tuple(eager_inputs[k]), None)
            why = why and f"inputs after the call: {why}"
        if why is not None:
            outcomes.append(Outcome(name, "failed", why))
        elif fallback:
            outcomes.append(Outcome(name, "fell_back", fallback))
        else:
            outcomes.append(Outcome(name, "passed"))
    return outcomes, None


def run_op(op_name: str, dtypes: Sequence[torch.dtype], device: str = "cpu") -> list[CaseResult]:
    """Every sample of the op's cases in `dtypes`, judged (see the module docstring): one
    CaseResult per dtype. All of them are compiled as one function first (one C++ build);
    a group that fell back or raised is split by dtype, then by sample."""
    if not dtypes:
        return []
    start = time.perf_counter()
    op = opinfo(op_name)
    results = {d: CaseResult(op_name, d, device) for d in dtypes}
    runnable, expected, of = [], [], []
    for dtype in dtypes:
        for s in samples(op_name, dtype, device):
            name = describe_sample(s)
            reason = skip_reason(op_name, dtype, name)
            if reason is not None:
                results[dtype].outcomes.append(Outcome(name, "skipped", reason))
                continue
            call, tensors, _ = _bind(op, [s])
            out, inputs_after = _run(call, tensors)
            runnable.append(s)
            expected.append((out[0] if not isinstance(out, _Raised) else out, inputs_after))
            of.append(dtype)
    # Samples eager raises for go alone (their graphs raise); the rest together first.
    ok = [k for k, e in enumerate(expected) if not isinstance(e[0], _Raised)]
    raising = [k for k, e in enumerate(expected) if isinstance(e[0], _Raised)]
    groups = ([ok] if ok else []) + [[k] for k in raising]
    done: dict[int, Outcome] = {}
    while groups:
        group = groups.pop(0)
        try:
            outcomes, _ = _judge_group(
                op,
                [runnable[k] for k in group],
                [expected[k] for k in group],
                [of[k] for k in group],
            )
        except Exception as exc:  # the compiler itself crashed outside the compiled code
            outcomes = None
            if len(group) == 1:
                outcomes = [Outcome(describe_sample(runnable[group[0]]), "failed", repr(exc))]
        if outcomes is None:
            groups = _split(group, of) + groups
            continue
        done.update(zip(group, outcomes))
    for k in sorted(done):
        results[of[k]].outcomes.append(done[k])
    compiler.reset()
    seconds = time.perf_counter() - start
    for r in results.values():
        r.seconds = seconds / len(results)  # the op's time, shared out
    return list(results.values())


def _split(group: list[int], of: Sequence[torch.dtype]) -> list[list[int]]:
    """A group of several dtypes by dtype, else by sample."""
    by_dtype: dict[torch.dtype, list[int]] = {}
    for k in group:
        by_dtype.setdefault(of[k], []).append(k)
    if len(by_dtype) > 1:
        return list(by_dtype.values())
    return [[k] for k in group]


def run_case(op_name: str, dtype: torch.dtype, device: str = "cpu") -> CaseResult:
    """One (op, dtype) case alone."""
    return run_op(op_name, [dtype], device)[0]


def op_results(op_name: str, device: str = "cpu") -> list[CaseResult]:
    """Every case of the op, whole-case skips included (with their reasons)."""
    dtypes = case_dtypes(op_name, device)
    skipped = {d: whole_case_skip(op_name, d) for d in dtypes}
    ran = iter(run_op(op_name, [d for d in dtypes if skipped[d] is None], device))
    return [
        CaseResult(op_name, d, device, [Outcome("*", "skipped", skipped[d])])
        if skipped[d] is not None
        else next(ran)
        for d in dtypes
    ]


# ---- the summary ----------------------------------------------------------------------------

STATUSES = ("passed", "fell_back", "skipped", "failed")

# The results of a pytest session's cases, for its summary table.
RESULTS: list[CaseResult] = []


def summary_table(results: Iterable[CaseResult]) -> str:
    """Sample counts per dtype: passed / fell back / skipped / failed, and cases failed."""
    per: dict[str, Counter] = {}
    failed_cases: Counter = Counter()
    for r in results:
        name = f"{r.device} {dtype_name(r.dtype)}"
        per.setdefault(name, Counter()).update(r.count())
        failed_cases[name] += bool(r.failures())
    rows = ["device dtype        passed  fell_back  skipped  failed  (cases failed)"]
    total: Counter = Counter()
    for name in sorted(per, key=lambda n: (n.split()[0], _dtype_rank(n.split()[1]))):
        c = per[name]
        total.update(c)
        rows.append(
            f"{name:<18} {c['passed']:>7} {c['fell_back']:>10} {c['skipped']:>8} "
            f"{c['failed']:>7}  ({failed_cases[name]})"
        )
    rows.append(
        f"{'total':<18} {total['passed']:>7} {total['fell_back']:>10} {total['skipped']:>8} "
        f"{total['failed']:>7}  ({sum(failed_cases.values())})"
    )
    return "\n".join(rows)


def _dtype_rank(name: str) -> int:
    names = [dtype_name(d) for d in DTYPES]
    return names.index(name) if name in names else len(names)


def main(argv: Sequence[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--ops", nargs="*", help="fnmatch patterns of OpInfo names")
    parser.add_argument("--details", action="store_true", help="print every non-pass")
    args = parser.parse_args(argv)
    results = []
    start = time.perf_counter()
    for name in lowered_ops():
        if args.ops and not any(fnmatch.fnmatchcase(name, p) for p in args.ops):
            continue
        for r in op_results(name, args.device):
            results.append(r)
            for o in r.outcomes:
                if o.status == "failed" or (args.details and o.status not in ("passed", "skipped")):
                    line = f"{o.status}: {name} {dtype_name(r.dtype)} [{o.sample}] {o.detail}"
                    print(line, flush=True)
    print(summary_table(results))
    print(f"{len(results)} cases in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
