"""PYTEST_DONT_REWRITE: the user functions here use `assert`, whose message must be eager's.

Graph breaks and what follows them: data-dependent control flow, .item()/bool()/.tolist(),
numpy/scipy, print, unknown C functions; continuation into new graphs; nested user functions
that break; exceptions from user code; fullgraph=True."""

import traceback
import zlib

import numpy as np
import pytest
import scipy.fft
import torch

import compiler

from .helpers import Cases, RecordingBackend, T, assert_explain, assert_same, check, neg, pos

case = Cases()

# ---- data-dependent control flow --------------------------------------------------------


def bar(a, b):
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
    return x * b


@case(T(10), pos(10), graphs=2, breaks=1)
def bar_positive(a, b):
    return bar(a, b)


@case(T(10), neg(10), graphs=2, breaks=1)
def bar_negative(a, b):
    return bar(a, b)


def f1(x, y):
    if x.sum() < 0:
        return -y
    return y


# f1 with a positive x returns y untouched: after the break nothing is left to capture.
case(pos(5, 5), T(5, 5), graphs=1, breaks=1)(f1)


@case(neg(5, 5), T(5, 5), graphs=2, breaks=1)
def f1_negative(x, y):
    return f1(x, y)


@case(pos(4), graphs=2, breaks=1)
def if_on_tensor_bool(x):
    y = x * 2
    if y.max() > 0.5:  # pos() entries are >= 0.5, so the max is above
        y = y + 1
    return y


@case(pos(4), graphs=2, breaks=1)
def bool_of_tensor(x):
    y = x.cos()
    flag = bool((x > 0).all())
    return y * 2 if flag else y


@case(pos(4), graphs=2, breaks=1, recompiles=True)
def item_then_more_work(x):
    y = x * 2
    v = y.sum().item()  # a new Python float every call
    return y + v


@case(T(4), graphs=1, breaks=1)
def item_returned(x):
    return (x * 3).sum().item()


@case(T(4), graphs=(0, 1), breaks=1)
def tolist_then_python(x):
    vals = x.tolist()
    return sum(vals) * 2, len(vals)


@case(pos(4), graphs=2, breaks=1)
def data_dependent_while(x):
    x = x * 1
    while x.sum() > 100:  # never true for pos(4), still a break
        x = x - 1
    return x + 1


@case(T(8), graphs=None, breaks=None, calls=4, recompiles=True)
def data_dependent_loop_with_break_each_iteration(x):
    total = torch.zeros(())
    for i in range(3):
        if x[i] > 0:
            total = total + x[i]
        else:
            total = total - x[i]
    return total


# The number of selected elements is data: a tracer may specialise on it and recompile.
@case(T(6), graphs=None, breaks=None, recompiles=True)
def boolean_mask_getitem(x):
    return x[x > 0].sum() + 1


@case(T(6), graphs=None, breaks=None, recompiles=True)
def nonzero_dynamic_shape(x):
    idx = torch.nonzero(x > 0)
    return idx.shape[0] + x.sum()


# ---- non-torch code: numpy, scipy, unknown C functions ----------------------------------


@case(T(5, 5), graphs=range(1, 4), breaks=range(1, 4))
def numpy_roundtrip(x):
    x = x * 2
    a = np.cos(x.numpy())
    return torch.from_numpy(a) + 1


@case(T(5), graphs=range(1, 4), breaks=range(1, 4), recompiles=True)
def numpy_scalar(x):
    m = np.float64(x.sum().item()) * 2.0
    return x * float(m)


def f3(x):
    x = x * 2
    x = scipy.fft.dct(x.numpy())
    x = torch.from_numpy(x)
    x = x * 2
    return x


# The break at x.numpy() and the scipy call may be one break or two, so 2 to 4 graphs.
case(T(5, 5), graphs=range(2, 5), breaks=range(1, 4))(f3)


@case(T(4), graphs=2, breaks=1)
def unknown_c_function(x):
    y = x + 1
    k = zlib.crc32(b"abc") % 7  # a C function the tracer cannot see into
    return y * k


@case(T(4), graphs=2, breaks=1)
def unknown_c_function_with_keywords(x):
    y = x + 1
    # The call the graph breaks at runs for real with its keyword names (they were set by
    # the KW_NAMES inside the graph's region): `value` must not become the first positional.
    # zlib.compress: a C function the tracer cannot see into (int.from_bytes now folds)
    k = len(zlib.compress(b"\x01\x02", level=1, wbits=15)) % 7
    return y * k


