"""The tracer's direct fake batch norm (compiler/tracer/fake_mode.py) gives the metadata of
torch's own fake path and of eager, in every case it takes, and steps aside otherwise."""

from __future__ import annotations

import copy
import itertools

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

import compiler
from compiler.tracer.fake_mode import TracerFakeMode

from .helpers import RecordingBackend

# (shape, memory format): every layout the direct path accepts, size-1 dims included.
LAYOUTS = [
    ((4, 3), torch.contiguous_format),
    ((4, 3, 5), torch.contiguous_format),
    ((2, 3, 4, 5), torch.contiguous_format),
    ((2, 3, 4, 5), torch.channels_last),
    ((1, 3, 4, 5), torch.channels_last),
    ((2, 3, 1, 1), torch.channels_last),
    ((2, 3, 1, 5), torch.channels_last),
    ((2, 3, 2, 4, 5), torch.contiguous_format),
    ((2, 3, 2, 4, 5), torch.channels_last_3d),
    ((1, 3, 1, 4, 1), torch.channels_last_3d),
]
# (training, running stats, affine)
FLAGS = [f for f in itertools.product([False, True], repeat=3) if f[0] or f[1]]


def _real_args(shape, fmt, dtype, training, stats, affine, grad):
    c = shape[1]
    x = torch.randn(shape, dtype=dtype).to(memory_format=fmt)
    w = torch.randn(c, dtype=dtype, requires_grad=grad) if affine else None
    b = torch.randn(c, dtype=dtype, requires_grad=grad) if affine else None
    rm = torch.randn(c, dtype=dtype) if stats else None
    rv = torch.rand(c, dtype=dtype) + 0.5 if stats else None
    return x, w, b, rm, rv, training


def _meta(t):
    return (t.shape, t.stride(), t.dtype, t.device, t.requires_grad, t.is_leaf)


def _run(mode, args, device="cpu"):
    x, w, b, rm, rv, training = args
    fakes = [None if t is None else mode.from_tensor(t, static_shapes=True) for t in args[:5]]
    with mode:
        if device != "cpu":
            fakes = [None if t is None else _on(t, device) for t in fakes]
        fx, fw, fb, frm, frv = fakes
        out = F.batch_norm(fx, frm, frv, fw, fb, training, 0.1, 1e-5)
        native = torch.native_batch_norm(fx, fw, fb, frm, frv, training, 0.1, 1e-5)
    return out, native


def _layout(t):
    # Strides of the dims that address memory: for a size-1 dim torch's fake path keeps the
    # input's stride where eager may write another ((2, 3, 1, 1) channels-last), which the
    # direct path reproduces so that graphs stay as they were.
    return [s for n, s in zip(t.shape, t.stride()) if n != 1]


def _on(t, device):
    # A fake tensor on `device` with t's strides and autograd state (no such device needed).
    moved = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=device)
    return moved.requires_grad_(t.requires_grad)


@pytest.fixture
def direct_calls(monkeypatch):
    """How many batch norms the direct path answered."""
    calls = []
    original = TracerFakeMode._batch_norm

    def counting(self, *args):
        out = original(self, *args)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(TracerFakeMode, "_batch_norm", counting)
    return calls


@pytest.mark.parametrize("shape,fmt", LAYOUTS)
@pytest.mark.parametrize("training,stats,affine", FLAGS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("grad", [False, True])
def test_direct_batch_norm_matches_torch_fake_and_eager(
    shape, fmt, training, stats, affine, dtype, grad, direct_calls
):
    args = _real_args(shape, fmt, dtype, training, stats, affine, grad)
    out, native = _run(TracerFakeMode(), args)
    assert direct_calls == [True, True]
    ref_out, ref_native = _run(FakeTensorMode(), args)
    assert _meta(out) == _meta(ref_out)
    assert [_meta(t) for t in native] == [_meta(t) for t in ref_native]
    x, w, b, rm, rv, _ = args
    eager = F.batch_norm(x, rm, rv, w, b, training, 0.1, 1e-5)
    assert (eager.shape, _layout(eager), eager.dtype) == (out.shape, _layout(out), out.dtype)
    assert eager.requires_grad == out.requires_grad
    eager_native = torch.native_batch_norm(x, w, b, rm, rv, training, 0.1, 1e-5)
    assert [(t.shape, t.dtype) for t in eager_native] == [(t.shape, t.dtype) for t in native]


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("fmt", [torch.contiguous_format, torch.channels_last])
def test_direct_batch_norm_on_another_device_matches_torch_fake(training, fmt, direct_calls):
    # Off CPU, eval mode returns the running statistics rather than empty ones.
    args = _real_args((2, 3, 4, 5), fmt, torch.float32, training, True, True, True)
    out, native = _run(TracerFakeMode(), args, device="cuda")
    assert direct_calls == [True, True]
    ref_out, ref_native = _run(FakeTensorMode(), args, device="cuda")
    assert _meta(out) == _meta(ref_out)
    assert [_meta(t) for t in native] == [_meta(t) for t in ref_native]


@pytest.mark.parametrize(
    "case",
    ["half", "transposed", "weight_dtype", "weight_shape", "empty_batch", "eval_no_stats"],
)
def test_other_cases_take_torchs_path(case, direct_calls):
    x, w, b, rm, rv, training = _real_args(
        (2, 3, 4, 5), torch.contiguous_format, torch.float32, False, True, True, False
    )
    if case == "half":
        x = x.half()
    elif case == "transposed":
        x = x.transpose(2, 3)
    elif case == "weight_dtype":
        w = w.double()
    elif case == "weight_shape":
        w = torch.randn(4)
    elif case == "empty_batch":
        x = x[:0]
    elif case == "eval_no_stats":
        rm = rv = None
    args = (x, w, b, rm, rv, training)
    try:
        expected = _meta(_run(FakeTensorMode(), args)[0])
    except Exception as e:
        with pytest.raises(type(e)):
            _run(TracerFakeMode(), args)
    else:
        assert _meta(_run(TracerFakeMode(), args)[0]) == expected
    assert not any(direct_calls)


@pytest.mark.parametrize("train", [False, True])
@pytest.mark.parametrize("dims", [1, 2, 3])
@pytest.mark.parametrize("channels_last", [False, True])
def test_traced_batch_norm_records_eagers_metadata(train, dims, channels_last, direct_calls):
    """The graph's example values for a batch norm module are eager's outputs' metadata."""
    if channels_last and dims == 1:
        pytest.skip("no channels-last layout for 3-d inputs")
    norm = {1: torch.nn.BatchNorm1d, 2: torch.nn.BatchNorm2d, 3: torch.nn.BatchNorm3d}[dims]
    mod = torch.nn.Sequential(norm(4), torch.nn.ReLU(), norm(4, track_running_stats=False))
    mod.train(train)
    x = torch.randn((3, 4) + (5,) * dims)
    if channels_last:
        x = x.to(memory_format=torch.channels_last if dims == 2 else torch.channels_last_3d)
    eager = copy.deepcopy(mod)[0](x)
    expected = copy.deepcopy(mod)(x)
    backend = RecordingBackend()
    out = compiler.compile(mod, backend=backend)(x)
    assert backend.count == 1
    assert any(direct_calls)
    nodes = [n for n in backend.graphs[0].graph.nodes if n.target is F.batch_norm]
    assert len(nodes) == 2
    fake = nodes[0].meta["example_value"]
    assert (fake.shape, _layout(fake), fake.dtype, fake.requires_grad) == (
        eager.shape,
        _layout(eager),
        eager.dtype,
        eager.requires_grad,
    )
    torch.testing.assert_close(out, expected)
