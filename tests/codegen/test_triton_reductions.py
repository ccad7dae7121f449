"""Reductions (persistent and looped kernels), norms and pooling vs eager."""

import pytest
import torch
import torch.nn.functional as F

from tests.codegen.helpers import DEVICE, check, rand, triton_kernels


@pytest.fixture(autouse=True)
def triton_on_cpu(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("COMPILER_CPU_EMITTER", "triton")
    monkeypatch.setenv("COMPILER_STRICT", "1")
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


REDUCTIONS = {
    "sum": lambda x, d, k: x.sum(d, keepdim=k),
    "mean": lambda x, d, k: x.mean(d, keepdim=k),
    "amax": lambda x, d, k: x.amax(d, keepdim=k),
    "amin": lambda x, d, k: x.amin(d, keepdim=k),
    "argmax": lambda x, d, k: x.argmax(d, keepdim=k),
    "argmin": lambda x, d, k: x.argmin(d, keepdim=k),
    "var": lambda x, d, k: x.var(d, keepdim=k),
    "prod": lambda x, d, k: x.prod(d, keepdim=k),
    "max_dim": lambda x, d, k: (x.max(d, keepdim=k)[0], x.max(d, keepdim=k)[1]),
}


@pytest.mark.parametrize("name", REDUCTIONS)
@pytest.mark.parametrize("dim", [0, 1, 2, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_reduction_each_dim(name, dim, keepdim):
    op = REDUCTIONS[name]
    check(lambda x: (op(x, dim, keepdim),), rand(3, 4, 5))


@pytest.mark.parametrize("n", [5, 3000])  # persistent and looped
def test_full_and_looped_reductions(n):
    x = rand(3, n)
    check(
        lambda x: (
            x.sum(),
            x.amax(1),
            x.argmax(1),
            x.var(1),
            x.mean((0, 1), keepdim=True),
            x.argmin(),
            (x > 0).any(1),
            (x > -10).all(),
        ),
        x,
        atol=1e-3,
        rtol=1e-4,
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int64, torch.bool])
def test_reduction_dtypes(dtype):
    x = rand(4, 33, dtype=dtype)
    if dtype == torch.bool:
        check(lambda x: (x.any(1), x.all(0), x.sum(1)), x)
    elif dtype == torch.int64:
        check(lambda x: (x.sum(1), x.amax(0), x.argmax(1)), x)
    else:
        check(lambda x: (x.sum(1), x.amax(0), x.float().mean(1)), x, atol=5e-2, rtol=5e-2)


def test_empty_reduction():
    check(lambda x: (x.sum(1), x.sum(0)), rand(3, 0))


@pytest.mark.parametrize("n", [16, 2500])
def test_softmax_and_layer_norm_fuse_into_one_kernel(n):
    w, b = rand(n), rand(n)
    record = check(lambda x: (x.softmax(-1),), rand(4, n), atol=1e-5, rtol=1e-4)
    assert len(triton_kernels(record)) == 1
    record = check(
        lambda x, w, b: (F.layer_norm(x, (n,), w, b),), rand(4, n), w, b, atol=1e-4, rtol=1e-4
    )
    assert len(triton_kernels(record)) == 1


def test_non_contiguous_reduction():
    x = rand(6, 5).t()
    check(lambda x: (x.sum(0), x.sum(1), x.softmax(0)), x)


def test_batch_norm_inference_and_pooling():
    bn = torch.nn.BatchNorm2d(4).eval().to(DEVICE)
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.5, 2)
    model = torch.nn.Sequential(bn, torch.nn.ReLU(), torch.nn.MaxPool2d(3, 2, 1))
    x = rand(2, 4, 9, 9)
    check(model, x)
    check(
        lambda x: (
            F.avg_pool2d(x, 2),
            F.adaptive_avg_pool2d(x, (3, 3)),
            F.adaptive_avg_pool2d(x, 1),
            F.max_pool2d(x, 2),
        ),
        x,
    )
    check(lambda x: (F.avg_pool2d(x, 3, 1, 1, count_include_pad=False),), x)  # runs as an extern
