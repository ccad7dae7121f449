"""torch.compiler's controls on our compiler: disable, allow_in_graph, disallow_in_graph,
assume_constant_result and is_compiling. Each test is differential (compiled vs eager on fresh
inputs, through `check`) and asserts the graphs and breaks the control made, and what the
records say about it."""

import pytest
import torch

import compiler
from compiler import controls

from .helpers import RecordingBackend, T, assert_explain, assert_same, check

# ---- disable ------------------------------------------------------------------------------


def times_three(x):
    return x * 3


@compiler.disable
def disabled_helper(x):
    return times_three(x) + 1


def calls_disabled(x):
    y = x.sin()
    z = disabled_helper(y)
    return z.cos()


def test_disable_breaks_the_graph_around_the_call():
    backend = check(calls_disabled, T(4), graphs=2, breaks=1)
    assert "sin" in backend.targets() and "cos" in backend.targets()
    out = assert_explain(calls_disabled, [T(4)], graphs=2, breaks=1)
    reason = out.break_reasons[0].reason
    assert "disabled_helper() is disabled with compiler.disable" in reason
    assert "nothing it calls is compiled" in reason
    assert [c.kind for c in out.controls] == ["disable"]


def test_disable_recursive_compiles_nothing_it_calls():
    compiled = compiler.compile(calls_disabled, backend="eager")
    x = torch.randn(4)
    assert_same(calls_disabled(x), compiled(x))
    names = [f.name for f in compiler.inspect(compiled).functions]
    assert names == ["calls_disabled"]  # neither disabled_helper nor times_three


def helper_calling_disabled(x):
    return disabled_helper(x.exp()) * 2


def calls_helper(x):
    return helper_calling_disabled(x + 1) - 1


def test_disable_reached_through_a_callee():
    # The break inside the inlined helper ends the caller's graph at the call; the helper is
    # compiled on its own, with a break around the disabled call; nothing below it compiles.
    check(calls_helper, T(3), graphs=4, breaks=2)
    compiled = compiler.compile(calls_helper, backend="eager")
    x = torch.randn(3)
    assert_same(calls_helper(x), compiled(x))
    names = [f.name for f in compiler.inspect(compiled).functions]
    assert names == ["calls_helper", "helper_calling_disabled"]


def test_disable_non_recursive_compiles_its_callees():
    inner_backend = RecordingBackend()

    def inner(x):
        return x.sin() * 2

    @compiler.disable(recursive=False)
    def outer(x):
        return inner(x) + 1

    def f(x):
        return outer(x.cos())

    check(f, T(5), graphs=(2, 3), breaks=1)
    compiled = compiler.compile(f, backend=inner_backend)
    x = torch.randn(5)
    assert_same(f(x), compiled(x))
    names = [fn.name for fn in compiler.inspect(compiled).functions]
    assert "inner" in names and "outer" not in names
    assert any("sin" in str(n.target) for gm in inner_backend.graphs for n in gm.graph.nodes)


def test_disable_as_a_call_with_a_reason():
    def noisy(x):
        return x.abs()

    quiet = compiler.disable(noisy, reason="calls a C extension")

    def f(x):
        return quiet(x - 1) + 2

    out = assert_explain(f, [T(4)], graphs=2, breaks=1)
    assert "(calls a C extension)" in out.break_reasons[0].reason
    check(f, T(4), graphs=2, breaks=1)


def test_compiling_a_disabled_function_runs_it_eagerly():
    backend = RecordingBackend()
    compiled = compiler.compile(disabled_helper, backend=backend)
    x = torch.randn(4)
    assert_same(disabled_helper(x), compiled(x))
    assert backend.count == 0
    assert compiler.inspect(compiled).functions == []


def test_disabled_method():
    class Model(torch.nn.Module):
        def forward(self, x):
            return self.post(x.relu()) + 1

        @compiler.disable
        def post(self, x):
            return x * 2

    model = Model()
    check(lambda x: model(x), T(3, 4), graphs=2, breaks=1)


def test_disable_rejects_modules():
    with pytest.raises(TypeError, match="mark its forward"):
        compiler.disable(torch.nn.ReLU())


