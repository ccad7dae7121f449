"""try/except/finally and `with` blocks, differential against eager.

The normal path of a try block is plain code (one graph). An exception raised while tracing
is sent to its handler through the exception table (still one graph); one that leaves the
graph, or a handler that breaks, makes the instruction that raised it raise for real and the
frame evaluator run the handler (exceptions raised for real always take that path). Each
case also checks the exception eager raises, and the inputs after the call.
"""

import json
import sys
import traceback

import pytest
import torch

import compiler

from .helpers import Cases, T, check

case = Cases()


class Boom(Exception):
    pass


def _missing_key(d):
    return d["missing"]


def _raise_boom(x):
    raise Boom("from a callee")


# ---- the normal path ------------------------------------------------------------------------


@case(T(3), graphs=1, breaks=0)
def try_finally_normal_path(x):
    try:
        y = x + 1
    finally:
        y = y * 2
    return y


@case(T(3), graphs=1, breaks=0)
def return_inside_try_runs_finally(x):
    out = [x]
    try:
        return x * 2, out
    finally:
        out.append(x + 1)


@case(T(3), graphs=1, breaks=0)
def break_out_of_loop_through_finally(x):
    for i in range(5):
        try:
            if i == 2:
                break
            x = x + i
        finally:
            x = x * 2
    return x


@case(T(3), graphs=1, breaks=0)
def nested_try_normal_path(x):
    try:
        try:
            y = x.sin()
        except ValueError:
            y = x
        finally:
            y = y + 1
    except KeyError:
        y = x
    return y


# ---- exceptions raised and caught in the trace ------------------------------------------------


@case(T(3), graphs=1, breaks=0)
def raise_and_catch_in_frame(x):
    try:
        raise ValueError("inner")
    except ValueError as e:
        return x * len(str(e)), e.args


@case(T(3), graphs=1, breaks=0)
def key_error_from_callee_caught(x):
    try:
        return _missing_key({"a": x})
    except KeyError as e:
        return x - 1, e.args


@case(T(3), graphs=1, breaks=0)
def tuple_of_classes_and_order(x):
    out = []
    for exc in (KeyError, IndexError, ValueError):
        try:
            try:
                raise exc("e")
            except (KeyError, IndexError):
                out.append(1)
                raise
        except LookupError:
            x = x + 1
        except ValueError:
            x = x * 2
    return x, out


@case(T(3), graphs=1, breaks=0)
def finally_runs_while_exception_propagates(x):
    log = []
    try:
        try:
            _raise_boom(x)
        finally:
            log.append("finally")
            x = x + 1
    except Boom:
        x = x * 3
    return x, log


@case(T(3), graphs=1, breaks=0)
def raise_from(x):
    try:
        try:
            {}["k"]
        except KeyError as e:
            raise ValueError("wrapped") from e
    except ValueError as e:
        return x + 1, type(e.__cause__).__name__


@case(T(3), graphs=1, breaks=0)
def stop_iteration_ends_loop(x):
    it = iter([1, 2, 3])
    while True:
        try:
            x = x + next(it)
        except StopIteration:
            break
    return x


# pytest rewrites the asserts of test modules; this one is compiled as Python writes it
exec(
    compile(
        "def assertion_caught(x):\n"
        "    try:\n"
        "        assert x.dim() == 2, 'not a matrix'\n"
        "    except AssertionError as e:\n"
        "        return x * 2, str(e)\n"
        "    return x + 1\n",
        __file__,
        "exec",
    )
)
case(T(3), graphs=1, breaks=0)(assertion_caught)  # noqa: F821


@case(T(3), graphs=1, breaks=0)
def error_inside_comprehension_caught(x):
    table = {"a": x, "b": x + 1}
    try:
        picked = [table[k] for k in ("a", "c", "b")]  # 3.12 inlines it, with its own handler
    except KeyError as e:
        picked = [table["b"], e.args[0]]
    return picked


@case(T(3), graphs=1, breaks=0)
def builtin_error_on_constants_caught(x):
    try:
        n = int("not a number")
    except ValueError:
        n = 4
    return x * n


class Config:
    scale = 2.0


@case(T(3), graphs=1, breaks=0)
def hasattr_and_getattr_default(x):
    c = Config()
    return x * getattr(c, "scale", 1.0) + hasattr(c, "missing") + getattr(c, "shift", 3.0)


# ---- with blocks ------------------------------------------------------------------------------


