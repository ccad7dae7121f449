"""Library calls traced without a graph break, compared with eager: custom autograd Functions
called through `.apply` (forward inlined without autograd, one call of the Function in the
graph with it, the user's backward winning), functools.lru_cache wrappers (called once at
trace time on constants, traced through on tensors) and log calls and warnings with constant
arguments (replayed after the graph, in order)."""

from __future__ import annotations

import functools
import logging
import warnings

import pytest
import torch

import compiler

from .helpers import T, assert_explain, check

# ---- custom autograd Functions ----------------------------------------------------------


class StraightThroughRound(torch.autograd.Function):
    """round() forward, a made-up backward: compiled gradients must be this one's."""

    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x)
        ctx.scale = scale
        return torch.round(x * scale)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 3 + x * ctx.scale, None


class NeedsGrad(torch.autograd.Function):
    """forward reads ctx.needs_input_grad and marks an output non-differentiable."""

    @staticmethod
    def forward(ctx, x, y):
        flags = ctx.needs_input_grad
        out = x * 2 + y if flags[0] else x - y
        index = (x > 0).to(x.dtype)
        ctx.mark_non_differentiable(index)
        ctx.save_for_backward(x)
        return out, index

    @staticmethod
    def backward(ctx, grad, grad_index):
        (x,) = ctx.saved_tensors
        return grad * 2 + x, grad


class SetupContextStyle(torch.autograd.Function):
    @staticmethod
    def forward(x, k):
        return x.sin() * k

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, k = inputs
        ctx.save_for_backward(x)
        ctx.k = k

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.cos() * ctx.k, None


