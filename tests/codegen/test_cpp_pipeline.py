"""The C++ emitter behind the real pipeline (aot -> lowering -> fusion scheduler), compared
with eager on fresh random inputs: pointwise chains, reductions, broadcasting, strided and
channels-last inputs, dtypes, a small CNN and a tiny transformer layer.

When `compile_fx` is importable the graph goes through it (and its wrapper); the small
`run_schedule` here runs a Schedule directly otherwise, so the emitter is tested either way.
"""

from __future__ import annotations

import operator
from collections.abc import Callable

import pytest
import torch
from torch import nn
from torch.utils._pytree import tree_flatten

import compiler.config as config
from compiler.aot.trace import trace_forward
from compiler.codegen.cpp import EMITTER
from compiler.ir.nodes import TensorArg
from compiler.lowering.graph import lower
from compiler.scheduler.fusion import schedule
from compiler.scheduler.kernel import ExternCall, KernelGroup, Schedule


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(tmp_path))


def _view(t: torch.Tensor, layout) -> torch.Tensor:
    return t.as_strided(layout.size, layout.stride, layout.offset)


def run_schedule(sched: Schedule, args: list[torch.Tensor]) -> list:
    """Execute a Schedule: C++ kernels through the emitter, extern calls through aten."""
    kernels = [k for k in sched.launches if isinstance(k, KernelGroup)]
    sources = [EMITTER.emit_kernel(k, sched) for k in kernels]
    loaded = dict(zip((k.name for k in kernels), EMITTER.load_many(sources)))
    calls = {k.name: s.call[len(s.name) + 1 : -1].split(", ") for k, s in zip(kernels, sources)}
    bufs: dict[str, torch.Tensor] = {b.name: args[b.position] for b in sched.inputs}
    bufs.update({c.name: c.value for c in sched.constants})

    def arg(a):
        if isinstance(a, TensorArg):
            return _view(bufs[a.buf], a.layout)
        if isinstance(a, (list, tuple)):
            return type(a)(arg(x) for x in a)
        return a

    for launch in sched.launches:
        if isinstance(launch, ExternCall):
            node = launch.node
            op = eval(node.op, {"aten": torch.ops.aten})  # e.g. "aten.convolution.default"
            result = op(*arg(node.args), **{k: arg(v) for k, v in node.kwargs})
            results = result if isinstance(result, (list, tuple)) else [result]
            for (name, layout), r in zip(node.outputs, results):
                out = torch.empty_strided(layout.size, layout.stride, dtype=layout.dtype)
                out.copy_(r)
                bufs[name] = out
            continue
        for name in launch.writes:
            layout = sched.buffers[name]
            if name not in bufs:
                bufs[name] = torch.empty_strided(layout.size, layout.stride, dtype=layout.dtype)
        loaded[launch.name](*(bufs[n] for n in calls[launch.name]))
    return [arg(o) for o in sched.outputs]


def compiled(fn: Callable, args: list[torch.Tensor]) -> tuple[Schedule, list]:
    gm = fn if isinstance(fn, torch.fx.GraphModule) else torch.fx.symbolic_trace(fn)
    aot = trace_forward(gm, args)
    graph, _ = lower(aot, args)
    sched = schedule(graph)
    return sched, run_schedule(sched, args)


def check(fn: Callable, *args: torch.Tensor, rtol=1.3e-6, atol=1e-5) -> Schedule:
    with torch.no_grad():
        expected = fn(*args)
        sched, out = compiled(fn, list(args))
    expected, _ = tree_flatten(expected)
    assert len(out) == len(expected)
    for o, e in zip(out, expected):
        torch.testing.assert_close(o, e, rtol=rtol, atol=atol, equal_nan=True)
    return sched


def test_sin_plus_cos_is_one_cpp_kernel():
    sched = check(lambda x, y: torch.sin(x) + torch.cos(y), torch.randn(4096), torch.randn(4096))
    assert len(sched.launches) == 1
    src = EMITTER.emit_kernel(sched.kernels[0], sched)
    assert src.language == "cpp" and "sinf(" in src.source and "cosf(" in src.source