# ---- allow_in_graph -----------------------------------------------------------------------

OPAQUE_CALLS: list[int] = []


@compiler.allow_in_graph
def scaled_pair(a, b):
    OPAQUE_CALLS.append(1)  # a Python side effect: only an opaque call keeps it per call
    if a.shape[0] > 100:  # Python the tracer would otherwise follow
        return a, b
    return a * 2 + b, a - b


def uses_opaque(x, y):
    p, q = scaled_pair(x.sin(), y)
    return (p.cos() + q).sum()


def test_allow_in_graph_is_one_opaque_node():
    backend = check(uses_opaque, T(6), T(6), graphs=1, breaks=0)
    gm = backend.graphs[0]
    opaque = [n for n in gm.graph.nodes if n.target is scaled_pair]
    assert len(opaque) == 1 and opaque[0].meta["opaque"]
    assert "mul" not in backend.targets()  # not traced into
    out = assert_explain(uses_opaque, [T(6), T(6)], graphs=1, breaks=0)
    assert [c.kind for c in out.controls] == ["allow_in_graph"]


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_allow_in_graph_runs_on_real_tensors_in_every_backend(backend):
    compiled = compiler.compile(uses_opaque, backend=backend)
    for _ in range(3):
        x = torch.randn(6, requires_grad=True)
        y = torch.randn(6)
        x_eager = x.detach().clone().requires_grad_()
        OPAQUE_CALLS.clear()
        out = compiled(x, y)
        assert len(OPAQUE_CALLS) in (1, 2)  # the real call, plus the fake run at the compile
        expected = uses_opaque(x_eager, y)
        assert_same(expected, out)
        out.backward()
        expected.backward()
        assert_same(x_eager.grad, x.grad)
    OPAQUE_CALLS.clear()
    compiled(torch.randn(6, requires_grad=True), torch.randn(6))  # the same entry
    assert OPAQUE_CALLS == [1]  # compiled code runs the Python function, once a call
    report = compiler.inspect(compiled)
    assert len(report.entries) == 1
    if backend != "eager":
        graph = report.graphs[0]
        assert any("runs as a Python call on the real tensors" in n for n in graph.notes)
        assert "extern_python_scaled_pair" in [k.name for k in graph.kernels]


def test_allow_in_graph_function_writing_to_its_input_is_kept():
    @compiler.allow_in_graph
    def bump(t):
        t.add_(1)

    def f(x):
        bump(x)
        return x * 2

    check(f, T(4), graphs=1, breaks=0)


def test_allow_in_graph_returning_a_python_value_breaks():
    @compiler.allow_in_graph
    def count(t):
        return t.shape[0] + 1

    def f(x):
        return x * count(x)

    out = assert_explain(f, [T(4)], graphs=(1, 2), breaks=1)
    assert "an opaque call must return tensors" in out.break_reasons[0].reason
    check(f, T(4), breaks=1)


def test_disallow_in_graph_breaks_at_a_torch_op():
    def f(x):
        return torch.sub(x.sin(), 1).cos()

    check(f, T(4), graphs=1, breaks=0)
    compiler.disallow_in_graph(torch.sub)
    try:
        backend = check(f, T(4), graphs=2, breaks=1)
        assert "sub" not in backend.targets()
        out = assert_explain(f, [T(4)], graphs=2, breaks=1)
        assert "compiler.disallow_in_graph" in out.break_reasons[0].reason
        assert [c.kind for c in out.controls] == ["disallow_in_graph"]
    finally:
        controls._MARKS.pop(id(torch.sub))  # torch.sub unmarked for the tests after this one


# ---- assume_constant_result ---------------------------------------------------------------

SCALE_CALLS: list[int] = []
SETTINGS = {"scale": 0.5}


@compiler.assume_constant_result
def current_scale():
    SCALE_CALLS.append(1)
    return SETTINGS["scale"]


def scaled(x):
    return x * current_scale() + 1


