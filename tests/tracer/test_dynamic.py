"""Dynamic shapes: `dynamic=None/True/False`, `mark_dynamic` / `mark_static`, symbolic sizes
in graphs and guards, and the code generator's per-size kernels. Every test compares the
compiled function with eager over many sizes, and asserts how many entries and graphs the
sizes cost."""

import warnings

import pytest
import torch

import compiler
from compiler.explain import explain_records

from .helpers import RecordingBackend, assert_same

SIZES = (8, 9, 12, 8, 17, 9, 30, 5)


def sweep(fn, make_args, sizes=SIZES, backend="eager", tol=None, **compile_kwargs):
    """Compiled vs eager on fresh inputs of each size; returns the compiled function."""
    compiled = compiler.compile(fn, backend=backend, **compile_kwargs)
    for n in sizes:
        args = make_args(n)
        expected = fn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
        assert_same(expected, compiled(*args), f"size {n}", **(tol or {}))
    return compiled


def report(fn):
    return compiler.inspect(fn)


def rows(n):
    return (torch.randn(n, 16),)


def normalise_rows(x):
    n = x.shape[0]
    return (x - x.mean(0)) / n + x.view(n, 4, 4).sum(-1).repeat(1, 4)


# ---- which dimensions are dynamic ---------------------------------------------------------


def test_dynamic_none_specialises_first_then_makes_the_changed_dim_dynamic():
    backend = RecordingBackend()
    compiled = sweep(normalise_rows, rows, backend=backend)
    entries = report(compiled).entries
    assert len(entries) == 2 and backend.count == 2
    static, dynamic = entries
    assert "L_x.shape == (8, 16)" in static.guard_source
    assert dynamic.recompile_reason == "L['x'] has shape [8, 16] (got torch.Size([9, 16]))"
    (control,) = dynamic.controls
    assert control.kind == "dynamic" and control.target == "L['x'].size(0)"
    assert "changed from 8 to 9" in control.detail and "automatic dynamic" in control.detail
    assert dynamic.hits == len(SIZES) - 2
    # the size is a graph input, and backends get its value among the example inputs
    placeholders = [n for n in backend.graphs[1].graph.nodes if n.op == "placeholder"]
    assert [p.meta["source"] for p in placeholders] == ["L['x']", "L['x'].size(0)"]
    assert isinstance(backend.example_inputs[1][1], int)
    out = compiler.explain(normalise_rows)(torch.randn(8, 16))
    assert out.controls == []  # one call: no recompile, nothing dynamic


def test_dynamic_true_makes_every_dim_dynamic_but_sizes_0_and_1():
    backend = RecordingBackend()
    compiled = sweep(normalise_rows, rows, backend=backend, dynamic=True)
    assert len(report(compiled).entries) == 1 and backend.count == 1
    guard_source = report(compiled).entries[0].guard_source
    assert "if not (L_x.size(0) >= 2):" in guard_source
    # view(n, 4, 4) needs 16 columns: the condition the trace relied on says so
    assert "== (16*L_x.size(0))" in guard_source
    x = torch.randn(1, 16)  # size 1 is specialised: a new, static entry
    assert_same(normalise_rows(x), compiled(x))
    assert len(report(compiled).entries) == 2


def test_dynamic_false_recompiles_per_size():
    compiled = sweep(normalise_rows, rows, sizes=(8, 9, 12), dynamic=False)
    entries = report(compiled).entries
    assert len(entries) == 3 and all(not e.controls for e in entries)


def test_mark_dynamic_makes_the_first_compile_dynamic_even_with_dynamic_false():
    def make(n):
        x = torch.randn(n, 16)
        compiler.mark_dynamic(x, 0)
        return (x,)

    compiled = sweep(normalise_rows, make, dynamic=False)
    (entry,) = report(compiled).entries
    assert [c.detail.split(": ")[-1] for c in entry.controls] == [
        "marked with compiler.mark_dynamic"
    ]


def test_mark_static_wins_over_dynamic_true():
    def make(n):
        x = torch.randn(n, 16)
        compiler.mark_static(x, 0)
        return (x,)

    compiled = sweep(normalise_rows, make, sizes=(8, 9), dynamic=True)
    assert len(report(compiled).entries) == 2


