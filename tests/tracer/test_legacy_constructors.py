"""The legacy tensor constructors (torch.LongTensor([...]), torch.FloatTensor(2, 3),
torch.Tensor(...), ...) are traced as the factory that makes the same tensor
(compiler/tracer/construct.py): data as torch.tensor with the class's dtype and device,
sizes as torch.empty. They once broke the graph ("constructing a LongTensor runs in
Python"). What eager aliases or rejects still runs in Python, with a reason."""

from __future__ import annotations

import pytest
import torch

import compiler
from tests.tracer.helpers import T, assert_explain, check

DATA = {
    "long": lambda x: x + torch.LongTensor([1, 2, 3]),
    "long_truncates_floats": lambda x: x + torch.LongTensor([1.7, -2.5, 3.2]),
    "int_from_tuple": lambda x: x * torch.IntTensor((1, 2, 3)),
    "float_nested": lambda x: torch.FloatTensor([[1, 2, 3], [4, 5, 6]]) * x,
    "double": lambda x: x + torch.DoubleTensor([0.1, 0.2, 0.3]),
    "half": lambda x: (x.half() + torch.HalfTensor([1, 2, 3])).float(),
    "bfloat16": lambda x: torch.BFloat16Tensor([1, 2, 3]).float() + x,
    "byte_wraps": lambda x: x + torch.ByteTensor([1, 2, 255]),
    "char": lambda x: x - torch.CharTensor([-1, 0, 1]),
    "short": lambda x: x + torch.ShortTensor([7, 8, 9]),
    "bool": lambda x: x * torch.BoolTensor([0, 2, 1]),
    "tensor_default_dtype": lambda x: x * torch.Tensor([1, 2, 3]),
    "returned": lambda x: (torch.LongTensor([4, 5]), x + 1),
    "device_keyword": lambda x: x + torch.FloatTensor([1, 2, 3], device="cpu"),
}


@pytest.mark.parametrize("case", DATA)
def test_data(case):
    check(DATA[case], T(3), graphs=1, breaks=0)
    x = torch.randn(3)
    expected, got = DATA[case](x), compiler.compile(DATA[case])(x)  # our kernels
    # exact, but for half-precision arithmetic, which our kernels do in float32 and round
    # once (eager rounds after each op): float16's tolerance
    tol = {"rtol": 1e-3, "atol": 1e-5} if case == "half" else {"rtol": 0, "atol": 0}
    torch.testing.assert_close(got, expected, **tol)


def test_default_dtype_of_torch_tensor():
    # torch.Tensor(...) takes the default dtype, which every entry's guards pin
    fn = DATA["tensor_default_dtype"]
    compiled = compiler.compile(fn)
    old = torch.get_default_dtype()
    try:
        for dtype in (torch.float64, torch.float32):
            torch.set_default_dtype(dtype)
            x = torch.randn(3)
            assert compiled(x).dtype == fn(x).dtype == dtype
            torch.testing.assert_close(compiled(x), fn(x))
    finally:
        torch.set_default_dtype(old)


SIZES = {
    "ints": lambda x: torch.LongTensor(2, 3),
    "one_int": lambda x: torch.FloatTensor(4),
    "torch_size": lambda x: torch.DoubleTensor(x.shape),
    "none": lambda x: torch.IntTensor(),
}


@pytest.mark.parametrize("case", SIZES)
def test_sizes_give_uninitialised_tensors_of_eager_size_dtype_and_device(case):
    fn = SIZES[case]
    for compiled in (fn, compiler.compile(fn)):
        x = torch.randn(5, 2)
        expected, got = fn(x), compiled(x)
        assert (got.shape, got.dtype, got.device) == (expected.shape, expected.dtype, x.device)
    assert_explain(fn, [T(5, 2)], graphs=1, breaks=0)


def test_what_eager_aliases_runs_in_python():
    # torch.FloatTensor(t) returns an alias of t (an error for another dtype): not a factory
    out = assert_explain(lambda x: torch.FloatTensor(x) + 1, [T(3)], graphs=(1, 2), breaks=1)
    assert "of a tensor" in out.break_reasons[0].reason
    check(lambda x: torch.FloatTensor(x) + 1, T(3))
    check(lambda x: torch.LongTensor(x) + 1, T(3))  # eager's TypeError, raised as eager does


def test_another_device_type_runs_in_python():
    fn = lambda x: x + torch.FloatTensor([1, 2, 3], device="meta")  # noqa: E731
    check(fn, T(3))  # eager's RuntimeError, raised as eager raises it


@pytest.mark.gpu
def test_cuda_classes_on_the_gpu():
    def fn(x):
        return x + torch.cuda.FloatTensor([1, 2, 3]), torch.cuda.LongTensor(2, 3).shape

    x = torch.randn(3, device="cuda")
    expected, got = fn(x), compiler.compile(fn)(x)
    torch.testing.assert_close(got, expected)
    assert_explain(fn, [lambda: torch.randn(3, device="cuda")], graphs=1, breaks=0)
