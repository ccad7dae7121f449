"""set_stance and compiler.config: as calls, context managers and decorators, each checked
against eager on fresh inputs, with the entries and graphs they leave asserted."""

import warnings

import pytest
import torch

import compiler

from .helpers import RecordingBackend, assert_same


@pytest.fixture(autouse=True)
def default_stance_and_config():
    before = compiler.config.settings()
    yield
    compiler.set_stance("default")
    compiler.config.patch(before).__enter__()


def scale(x, k):
    return torch.relu(x) * k + 1


def compiled_scale():
    backend = RecordingBackend()
    return compiler.compile(scale, backend=backend), backend


def entries(fn) -> int:
    return len(compiler.inspect(fn).entries)


# ---- stances ------------------------------------------------------------------------------


def test_force_eager_as_a_context_manager():
    compiled, backend = compiled_scale()
    x = torch.randn(4)
    with compiler.set_stance("force_eager"):
        assert_same(scale(x, 2.0), compiled(x, 2.0))
        assert backend.count == 0 and entries(compiled) == 0
    assert_same(scale(x, 2.0), compiled(x, 2.0))
    assert backend.count == 1


def test_force_eager_as_a_call_and_back():
    compiled, backend = compiled_scale()
    x = torch.randn(4)
    compiler.set_stance("force_eager")
    assert_same(scale(x, 2.0), compiled(x, 2.0))
    assert backend.count == 0
    compiler.set_stance("default")
    assert_same(scale(x, 2.0), compiled(x, 2.0))
    assert backend.count == 1


def test_force_eager_as_a_decorator_applies_only_during_calls():
    compiled, backend = compiled_scale()

    @compiler.set_stance("force_eager")
    def run(x):
        return compiled(x, 3.0)

    from compiler import controls

    assert controls.stance() == "default"  # decorating changed nothing
    x = torch.randn(4)
    assert_same(scale(x, 3.0), run(x))
    assert backend.count == 0
    assert controls.stance() == "default"
    assert_same(scale(x, 3.0), compiled(x, 3.0))
    assert backend.count == 1


def test_eager_on_recompile_uses_cached_entries_and_runs_the_rest_eagerly():
    compiled, backend = compiled_scale()
    x = torch.randn(4)
    assert_same(scale(x, 2.0), compiled(x, 2.0))
    with compiler.set_stance("eager_on_recompile"):
        for _ in range(2):
            x = torch.randn(4)
            assert_same(scale(x, 2.0), compiled(x, 2.0))  # cached
            assert_same(scale(x.double(), 2.0), compiled(x.double(), 2.0))  # would recompile
            assert_same(scale(x, 5.0), compiled(x, 5.0))  # would recompile
    assert backend.count == 1 and entries(compiled) == 1
    assert compiler.inspect(compiled).entries[0].hits == 3
    fn = compiler.inspect(compiled).functions[0]
    assert [c.kind for c in fn.controls] == ["stance", "stance"]
    assert "ran eagerly instead" in fn.controls[0].detail
    assert "dtype" in fn.controls[0].detail
    assert_same(scale(x, 5.0), compiled(x, 5.0))  # the default stance compiles again
    assert backend.count == 2


def test_fail_on_recompile_raises_naming_the_guard():
    compiled, backend = compiled_scale()
    x = torch.randn(4)
    compiled(x, 2.0)
    with compiler.set_stance("fail_on_recompile"):
        assert_same(scale(x, 2.0), compiled(torch.clone(x), 2.0))
        with pytest.raises(compiler.RecompileError, match=r"L\['k'\] == 2.0 \(got 7.0\)"):
            compiled(x, 7.0)
    assert backend.count == 1


def test_fail_on_recompile_lets_first_compiles_through():
    compiled, backend = compiled_scale()
    with compiler.set_stance("fail_on_recompile"):
        x = torch.randn(4)
        assert_same(scale(x, 2.0), compiled(x, 2.0))
    assert backend.count == 1


def test_unknown_stance():
    with pytest.raises(ValueError, match="eager_on_recompile"):
        compiler.set_stance("sometimes")