def test_mark_dynamic_specialised_by_the_trace_warns():
    def by_size(x):
        return x * 2 if x.shape[0] == 8 else x

    x = torch.randn(8, 3)
    compiler.mark_dynamic(x, 0)
    compiled = compiler.compile(by_size, backend="eager")
    with pytest.warns(compiler.CompilerWarning, match=r"L\['x'\].size\(0\) was marked dynamic"):
        assert_same(by_size(x), compiled(x))
    y = torch.randn(8, 3)
    compiler.maybe_mark_dynamic(y, 0)
    compiler.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert_same(by_size(y), compiler.compile(by_size, backend="eager")(y))


def test_mark_dynamic_checks_its_dims():
    with pytest.raises(IndexError):
        compiler.mark_dynamic(torch.randn(3), 1)
    with pytest.raises(TypeError):
        compiler.mark_static([1, 2], 0)


def test_parameters_stay_static_under_dynamic_true():
    lin = torch.nn.Linear(16, 4)

    def f(x):
        return lin(x).relu()

    compiled = sweep(f, rows, dynamic=True)
    entry = report(compiled).entries[0]
    assert len(report(compiled).entries) == 1
    # x's dims are symbols; the weight's are not, and x's columns specialise to match it
    targets = [c.target for c in entry.controls]
    assert targets == ["L['x'].size(0)", "L['x'].size(1)", "L['x'].size(1)"]
    assert "specialised it to 16" in entry.controls[2].detail
    assert "weight.shape == (4, 16)" in entry.guard_source


class KVCache:
    """What a generation loop hands its model each step: a plain object whose tensors grow
    along the sequence and whose counter goes up (transformers' DynamicCache)."""

    def __init__(self):
        self.keys = torch.randn(2, 4, 3)
        self.seen = 3


def attend_with_cache(q, cache):
    cache.keys = torch.cat([cache.keys, q], dim=1)
    cache.seen += q.shape[1]
    scores = (q @ cache.keys.transpose(1, 2)).softmax(-1)
    return scores @ cache.keys * cache.seen


def test_tensors_and_ints_of_a_plain_object_become_dynamic_once_they_change():
    # a tensor on an object that is not an nn.Module follows the dynamic policy as an
    # argument does: one dynamic entry serves the growing cache (torch.compile's count),
    # not a recompile per step until cache_size_limit sends the frame to eager
    backend = RecordingBackend()
    compiled = compiler.compile(attend_with_cache, backend=backend)
    eager_cache, cache = KVCache(), KVCache()
    cache.keys = eager_cache.keys.clone()
    with warnings.catch_warnings():
        warnings.simplefilter("error", compiler.CompilerWarning)
        for step in range(12):
            q = torch.randn(2, 1, 3)
            expected = attend_with_cache(q, eager_cache)
            assert_same(expected, compiled(q, cache), f"step {step}")
            assert_same(eager_cache.keys, cache.keys, f"step {step}: the cache")
            assert cache.seen == eager_cache.seen
    entries = report(compiled).entries
    assert len(entries) == 2 and backend.count == 2
    targets = {c.target for c in entries[1].controls}
    assert targets == {"L['cache'].keys.size(1)", "L['cache'].seen"}


