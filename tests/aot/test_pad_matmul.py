"""compiler/aot/pad_matmul.py on CPU, the pass forced on (config.pad_matmuls=True) for matmuls
of any size: compiled against eager on fresh random inputs, with odd M, K, N, bmm, addmm with a
bias, 16-bit and float32, training gradients and an LM head of an odd vocabulary."""

from __future__ import annotations

import copy
import re

import pytest
import torch
import torch.nn.functional as F

import compiler
from compiler.aot import pad_matmul
from compiler.aot.trace import trace_forward
from tests.aot.helpers import train_and_compare, training_graphs

# matmul tolerances: the padded K may change the order cuBLAS / oneDNN sum in
TOL = {torch.float32: {"atol": 1e-4, "rtol": 1e-4}, torch.bfloat16: {"atol": 2e-2, "rtol": 2e-2}}


@pytest.fixture
def pad_all(monkeypatch):
    """The pass on, on CPU, for matmuls of every size."""
    monkeypatch.setattr(pad_matmul, "MIN_MACS", 0)
    with compiler.config.patch(pad_matmuls=True):
        yield


def _padded_notes(report) -> list[str]:
    return [n for g in report.graphs for n in g.notes if "zero-padded operands" in n]


def _check(fn, *inputs, dtype=torch.float32):
    """`fn` compiled against eager on `inputs`: values and strides; returns the notes of
    padded matmuls."""
    compiled = compiler.compile(fn)
    got, expected = compiled(*inputs), fn(*inputs)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, **TOL[dtype])
        assert g.stride() == e.stride()
    return _padded_notes(compiler.inspect(compiled))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m, k, n", [(13, 17, 19), (16, 17, 16), (13, 16, 16), (16, 16, 19)])
def test_mm_of_odd_sizes(pad_all, dtype, m, k, n):
    def fn(a, b):  # the operands and the result each made or read by a kernel
        return ((torch.relu(a) * 2) @ b.sin()).cos(), a @ b

    a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
    notes = _check(fn, a, b, dtype=dtype)
    assert len(notes) == 1 and "2 matmuls" in notes[0]


