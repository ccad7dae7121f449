"""The C++ emitter on hand-built schedules: what is specific to C++ (conversions, NaN and
integer semantics, OpenMP splitting, strides), independent of lowering and fusion."""

from __future__ import annotations

import pytest
import torch

from compiler.codegen.cpp import EMITTER, c_constant, c_index
from compiler.ir.index import Index, Var, make_vars
from compiler.ir.nodes import Constant, InputBuffer, Layout, Load, Op, Ref
from compiler.scheduler.kernel import KernelGroup, Schedule, Step

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(tmp_path))


def _layout(t: torch.Tensor) -> Layout:
    return Layout.like(t)


def run_kernel(
    steps, outer, reduction, inputs: dict[str, torch.Tensor], outputs: dict[str, Layout]
):
    """Build one kernel from `steps`, run it on `inputs`, return the output tensors."""
    buffers = {name: _layout(t) for name, t in inputs.items()} | outputs
    group = KernelGroup(
        name="triton_test_kernel_0",
        kind="reduction" if reduction else "pointwise",
        outer=tuple(outer),
        reduction=tuple(reduction),
        steps=tuple(steps),
        reads=tuple(inputs),
        writes=tuple(outputs),
        origins=("node",),
        ir_nodes=tuple(outputs),
    )
    schedule = Schedule(
        inputs=tuple(InputBuffer(n, k, buffers[n]) for k, n in enumerate(inputs)),
        constants=(),
        launches=(group,),
        buffers=buffers,
    )
    source = EMITTER.emit_kernel(group, schedule)
    kernel = EMITTER.load(source)
    outs = {
        n: torch.empty_strided(lay.size, lay.stride, dtype=lay.dtype) for n, lay in outputs.items()
    }
    kernel(*inputs.values(), *outs.values())
    return source, outs


def load(name, t, idx):
    return Load(name, tuple(Index.of(i) for i in idx), t.dtype)


def pointwise(fn, *tensors, out_dtype=None):
    """Run `fn(load0, load1, ...)` elementwise over same-shaped tensors."""
    shape = tensors[0].shape
    xs = make_vars("x", tuple(shape))
    inputs = {f"arg{k}": t for k, t in enumerate(tensors)}
    value = fn(*(load(n, t, xs) for n, t in inputs.items()))
    out = Layout.contiguous(tuple(shape), out_dtype or value.dtype, CPU)
    step = Step("buf0", "outer", value, value.dtype, None, tuple(Index.of(x) for x in xs))
    source, outs = run_kernel([step], xs, (), inputs, {"buf0": out})
    return source, outs["buf0"]


def test_sin_plus_cos_is_one_vectorised_parallel_kernel():
    x, y = torch.randn(1 << 16), torch.randn(1 << 16)
    f32 = torch.float32
    source, out = pointwise(
        lambda a, b: Op("add", (Op("sin", (a,), f32), Op("cos", (b,), f32)), f32), x, y
    )
    torch.testing.assert_close(out, torch.sin(x) + torch.cos(y))
    assert "parallel for simd" in source.source and "sinf(" in source.source
    assert source.name.startswith("cpp_") and source.language == "cpp"
    assert "fused FX nodes: node" in source.source


def test_small_kernels_stay_on_one_thread():
    x = torch.randn(100)
    source, out = pointwise(lambda a: Op("exp", (a,), torch.float32), x)
    torch.testing.assert_close(out, x.exp())
    assert "omp parallel" not in source.source and "omp simd" in source.source


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_loads_and_stores_round_like_torch(dtype):
    x = torch.cat([torch.randn(1000) * 1e3, torch.tensor([0.0, -0.0, 1e-7, 6e4, 7e4])]).to(dtype)
    x = torch.cat([x, torch.tensor([float("nan"), float("inf"), -float("inf")], dtype=dtype)])
    f32 = torch.float32

    def fn(a):
        up = Op("to_dtype", (a,), f32)
        return Op("to_dtype", (Op("mul", (up, Constant(1.5, f32)), f32),), dtype)

    _, out = pointwise(fn, x)
    torch.testing.assert_close(out, (x.float() * 1.5).to(dtype), equal_nan=True, atol=0, rtol=0)


