"""Outputs that are inputs or views of inputs (or of other outputs) come back as eager
returns them (compiler/aot/outputs.py): `return x.add_(y)` is `x` itself, a view of an input
written in place shares the input's memory with eager's offset, size and strides, and its
`_base` is eager's. Differential: each case runs eagerly and compiled, on copies of the same
random inputs, and compares the values, the inputs after the call, and how every output
leaf aliases the inputs and the other outputs.

Four ways in: compiler.compile with the default backend (the tracer's graphs, whose fake
values describe the outputs; with dynamic=True, compiled per size), compile_fx on a symbolic_trace graph (no recorded values: the
aot trace's own), and the aot_eager backend."""

from __future__ import annotations

import pytest
import torch
from torch.utils._pytree import tree_flatten

import compiler
from compiler.backends.inductor import compile_fx
from compiler.records import GraphRecord, compiling_graph


@pytest.fixture(autouse=True)
def strict(monkeypatch, tmp_path):
    monkeypatch.setenv("COMPILER_STRICT", "1")  # an eager fallback would alias as eager does
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(tmp_path / "cache"))


def _via_tracer(fn):
    return compiler.compile(fn)


def _via_tracer_dynamic(fn):
    # symbolic sizes: compiled per size (backends/per_size.py), described by the aot trace
    return compiler.compile(fn, dynamic=True)


def _via_aot_eager(fn):
    return compiler.compile(fn, backend="aot_eager")


def _via_compile_fx(fn):
    compiled = {}

    def run(*args):
        if not compiled:
            gm = torch.fx.symbolic_trace(fn)
            record = GraphRecord(gm, gm.code, len(gm.graph.nodes))
            with compiling_graph(record):
                compiled["fn"] = compile_fx(gm, [a.clone() for a in args])
            assert record.fallback is None, record.fallback
        return compiled["fn"](*args)

    return run


PATHS = {
    "tracer": _via_tracer,
    "tracer_dynamic": _via_tracer_dynamic,
    "compile_fx": _via_compile_fx,
    "aot_eager": _via_aot_eager,
}


def _relation(t, inputs, earlier) -> tuple:
    """How output leaf `t` aliases `inputs` and the `earlier` output leaves."""
    if not isinstance(t, torch.Tensor):
        return ("value", t)
    layout = (tuple(t.shape), t.stride())
    for i, a in enumerate(inputs):
        if t is a:
            return ("input", i)
    for i, a in enumerate(inputs):
        if t.untyped_storage().data_ptr() == a.untyped_storage().data_ptr():
            base = "input's base" if t._base is not None and t._base is a._base else None
            base = (
                f"input {next(k for k, b in enumerate(inputs) if b is t._base)}"
                if t._base is not None and any(t._base is b for b in inputs)
                else base
            )
            offset = t.storage_offset() - a.storage_offset()
            return ("view of input", i, offset, layout, base)
    for j, e in enumerate(earlier):
        if t is e:
            return ("output", j)
        if isinstance(e, torch.Tensor) and t.untyped_storage().data_ptr() == (
            e.untyped_storage().data_ptr()
        ):
            return ("view of output", j, t.storage_offset() - e.storage_offset(), layout)
    return ("fresh", layout)


def _relations(out, inputs) -> list[tuple]:
    leaves = tree_flatten(out)[0]
    return [_relation(t, inputs, leaves[:k]) for k, t in enumerate(leaves)]


def _check(path: str, fn, *inputs: torch.Tensor, make=None) -> None:
    """Eager and compiled `fn` on copies of `inputs` (made by `make` from them, for inputs
    that are views): values, inputs after the call and aliasing agree; twice, so the second
    call runs the cached compiled code."""
    make = make or (lambda *ts: [t.clone() for t in ts])
    compiled = PATHS[path](fn)
    for _ in range(2):
        eager_in, compiled_in = make(*inputs), make(*inputs)
        expected = fn(*eager_in)
        got = compiled(*compiled_in)
        assert type(got) is type(expected)
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(compiled_in, eager_in)
        assert _relations(got, compiled_in) == _relations(expected, eager_in)


def _add_(x, y):
    return x.add_(y)


def _view_mul_(x):
    v = x[1:]
    v.mul_(2)
    return v


def _chain(x):
    return x.mul_(2).add_(1).t()


def _returned_and_read(x, y):
    z = x.add_(y)
    return z, x + 1


def _views_of_unwritten_input(x):
    return x[1:], x.t(), x.view(-1), x.view(x.shape)


def _output_and_its_view(x):
    y = x + 1
    return y, y[1:], y


def _written_through_a_view(x):
    x[:, 0].zero_()
    return x.diagonal()


def _column_view_written(x, y):
    c = x[:, 1]
    c.add_(y[:, 1])
    return c, y