POINTWISE = {
    "chain": lambda x: torch.relu(x * 2 + 1).exp().clamp(max=3.0),
    "broadcast": lambda x: x + x.sum(0, keepdim=True) * x[:1],
    "where_nan": lambda x: torch.where(x > 0, x.log(), torch.tensor(float("nan"))),
    "gelu_tanh": lambda x: torch.nn.functional.gelu(x) + torch.tanh(x) + torch.sigmoid(x),
    "div_floor": lambda x: torch.floor_divide(x, 0.7) + torch.remainder(x, 0.3),
    "transpose": lambda x: (x.t() * 3).sin(),
    "int_ops": lambda x: ((x * 100).long() // 7 + (x * 100).long() % 5).float(),
    "bool_ops": lambda x: ((x > 0) & (x < 0.5)) | (x < -1),
    "pow_rsqrt": lambda x: x.pow(2) + x.abs().add(1).rsqrt() + x.pow(3),
    "cat_pad": lambda x: torch.cat([x, torch.nn.functional.pad(x, (1, 0))[:, :-1]], 1),
}


@pytest.mark.parametrize("name", sorted(POINTWISE))
def test_pointwise(name):
    check(POINTWISE[name], torch.randn(33, 65))


REDUCTIONS = {
    "sum_dims": lambda x: (x.sum(), x.sum(0), x.sum(1, keepdim=True), x.sum((0, 2))),
    "mean_amax": lambda x: (x.mean(-1), x.amax(1), x.amin(0)),
    "argmax": lambda x: (x.argmax(-1), x.argmin(1)),
    "var_std": lambda x: (x.var(-1), x.std(0), torch.var_mean(x, 2)),
    "softmax": lambda x: (x.softmax(-1), x.log_softmax(1)),
    "any_all": lambda x: ((x > 1).any(-1), (x > -2).all(0)),
    "norm": lambda x: torch.nn.functional.layer_norm(x, (x.shape[-1],)),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reductions(name):
    check(REDUCTIONS[name], torch.randn(6, 17, 40), rtol=1e-5, atol=1e-5)


def test_big_full_reduction_runs_split():
    check(lambda x: (x.sum(), x.amax()), torch.randn(1 << 17), rtol=1e-5, atol=1e-3)


def test_strided_channels_last_and_0d_inputs():
    x = torch.randn(2, 8, 5, 6).to(memory_format=torch.channels_last)
    y = torch.randn(6, 5, 8, 2).permute(3, 2, 1, 0)
    check(lambda a, b, s: (a * b + s).relu(), x, y, torch.tensor(0.5))


def test_empty_and_zero_dim():
    check(lambda a: a.sin() * 2, torch.randn(0, 4))
    check(lambda a: a.sin() * 2, torch.tensor(1.5))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_float_dtypes(dtype):
    """Half precisions: as eager when the kernels round after every op as it does
    (emulate_precision_casts); by default they compute in float32 and round once, at least
    as close to the exact result as eager."""
    x = torch.randn(17, 31).to(dtype)
    tol = {"rtol": 1e-2, "atol": 1e-2} if dtype != torch.float64 else {}
    fns = (lambda a: (a.sin() * 2 + a).sum(-1), lambda a: torch.nn.functional.silu(a) * a)
    with config.patch(emulate_precision_casts=dtype != torch.float64):
        for fn in fns:
            check(fn, x, **tol)
    for fn in fns if dtype != torch.float64 else ():
        exact = fn(x.double())
        (out,) = compiled(fn, [x])[1]
        assert (out.double() - exact).abs().max() <= (fn(x).double() - exact).abs().max()


def test_int_and_bool_inputs():
    i = torch.randint(-50, 50, (9, 13))
    b = torch.rand(9, 13) > 0.5
    check(lambda a, m: (a * 3 + 1).sum(1) + m.sum(1), i, b)
    check(lambda a, m: torch.where(m, a, -a).amax(0), i, b)


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = self.pool(torch.relu(self.bn2(self.conv2(x)) + 1))
        x = torch.nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x).log_softmax(-1)


def test_small_cnn_matches_eager():
    model = SmallCNN().eval()
    for bn in (model.bn1, model.bn2):  # non-trivial running statistics
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
    check(model, torch.randn(2, 3, 16, 16), rtol=1e-4, atol=1e-4)


class TinyTransformerLayer(nn.Module):
    """Pre-norm self-attention and MLP written with plain ops (symbolic_trace cannot take
    nn.TransformerEncoderLayer's fast-path checks)."""

    def __init__(self, d: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm2(x))))