# ---- continuation and nesting -----------------------------------------------------------


def _quiet_print(*args):
    print(*args, end="")


@case(T(4), graphs=3, breaks=2)
def several_breaks_continue(x):
    a = x + 1
    _quiet_print("")
    b = a * 2
    _quiet_print("")
    return b - 1


def _inner_breaks(t):
    t = t + 1
    _quiet_print("")
    return t * 2


@case(T(4), graphs=(3, 4), breaks=(2, 3))
def nested_callee_breaks(x):
    y = x.sin()
    z = _inner_breaks(y)
    return z - 1


@case(T(4, grad=True), graphs=2, breaks=1)
def break_inside_no_grad(x):
    with torch.no_grad():
        y = x * 2
        _quiet_print("")
        z = y + x  # still under no_grad after the break
    return z, x * 3


@case(T(4), graphs=2, breaks=1)
def break_with_live_containers(x):
    parts = [x + 1, x + 2]
    cfg = {"scale": 3}
    _quiet_print("")
    return [p * cfg["scale"] for p in parts]


@case(T(4), graphs=2, breaks=1)
def break_inside_for_loop_over_range(x):
    acc = x * 1
    for i in range(3):
        acc = acc + i
    _quiet_print("")
    for _ in range(2):
        acc = acc * 2
    return acc


@pytest.mark.parametrize("fn,factories,expect", case)
def test_break(fn, factories, expect):
    check(fn, *factories, **expect)


# ---- print: side effects happen once per call, as in eager --------------------------------


def printing(x, tag):
    y = x + 1
    print("value of", tag, "is", 7)
    return y * 2


def test_print_once_per_call(capsys):
    cf = compiler.compile(printing, backend=RecordingBackend())
    for call in range(3):
        x = torch.randn(3)
        expected = printing(x, "x")
        eager_out = capsys.readouterr().out
        got = cf(x, "x")
        compiled_out = capsys.readouterr().out
        assert_same(expected, got)
        assert compiled_out == eager_out == "value of x is 7\n", f"call {call}: {compiled_out!r}"


def test_print_counts_as_break():
    out = assert_explain(printing, [T(3), "x"], graphs=2, breaks=1)
    assert "print" in out.break_reasons[0].reason.lower() or any(
        "print(" in s.text for s in out.break_reasons[0].user_stack
    )


def test_print_of_tensor_value(capsys):
    def f(x):
        y = x * 2
        print(y)
        return y + 1

    x = torch.randn(3)
    f(x)
    eager_out = capsys.readouterr().out
    compiler.compile(f, backend="eager")(x)
    assert capsys.readouterr().out == eager_out


# ---- exceptions from user code come out as in eager ---------------------------------------


class CustomError(Exception):
    pass


exc_case = Cases()


@exc_case(T(4))
def raise_value_error(x):
    y = x * 2
    if x.shape[0] > 2:
        raise ValueError(f"too many rows: {x.shape[0]}")
    return y


@exc_case(T(3), T(4))
def shape_mismatch(x, y):
    z = x.sin()
    return z + y


@exc_case(T(3, 4), T(5, 6))
def matmul_shape_mismatch(x, y):
    return x @ y


@exc_case(T(4))
def key_error_in_dict(x):
    d = {"a": x}
    return d["b"]


@exc_case([T(2)])
def index_error_in_list(xs):
    return xs[3] + 1


@exc_case(T(4))
def custom_exception(x):
    x = x + 1
    raise CustomError("custom <b>message</b>")


@exc_case(T(4))
def assertion_in_user_code(x):
    assert x.dim() == 2, "expected a matrix"
    return x


@exc_case(pos(4))
def raise_after_break(x):
    y = x * 2
    if y.sum() > 0:
        raise RuntimeError("positive sum")
    return y


@exc_case(T(4))
def exception_caught_in_user_code(x):
    try:
        raise ValueError("inner")
    except ValueError as e:
        return x * len(str(e))


@exc_case(T(4))
def exception_from_callee_caught(x):
    try:
        return key_error_in_dict(x)
    except KeyError:
        return x - 1


@exc_case(T(4))
def view_size_error(x):
    return x.view(3, 5)


@exc_case(T(4))
def wrong_dtype_error(x):
    return torch.bitwise_and(x, x)