def test_aligned_sizes_are_left_alone(pad_all):
    notes = _check(lambda a, b: (a @ b,), torch.randn(16, 8), torch.randn(8, 4))
    assert notes == []


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_bmm_and_baddbmm(pad_all, dtype):
    def fn(c, a, b):
        return (
            torch.bmm(a, b),
            torch.baddbmm(c, a, b, beta=0.5, alpha=2.0),
            a @ b.transpose(1, 2).transpose(1, 2),
        )

    a, b = torch.randn(3, 9, 11, dtype=dtype), torch.randn(3, 11, 5, dtype=dtype)
    notes = _check(fn, torch.randn(3, 9, 5, dtype=dtype), a, b, dtype=dtype)
    assert "bmm 3 x (9x11 @ 11x5)" in notes[0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_addmm_with_bias(pad_all, dtype):
    def fn(x, w, bias, row):
        return F.linear(x, w, bias), torch.addmm(row, x, w.t(), beta=2.0, alpha=0.5)

    x, w = torch.randn(10, 7, dtype=dtype), torch.randn(21, 7, dtype=dtype)
    bias, row = torch.randn(21, dtype=dtype), torch.randn(10, 21, dtype=dtype)
    notes = _check(fn, x, w, bias, row, dtype=dtype)
    assert "addmm 10x7 @ 7x21" in notes[0] and "N 21->" in notes[0]


def test_under_autocast(pad_all):
    lin = torch.nn.Linear(12, 29)

    def fn(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return (lin(x).relu(),)

    notes = _check(fn, torch.randn(6, 12), dtype=torch.bfloat16)
    assert "bfloat16: M 6->8, K 12->16, N 29->32" in notes[0]


def test_a_result_read_by_its_strides_is_left_alone(pad_all):
    def fn(a, b):  # as_strided reads the memory of a dense result, not a padded buffer's
        return (torch.as_strided(a @ b, (6, 5), (17, 2)) * 2,)

    assert _check(fn, torch.randn(13, 7), torch.randn(7, 17)) == []


def test_note_says_what_was_padded(pad_all):
    compiled = compiler.compile(lambda a, b: a @ b)
    compiled(torch.randn(10, 3, dtype=torch.bfloat16), torch.randn(3, 16, dtype=torch.bfloat16))
    (graph,) = compiler.inspect(compiled).graphs
    assert _padded_notes(compiler.inspect(compiled)) == [
        "1 matmul of sizes that are not multiples of 16 bytes run on zero-padded operands, "
        "for cuBLAS's aligned kernels: mm 10x3 @ 3x16 bfloat16: M 10->16, K 3->8"
    ]
    assert "constant_pad_nd" in graph.aot_graphs["forward"]  # the graph that was lowered


def _traced():
    gm = torch.fx.symbolic_trace(lambda a, b: torch.mm(a, b) + 1)
    return trace_forward(gm, [torch.randn(9, 5), torch.randn(5, 7)])


@pytest.mark.parametrize("setting", [False, "auto"])
def test_off_and_auto_on_cpu_leave_graphs_unchanged(monkeypatch, setting):
    monkeypatch.setattr(pad_matmul, "MIN_MACS", 0)
    aot = _traced()
    code = aot.gm.code
    with compiler.config.patch(pad_matmuls=setting):
        assert pad_matmul.pad_matmuls(aot) is aot
    assert aot.gm.code == code


def test_forced_on_pads_a_copy_of_the_graph(pad_all):
    aot = _traced()
    code = aot.gm.code
    padded = pad_matmul.pad_matmuls(aot)
    assert "constant_pad_nd" in padded.gm.code and aot.gm.code == code
    out = padded.gm(a := torch.randn(9, 5), b := torch.randn(5, 7))
    torch.testing.assert_close(out[0] if isinstance(out, (tuple, list)) else out, a @ b + 1)


def test_small_matmuls_are_left_alone():
    with compiler.config.patch(pad_matmuls=True):
        aot = _traced()
        assert pad_matmul.pad_matmuls(aot) is aot  # 315 multiply-adds, under MIN_MACS


def test_a_failing_pass_leaves_the_graph_unpadded(pad_all, monkeypatch):
    monkeypatch.delenv("COMPILER_STRICT")

    def broken(self, *args):
        raise RuntimeError("injected")

    monkeypatch.setattr(pad_matmul._Rewriter, "rewrite", broken)
    compiled = compiler.compile(lambda a, b: a @ b)
    a, b = torch.randn(10, 3), torch.randn(3, 5)
    torch.testing.assert_close(compiled(a, b), a @ b)
    (graph,) = compiler.inspect(compiled).graphs
    assert "matmuls not padded (RuntimeError: injected)" in graph.notes
    assert graph.fallback is None and "constant_pad_nd" not in graph.aot_graphs["forward"]


def test_training_gradients(pad_all):
    model = torch.nn.Sequential(
        torch.nn.Linear(11, 27), torch.nn.GELU(), torch.nn.Linear(27, 5), torch.nn.Tanh()
    )
    report = train_and_compare(
        model,
        lambda: (torch.randn(13, 11), torch.randn(13, 5)),
        F.mse_loss,
        steps=2,
        atol=1e-4,
        rtol=1e-4,
    )
    (graph,) = training_graphs(report)
    notes = _padded_notes(report)
    assert any(n.startswith("forward graph:") for n in notes)
    assert any(n.startswith("backward graph:") for n in notes)
    assert "constant_pad_nd" in graph.aot_graphs["backward"]


VOCAB, WIDTH = 1001, 24


class LMHead(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.mix = torch.nn.Linear(WIDTH, WIDTH)
        self.head = torch.nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, ids):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = self.head(torch.relu(self.mix(self.embed(ids))))
        return logits


def _lm_loss(logits, ids):
    return F.cross_entropy(logits.float()[:, :-1].reshape(-1, VOCAB), ids[:, 1:].reshape(-1))


def _lm_step(model, ids):
    logits = model(ids)
    loss = _lm_loss(logits, ids)
    loss.backward()
    return loss, logits


def _lm_run(setting: bool, grad_tol: float) -> tuple[int, str, list[torch.Tensor]]:
    """One compiled forward+backward against eager's, from seed 0 (gradients within
    `grad_tol`); the partition's saved bytes, the notes of padded matmuls, the gradients."""
    compiler.reset()
    torch.manual_seed(0)
    model = LMHead()
    comp_model = copy.deepcopy(model)
    compiled = compiler.compile(_lm_step)
    ids = torch.randint(0, VOCAB, (3, 10))
    with compiler.config.patch(pad_matmuls=setting):
        got, got_logits = compiled(comp_model, ids)
    expected, logits = _lm_step(model, ids)
    torch.testing.assert_close(got, expected, atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(got_logits, logits, atol=2e-2, rtol=2e-2)
    assert got_logits.stride() == logits.stride()
    for (name, p), q in zip(model.named_parameters(), comp_model.parameters()):
        torch.testing.assert_close(q.grad, p.grad, atol=grad_tol, rtol=2e-2, msg=name)
    report = compiler.inspect(compiled)
    (graph,) = training_graphs(report)
    grads = [p.grad for p in comp_model.parameters()]
    notes = " ".join(_padded_notes(report))
    if setting:  # the weight's bfloat16 copy made once, padded; the backward keeps a view of it
        assert re.search(
            rf"slice.Tensor\(constant_pad_nd\w*, 0, 0, {VOCAB}\)", graph.aot_graphs["forward"]
        )
    return graph.partition.saved_bytes, notes, grads


# Triton's kernels round bfloat16 once per kernel where eager rounds after every op: their
# gradients of this model differ from eager's by up to 0.01 with the pass on or off.
GRAD_TOL = {"cpp": 1e-3, "triton": 1.5e-2}


@pytest.mark.parametrize("emitter", ["cpp", "triton"])
def test_lm_head_of_an_odd_vocabulary(monkeypatch, emitter):
    """Logits of 1001 classes, then cross-entropy, forward and backward: the three LM-head
    matmuls padded (N of the logits, M of the weight's gradient, K of the input's), the
    logits returned with eager's strides, the gradients those of the unpadded graphs, and
    the backward keeping what it keeps unpadded. With Triton kernels (in its interpreter)
    as on CUDA, too."""
    monkeypatch.setattr(pad_matmul, "MIN_MACS", 0)
    monkeypatch.setenv("COMPILER_CPU_EMITTER", emitter)
    saved, notes, grads = _lm_run(True, GRAD_TOL[emitter])
    assert f"mm 30x24 @ 24x{VOCAB} bfloat16: M 30->32, N {VOCAB}->1008" in notes
    assert f"mm {VOCAB}x30 @ 30x24 bfloat16: M {VOCAB}->1008, K 30->32" in notes
    assert f"mm 30x{VOCAB} @ {VOCAB}x24 bfloat16: M 30->32, K {VOCAB}->1008" in notes
    unpadded, none, unpadded_grads = _lm_run(False, GRAD_TOL[emitter])
    assert none == "" and saved == unpadded
    for g, u in zip(grads, unpadded_grads):
        torch.testing.assert_close(g, u, atol=1e-4, rtol=1e-3)