def test_float_to_half_rounding_exhaustive_on_a_grid():
    # Every float16 bit pattern, and midpoints between neighbours (ties to even).
    h = torch.arange(0, 1 << 16, dtype=torch.int32).to(torch.int16).view(torch.float16)
    f = h.float()
    mid = (f[:-1] + f[1:]) / 2
    for values in (f, mid):
        _, out = pointwise(lambda a: Op("to_dtype", (a,), torch.float16), values)
        torch.testing.assert_close(out, values.to(torch.float16), equal_nan=True, atol=0, rtol=0)


def test_integer_floordiv_and_remainder_follow_python():
    a = torch.tensor([7, -7, 7, -7, 0, 5], dtype=torch.int64)
    b = torch.tensor([2, 2, -2, -2, 3, -5], dtype=torch.int64)
    i64 = torch.int64
    _, q = pointwise(lambda x, y: Op("floordiv", (x, y), i64), a, b)
    _, r = pointwise(lambda x, y: Op("remainder", (x, y), i64), a, b)
    assert q.tolist() == (a // b).tolist() and r.tolist() == torch.remainder(a, b).tolist()


def test_float_floordiv_remainder_and_nan_maximum():
    a = torch.tensor([7.5, -7.5, 1.0, float("nan"), 3.0, -0.0])
    b = torch.tensor([2.0, 2.0, 0.0, 1.0, float("nan"), 1.0])
    f32 = torch.float32
    for op, ref in (
        ("floordiv", torch.floor_divide),
        ("remainder", torch.remainder),
        ("maximum", torch.maximum),
        ("minimum", torch.minimum),
    ):
        _, out = pointwise(lambda x, y, op=op: Op(op, (x, y), f32), a, b)
        torch.testing.assert_close(out, ref(a, b), equal_nan=True)


def test_bool_and_int_ops():
    a = torch.tensor([True, False, True, False])
    b = torch.tensor([True, True, False, False])
    bl = torch.bool
    _, out = pointwise(lambda x, y: Op("logical_xor", (x, y), bl), a, b)
    assert out.tolist() == (a ^ b).tolist()
    _, out = pointwise(lambda x: Op("bitwise_not", (x,), bl), a)
    assert out.tolist() == (~a).tolist()
    i = torch.tensor([3, -4, 0], dtype=torch.int32)
    _, out = pointwise(lambda x: Op("bitwise_not", (x,), torch.int32), i)
    assert out.tolist() == (~i).tolist()


def test_strided_and_channels_last_inputs_and_outputs():
    x = torch.randn(2, 3, 5, 7).to(memory_format=torch.channels_last)
    y = torch.randn(2, 7, 5, 3).permute(0, 3, 2, 1)  # non-contiguous view
    xs = make_vars("x", (2, 3, 5, 7))
    f32 = torch.float32
    value = Op("mul", (load("arg0", x, xs), load("arg1", y, xs)), f32)
    out = Layout(x.shape, x.stride(), f32, CPU)  # channels-last output
    step = Step("buf0", "outer", value, f32, None, tuple(Index.of(v) for v in xs))
    source, outs = run_kernel([step], xs, (), {"arg0": x, "arg1": y}, {"buf0": out})
    torch.testing.assert_close(outs["buf0"], x * y)
    # the channel dimension (stride 1 in channels-last) is the innermost loop
    assert source.source.index("x1 < 3") > source.source.index("x3 < 7")


def test_zero_dim_and_empty():
    f32 = torch.float32
    _, out = pointwise(lambda a: Op("neg", (a,), f32), torch.tensor(2.5))
    assert out.shape == () and out.item() == -2.5
    _, out = pointwise(lambda a: Op("neg", (a,), f32), torch.randn(0, 3))
    assert out.shape == (0, 3)


def _reduce(x: torch.Tensor, kind: str, out_dtype: torch.dtype):
    """Reduce a 2-d tensor over its last dim with reduction `kind`."""
    (p, r) = x.shape
    xv, rv = Var("x0", p), Var("r0", r)
    value = Load("arg0", (Index.of(xv), Index.of(rv)), x.dtype)
    if x.dtype in (torch.float16, torch.bfloat16):
        value = Op("to_dtype", (value,), torch.float32)
    step = Step("buf0", "inner", value, out_dtype, kind, (Index.of(xv),))
    out = Layout.contiguous((p,), out_dtype, CPU)
    source, outs = run_kernel([step], (xv,), (rv,), {"arg0": x}, {"buf0": out})
    return source, outs["buf0"]


@pytest.mark.parametrize(
    "kind,ref",
    [
        ("sum", lambda x: x.sum(1)),
        ("max", lambda x: x.amax(1)),
        ("min", lambda x: x.amin(1)),
        ("argmax", lambda x: x.argmax(1)),
        ("argmin", lambda x: x.argmin(1)),
        ("prod", lambda x: (x / 2 + 1).prod(1)),
    ],
)
def test_row_reductions_with_nan(kind, ref):
    x = torch.randn(37, 301)
    x[3, 7] = float("nan")
    x[5, :] = x[5, 0]  # ties: the first position wins
    if kind == "prod":
        x = x / 2 + 1
    out_dtype = torch.int64 if kind.startswith("arg") else torch.float32
    _, out = _reduce(x, kind, out_dtype)
    expected = ref(x) if kind != "prod" else x.prod(1)
    torch.testing.assert_close(out, expected, equal_nan=True, rtol=1e-4, atol=1e-5)


def test_full_sum_splits_across_threads_and_half_accumulates_in_float():
    x = torch.randn(1, 1 << 18)
    source, out = _reduce(x, "sum", torch.float32)
    assert "omp parallel for simd reduction(+:" in source.source
    torch.testing.assert_close(out, x.double().sum(1).float(), rtol=1e-5, atol=1e-3)
    h = (torch.rand(2, 4096) + 1).to(torch.float16)  # a float16 accumulator would saturate
    _, out = _reduce(h, "sum", torch.float32)
    torch.testing.assert_close(out, h.float().sum(1), rtol=1e-5, atol=1e-2)


def test_any_all_and_int_sum():
    b = torch.rand(8, 50) > 0.9
    _, out = _reduce(b, "any", torch.bool)
    assert out.tolist() == b.any(1).tolist()
    _, out = _reduce(b, "all", torch.bool)
    assert out.tolist() == b.all(1).tolist()
    i = torch.randint(-100, 100, (8, 50), dtype=torch.int32)
    xv, rv = Var("x0", 8), Var("r0", 50)
    value = Op("to_dtype", (Load("arg0", (Index.of(xv), Index.of(rv)), torch.int32),), torch.int64)
    step = Step("buf0", "inner", value, torch.int64, "sum", (Index.of(xv),))
    out_layout = Layout.contiguous((8,), torch.int64, CPU)
    _, outs = run_kernel([step], (xv,), (rv,), {"arg0": i}, {"buf0": out_layout})
    assert outs["buf0"].tolist() == i.sum(1).tolist()


def test_softmax_in_one_kernel_with_multiple_passes():
    x = torch.randn(64, 257)
    f32 = torch.float32
    xv, rv = Var("x0", 64), Var("r0", 257)
    v = Load("arg0", (Index.of(xv), Index.of(rv)), f32)
    steps = [
        Step("mx", "inner", v, f32, "max"),
        Step("e", "inner", Op("exp", (Op("sub", (v, Ref("mx", f32)), f32),), f32), f32),
        Step("s", "inner", Ref("e", f32), f32, "sum"),
        Step("inv", "outer", Op("reciprocal", (Ref("s", f32),), f32), f32),
        Step(
            "buf0",
            "inner",
            Op("mul", (Ref("e", f32), Ref("inv", f32)), f32),
            f32,
            None,
            (Index.of(xv), Index.of(rv)),
        ),
    ]
    out = Layout.contiguous((64, 257), f32, CPU)
    source, outs = run_kernel(steps, (xv,), (rv,), {"arg0": x}, {"buf0": out})
    torch.testing.assert_close(outs["buf0"], x.softmax(1))
    assert source.source.count("for (int64_t r0") == 3


def test_printers():
    i, j = Var("x0", 10), Var("x1", 4)
    assert c_index(Index.of(i) * 4 + j) == "4*x0 + x1"
    assert c_index((Index.of(i) * 4 + j) // 3) == "((4*x0 + x1) / 3)"
    assert c_constant(float("inf"), torch.float32) == "static_cast<float>(INFINITY)"
    assert c_constant(-(2**63), torch.int64) == "INT64_MIN"
    assert c_constant(0.1, torch.float32) == "0.1f"


def test_contiguous_loops_fuse_into_one():
    x = torch.randn(2, 3, 8, 8)
    scale = torch.randn(3, 1, 1)
    xs = make_vars("x", (2, 3, 8, 8))
    f32 = torch.float32
    # per-channel scale (a broadcast: stride 0 over n, h, w) times x
    b = scale.expand(2, 3, 8, 8)
    value = Op("mul", (load("arg0", x, xs), load("arg1", b, xs)), f32)
    out = Layout.contiguous((2, 3, 8, 8), f32, CPU)
    step = Step("buf0", "outer", value, f32, None, tuple(Index.of(v) for v in xs))
    source, outs = run_kernel([step], xs, (), {"arg0": x, "arg1": b}, {"buf0": out})
    torch.testing.assert_close(outs["buf0"], x * scale)
    # h and w fuse (64 contiguous elements); n and c cannot (the scale depends on c only)
    assert source.source.count("for (int64_t") == 3 and "x2 < 64" in source.source


def test_reduction_over_contiguous_dims_is_one_loop():
    x = torch.randn(4, 6, 8, 8)
    xv = Var("x0", 24)
    r = make_vars("r", (8, 8))
    f32 = torch.float32
    value = Load("arg0", (Index.of(xv) // 6, Index.of(xv) % 6, Index.of(r[0]), Index.of(r[1])), f32)
    step = Step("buf0", "inner", value, f32, "sum", (Index.of(xv),))
    out = Layout.contiguous((24,), f32, CPU)
    source, outs = run_kernel([step], (xv,), r, {"arg0": x}, {"buf0": out})
    torch.testing.assert_close(outs["buf0"], x.sum((2, 3)).flatten())
    assert "r0 < 64" in source.source and "r1" not in source.source


def test_short_window_reductions_unroll_and_vectorise_across_outputs():
    x = torch.randn(4, 6, 3, 3)
    xv = Var("x0", 24)
    r = make_vars("r", (3, 3))
    f32 = torch.float32
    value = Load("arg0", (Index.of(xv) // 6, Index.of(xv) % 6, Index.of(r[0]), Index.of(r[1])), f32)
    step = Step("buf0", "inner", value, f32, "max", (Index.of(xv),))
    out = Layout.contiguous((24,), f32, CPU)
    source, outs = run_kernel([step], (xv,), r, {"arg0": x}, {"buf0": out})
    torch.testing.assert_close(outs["buf0"], x.amax((2, 3)).flatten())
    # the 3x3 window is contiguous: fused to 9 points, each its own block
    assert "const int64_t r0 = 8;" in source.source and "for (int64_t r" not in source.source


def test_every_ir_op_has_a_cpp_rule():
    from compiler.codegen.cpp import op_expr
    from compiler.ir.nodes import OPS

    f32, i64, bl = torch.float32, torch.int64, torch.bool
    for name, arity in OPS.items():
        for dtype in (f32, i64):
            args = [Constant(1, dtype)] * arity
            if name == "where":
                args[0] = Constant(True, bl)
            out = bl if name in ("eq", "ne", "lt", "le", "gt", "ge", "isnan", "isinf") else dtype
            assert op_expr(Op(name, tuple(args), out), ["a", "b", "c"][:arity])