@pytest.mark.parametrize("fn,factories,expect", exc_case)
def test_exception(fn, factories, expect):
    check(fn, *factories, **expect)


def test_exception_traceback_points_at_user_line():
    cf = compiler.compile(raise_value_error, backend="eager")
    with pytest.raises(ValueError, match="too many rows: 4") as info:
        cf(torch.randn(4))
    frames = traceback.extract_tb(info.value.__traceback__)
    assert any(f.filename == __file__ and "raise ValueError" in (f.line or "") for f in frames), (
        "the traceback should contain the user's raise line:\n"
        + "".join(traceback.format_list(frames))
    )


# ---- fullgraph=True ---------------------------------------------------------------------


def test_fullgraph_raises_at_data_dependent_branch():
    cf = compiler.compile(bar, backend="eager", fullgraph=True)
    with pytest.raises(Exception) as info:
        cf(torch.randn(10), torch.randn(10))
    assert not isinstance(info.value, (AssertionError, TypeError, NameError))
    assert "b.sum() < 0" in str(info.value), str(info.value)


def test_fullgraph_raises_at_print_naming_it():
    def f(x):
        y = x + 1
        print("hello")
        return y

    cf = compiler.compile(f, backend="eager", fullgraph=True)
    with pytest.raises(Exception) as info:
        cf(torch.randn(3))
    assert 'print("hello")' in str(info.value), str(info.value)


def test_fullgraph_raises_at_item():
    def f(x):
        return x * x.sum().item()

    with pytest.raises(Exception) as info:
        compiler.compile(f, backend="eager", fullgraph=True)(torch.randn(3))
    assert "x.sum().item()" in str(info.value), str(info.value)


def test_fullgraph_passes_without_break():
    backend = RecordingBackend()
    cf = compiler.compile(lambda x: x.sin().cos() + 1, backend=backend, fullgraph=True)
    x = torch.randn(3)
    assert_same((x.sin().cos() + 1), cf(x))
    assert backend.count == 1


def test_fullgraph_does_not_run_the_function_partially(capsys):
    def f(x):
        print("before")
        if x.sum() > 0:
            return x
        return -x

    with pytest.raises(Exception):  # noqa: B017 (the compiler's own error type; the point is the print count)
        compiler.compile(f, backend="eager", fullgraph=True)(torch.randn(3))
    assert capsys.readouterr().out.count("before") <= 1


# ---- explain's break reasons ------------------------------------------------------------


def test_break_reason_names_source_line():
    out = assert_explain(bar, [T(10), neg(10)], graphs=2, breaks=1)
    (reason,) = out.break_reasons
    assert reason.reason
    last = reason.user_stack[-1]
    assert last.filename == __file__
    assert "if b.sum() < 0:" in last.text
    assert last.lineno == bar.__code__.co_firstlineno + 2


def test_nested_break_reason_stack_includes_callee_line():
    out = compiler.explain(nested_callee_breaks)(torch.randn(4))
    texts = [s.text for r in out.break_reasons for s in r.user_stack]
    assert any('_quiet_print("")' in t for t in texts), texts


def test_callee_of_a_break_is_compiled_too():
    backend = RecordingBackend()
    cf = compiler.compile(nested_callee_breaks, backend=backend)
    x = torch.randn(4)
    assert_same(nested_callee_breaks(x), cf(x))
    # the callee's own graphs: t + 1 before its print, t * 2 after it
    assert backend.count >= 3, backend.count
    names = [f.name for f in compiler.inspect(cf).functions]
    assert "_inner_breaks" in names, names


def _autocast_off(x):
    y = x + 1
    with torch.autocast(device_type=x.device.type, enabled=False):
        z = y @ y.t()
    with torch.no_grad(), torch.autocast("cpu", enabled=False):
        w = y * 3  # the grad mode inside is no_grad's
    return z, w


def test_autocast_disabled_while_off_is_no_break():
    # timm's efficientvit computes attention under torch.autocast(..., enabled=False).
    check(_autocast_off, T(3, 3, grad=True), graphs=1, breaks=0)


def test_autocast_disabled_inside_autocast_is_traced_and_matches_eager():
    # the blocks switch autocast off and back on inside the graph (tests/tracer/test_autocast.py)
    compiled = compiler.compile(_autocast_off)
    x = torch.randn(3, 3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected, got = _autocast_off(x), compiled(x)
    assert_same(expected, got)
    assert compiler.inspect(compiled).entries[0].graph_break is None