CASES = {
    "add_": (_add_, lambda: (torch.randn(4, 3), torch.randn(4, 3))),
    "view_mul_": (_view_mul_, lambda: (torch.randn(5, 3),)),
    "chain": (_chain, lambda: (torch.randn(4, 3),)),
    "returned_and_read": (_returned_and_read, lambda: (torch.randn(6), torch.randn(6))),
    "views_of_unwritten_input": (_views_of_unwritten_input, lambda: (torch.randn(4, 3),)),
    "output_and_its_view": (_output_and_its_view, lambda: (torch.randn(4, 3),)),
    "written_through_a_view": (_written_through_a_view, lambda: (torch.randn(4, 4),)),
    "column_view_written": (_column_view_written, lambda: (torch.randn(4, 3), torch.randn(4, 3))),
    # the structure too: a torch.return_types structseq (compile_fx once returned a tuple)
    "structseq": (lambda x: torch.topk(x, 2), lambda: (torch.randn(4, 3),)),
    "structseq_of_input_view": (lambda x: torch.aminmax(x.t()[0]), lambda: (torch.randn(4, 3),)),
    # copies of an input are new memory, though a clone lowers to the input's own buffer
    "clone": (lambda x: x.clone(), lambda: (torch.randn(4, 3),)),
    "copies_beside_views": (
        lambda x, y: (x.contiguous().clone(), x[:].clone(), y.clone(), y[1:], y.detach().clone()),
        lambda: (torch.randn(4, 3), torch.randn(4, 3)),
    ),
    "contiguous_copy_of_a_transpose": (lambda x: x.t().contiguous(), lambda: (torch.randn(4, 3),)),
}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", CASES)
def test_outputs_alias_as_in_eager(path, case):
    fn, inputs = CASES[case]
    _check(path, fn, *inputs())


@pytest.mark.parametrize("path", PATHS)
def test_the_example_of_the_issue(path):
    x, y = torch.randn(3), torch.randn(3)
    r = PATHS[path](_add_)(x, y)
    assert r is x
    x = torch.randn(4)
    r = PATHS[path](_view_mul_)(x)
    assert r._base is x and r.data_ptr() == x.data_ptr() + 4 and r.shape == (3,)


@pytest.mark.parametrize("path", PATHS)
def test_inputs_that_are_views_themselves(path):
    # an input with a storage offset and strides of its own: the view returned is made on
    # the real input, its `_base` the input's base as in eager
    def make(base):
        b = base.clone()
        return [b[1:, ::2]]

    _check(path, _view_mul_, torch.randn(6, 8), make=make)
    _check(path, lambda x: x.add_(1), torch.randn(6, 8), make=make)


@pytest.mark.parametrize("path", ["tracer", "aot_eager"])
def test_training_graphs(path):
    # a graph that needs autograd (w requires grad) returning an input written in place and
    # a view of it: the joint graph's outputs are described the same way
    def fn(x, w):
        x.add_(1)
        return x, x[1:], (x * w).sum()

    w = torch.randn(4, 3, requires_grad=True)
    x = torch.randn(4, 3)
    xe, xc = x.clone(), x.clone()
    expected = fn(xe, w)
    got = PATHS[path](fn)(xc, w)
    torch.testing.assert_close(got, expected)
    assert got[0] is xc and got[1]._base is xc
    assert got[1].data_ptr() == xc.data_ptr() + 3 * 4
    got[2].backward()
    grad = w.grad.clone()
    w.grad = None
    expected[2].backward()
    torch.testing.assert_close(grad, w.grad)


@pytest.mark.parametrize("path", ["tracer", "aot_eager"])
def test_training_graphs_return_clones_of_inputs_in_new_memory(path):
    def fn(x, w):
        return x.clone(), w.clone(), (x * w).sum()

    w = torch.randn(4, 3, requires_grad=True)
    x = torch.randn(4, 3)
    a, b, loss = PATHS[path](fn)(x, w)
    assert a.data_ptr() != x.data_ptr() and b.data_ptr() != w.data_ptr()
    a.add_(1)  # the caller's writes to a copy leave the inputs as they were
    with torch.no_grad():
        b.add_(1)
    torch.testing.assert_close(a, x + 1)
    torch.testing.assert_close(b, w.detach() + 1)
    assert b.requires_grad and b.grad_fn is not None


def test_a_wrong_description_runs_eagerly_instead(monkeypatch):
    # the first call checks every recreated view against the value the graph computed: a
    # description that does not fit the real tensors never returns wrong values
    import compiler.aot.trace as trace

    real = trace.describe_outputs

    def shifted(*args):
        outputs = real(*args)
        for o in outputs.leaves:
            o.offset -= 1  # still inside the input: as_strided accepts it
        return outputs

    monkeypatch.setattr(trace, "describe_outputs", shifted)
    monkeypatch.setenv("COMPILER_STRICT", "0")
    x = torch.randn(5, 3)
    xe, xc = x.clone(), x.clone()
    expected = _view_mul_(xe)
    with pytest.warns(compiler.CompilerWarning, match="differs from the value"):
        got = _via_compile_fx(_view_mul_)(xc)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(xc, xe)
    assert got._base is xc


@pytest.mark.gpu
@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
@pytest.mark.parametrize("case", ["add_", "view_mul_", "chain", "column_view_written"])
def test_outputs_alias_as_in_eager_on_the_gpu(case, mode):
    # Triton kernels, and CUDA graphs whose outputs live in the graph's own memory: the
    # aliases are still made on the real inputs after the replay
    fn, inputs = CASES[case]
    compiled = compiler.compile(fn, mode=mode)
    for _ in range(3):  # CUDA graphs record at a later call than the first
        args = [t.cuda() for t in inputs()]
        eager_in, compiled_in = [a.clone() for a in args], [a.clone() for a in args]
        expected, got = fn(*eager_in), compiled(*compiled_in)
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(compiled_in, eager_in)
        assert _relations(got, compiled_in) == _relations(expected, eager_in)
