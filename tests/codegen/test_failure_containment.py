"""Failure containment: an internal error at any stage of the compiler makes that frame (or
graph) run eagerly with one clear warning and a record in the inspector; fullgraph=True and
COMPILER_STRICT=1 raise it instead. User errors surface as eager raises them. An interrupt
(KeyboardInterrupt) during a compile is never taken for an internal error: it propagates,
leaves no half-written cache entry, and the next call compiles cleanly.

tests/jupyter/test_interrupts.py checks the same interrupt through a real IPython shell;
tests/runtime/test_containment_gpu.py injects the same failures on CUDA.
"""

from __future__ import annotations

import os
import stat
import traceback
import uuid
import warnings
from collections.abc import Callable

import pytest
import torch

import compiler
from compiler.backends import inductor as compile_fx_module
from compiler.codegen import cpp
from compiler.records import CompilerWarning
from compiler.runtime import cpp_build, triton_launch
from compiler.tracer import evaluator


def f(x, y):
    return torch.sin(x) * y + 1


def inputs() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(4, 8), torch.randn(8)


@pytest.fixture(autouse=True)
def fresh(monkeypatch, tmp_path):
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("COMPILER_STRICT", raising=False)
    monkeypatch.delenv("COMPILER_CPU_EMITTER", raising=False)
    compiler.reset()
    yield
    compiler.reset()


# ---- injecting an internal error at each stage --------------------------------------------


def _raiser(marker: str, exc: type[BaseException] = RuntimeError) -> Callable:
    def broken(*args, **kwargs):
        raise exc(f"injected failure {marker}")

    return broken


def _failing_compiler(tmp_path, marker: str) -> str:
    """A C++ compiler command that answers --version and rejects every source."""
    script = tmp_path / f"cxx-{marker}"
    script.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "--version" ]; then echo "fake c++ 1.0"; exit 0; fi\n'
        f'echo "error: injected failure {marker}" >&2\nexit 1\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def inject(stage: str, monkeypatch, tmp_path, marker: str, exc=RuntimeError) -> None:
    if stage in ("triton compile", "triton launch"):
        monkeypatch.setenv("COMPILER_CPU_EMITTER", "triton")
    if stage == "tracing":
        monkeypatch.setattr(evaluator, "_trace", _raiser(marker, exc))
    elif stage == "aot":
        monkeypatch.setattr(compile_fx_module, "trace_forward", _raiser(marker, exc))
    elif stage == "lowering":
        monkeypatch.setattr(compile_fx_module, "lower", _raiser(marker, exc))
    elif stage == "scheduling":
        monkeypatch.setattr(compile_fx_module, "fuse", _raiser(marker, exc))
    elif stage == "codegen":
        monkeypatch.setattr(compile_fx_module, "wrapper_source", _raiser(marker, exc))
    elif stage == "wrapper":
        monkeypatch.setattr(compile_fx_module, "load_module", _raiser(marker, exc))
    elif stage == "cpp compile":
        if exc is not RuntimeError:
            monkeypatch.setattr(cpp_build.subprocess, "run", _raiser(marker, exc))
        else:
            monkeypatch.setenv("CXX", _failing_compiler(tmp_path, marker))
    elif stage == "cpp launch":
        monkeypatch.setattr(cpp.CppKernel, "__call__", _raiser(marker, exc))
    elif stage == "triton compile":
        monkeypatch.setattr(triton_launch, "load_module", _raiser(marker, exc))
    elif stage == "triton launch":
        monkeypatch.setattr(triton_launch.TritonKernel, "run", _raiser(marker, exc))
    else:
        raise AssertionError(stage)


STAGES = [
    "tracing",
    "aot",
    "lowering",
    "scheduling",
    "codegen",
    "wrapper",
    "cpp compile",
    "cpp launch",
    "triton compile",
    "triton launch",
]


