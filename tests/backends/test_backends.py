"""Backends as values (issue 11): looked up by name, wrapped by user backends, composed.

Every test is differential: the compiled function against eager on fresh inputs, with the
graph count and the inspection records asserted, so a wrapped backend that silently ran the
graph eagerly would fail.
"""

from __future__ import annotations

import pytest
import torch

import compiler
from compiler.backends import current_options


@pytest.fixture(autouse=True)
def fresh():
    compiler.reset()
    torch.manual_seed(0)
    yield
    compiler.reset()


def sin_cos(x, y):
    return torch.sin(x) + torch.cos(y)


def bump(x):
    x.add_(1)  # an in-place update of an input: the backends must write it back
    return x * 2


class CountingBackend:
    """A user backend that counts graphs and hands them on to a registered backend."""

    def __init__(self, inner: str):
        self.inner = inner
        self.graphs: list[torch.fx.GraphModule] = []
        self.__name__ = f"counting_{inner}"

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return compiler.lookup_backend(self.inner)(gm, example_inputs)


def _check(fn, compiled, *makers):
    for _ in range(2):  # the second call reuses the compiled entry on fresh values
        args = [m() for m in makers]
        torch.testing.assert_close(compiled(*[a.clone() for a in args]), fn(*args))


def _inputs():
    return (lambda: torch.randn(4, 5), lambda: torch.randn(4, 5))


def test_wrapped_inductor_generates_kernels_recorded_in_inspect():
    backend = CountingBackend("inductor")
    compiled = compiler.compile(sin_cos, backend=backend)
    _check(sin_cos, compiled, *_inputs())
    assert len(backend.graphs) == 1
    report = compiler.inspect(compiled)
    assert report.backend == "counting_inductor"
    generated = [k for k in report.kernels if k.language in ("cpp", "triton")]
    assert len(generated) == 1, [k.name for k in report.kernels]
    assert {"sin", "cos", "add"} <= set(generated[0].fused_nodes)


@pytest.mark.parametrize("inner", ["eager", "aot_eager"])
def test_wrapped_eager_and_aot_eager(inner):
    backend = CountingBackend(inner)
    compiled = compiler.compile(sin_cos, backend=backend)
    _check(sin_cos, compiled, *_inputs())
    assert len(backend.graphs) == 1
    (graph,) = compiler.inspect(compiled).graphs
    assert graph.kernels == []  # neither generates code
    if inner == "aot_eager":
        assert "aten.sin" in graph.aot_graphs["forward"]


@pytest.mark.parametrize("name", ["eager", "aot_eager", "inductor"])
def test_input_mutation_is_written_back(name):
    x = torch.randn(6)
    expected_x = x.clone()
    expected = bump(expected_x)
    compiled = compiler.compile(bump, backend=CountingBackend(name))
    out = compiled(x)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(x, expected_x)


def test_backend_compiling_its_graph_again_gets_real_kernels():
    seen = []

    def nested(gm, example_inputs):
        seen.append(gm)
        return compiler.compile(gm)  # the default backend, on the graph it was handed

    compiled = compiler.compile(sin_cos, backend=nested)
    _check(sin_cos, compiled, *_inputs())
    assert len(seen) == 1
    (graph,) = compiler.inspect(compiled).graphs
    assert [k.language for k in graph.kernels] in (["cpp"], ["triton"])
    assert any("compiler.compile(gm" in n for n in graph.notes)


def test_wrapped_inductor_compiles_in_the_users_mode(monkeypatch):
    from compiler.backends import inductor as compile_fx_module

    modes = []
    real = compile_fx_module.compile_fx

    def spy(gm, example_inputs, mode=None, options=None, **kwargs):
        modes.append(mode)
        return real(gm, example_inputs, mode=mode, options=options, **kwargs)

    monkeypatch.setattr(compile_fx_module, "compile_fx", spy)
    observed = []

    def wrapper(gm, example_inputs):
        observed.append(current_options().mode)
        return compiler.lookup_backend("inductor")(gm, example_inputs)

    compiled = compiler.compile(sin_cos, backend=wrapper, mode="max-autotune")
    _check(sin_cos, compiled, *_inputs())
    assert observed == ["max-autotune"] and modes == ["max-autotune"]
    assert current_options().mode is None  # nothing leaks past the compile