def test_tiny_transformer_layer_matches_eager():
    layer = TinyTransformerLayer().eval()
    gm = torch.fx.symbolic_trace(layer, concrete_args=None)
    check(gm, torch.randn(2, 7, 32), rtol=1e-4, atol=1e-4)


def test_extern_ops_are_used_for_matmul():
    sched = check(lambda a, b: (a @ b).relu(), torch.randn(8, 16), torch.randn(16, 4))
    assert any(isinstance(launch, ExternCall) for launch in sched.launches)


def test_kernel_headers_name_fx_nodes():
    def fn(x):
        y = operator.mul(x, 2)
        return torch.sin(y)

    sched = check(fn, torch.randn(64))
    source = EMITTER.emit_kernel(sched.kernels[0], sched).source
    if sched.kernels[0].origins:
        assert "fused FX nodes:" in source


def _continued(x, y):
    return torch.relu(x) * 2 + \
        torch.sin(y)  # fmt: skip


def test_kernel_header_of_a_continued_line_stays_a_comment(monkeypatch):
    # The header quotes the user's line; one ending in `\` spliced the kernel's signature into
    # the `//` comment (timm's poolformer: `x = self.res_scale1(x) + \`).
    import compiler

    monkeypatch.setenv("COMPILER_STRICT", "1")
    compiled_fn = compiler.compile(_continued, fullgraph=True)
    x, y = torch.randn(64), torch.randn(64)
    torch.testing.assert_close(compiled_fn(x, y), _continued(x, y))
    sources = [k.source for k in compiler.inspect(compiled_fn).kernels if k.language == "cpp"]
    assert sources and any("test_cpp_pipeline.py" in s for s in sources)
    assert not [ln for s in sources for ln in s.splitlines() if ln.rstrip().endswith("\\")]


def test_variance_of_values_far_from_zero_is_eagers():
    """The two-pass variance counts from each row's first element: from 0, the float32
    mean of 1e4 plus noise of 1e-3 was an ulp of 1e4 off, and that error squared made the
    variance 20% wrong where eager's CPU kernel (double accumulators) is exact to 1e-14.
    Rows with an infinity or a NaN, empty rows and a single element stay eager's."""
    torch.manual_seed(0)
    x = torch.full((6, 40), 1e4) + torch.randn(6, 40) * 1e-3
    x[1, 0], x[2, 5], x[3, 0] = float("inf"), float("nan"), float("-inf")

    def fn(x, e, one):
        return (
            x.var(1),
            x.std(1, correction=0),
            torch.var_mean(x[4:], 1),  # (eager's Welford mean of a row with an inf is NaN)
            x[4:].t().var(1),
            e.var(1),
            one.var(0, correction=0),
        )

    check(fn, x, torch.randn(3, 0), torch.randn(1, 5), rtol=1e-4, atol=1e-12)


def test_long_float_sums_are_as_exact_as_eagers():
    """Float sums accumulate in double: a float accumulator per lane rounded each of 4M
    additions of values near 1000 at the size of the total, 3e-3 off where eager's
    cascade sum is exact to 3e-8 (torch's float32 tolerance is 1.3e-6)."""
    torch.manual_seed(0)
    x = torch.rand(4_000_000) + 1000
    check(
        lambda x: (x.sum(), x.mean(), x.view(4, -1).sum(1), (x * x).sum(), x.half().sum()), x
    )
