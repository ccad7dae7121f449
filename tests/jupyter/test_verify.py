"""Verify mode: `compiler.compile(fn, verify=True)` and `%%compile --verify` check every call
against eager (float64 and the inputs' dtype) and name the first FX node that diverges. The
mismatches here are real: a lowering is made wrong for the test (sin computed as cos)."""

from __future__ import annotations

import warnings

import pytest
import torch

import compiler
from compiler import verify
from compiler.lowering import pointwise
from tests.jupyter.conftest import run

aten = torch.ops.aten


@pytest.fixture
def wrong_sin(monkeypatch: pytest.MonkeyPatch) -> None:
    """The code generator's sin computes cos: a wrong lowering, as a bug would be."""
    monkeypatch.setitem(pointwise.UNARY, aten.sin, "cos")


def _call(fn, *args):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn(*args)
    return out, [w for w in caught if issubclass(w.category, compiler.VerificationWarning)]


def scaled_sin(x, y):
    a = x * 2
    b = torch.sin(a) + y
    return b.relu() * 3


def test_a_correct_compile_passes_and_is_counted() -> None:
    compiled = compiler.compile(scaled_sin, verify=True)
    x, y = torch.randn(16), torch.randn(16)
    out, found = _call(compiled, x, y)
    torch.testing.assert_close(out, scaled_sin(x, y))
    assert not found
    report = compiler.inspect(compiled)
    assert report.graphs[0].verified_runs == 1 and not report.mismatches


def wrong_sin_fn(x, y):
    a = x * 2
    b = torch.sin(a) + y  # the diverging line
    return b.relu() * 3


def test_a_wrong_lowering_is_named_with_its_node_and_line(wrong_sin) -> None:
    compiled = compiler.compile(wrong_sin_fn, verify=True)
    x, y = torch.randn(16), torch.randn(16)
    out, found = _call(compiled, x, y)
    assert not torch.allclose(out, wrong_sin_fn(x, y))  # the lowering really is wrong
    assert len(found) == 1
    message = str(found[0].message)
    assert "sin (torch.sin) at line" in message
    assert found[0].filename == __file__  # shown at the user's line
    assert found[0].lineno == wrong_sin_fn.__code__.co_firstlineno + 2
    (mismatch,) = compiler.inspect(compiled).mismatches
    assert mismatch.node == "sin" and mismatch.user_line.text.strip().startswith("b = torch.sin")
    assert mismatch.user_line.lineno == wrong_sin_fn.__code__.co_firstlineno + 2
    assert mismatch.compiled_rmse > 100 * mismatch.eager_rmse


def wrong_after_break(x):
    y = x.cos() * 2
    print("between graphs")
    z = torch.sin(y) - 1
    return z.exp()


def test_the_mismatch_is_found_in_the_graph_after_a_break(wrong_sin, capsys) -> None:
    compiled = compiler.compile(wrong_after_break, verify=True)
    _, found = _call(compiled, torch.randn(8))
    assert len(found) == 1 and found[0].lineno == wrong_after_break.__code__.co_firstlineno + 3
    report = compiler.inspect(compiled)
    assert [g.mismatch is not None for g in report.graphs] == [False, True]


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x)
        return torch.sin(h) * h


def test_a_module_is_verified_on_copies(wrong_sin) -> None:
    block = Block()
    before = {k: v.clone() for k, v in block.state_dict().items()}
    compiled = compiler.compile(block, verify=True)
    _, found = _call(compiled, torch.randn(3, 4))
    assert len(found) == 1 and "sin (torch.sin)" in str(found[0].message)
    assert found[0].lineno == Block.forward.__code__.co_firstlineno + 2
    for k, v in block.state_dict().items():
        assert torch.equal(v, before[k]) and v.dtype == torch.float32  # the float64 run copied


def test_the_judgement_is_rmse_against_float64() -> None:
    """A result further from eager than allclose allows still passes when it is as close to
    float64 as eager is: a fused kernel computing in float32 is not wrong."""
    ref64 = torch.linspace(0, 1, 1000, dtype=torch.float64)
    eager = (ref64 + 1e-3 * torch.randn(1000, dtype=torch.float64)).half()
    closer = (ref64 + 1e-4 * torch.randn(1000, dtype=torch.float64)).half()
    assert not torch.allclose(closer, eager, rtol=1e-3, atol=1e-3)
    assert verify.judge(closer, eager, ref64) is None
    far = (ref64 + 1e-1 * torch.randn(1000, dtype=torch.float64)).half()
    verdict = verify.judge(far, eager, ref64)
    assert verdict is not None and verdict.compiled_rmse > 2 * verdict.eager_rmse


def test_off_costs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args, **kwargs):
        raise AssertionError("verify mode ran while off")

    monkeypatch.setattr(verify, "run_verified", fail)
    monkeypatch.setattr(verify, "checking_backend", fail)
    compiled = compiler.compile(scaled_sin, backend="eager")
    torch.testing.assert_close(
        compiled(torch.ones(2), torch.ones(2)), scaled_sin(torch.ones(2), torch.ones(2))
    )


def test_compile_cell_verify_marks_the_line_red(ipython, wrong_sin) -> None:
    run(ipython, "import torch")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = run(
            ipython,
            "%%compile --verify\n"
            "def f(x):\n"
            "    y = x + 1\n"
            "    return torch.sin(y) * 2\n"
            "f(torch.randn(8))\n",
        )
    assert out.result.success, out.stdout + out.stderr
    (found,) = [w for w in caught if issubclass(w.category, compiler.VerificationWarning)]
    assert "sin (torch.sin) at line 3" in str(found.message)
    assert found.filename.startswith("<ipython-input-") and found.lineno == 3  # the user's line
    twin = out.twins()[0]
    row = twin.index('class="jc-line jc-mismatch-line" data-line="3"')
    assert 'class="jc-mismatch"' in twin[row:] and "sin (torch.sin)" in twin[row:]
    assert "verify" in out.html()  # the subtitle names the mode


def _sin_as_cos_backend(gm, example_inputs):
    """A user backend with a bug that rewrites the graph it is handed."""
    for node in gm.graph.nodes:
        if node.target is torch.sin:
            node.target = torch.cos
    gm.recompile()
    return gm.forward


def test_a_backend_that_rewrites_its_graph_is_judged_against_the_traced_graph() -> None:
    compiled = compiler.compile(wrong_sin_fn, backend=_sin_as_cos_backend, verify=True)
    _, found = _call(compiled, torch.randn(16), torch.randn(16))
    assert len(found) == 1
    (mismatch,) = compiler.inspect(compiled).mismatches
    assert mismatch.node == "sin"
