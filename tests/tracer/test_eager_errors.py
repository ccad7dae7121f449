"""Errors eager raises from an op's inputs are raised by compiled code, on every backend: the
same exception type and message, and no input written where eager writes none. Before
compiler/tracer/eager_checks.py, an in-place op into an expanded view wrote 3 into every
element of its base, and `torch.zeros(0).max()` returned -inf."""

from __future__ import annotations

import traceback

import pytest
import torch

import compiler

BACKENDS = ["eager", "aot_eager", "inductor"]


def _overlap_add(base):
    y = base * 2
    base.expand(3, 4).add_(1)
    return y


def _overlap_input(x):
    x.mul_(2)
    return x.sum()


def _overlap_out(x):
    torch.add(x, 1, out=x.expand(3, 4))
    return x


def _partial_overlap(x):
    x[1:].add_(x[:-1])  # eager would read elements this op already wrote
    return x


def _partial_overlap_out(x):
    torch.sin(x[:-1], out=x[1:])
    return x


def _aliased_inputs(a, b):
    a.mul_(b)
    return a


def _empty_max(x):
    return x.sin().max()


def _empty_min_dim(x):
    return x.min(0)


def _empty_median_dim(x):
    return (x + 1).median(0)


def _empty_mode(x):
    return x.mode(0)


def _empty_argmax(x):
    return x.argmax()


def _empty_amax(x):
    return x.amax(0)


def _out_of_range(x, i):
    return x[i] * 2


def _gather_out_of_range(x, i):
    return torch.gather(x, 0, i) + 1


def _int_add_float(x):
    x.add_(1.5)
    return x


def _shapes(x, y):
    return x + y


def _index_add(x, i, src):
    return x.index_add(0, i, src) * 2


def _multinomial_out(p, out):
    torch.multinomial(p, 2, out=out)
    return out


def _softmax_backward(grad, output):
    return torch._softmax_backward_data(grad, output, 0, torch.float16) * 2


def _log_softmax_backward(grad, output):
    return torch._log_softmax_backward_data(grad, output, 0, torch.float32) + 1


def _softmax_output(dtype):
    return torch.softmax(torch.randn(5), 0).to(dtype)


# (name, function, argument factories): each raises in eager.
CASES = [
    ("overlap_add", _overlap_add, lambda: [torch.zeros(4)]),
    ("overlap_input", _overlap_input, lambda: [torch.ones(4).expand(3, 4)]),
    ("overlap_out", _overlap_out, lambda: [torch.ones(4)]),
    ("partial_overlap", _partial_overlap, lambda: [torch.arange(4.0)]),
    ("partial_overlap_out", _partial_overlap_out, lambda: [torch.arange(4.0)]),
    ("aliased_inputs", _aliased_inputs, lambda: (lambda x: [x[1:], x[:-1]])(torch.arange(4.0))),
    ("empty_max", _empty_max, lambda: [torch.zeros(0)]),
    ("empty_min_dim", _empty_min_dim, lambda: [torch.zeros(0, 3)]),
    ("empty_median_dim", _empty_median_dim, lambda: [torch.zeros(0, 3)]),
    ("empty_mode", _empty_mode, lambda: [torch.zeros(0, 3)]),
    ("empty_argmax", _empty_argmax, lambda: [torch.zeros(0, 3)]),
    ("empty_amax", _empty_amax, lambda: [torch.zeros(0, 3)]),
    ("out_of_range", _out_of_range, lambda: [torch.randn(4), torch.tensor([5])]),
    ("gather", _gather_out_of_range, lambda: [torch.randn(4), torch.tensor([-9])]),
    ("int_add_float", _int_add_float, lambda: [torch.arange(4)]),
    ("shapes", _shapes, lambda: [torch.randn(4), torch.randn(3)]),
    ("index_add", _index_add, lambda: [torch.randn(3, 2), torch.tensor([0, 2]), torch.randn(2)]),
    ("multinomial_out", _multinomial_out, lambda: [torch.rand(3), torch.zeros(2).double()]),
    # a float32 grad with a float16 output (found by the OpInfo run on CUDA)
    ("softmax_backward", _softmax_backward, lambda: [torch.randn(5), _softmax_output(torch.half)]),
    (
        "log_softmax_backward",
        _log_softmax_backward,
        lambda: [torch.randn(5), _softmax_output(torch.half)],
    ),
]