@pytest.mark.parametrize(
    "options, mode",
    [
        ({"triton.cudagraphs": True}, "reduce-overhead"),
        ({"max_autotune": True}, "max-autotune"),
        ({"max_autotune": False}, None),
    ],
)
def test_inductor_options_compile_in_the_mode_they_name(monkeypatch, options, mode):
    from compiler.backends import inductor as compile_fx_module

    modes = []
    real = compile_fx_module.compile_fx

    def spy(gm, example_inputs, mode=None, options=None, **kwargs):
        modes.append((mode, options))
        return real(gm, example_inputs, mode=mode, options=options, **kwargs)

    monkeypatch.setattr(compile_fx_module, "compile_fx", spy)
    compiled = compiler.compile(sin_cos, options=options)
    _check(sin_cos, compiled, *_inputs())
    assert modes == [(mode, None)]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"options": {"bogus": 1}}, "unknown option 'bogus' for the inductor backend"),
        ({"options": {"epilogue_fusion": False}}, "unknown option 'epilogue_fusion'"),
        (
            {"options": {"max_autotune": True}, "mode": "reduce-overhead"},
            "pass mode or options, not both",
        ),
        (
            {"options": {"max_autotune": True, "triton.cudagraphs": True}},
            "pick different modes",
        ),
    ],
)
def test_inductor_options_it_cannot_honour_are_refused_by_name(kwargs, message):
    # silently ignoring an option a torch.compile user relied on would be a silent change
    with pytest.raises(ValueError, match=message):
        compiler.compile(sin_cos, **kwargs)


def test_a_user_backends_options_are_its_own():
    seen = []

    def backend(gm, example_inputs):
        seen.append(current_options().options)
        return gm.forward

    compiled = compiler.compile(sin_cos, backend=backend, options={"anything": 3})
    _check(sin_cos, compiled, *_inputs())
    assert seen == [{"anything": 3}]


def test_unknown_backend_lists_the_registered_ones():
    @compiler.register_backend(name="listed_in_the_error")
    def _mine(gm, example_inputs):
        return gm.forward

    with pytest.raises(ValueError) as info:
        compiler.lookup_backend("no_such_backend")
    message = str(info.value)
    assert "'no_such_backend'" in message
    for name in ("aot_eager", "cudagraphs", "eager", "inductor", "listed_in_the_error"):
        assert name in message
    with pytest.raises(ValueError, match="no_such_backend"):
        compiler.compile(sin_cos, backend="no_such_backend")


def test_register_backend_forms():
    def plain(gm, example_inputs):
        return gm.forward

    def called(gm, example_inputs):
        return gm.forward

    compiler.register_backend(plain)
    compiler.register_backend(called, name="called_with_name")

    @compiler.register_backend("by_positional_name")
    def _positional(gm, example_inputs):
        return gm.forward

    @compiler.register_backend
    def bare_decorator(gm, example_inputs):
        return gm.forward

    names = compiler.list_backends()
    for name in ("plain", "called_with_name", "by_positional_name", "bare_decorator"):
        assert name in names
        _check(sin_cos, compiler.compile(sin_cos, backend=name), *_inputs())
    with pytest.raises(TypeError, match="callable"):
        compiler.register_backend(name="not_callable")(42)


def test_cudagraphs_backend_without_cuda_says_so():
    compiled = compiler.compile(sin_cos, backend="cudagraphs")
    _check(sin_cos, compiled, *_inputs())
    (graph,) = compiler.inspect(compiled).graphs
    assert any("not all CUDA" in n for n in graph.notes)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cudagraphs_backend_replays_on_cuda():
    compiled = compiler.compile(sin_cos, backend="cudagraphs")
    for _ in range(3):
        x, y = torch.randn(64, device="cuda"), torch.randn(64, device="cuda")
        torch.testing.assert_close(compiled(x, y), sin_cos(x, y))
    (graph,) = compiler.inspect(compiled).graphs
    assert graph.notes == []