class Recorder:
    """A context manager in Python: the trace inlines __enter__ and __exit__."""

    def __init__(self, swallow):
        self.swallow = swallow
        self.log = []

    def __enter__(self):
        self.log.append("enter")
        return self

    def __exit__(self, exc_type, exc, tb):
        self.log.append(exc_type.__name__ if exc_type else "clean")
        return self.swallow


@case(T(3), graphs=1, breaks=0)
def python_context_manager_clean(x):
    r = Recorder(False)
    with r:
        y = x + 1
    return y, r.log


@case(T(3), graphs=1, breaks=0)
def python_context_manager_swallows(x):
    r = Recorder(True)
    with r:
        y = x + 1
        raise KeyError("swallowed")
    return y, r.log


@case(T(3, grad=True), graphs=1, breaks=0)
def grad_mode_restored_on_exception(x):
    with torch.no_grad():
        try:
            with torch.enable_grad():
                y = x * 2
                raise RuntimeError("leave the block")
        except RuntimeError:
            z = y + 1
    return z, torch.is_grad_enabled()


# ---- exceptions that leave the graph ---------------------------------------------------------


@case(T(3))
def uncaught_after_finally(x):
    log = []
    try:
        y = x + 1
        raise Boom("out")
    finally:
        log.append(y)


@case(T(3), graphs=2, breaks=1)
def real_exception_in_try_body(x):
    try:
        y = x + 1
        json.loads("{not json")  # library code: a graph break that raises for real
    except ValueError:
        y = y * 3
    return y + 1


@case(T(3), graphs=2, breaks=1)
def handler_that_breaks(x):
    try:
        y = x + 1
        raise KeyError("k")
    except KeyError:
        seen = sys.exc_info()[0].__name__  # runs in Python, inside the handler
        y = y * 5
    return y + 1, seen


@case(T(3), graphs=1, breaks=1)
def exception_context_chained(x):
    try:
        try:
            y = x + 1
            json.loads("{")
        except ValueError:
            raise KeyError("during handling")  # noqa: B904 (the implicit __context__ is tested)
    except KeyError as e:
        return y, type(e.__context__).__name__


@case(T(3))
def finally_then_uncaught_in_callee(x):
    return _raise_boom(x + 1)


@pytest.mark.parametrize("fn,factories,expect", case)
def test_exceptions(fn, factories, expect):
    check(fn, *factories, **expect)


# ---- the real frame's handlers -----------------------------------------------------------------


def test_graph_error_inside_handlers_reruns_eagerly():
    """An index out of range is only found when the graph runs: inside a try block whose
    handler catches it, the frame reruns eagerly so the handler runs as in eager."""
    emb = torch.nn.Embedding(5, 3)

    def f(idx):
        try:
            return emb(idx) * 2
        except IndexError:
            return torch.zeros(3)

    cf = compiler.compile(f, backend="eager")
    good = torch.tensor([1, 2])
    torch.testing.assert_close(cf(good), f(good))
    torch.testing.assert_close(cf(torch.tensor([9])), torch.zeros(3))


def test_graph_error_without_handlers_propagates():
    emb = torch.nn.Embedding(5, 3)

    def f(idx):
        return emb(idx) * 2

    cf = compiler.compile(f, backend="eager")
    cf(torch.tensor([1]))
    with pytest.raises(IndexError):
        cf(torch.tensor([9]))


def test_reraised_exception_points_at_user_line():
    def f(x):
        try:
            y = x + 1
            json.loads("{")
        finally:
            y = None
        return y

    with pytest.raises(ValueError) as info:
        compiler.compile(f, backend="eager")(torch.ones(2))
    lines = [frame.line for frame in traceback.extract_tb(info.value.__traceback__)]
    assert any('json.loads("{")' in (line or "") for line in lines), lines


def test_handler_sees_the_exception_in_sys_exc_info():
    seen = []

    def f(x):
        try:
            y = x + 1
            json.loads("{")
        except ValueError:
            seen.append(sys.exc_info()[1])
            y = x
        return y

    compiler.compile(f, backend="eager")(torch.ones(2))
    assert isinstance(seen[0], json.JSONDecodeError)
    assert sys.exc_info() == (None, None, None)


def test_keyword_names_of_a_breaking_call_are_kept(capsys):
    def f(x):
        y = x + 1
        print("a", "b", sep="-")
        return y

    compiler.compile(f, backend="eager")(torch.ones(2))
    assert capsys.readouterr().out == "a-b\n"