def recorded(compiled) -> list[str]:
    report = compiler.inspect(compiled)
    return [g.fallback for g in report.graphs if g.fallback] + [
        w for fn in report.functions for w in fn.warnings
    ]


@pytest.mark.parametrize("stage", STAGES)
def test_internal_error_runs_eagerly_with_one_warning_and_a_record(stage, monkeypatch, tmp_path):
    marker = f"{stage.replace(' ', '_')}-{uuid.uuid4().hex[:8]}"
    inject(stage, monkeypatch, tmp_path, marker)
    compiled = compiler.compile(f)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):  # later calls of the same kind: eager, no second warning
            x, y = inputs()
            torch.testing.assert_close(compiled(x, y), f(x, y))
    ours = [w for w in caught if issubclass(w.category, (CompilerWarning, RuntimeWarning))]
    assert len(ours) == 1, [str(w.message) for w in ours]
    assert marker in str(ours[0].message)
    assert "eagerly" in str(ours[0].message) or stage == "cpp compile"  # the compiler's output
    notes = recorded(compiled)
    assert len(notes) == 1 and marker in notes[0], notes


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("how", ["fullgraph", "COMPILER_STRICT"])
def test_internal_error_raises_with_fullgraph_or_strict(stage, how, monkeypatch, tmp_path):
    marker = f"{stage.replace(' ', '_')}-{how}-{uuid.uuid4().hex[:8]}"
    inject(stage, monkeypatch, tmp_path, marker)
    if how == "COMPILER_STRICT":
        monkeypatch.setenv("COMPILER_STRICT", "1")
    compiled = compiler.compile(f, fullgraph=how == "fullgraph")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Exception, match="injected") as info:
            compiled(*inputs())
    assert marker in str(info.value) or marker in getattr(info.value, "stderr", "")


# ---- a failure inside a training step ---------------------------------------------------------