# ---- config -------------------------------------------------------------------------------


def test_recompiles_past_cache_size_limit_fall_back_to_eager_with_one_warning():
    compiled, backend = compiled_scale()
    x = torch.randn(4)
    # without automatic dynamic, a float argument that changes recompiles at every value
    with compiler.config.patch(cache_size_limit=2, automatic_dynamic_shapes=False):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for k in (0.5, 1.5, 2.5, 3.5, 4.5):
                x = torch.randn(4)
                assert_same(scale(x, k), compiled(x, k))
    assert backend.count == 2 and entries(compiled) == 2
    limit = [w for w in caught if issubclass(w.category, compiler.CompilerWarning)]
    assert len(limit) == 1
    message = str(limit[0].message)
    assert "config.cache_size_limit = 2" in message
    assert "L['k'] == 1.5 (got 2.5)" in message  # the guard that failed
    fn = compiler.inspect(compiled).functions[0]
    assert fn.warnings == [message]
    assert_same(scale(x, 0.5), compiled(x, 0.5))  # the function runs eagerly from now on
    assert backend.count == 2


def test_cache_size_limit_counts_each_entry_point_separately():
    def many_breaks(x):
        x = x + 1
        print(end="")  # a graph break: the next line is an entry point of its own
        x = x * 2
        print(end="")
        x = x - 3
        print(end="")
        return x.sin()

    backend = RecordingBackend()
    compiled = compiler.compile(many_breaks, backend=backend)
    with compiler.config.patch(cache_size_limit=1):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            x = torch.randn(3)
            assert_same(many_breaks(x), compiled(x))
    assert backend.count == 4 and entries(compiled) == 4


def test_patch_as_a_decorator_and_nested():
    @compiler.config.patch(cache_size_limit=3)
    def read():
        with compiler.config.patch({"verbose": True}):
            return compiler.config.cache_size_limit, compiler.config.verbose

    assert read() == (3, True)
    assert compiler.config.cache_size_limit == 8 and compiler.config.verbose is False


def test_patch_restores_after_an_exception():
    with pytest.raises(KeyError):
        with compiler.config.patch(cache_size_limit=1):
            raise KeyError
    assert compiler.config.cache_size_limit == 8


def test_patch_rejects_unknown_settings():
    with pytest.raises(AttributeError, match="cache_size_limit"):
        compiler.config.patch(cache_limit=3)


def failing_backend(gm, example_inputs):
    raise RuntimeError("backend exploded")


def test_suppress_errors_runs_failures_eagerly_by_default():
    compiled = compiler.compile(scale, backend=failing_backend)
    x = torch.randn(4)
    with pytest.warns(compiler.CompilerWarning, match="backend exploded"):
        assert_same(scale(x, 2.0), compiled(x, 2.0))


def test_suppress_errors_false_raises_compiler_failures():
    compiled = compiler.compile(scale, backend=failing_backend)
    with compiler.config.patch(suppress_errors=False):
        with pytest.raises(RuntimeError, match="backend exploded"):
            compiled(torch.randn(4), 2.0)


def test_suppress_errors_false_still_raises_user_errors_as_eager():
    def bad(x):
        return x @ x.T @ torch.ones(3)

    compiled = compiler.compile(bad, backend="eager")
    with compiler.config.patch(suppress_errors=False):
        with pytest.raises(RuntimeError) as compiled_error:
            compiled(torch.randn(2, 2))
    with pytest.raises(RuntimeError) as eager_error:
        bad(torch.randn(2, 2))
    assert str(compiled_error.value) == str(eager_error.value)


def test_verbose_prints_each_compile_and_recompile(capsys):
    compiled, _ = compiled_scale()
    with compiler.config.patch(verbose=True):
        compiled(torch.randn(4), 2.0)
        compiled(torch.randn(4), 3.0)
    err = capsys.readouterr().err
    assert "[compiler] compiled scale from line" in err
    assert "recompiled because: L['k'] == 2.0 (got 3.0)" in err
    compiled(torch.randn(4), 4.0)
    assert capsys.readouterr().err == ""