def test_assume_constant_result_bakes_the_value_in():
    backend = check(scaled, T(4), graphs=1, breaks=0)
    assert "current_scale" not in backend.targets()
    SCALE_CALLS.clear()
    compiled = compiler.compile(scaled, backend=backend)
    x = torch.randn(4)
    assert_same(scaled(x), compiled(x))
    assert len(SCALE_CALLS) == 2  # eager's call, and one while tracing
    SCALE_CALLS.clear()
    compiled(x)
    assert SCALE_CALLS == []  # the compiled code never calls it again
    entry = compiler.inspect(compiled).entries[0]
    # the function's identity is guarded (as any global it calls); its result is not
    assert not any("SETTINGS" in g.expr for g in entry.guards)
    assert all(g.kind == "ID_MATCH" for g in entry.guards if "current_scale" in g.expr)
    (control,) = entry.controls
    assert control.kind == "assume_constant_result"
    assert "returned 0.5" in control.detail and "no guard" in control.detail
    SETTINGS["scale"] = 3.0  # no guard sees it: the constant stays, as the user asked
    try:
        assert_same(x * 0.5 + 1, compiled(x))
    finally:
        SETTINGS["scale"] = 0.5


def test_assume_constant_result_is_called_once_across_restarts():
    calls = []

    @compiler.assume_constant_result
    def offset():
        calls.append(1)
        return 2

    def inner(x):
        y = x + offset()
        print("break inside an inlined call", end="")  # restarts the trace of outer
        return y

    def outer(x):
        return inner(x * offset())

    check(outer, T(3))
    calls.clear()
    compiled = compiler.compile(outer, backend="eager")
    compiled(torch.randn(3))
    # outer's trace (restarted once) calls it once; inner's own entry once
    assert len(calls) == 2


def test_assume_constant_result_with_tensor_arguments_breaks():
    @compiler.assume_constant_result
    def rank(t):
        return len(t.shape)

    def f(x):
        return x / rank(x)

    out = assert_explain(f, [T(4)], graphs=(1, 2), breaks=1)
    assert "not constants" in out.break_reasons[0].reason
    check(f, T(4), breaks=1)


# ---- is_compiling -------------------------------------------------------------------------


def branches_on_compiling(x):
    if compiler.is_compiling():
        return x + 1
    return x - 1


def test_is_compiling_is_true_while_tracing_and_false_in_eager():
    assert compiler.is_compiling() is False
    compiled = compiler.compile(branches_on_compiling, backend=RecordingBackend())
    x = torch.randn(4)
    assert_same(x - 1, branches_on_compiling(x))
    assert_same(x + 1, compiled(x))
    assert_same(x + 1, compiled(torch.clone(x)))


def test_is_compiling_is_false_in_compiled_code_running_for_real():
    seen = []

    @compiler.disable
    def record():
        seen.append(compiler.is_compiling())

    def f(x):
        record()
        return x * 2

    check(f, T(4), graphs=1, breaks=1)
    assert seen and not any(seen)


def test_torch_compiler_is_compiling_is_answered_by_the_tracer():
    def f(x):
        return x * 3 if torch.compiler.is_compiling() else x

    backend = RecordingBackend()
    compiled = compiler.compile(f, backend=backend)
    x = torch.randn(4)
    assert_same(x * 3, compiled(x))
    assert backend.count == 1


def test_is_compiling_inside_an_opaque_call_is_true_while_tracing():
    seen = []

    @compiler.allow_in_graph
    def probe(t):
        seen.append(compiler.is_compiling())
        return t + 1

    def f(x):
        return probe(x) * 2

    compiled = compiler.compile(f, backend="eager")
    compiled(torch.randn(3))
    assert seen == [True, False]  # the fake run while tracing, then the real call


@pytest.mark.gpu
def test_allow_in_graph_between_triton_kernels():
    compiled = compiler.compile(uses_opaque, backend="inductor")
    for _ in range(2):
        x, y = torch.randn(6, device="cuda"), torch.randn(6, device="cuda")
        assert_same(uses_opaque(x, y), compiled(x, y))
    kernels = compiler.inspect(compiled).kernels
    assert "extern_python_scaled_pair" in [k.name for k in kernels]
    assert any(k.language == "triton" for k in kernels)