def _outcome(fn, args):
    try:
        fn(*args)
    except Exception as e:
        return type(e), str(e), traceback.extract_tb(e.__traceback__)
    raise AssertionError(f"{fn.__name__} returned; eager raises")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name,fn,make", CASES, ids=[c[0] for c in CASES])
def test_raises_as_eager(name, fn, make, backend):
    torch.manual_seed(0)
    eager_args = make()
    torch.manual_seed(0)
    compiled_args = make()
    e_type, e_msg, _ = _outcome(fn, eager_args)
    compiled = compiler.compile(fn, backend=backend)
    for _ in range(2):  # the first call traces, the second runs what the first left
        c_type, c_msg, frames = _outcome(compiled, compiled_args)
        assert (c_type, c_msg) == (e_type, e_msg)
        # the traceback ends in the user's function, at the line that raised
        assert fn.__code__.co_name in [f.name for f in frames], frames
        for e, c in zip(eager_args, compiled_args):
            torch.testing.assert_close(c, e)  # nothing written that eager did not write


def _same_memory_in_place(x):
    x.add_(x)  # the input is the written tensor itself: allowed
    x[1:].mul_(x[1:].clone())
    return x


def _fill_expanded(x):
    y = x + 1
    y.expand(3, 4).fill_(2.0)  # eager allows a single value written everywhere
    return y * x


def _max_of_nonempty_dim(x):
    return x.max(1).values + x.amax(1)


def _index_add_rows(x, i, src):
    return x.index_add(0, i, src) * 2 + torch.zeros(5).index_add(0, i, src[:, 0]).unsqueeze(1)


def test_softmax_backward_of_mixed_dtypes_is_eagers():
    """Mixed dtypes eager accepts run eagerly, with eager's result (on the CPU a float16
    grad and output with a float32 input_dtype give a float16 gradient)."""
    grad, output = torch.randn(5).half(), _softmax_output(torch.half)
    expected = _log_softmax_backward(grad, output)
    out = compiler.compile(_log_softmax_backward)(grad, output)
    assert out.dtype == expected.dtype
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize(
    "fn,make",
    [
        (_fill_expanded, lambda: [torch.randn(4)]),
        (_same_memory_in_place, lambda: [torch.randn(4)]),
        (_max_of_nonempty_dim, lambda: [torch.randn(0, 3)]),
        (_index_add_rows, lambda: [torch.randn(5, 2), torch.tensor([0, 4]), torch.randn(2, 2)]),
    ],
)
def test_allowed_cases_stay_one_graph(fn, make):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    args = make()
    expected = fn(*[a.clone() for a in args])
    torch.testing.assert_close(compiler.compile(fn, backend=backend)(*args), expected)
    assert len(graphs) == 1


def _dunder_writes(x, i, y):
    x.__setitem__(i, 3.0)  # returns None: was dropped from the graph with its write
    y.__iadd__(x)
    return x * 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_writes_through_dunder_methods_happen(backend):
    compiled = compiler.compile(_dunder_writes, backend=backend)
    for index in ([2], [0, 3]):
        args = [torch.zeros(4), torch.tensor(index), torch.ones(4)]
        copies = [a.clone() for a in args]
        torch.testing.assert_close(compiled(*copies), _dunder_writes(*args))
        for e, c in zip(args, copies):
            torch.testing.assert_close(c, e)
    e_type, e_msg, _ = _outcome(_dunder_writes, [torch.zeros(4), torch.tensor([-9]), torch.ones(4)])
    c_type, c_msg, _ = _outcome(compiled, [torch.zeros(4), torch.tensor([-9]), torch.ones(4)])
    assert (c_type, c_msg) == (e_type, e_msg)