def test_buffers_and_ints_of_a_module_stay_static_when_they_change():
    class Counter(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("history", torch.zeros(2))
            self.steps = 2

        def forward(self, x):
            return x * self.history.sum() + self.steps

    m = Counter()
    backend = RecordingBackend()
    compiled = compiler.compile(m, backend=backend, dynamic=None)
    for n in (3, 4, 5):
        m.history = torch.randn(n)
        m.steps = n
        x = torch.randn(4)
        assert_same(m.forward(x), compiled(x), f"{n}")
    # module state is specialised as torch.compile specialises it: each change recompiles
    entries = report(compiled).entries
    assert len(entries) == 3 and all(not e.controls for e in entries)


# Composite ops whose C++ kernel reads a symbolic size as an int on some torch versions
# (matmul and scaled_dot_product_attention on torch 2.11, F.pad on 2.14), which specialised
# the dynamic dim and recompiled on every size: the tracer runs them as torch's own tracing
# does, through their Python decompositions.
WEIGHT = torch.randn(16, 8)
COMPOSITE_OPS = {
    "batched matmul": lambda x: x @ x.transpose(1, 2),
    "matmul by a weight": lambda x: x @ WEIGHT,
    "matrix times a batch": lambda x: x[0] @ x.transpose(1, 2),
    "linear": lambda x: torch.nn.functional.linear(x, WEIGHT.t()),
    "attention": lambda x: torch.nn.functional.scaled_dot_product_attention(x, x, x),
    "pad": lambda x: torch.nn.functional.pad(x, (0, 0, 1, 1)),
}


@pytest.mark.parametrize("name", list(COMPOSITE_OPS))
def test_composite_ops_keep_a_dynamic_dim_dynamic(name):
    op = COMPOSITE_OPS[name]
    backend = RecordingBackend()
    compiled = sweep(lambda x: op(x) * 2, lambda n: (torch.randn(2, n, 16),), backend=backend)
    entries = report(compiled).entries
    assert [c.kind for c in entries[1].controls] == ["dynamic"], entries[1].controls
    assert len(entries) == 2 and backend.count == 2


# ---- guards and control flow on sizes -----------------------------------------------------


def branchy(x):
    if x.shape[0] > 10:
        return x.sum(0)
    if x.size(0) % 2 == 0:
        return x.mean(0) * x.shape[0]
    return x.amax(0)


def test_size_dependent_branches_guard_each_path():
    compiled = sweep(branchy, rows, sizes=(4, 5, 6, 7, 11, 12, 13, 14, 4, 5, 11))
    entries = report(compiled).entries
    # 4 static; then one dynamic entry per path: even <= 10, odd <= 10, > 10
    assert len(entries) == 4
    path = entries[1].guard_source
    assert "L_x.size(0) <= 10" in path and "L_x.size(0) % 2" in path


def test_size_guards_are_readable_one_per_line():
    compiled = sweep(branchy, rows, sizes=(4, 6), dynamic=None)
    source = report(compiled).entries[1].guard_source
    lines = [line.strip() for line in source.splitlines()]
    assert "# L['x'].size(0) is at least 2 (sizes 0 and 1 are specialised)" in " ".join(
        line for line in lines if line.startswith("#")
    )
    checks = [line for line in lines if line.startswith("if not (")]
    assert "if not (L_x.size(0) >= 2):" in checks
    assert "if not (L_x.size(1) == 16):" in checks
    assert "if not (L_x.stride() == (16, 1)):" in checks
    relied = [line for line in lines if "the trace relied on" in line]
    assert relied and all("test_dynamic.py" in line for line in relied)  # the user's line


def test_sizes_leave_the_graph_as_python_values():
    def f(x):
        n, m = x.shape
        return x * n, n + m, x.shape, (n // 2, float(m))

    compiled = sweep(f, rows)
    assert len(report(compiled).entries) == 2


def test_size_text_and_types_are_the_eager_ones():
    def f(x):
        n = x.shape[0]
        return f"{n} rows", str(n), isinstance(n, int), type(n) is int, x + 1

    compiled = sweep(f, rows)
    # formatting a size needs its value: each size specialises the entry
    assert len(report(compiled).entries) == len(set(SIZES))


def test_a_graph_break_hands_a_size_on_as_a_dynamic_int():
    def f(x):
        n = x.shape[0]
        print(end="")  # a graph break with `n` alive
        return x.new_ones(n, 2) * n, n

    backend = RecordingBackend()
    compiled = sweep(f, rows, backend=backend)
    fn = report(compiled).functions[0]
    # two entries at the start (static, dynamic) and two after the break: its int `n` changed
    assert len(fn.entries) == 4
    assert any(c.target == "L['n']" for c in fn.entries[3].controls)


def test_python_int_arguments_become_dynamic_once_they_change():
    def f(x, k):
        return x[:k] * k

    backend = RecordingBackend()
    compiled = sweep(f, lambda n: (torch.randn(40), n), backend=backend)
    assert len(report(compiled).entries) == 2
    placeholders = [n for n in backend.graphs[1].graph.nodes if n.op == "placeholder"]
    assert [p.meta["source"] for p in placeholders] == ["L['x']", "L['k']"]
    assert isinstance(placeholders[1].meta["example_value"], torch.SymInt)


@pytest.mark.parametrize(
    "index",
    [lambda x, i: x[i] * 2, lambda x, i: x[i % 5] + x[-1 - i % 5], lambda x, i: x[i % 3, 1:]],
    ids=["x[i]", "x[i % 5]", "x[i % 3, 1:]"],
)
def test_indexing_by_a_python_int_that_changes_compiles_twice(index):
    # the int is a symbolic graph input after its first change; x[i] read it as a concrete
    # int (a guard per value: a recompile on every call until the frame ran eagerly)
    def f(x, i):
        return index(x, i)

    compiled = sweep(f, lambda n: (torch.randn(5, 4), n), sizes=[0, 1, 2, 3, 4])
    assert len(report(compiled).entries) == 2


def test_iterating_over_a_dynamic_dim_specialises_it():
    def f(x):
        total = x[0]
        for i in range(1, x.shape[0]):
            total = total + x[i]
        return total

    compiled = sweep(f, rows, sizes=(3, 4, 5, 4))
    assert len(report(compiled).entries) == 3  # one per size: range() needs the value


# ---- the code generator: kernels per size, one tracer entry -------------------------------


def attention_like(q, k):
    scores = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
    return torch.softmax(scores, dim=-1) @ k


def qk(n):
    return torch.randn(n, 8), torch.randn(n, 8)


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_dynamic_graph_across_sizes_in_each_backend(backend):
    tol = {"atol": 1e-5, "rtol": 1e-4}
    compiled = sweep(attention_like, qk, backend=backend, dynamic=True, tol=tol)
    rep = report(compiled)
    assert len(rep.entries) == 1 and rep.entries[0].hits == len(SIZES)
    notes = rep.graphs[0].notes
    if backend == "inductor":
        (note,) = [n for n in notes if n.startswith("kernels specialised per size")]
        assert note == (
            "kernels specialised per size: generated for "
            "[(8,8) (8,8)], [(9,8) (9,8)], [(12,8) (12,8)], [(17,8) (17,8)], "
            "[(30,8) (30,8)], [(5,8) (5,8)]"
        )
        assert rep.kernels and all(k.language in ("cpp", "triton", "extern") for k in rep.kernels)
    elif backend == "eager":
        assert not any("per size" in n for n in notes)


def test_inductor_per_size_kernels_do_not_recompile_the_trace():
    compiled = compiler.compile(normalise_rows, backend="inductor")
    with compiler.config.patch(cache_size_limit=2):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for n in (8, 9, 10, 11, 12, 13, 9, 8):
                (x,) = rows(n)
                assert_same(normalise_rows(x), compiled(x), atol=1e-5, rtol=1e-5)
    rep = report(compiled)
    assert len(rep.entries) == 2  # static (8), dynamic (all others); the limit is not reached
    note = next(n for n in rep.entries[1].graph.notes if "per size" in n)
    assert note == (
        "kernels specialised per size: generated for (9,16), (10,16), (11,16), (12,16), (13,16)"
    )


def test_inductor_per_size_with_training():
    def loss(x, w):
        return (torch.tanh(x @ w) ** 2).mean() * x.shape[0]

    compiled = compiler.compile(loss, backend="inductor", dynamic=True)
    for n in (4, 6, 9):
        x = torch.randn(n, 8)
        w = torch.randn(8, 3, requires_grad=True)
        w_eager = w.detach().clone().requires_grad_()
        out, expected = compiled(x, w), loss(x, w_eager)
        assert_same(expected, out, atol=1e-5, rtol=1e-5)
        out.backward()
        expected.backward()
        assert_same(w_eager.grad, w.grad, atol=1e-5, rtol=1e-5)
    assert len(report(compiled).entries) == 1


def test_export_of_a_marked_dynamic_function_takes_any_size():
    def f(x):
        return x.view(x.shape[0], -1) * x.shape[0]

    x = torch.randn(6, 2, 2)
    compiler.mark_dynamic(x, 0)
    exported = compiler.export(f, x)
    for n in (3, 6, 11):
        y = torch.randn(n, 2, 2)
        assert_same(f(y), exported.graph_module(y))
    assert "L['x'].size(0) >= 2" in [g.expr for g in exported.guards]


def test_explain_names_the_recompile_a_dynamic_size_caused():
    compiled = compiler.compile(normalise_rows, backend="eager")
    compiled(torch.randn(8, 16))
    compiled(torch.randn(9, 16))
    text = str(explain_records(report(compiled).functions))
    assert "Controls:" in text
    assert "dynamic: L['x'].size(0)" in text and "changed from 8 to 9" in text


@pytest.mark.gpu
def test_dynamic_graph_on_cuda_gets_triton_kernels_per_size():
    compiled = compiler.compile(attention_like, backend="inductor", dynamic=True)
    for n in (8, 9, 12, 30, 9):
        q, k = torch.randn(n, 8, device="cuda"), torch.randn(n, 8, device="cuda")
        assert_same(attention_like(q, k), compiled(q, k), atol=1e-4, rtol=1e-4)
    rep = report(compiled)
    assert len(rep.entries) == 1 and rep.entries[0].hits == 5
    assert any(k.language == "triton" for k in rep.kernels)
    assert any(n.endswith("[(30,8) (30,8)]") for n in rep.graphs[0].notes)