def _mlp(device: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to(
        device
    )


def _train_step(model: torch.nn.Module, opt: torch.optim.Optimizer) -> Callable:
    """Forward, loss, backward and the optimizer's step in one function."""

    def train(x, y):
        opt.zero_grad(True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    return train


def _fail_in(part: str, marker: str, monkeypatch) -> None:
    """Lowering fails for graphs of one kind only: a training graph's "forward" or
    "backward" half (the backward compiles inside loss.backward()), or the optimizer step's
    graph ("step": compiler/optim's update, the one graph here that is no training half)."""
    real = compile_fx_module._Compiled._lower

    def lower(self, aot, emitter, device):
        if self.part == part or (part == "step" and not self.part):
            raise RuntimeError(f"injected failure {marker}")
        return real(self, aot, emitter, device)

    monkeypatch.setattr(compile_fx_module._Compiled, "_lower", lower)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("part", ["forward", "backward", "step"])
def test_internal_error_in_a_training_step_runs_it_eagerly_with_one_warning(
    part, device, monkeypatch
):
    marker = f"train-{part}-{uuid.uuid4().hex[:8]}"
    _fail_in(part, marker, monkeypatch)
    model, eager_model = _mlp(device), _mlp(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    eager_opt = torch.optim.AdamW(eager_model.parameters(), lr=1e-2)
    compiled = compiler.compile(_train_step(model, opt))
    eager = _train_step(eager_model, eager_opt)
    g = torch.Generator().manual_seed(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            x = torch.randn(6, 8, generator=g).to(device)
            y = torch.randint(4, (6,), generator=g).to(device)
            torch.testing.assert_close(compiled(x, y), eager(x, y))
    for p, q in zip(model.parameters(), eager_model.parameters()):
        torch.testing.assert_close(p, q)
        torch.testing.assert_close(p.grad, q.grad)
    ours = [w for w in caught if issubclass(w.category, (CompilerWarning, RuntimeWarning))]
    assert len(ours) == 1 and marker in str(ours[0].message), [str(w.message) for w in ours]
    notes = recorded(compiled)
    assert len(notes) == 1 and marker in notes[0], notes


# ---- user errors ----------------------------------------------------------------------------

EVIL = "<script>alert('x\"y')</script>"


def index_rows(x, i):
    y = x * 2
    return y[i] + 1


def test_a_user_error_in_a_compiled_graph_reads_as_eager():
    """The index is out of range at run time: the compiled kernel's error is replaced by
    eager's (type and message), raised from the user's line, on the first call and later."""
    compiled = compiler.compile(index_rows)
    x = torch.randn(5, 3)
    good, bad = torch.tensor([0, 4]), torch.tensor([0, 9])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a user error is not an internal failure: no warning
        for i in (bad, good, bad):
            try:
                index_rows(x, i)
                expected = None
            except IndexError as e:
                expected = e
            if expected is None:
                torch.testing.assert_close(compiled(x, i), index_rows(x, i))
                continue
            with pytest.raises(IndexError) as info:
                compiled(x, i)
            assert str(info.value) == str(expected)
            frames = traceback.extract_tb(info.value.__traceback__)
            assert any(fr.filename == __file__ and fr.line == "return y[i] + 1" for fr in frames), (
                "".join(traceback.format_list(frames))
            )
    assert not recorded(compiled)
    assert any(k.language == "cpp" for k in compiler.inspect(compiled).kernels)


def test_a_user_exception_keeps_its_type_and_message():
    class Custom(ValueError):
        pass

    def g(x):
        if x.shape[0] > 2:
            raise Custom(f"bad {EVIL}")
        return x

    compiled = compiler.compile(g)
    with pytest.raises(Custom) as info:
        compiled(torch.randn(3))
    assert str(info.value) == f"bad {EVIL}"
    frames = traceback.extract_tb(info.value.__traceback__)
    assert any(fr.line and "raise Custom" in fr.line for fr in frames)
    torch.testing.assert_close(compiled(torch.ones(2)), torch.ones(2))


def test_a_shape_error_is_raised_as_eager_without_a_logged_traceback(capfd):
    """Found while testing user errors: the fake-tensor run logged the whole meta-function
    traceback to stderr (30 lines in a notebook) before the error itself."""

    def g(x, w):
        return x @ w

    x, w = torch.randn(3, 4), torch.randn(5, 5)
    with pytest.raises(RuntimeError) as expected:
        g(x, w)
    with pytest.raises(RuntimeError) as info:
        compiler.compile(g)(x, w)
    assert str(info.value) == str(expected.value)
    assert "failed while attempting to run meta" not in capfd.readouterr().err


# ---- interrupts -------------------------------------------------------------------------------


def _cache_files(root) -> list[str]:
    return sorted(
        os.path.relpath(os.path.join(d, n), root) for d, _, names in os.walk(root) for n in names
    )


@pytest.mark.parametrize("stage", ["tracing", "lowering", "cpp compile", "wrapper"])
def test_keyboard_interrupt_during_a_compile_propagates_and_leaves_caches_clean(
    stage, monkeypatch, tmp_path
):
    marker = f"{stage.replace(' ', '_')}-{uuid.uuid4().hex[:8]}"
    cache = tmp_path / "cache"
    inject(stage, monkeypatch, tmp_path, marker, exc=KeyboardInterrupt)
    compiled = compiler.compile(f)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(KeyboardInterrupt):
            compiled(*inputs())
    assert not [w for w in caught if issubclass(w.category, CompilerWarning)]
    assert not recorded(compiled), "an interrupt is not recorded as a compiler failure"
    assert not [p for p in _cache_files(cache) if p.endswith(".tmp")], _cache_files(cache)
    assert not compiler.inspect(compiled).entries, "no entry from the interrupted compile"
    monkeypatch.undo()
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(cache))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompilerWarning)
        x, y = inputs()
        torch.testing.assert_close(compiled(x, y), f(x, y))
    report = compiler.inspect(compiled)
    assert report.kernels and not recorded(compiled)
    assert not [p for p in _cache_files(cache) if p.endswith(".tmp")]