class ReadsValue(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * float(x.sum())

    @staticmethod
    def backward(ctx, grad):
        return grad


def ste_step(x, w):
    h = StraightThroughRound.apply(x @ w + 1, 2.0)
    return (h * 2).sin().sum()


def test_function_with_grad_runs_the_users_backward():
    backend = check(ste_step, T(3, 4, grad=True), T(4, 4, grad=True), graphs=1, breaks=0,
                    backward=True)  # fmt: skip
    assert any(t.startswith("apply_StraightThroughRound") for t in backend.targets())


def test_function_with_grad_on_the_default_backend():
    compiled = compiler.compile(ste_step)
    for _ in range(2):
        x, w = torch.randn(3, 4, requires_grad=True), torch.randn(4, 4, requires_grad=True)
        xc, wc = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
        ste_step(x, w).backward()
        compiled(xc, wc).backward()
        torch.testing.assert_close(xc.grad, x.grad)
        torch.testing.assert_close(wc.grad, w.grad)
    assert len(compiler.inspect(compiled).entries) == 1


class SavedMatmul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x @ w

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        return grad @ w.t().to(grad.dtype), x.t().to(grad.dtype) @ grad


def function_under_autocast(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = SavedMatmul.apply(x.sin(), w)
    return y


def test_function_with_grad_runs_forward_under_the_callers_autocast():
    """The default backend lowers autocast to casts; the Function's forward, run as one call,
    must still see the autocast block eager ran it in (a bfloat16 matmul)."""
    compiled = compiler.compile(function_under_autocast)
    for _ in range(2):
        x, w = torch.randn(4, 4, requires_grad=True), torch.randn(4, 4, requires_grad=True)
        eager = function_under_autocast(x, w)
        out = compiled(x, w)
        assert out.dtype == eager.dtype == torch.bfloat16
        torch.testing.assert_close(out, eager)
        grads = torch.autograd.grad(out.float().sum(), (x, w))
        e_grads = torch.autograd.grad(eager.float().sum(), (x, w))
        for got, want in zip(grads, e_grads):
            torch.testing.assert_close(got, want, atol=1e-2, rtol=1e-2)
    assert len(compiler.inspect(compiled).entries) == 1
    assert_explain(function_under_autocast, [T(4, 4, grad=True), T(4, 4, grad=True)],
                   graphs=1, breaks=0)  # fmt: skip


def autocast_block_around_function(x, w, v):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h = SavedMatmul.apply(x.sin(), w)
        out = h @ v  # in the part compiled after the call: still inside the block
    return out.float().sum(), out


def test_autocast_block_spanning_the_function_call():
    """The default backend compiles the graph's parts around the call on their own: the part
    after it must be compiled inside the autocast block the graph opened before it (a BLOOM
    training step under autocast crashed with a dtype mismatch)."""
    compiled = compiler.compile(autocast_block_around_function)
    for _ in range(2):
        args = [torch.randn(4, 4, requires_grad=True) for _ in range(3)]
        e_loss, eager = autocast_block_around_function(*args)
        c_loss, out = compiled(*args)
        assert out.dtype == eager.dtype == torch.bfloat16
        torch.testing.assert_close(out, eager)
        grads = torch.autograd.grad(c_loss, args)
        for got, want in zip(grads, torch.autograd.grad(e_loss, args)):
            torch.testing.assert_close(got, want, atol=5e-2, rtol=5e-2)
    assert len(compiler.inspect(compiled).entries) == 1


def ste_no_grad(x):
    with torch.no_grad():
        y = StraightThroughRound.apply(x.cos(), 3.0)
    return y + x


def test_function_without_grad_inlines_forward():
    backend = check(ste_no_grad, T(5, grad=True), graphs=1, breaks=0, backward=True)
    assert "round" in backend.targets()
    assert not any(t.startswith("apply_") for t in backend.targets())


def inputs_without_grad(x, y):
    out, index = NeedsGrad.apply(x, y)
    return out, index, SetupContextStyle.apply(x, 0.5)


def test_function_ctx_without_grad():
    backend = check(inputs_without_grad, T(4), T(4), graphs=1, breaks=0)
    assert not any(t.startswith("apply_") for t in backend.targets())


def test_function_ctx_with_grad():
    check(inputs_without_grad, T(4, grad=True), T(4), graphs=1, breaks=0, backward=True)


def test_function_reading_a_value_breaks_with_its_kind():
    def fn(x):
        return ReadsValue.apply(x * 2) + 1

    check(fn, T(4, grad=True), breaks=1, backward=True)
    out = assert_explain(fn, [T(4, grad=True)], graphs=None, breaks=1)
    assert out.break_reasons[0].kind == "autograd_function"
    assert "ReadsValue.apply" in out.break_reasons[0].reason


# ---- functools.lru_cache ----------------------------------------------------------------

CACHED_CALLS: list = []


@functools.lru_cache
def feature_available(name):
    CACHED_CALLS.append(name)
    return name == "fast"


@functools.cache
def scale_of(t):
    return t * 2


def uses_cached_flag(x):
    if feature_available("fast"):
        return x + 1
    return x - 1


def test_lru_cache_on_constants_is_called_once_and_baked_in():
    feature_available.cache_clear()
    CACHED_CALLS.clear()
    uses_cached_flag(torch.randn(3))
    eager_calls = list(CACHED_CALLS)
    feature_available.cache_clear()
    CACHED_CALLS.clear()
    check(uses_cached_flag, T(3), graphs=1, breaks=0)
    assert CACHED_CALLS == eager_calls == ["fast"]
    compiled = compiler.compile(uses_cached_flag)
    compiled(torch.randn(3))
    controls = [c for e in compiler.inspect(compiled).entries for c in e.controls]
    assert [c.kind for c in controls] == ["lru_cache"]
    assert "returned True" in controls[0].detail


def test_lru_cache_on_tensors_traces_the_wrapped_function():
    def fn(x):
        return scale_of(x) + 1

    check(fn, T(4), graphs=1, breaks=0)


@functools.lru_cache
def logged_scale_of(t):
    CACHED_CALLS.append("scale")
    return t * 2


def calls_a_cached_helper_twice(x):
    before = len(CACHED_CALLS)
    a, b = logged_scale_of(x), logged_scale_of(x)  # the second hits eager's cache
    return a is b, a + 1, len(CACHED_CALLS) - before


def test_lru_cache_on_the_same_tensor_twice_runs_once_as_eager():
    # one call: the global log it reads grows, and a second call would recompile on its length
    check(calls_a_cached_helper_twice, T(4), graphs=1, breaks=0, calls=1)


def cached_helpers_made_in_the_function(x):
    log = []

    @functools.lru_cache(maxsize=None)
    def fib(n):
        return n if n < 2 else fib(n - 1) + fib(n - 2)

    @functools.lru_cache(maxsize=2)
    def scaled(t, k):
        log.append(k)  # runs only on a miss: as often as eagerly
        return t * k

    @functools.cache
    def square(n):
        log.append(("square", n))
        return n * n

    @functools.lru_cache
    def boxed(n):
        return [n]

    a, b = scaled(x, 2), scaled(x, 2)
    scaled(x, 3), scaled(x, 4)  # 2 is the least recently used: evicted
    c = scaled(x, 2)
    return x + fib(20), a is b, a is c, c, square(3) + square(3), boxed(1) is boxed(1), log


def test_lru_cache_made_in_the_function_is_kept_in_the_trace():
    check(cached_helpers_made_in_the_function, T(4), graphs=1, breaks=0)


def returns_its_cached_helper(x):
    @functools.lru_cache(maxsize=None)
    def plus_one(n):
        return n + 1

    return x + plus_one(1), plus_one


def test_lru_cache_wrapper_made_in_the_function_that_outlives_it_is_made_in_python():
    x = torch.randn(3)
    e_out, e_fn = returns_its_cached_helper(x)
    c_out, c_fn = compiler.compile(returns_its_cached_helper)(x)
    torch.testing.assert_close(c_out, e_out)
    assert isinstance(c_fn, functools._lru_cache_wrapper)
    assert c_fn.cache_info() == e_fn.cache_info()
    assert (c_fn(1), c_fn.cache_info()) == (e_fn(1), e_fn.cache_info())


# ---- log calls and warnings -------------------------------------------------------------


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seen: list[tuple] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append(
            (record.levelname, record.getMessage(), record.lineno, record.funcName,
             record.pathname, record.name)
        )  # fmt: skip


@pytest.fixture
def collect():
    logger = logging.getLogger("tests.library_calls")
    handler = Collect()
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield handler
    logger.removeHandler(handler)


log = logging.getLogger("tests.library_calls")


def logs_and_warns(x):
    log.info("start %d", 3)
    y = x.sin()
    log.debug("hidden below the level")
    warnings.warn("careful", RuntimeWarning, stacklevel=1)
    log.warning("shape %s", tuple(x.shape))
    log.log(logging.ERROR, "done")
    return y * 2


def _run_logged(fn, x, handler):
    handler.seen.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn(x)
    return (
        out,
        list(handler.seen),
        [(str(w.message), w.category, w.lineno, w.filename) for w in caught],
    )


def test_log_calls_replayed_after_the_graph_in_order(collect):
    compiled = compiler.compile(logs_and_warns)
    for _ in range(3):
        x = torch.randn(4)
        e_out, e_logs, e_warns = _run_logged(logs_and_warns, x, collect)
        c_out, c_logs, c_warns = _run_logged(compiled, x, collect)
        torch.testing.assert_close(c_out, e_out)
        assert c_logs == e_logs and len(e_logs) == 3
        assert c_warns == e_warns and len(e_warns) == 1
    entries = compiler.inspect(compiled).entries
    assert len(entries) == 1
    assert [e.kind for e in entries[0].side_effects] == [
        "deferred"
    ] * 5  # debug too: the level is read at run time
    check(logs_and_warns, T(4), graphs=1, breaks=0)


def logs_through_get_logger(x):
    logging.getLogger("tests.library_calls").warning("inside %d", 2)
    logging.getLogger().debug("root, below its level")
    return x * 2


def test_a_logger_fetched_by_name_in_the_function_logs_as_eager(collect):
    # logging.getLogger(name) with a constant name is that one logger (it broke the graph)
    compiled = compiler.compile(logs_through_get_logger)
    for _ in range(2):
        x = torch.randn(3)
        e_out, e_logs, _ = _run_logged(logs_through_get_logger, x, collect)
        c_out, c_logs, _ = _run_logged(compiled, x, collect)
        torch.testing.assert_close(c_out, e_out)
        assert c_logs == e_logs and len(e_logs) == 1
    check(logs_through_get_logger, T(3), graphs=1, breaks=0)


def test_log_before_a_break_comes_before_the_break(collect):
    @compiler.disable
    def middle():
        log.warning("middle")

    def fn(x):
        log.warning("first")
        middle()
        log.warning("last")
        return x + 1

    compiled = compiler.compile(fn)
    _, e_logs, _ = _run_logged(fn, torch.randn(2), collect)
    _, c_logs, _ = _run_logged(compiled, torch.randn(2), collect)
    assert [m[1] for m in c_logs] == [m[1] for m in e_logs] == ["first", "middle", "last"]
    assert_explain(fn, [T(2)], graphs=None, breaks=1)


def test_log_of_a_tensor_breaks(collect):
    def fn(x):
        y = x * 2
        log.info("value %s", y)
        return y + 1

    out = assert_explain(fn, [T(3)], graphs=2, breaks=1)
    assert out.break_reasons[0].kind == "logging"
    compiled = compiler.compile(fn)
    x = torch.randn(3)
    _, e_logs, _ = _run_logged(fn, x, collect)
    _, c_logs, _ = _run_logged(compiled, x, collect)
    # the call runs in Python at the break: same message (the record's line is the break's)
    assert [m[:2] for m in c_logs] == [m[:2] for m in e_logs]


def test_default_warning_filter_shows_once_per_line():
    def fn(x):
        warnings.warn("once per line", stacklevel=1)
        return x + 1

    compiled = compiler.compile(fn)
    with warnings.catch_warnings(record=True) as caught:
        warnings.resetwarnings()
        warnings.simplefilter("default")
        fn.__globals__.pop("__warningregistry__", None)
        for _ in range(3):
            fn(torch.randn(2))
        eager = len(caught)
        fn.__globals__.pop("__warningregistry__", None)
        for _ in range(3):
            compiled(torch.randn(2))
        assert len(caught) - eager == eager == 1


def test_transformers_warning_once(collect):
    tlogging = pytest.importorskip("transformers.utils.logging")
    logger = tlogging.get_logger("tests.library_calls.once")
    handler = Collect()
    logger.addHandler(handler)
    logger.propagate = False

    def fn(x):
        logger.warning_once("only the first time")
        return x * 3

    try:
        compiled = compiler.compile(fn)
        for _ in range(3):
            torch.testing.assert_close(compiled(x := torch.randn(2)), fn(x))
        assert [m[1] for m in handler.seen] == ["only the first time"]
        assert_explain(fn, [T(2)], graphs=1, breaks=0)
    finally:
        logger.removeHandler(handler)


def test_log_of_a_changing_step_counter(collect):
    """A Python int that changes every call becomes a symbolic size: the deferred log call
    computes it from the inputs, so later steps reuse the entry and log their own value."""

    def fn(x, step):
        log.info("step %d of %s", step, "training")
        return x * step

    compiled = compiler.compile(fn)
    for step in range(1, 6):
        x = torch.randn(2)
        e_out, e_logs, _ = _run_logged(lambda t, s=step: fn(t, s), x, collect)
        c_out, c_logs, _ = _run_logged(lambda t, s=step: compiled(t, s), x, collect)
        torch.testing.assert_close(c_out, e_out)
        assert c_logs == e_logs
    report = compiler.inspect(compiled)
    assert len(report.entries) <= 2
    assert all(e.graph_break is None for e in report.entries)


def test_root_logging_functions(collect):
    root = logging.getLogger()
    handler = Collect()
    root.addHandler(handler)
    level = root.level
    root.setLevel(logging.INFO)

    def fn(x):
        logging.info("root info %d", 1)
        logging.debug("root debug")
        logging.log(logging.WARNING, "root log")
        return x - 1

    try:
        compiled = compiler.compile(fn)
        for _ in range(2):
            x = torch.randn(3)
            e_out, e_logs, _ = _run_logged(fn, x, handler)
            c_out, c_logs, _ = _run_logged(compiled, x, handler)
            torch.testing.assert_close(c_out, e_out)
            assert c_logs == e_logs and len(e_logs) == 2
        assert_explain(fn, [T(3)], graphs=1, breaks=0)
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def test_warn_with_arguments_it_rejects_raises_as_eagerly():
    def fn(x):
        warnings.warn("bad", bogus=1)  # noqa: B028
        return x + 1

    check(fn, T(2))  # eager raises TypeError: so does the compiled call
