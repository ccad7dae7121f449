"""Size-generic C++ kernels (compiler/codegen/size_args.py): a dynamic graph's kernels compile
once and serve every size, with their sizes as arguments. Each test compares the compiled
function with eager over many sizes (odd, prime, two rows; 0 and 1 specialise in the tracer)
and counts the C++ builds the sizes cost: after the first two sizes, none."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import compiler
from compiler.codegen import cpp_kernels, size_args
from compiler.codegen.cpp import emit_kernel_source
from compiler.runtime import cpp_build

SIZES = (6, 7, 13, 2, 31, 9, 37, 7)


@pytest.fixture
def builds(tmp_path, monkeypatch):
    """C++ libraries built, in order, with fresh caches (disk and skeletons)."""
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(tmp_path))
    size_args.clear()
    built: list[str] = []
    real = cpp_build.compile_files

    def counting(sources, flags, lib):
        built.append(lib.name)
        return real(sources, flags, lib)

    monkeypatch.setattr(cpp_build, "compile_files", counting)
    yield built
    size_args.clear()


def sweep(fn, make_args, builds, sizes=SIZES, atol=1e-5, rtol=1e-5, device="cpu"):
    """Compiled vs eager at each size; returns what each size added to `builds` (the C++
    builds here; tests/codegen/test_triton_size_generic.py counts Triton modules loaded)."""
    compiled = compiler.compile(fn)
    per_size = []
    for n in sizes:
        args = [a.to(device) for a in make_args(n)]
        before = len(builds)
        with torch.no_grad():
            expected = fn(*args)
            actual = compiled(*args)
        torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol, msg=f"size {n}")
        per_size.append(len(builds) - before)
    return compiled, per_size


def generic_kernels(compiled) -> list:
    return [k for k in compiler.inspect(compiled).kernels if k.size_generic]


def assert_one_compile_serves(per_size: list[int]) -> None:
    """The first size builds the static graph's kernels, the second the generic ones; the
    later sizes build nothing (repeated sizes never do)."""
    assert per_size[0] > 0 and per_size[1] > 0
    assert per_size[2:] == [0] * (len(per_size) - 2), per_size


# ---- op families --------------------------------------------------------------------------


def pointwise(x, y):
    return torch.sigmoid(x) * y + torch.where(x > 0, x.exp(), -y) / 3


def reductions(x):
    return (
        x.sum(0),
        x.mean(1),
        x.amax(1),
        x.softmax(-1),
        F.layer_norm(x, (x.shape[-1],)),
        x.sum(),
    )


def views(x):
    n = x.shape[0]
    a = x.reshape(n, 4, 4).permute(2, 0, 1).contiguous()
    b = torch.cat([x[:, :5], x[1:, :3].sum(0, keepdim=True).expand(n, 3), x[:, 8:]], dim=1)
    return a * 2, b.t() + 1, torch.cat([x, x[1:] * 2], dim=0), x[:, 3:11:2] - x[n - 2, :4]


@pytest.mark.parametrize(
    "fn, make_args",
    [
        (pointwise, lambda n: (torch.randn(n, 24), torch.randn(n, 24))),
        (reductions, lambda n: (torch.randn(n, 40),)),
        (lambda x: reductions(x.t())[:5], lambda n: (torch.randn(24, n),)),
        (views, lambda n: (torch.randn(n, 16),)),
    ],
    ids=["pointwise", "reductions", "reductions_over_n", "views"],
)
def test_op_families_across_sizes(builds, fn, make_args):
    # views: at 2 rows, x[1:] has one, which is code of its own (a broadcast)
    sizes = SIZES if fn is not views else tuple(n for n in SIZES if n != 2)
    compiled, per_size = sweep(fn, make_args, builds, sizes)
    assert_one_compile_serves(per_size)
    assert generic_kernels(compiled)


def test_float64_and_integer_kernels_across_sizes(builds):
    def fn(x, i):
        return (x * 2 + i).sum(1), (i * 3) % 7, i.amax(0)

    compiled, per_size = sweep(
        fn,
        lambda n: (torch.randn(n, 8, dtype=torch.float64), torch.randint(0, 100, (n, 8))),
        builds,
    )
    assert_one_compile_serves(per_size)


class MatmulEpilogue(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(32, 32)

    def forward(self, x):
        return x + F.gelu(self.fc(x))


class Attention(torch.nn.Module):
    """An attention-style block: layer norm, causal mask from arange of the length, softmax,
    matmuls."""

    def __init__(self, d=32, heads=2):
        super().__init__()
        self.heads = heads
        self.ln = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / (d // self.heads) ** 0.5
        i = torch.arange(t, device=x.device)
        att = att.masked_fill(i[None, :] > i[:, None], float("-inf")).softmax(-1)
        return x + (att @ v).transpose(1, 2).reshape(b, t, d)


@pytest.mark.parametrize(
    "module, make_args",
    [
        (MatmulEpilogue, lambda n: (torch.randn(n, 32),)),
        (Attention, lambda n: (torch.randn(2, n, 32),)),
    ],
    ids=["addmm_gelu_residual", "causal_attention"],
)
def test_blocks_across_sizes(builds, module, make_args):
    model = module().eval()
    compiled, per_size = sweep(model, make_args, builds, atol=1e-4, rtol=1e-4)
    assert_one_compile_serves(per_size)
    kernels = generic_kernels(compiled)
    assert kernels and all("int64_t ks0" in k.generic_source for k in kernels)
    sizes_served = {tuple(k.size_args.items()) for k in kernels}
    assert len(sizes_served) > 1  # the same generic kernels, other sizes passed
    notes = " ".join(g for r in compiler.inspect(compiled).graphs for g in r.notes)
    assert "size-generic kernels:" in notes


# ---- the guard: another skeleton or other fixed literals get their own code --------------


def test_split_separates_literals_from_identifiers():
    source = (
        "// cpp_k: pointwise kernel 12\n"
        'extern "C" void cpp_k(const int32_t* in_ptr0, float* out_ptr0) {\n'
        "  for (int64_t x0 = 0; x0 < 9; ++x0) {\n"
        "    out_ptr0[x0] = tmp12 * 0.125f + 1e-05f + 2.5 + INT64_C(81) + in_ptr0[256*x0];\n"
        "  }\n}\n"
    )
    s = size_args.split(source, "cpp_k")
    assert s.texts == ("0", "9", "0.125", "1e-05", "2.5", "81", "256")
    assert s.kinds == ("int", "int", "float", "float", "double", "int", "int")
    assert "@kernel@" in s.skeleton and "pointwise kernel" not in s.skeleton
    assert "int32_t" in s.skeleton and "tmp12" in s.skeleton and "in_ptr0" in s.skeleton


def _kernel(n: int, stride: int, fixed: int = 4) -> size_args.Split:
    source = (
        'extern "C" void cpp_k(const float* in_ptr0, float* out_ptr0) {\n'
        f"  for (int64_t x0 = 0; x0 < {n}; ++x0) out_ptr0[x0] = in_ptr0[{stride}*x0 + {fixed}]"
        f" * {1 / n!r}f;\n}}\n"
    )
    return size_args.split(source, "cpp_k")


def test_variants_take_their_parameters_from_two_samples_and_check_the_rest():
    size_args.clear()
    size_args.note_sample(_kernel(8, 8))
    variant = size_args.find(_kernel(9, 9))
    assert isinstance(variant, size_args.Variant)
    # the bound and the stride vary together: one size parameter; 1/n is a float one
    assert variant.ctypes == ("int64_t", "float")
    assert "x0 < ks0" in variant.source and "ks0*x0 + 4" in variant.source
    assert "int64_t ks0, float kf1" in variant.source
    found = size_args.find(_kernel(13, 13))
    assert found[0] is variant and found[1] == (13, 1 / 13)
    # a literal the generic code fixes differs, or one parameter's positions disagree:
    # another variant, from all samples
    other = size_args.find(_kernel(13, 13, fixed=5))
    assert isinstance(other, size_args.Variant) and other is not variant
    assert variant.values(_kernel(13, 14)) is None
    size_args.clear()


def test_static_kernels_are_unchanged_and_dynamic_ones_thread_at_run_time(builds):
    from compiler.aot.trace import trace_forward
    from compiler.lowering.graph import lower
    from compiler.scheduler.fusion import schedule

    gm = torch.fx.symbolic_trace(lambda x: (x.sin() + 1).softmax(-1))
    x = torch.randn(64, 600)
    aot = trace_forward(gm, [x])
    graph, _ = lower(aot, [x], welford=False)
    sched = schedule(graph, materialise_recomputed=True)
    group = sched.kernels[0]
    _, static, _ = emit_kernel_source(group, sched)
    _, generic, _ = emit_kernel_source(group, sched, size_generic=True)
    assert "if(parallel:" not in static
    assert "#pragma omp parallel for if(parallel: " in generic


def test_a_generic_kernel_that_fails_to_build_falls_back_to_per_size_code(builds, monkeypatch):
    real = size_args._variant

    def broken(s, samples, k):
        v = real(s, samples, k)
        v.source = v.source.replace("{", "{ this is not C++;", 1)
        return v

    monkeypatch.setattr(size_args, "_variant", broken)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the C++ compiler's failure, warned once
        compiled, per_size = sweep(
            pointwise, lambda n: (torch.randn(n, 8), torch.randn(n, 8)), builds
        )
    assert all(per_size[:-1])  # every new size built its own kernels, each right
    assert not generic_kernels(compiled)


def test_load_sized_without_a_second_sample_builds_the_kernels_own_code(builds):
    from compiler.codegen.common import KernelSource

    source = (
        'extern "C" void cpp_lone(const float* in_ptr0, float* out_ptr0) {\n'
        "  for (int64_t x0 = 0; x0 < 5; ++x0) out_ptr0[x0] = in_ptr0[x0] + 1.0f;\n}\n"
    )
    (kernel,) = cpp_kernels.load_sized([KernelSource("cpp_lone", "cpp", source, "cpp_lone(a, b)")])
    assert kernel.generic is None
    x, out = torch.randn(5), torch.empty(5)
    kernel(x, out)
    torch.testing.assert_close(out, x + 1)


def test_training_forward_and_backward_across_sizes(builds):
    model = MatmulEpilogue()
    compiled = compiler.compile(model)
    per_size = []
    for n in SIZES:
        x = torch.randn(n, 32, requires_grad=True)
        before = len(builds)
        out = compiled(x)
        out.square().sum().backward()
        per_size.append(len(builds) - before)
        grad, weight_grad = x.grad, model.fc.weight.grad.clone()
        x2 = x.detach().clone().requires_grad_()
        model.zero_grad()
        model(x2).square().sum().backward()
        torch.testing.assert_close(grad, x2.grad, atol=1e-4, rtol=1e-4, msg=f"size {n}")
        torch.testing.assert_close(weight_grad, model.fc.weight.grad, atol=1e-4, rtol=1e-4)
        model.zero_grad()
    assert_one_compile_serves(per_size)
    graphs = {k.graph for k in generic_kernels(compiled)}
    assert graphs == {"forward", "backward"}
