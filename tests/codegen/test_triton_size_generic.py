"""Size-generic Triton kernels (compiler/codegen/triton_sized.py): a dynamic graph's Triton
kernels are loaded once and serve every size, their sizes passed as arguments. Each test
compares the compiled function with eager over many sizes (odd, prime, two rows, then a
single row and an empty tensor, which the tracer specialises, then a new size again) and
counts the Triton kernels loaded per size (each a compile on a GPU): after the first two
sizes, none. On CPU tensors Triton's interpreter runs them; the `gpu` variants run real
Triton on CUDA (CODEGEN_TEST_DEVICE=cuda, without TRITON_INTERPRET)."""

from __future__ import annotations

import os
import re

import pytest
import torch

import compiler
from compiler.codegen import size_args, triton_sized
from compiler.runtime import triton_launch
from tests.codegen.helpers import assert_compile_for_sm90
from tests.codegen.test_size_generic import (
    SIZES,
    Attention,
    MatmulEpilogue,
    pointwise,
    reductions,
    views,
)
from tests.codegen.test_size_generic import sweep as sweep_sizes

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
DEVICES = [
    pytest.param(
        "cpu", marks=pytest.mark.skipif(not INTERPRETED, reason="needs Triton's interpreter")
    ),
    pytest.param(
        "cuda",
        marks=[pytest.mark.gpu, pytest.mark.skipif(INTERPRETED, reason="runs real Triton")],
    ),
]
# Specialised by the tracer (as Inductor does): code of their own, which must still be right
SPECIALISED = (1, 0)


@pytest.fixture
def loads(tmp_path, monkeypatch):
    """Triton kernel modules loaded, in order, with fresh caches (disk and skeletons)."""
    monkeypatch.setenv("COMPILER_CPU_EMITTER", "triton")
    monkeypatch.setenv("COMPILER_STRICT", "1")
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(tmp_path / "cache"))
    size_args.clear()
    loaded: list[str] = []
    real = triton_launch.load_function

    def counting(source: str, name: str):
        loaded.append(name)
        return real(source, name)

    monkeypatch.setattr(triton_launch, "load_function", counting)
    yield loaded
    size_args.clear()


def sweep(fn, make_args, loads, device, atol=1e-5, rtol=1e-5, specialised=SPECIALISED):
    """Compiled vs eager at each size, then at the specialised sizes and a new one; returns
    the Triton kernels each size loaded."""
    sizes = (*SIZES, *specialised, 11)
    return sweep_sizes(fn, make_args, loads, sizes, atol, rtol, device)


def generic_kernels(compiled) -> list:
    return [k for k in compiler.inspect(compiled).kernels if k.size_generic]


def assert_one_load_serves(per_size: list[int], sizes=SIZES) -> None:
    """The first size loads the static graph's kernels, the second the generic ones; later
    sizes load nothing, but for the specialised ones, and the new size after them neither."""
    assert per_size[0] > 0 and per_size[1] > 0
    dynamic = per_size[2 : len(sizes)] + per_size[-1:]
    assert dynamic == [0] * len(dynamic), per_size


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "fn, make_args",
    [
        (pointwise, lambda n: (torch.randn(n, 24), torch.randn(n, 24))),
        # softmax and layer norm among them; x.sum() stays persistent (at most 1024 elements):
        # a size past that is looped, another kernel text (its own load, then a generic one)
        (reductions, lambda n: (torch.randn(n, 24),)),
        (lambda x: reductions(x.t())[:5], lambda n: (torch.randn(24, n),)),
        (views, lambda n: (torch.randn(n, 16),)),
        (lambda x: (x.sum(1), x.softmax(-1)), lambda n: (torch.randn(3, 1100 + n),)),  # looped
    ],
    ids=["pointwise", "reductions", "reductions_over_n", "views", "looped_rows"],
)
def test_op_families_across_sizes(loads, device, fn, make_args):
    # views: at 2 rows, x[1:] has one, which is code of its own (a broadcast); an empty
    # x[n - 2] does not exist
    if fn is views:
        sizes = tuple(n for n in SIZES if n != 2)
        compiled = compiler.compile(fn)
        for n in sizes:
            x = torch.randn(n, 16, device=device)
            torch.testing.assert_close(compiled(x), fn(x))
        before = len(loads)
        for n in (5, 23, 8):
            x = torch.randn(n, 16, device=device)
            torch.testing.assert_close(compiled(x), fn(x))
        assert len(loads) == before and generic_kernels(compiled)
        return
    compiled, per_size = sweep(fn, make_args, loads, device, atol=1e-4, rtol=1e-4)
    assert_one_load_serves(per_size)
    kernels = generic_kernels(compiled)
    assert kernels and all(k.language == "triton" for k in kernels)
    assert all("do_not_specialize=['ks0'" in k.generic_source for k in kernels if k.size_args)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "module, make_args",
    [
        (MatmulEpilogue, lambda n: (torch.randn(n, 32),)),
        (Attention, lambda n: (torch.randn(2, n, 32),)),
    ],
    ids=["addmm_gelu_residual", "causal_attention"],
)
def test_blocks_across_sizes(loads, device, module, make_args):
    model = module().eval().to(device)
    # eager's attention cannot view an empty sequence as heads (-1 is ambiguous)
    specialised = (1,) if module is Attention else SPECIALISED
    compiled, per_size = sweep(
        model, make_args, loads, device, atol=1e-4, rtol=1e-4, specialised=specialised
    )
    assert_one_load_serves(per_size)
    kernels = generic_kernels(compiled)
    assert kernels
    sizes_served = {tuple(k.size_args.items()) for k in kernels}
    assert len(sizes_served) > 1  # the same generic kernels, other sizes passed
    # the record of each generic kernel lists every size it has served
    assert max(len(k.sizes_served) for k in kernels) >= len(SIZES) - 2
    notes = " ".join(g for r in compiler.inspect(compiled).graphs for g in r.notes)
    assert "size-generic kernels:" in notes


@pytest.mark.parametrize("device", DEVICES)
def test_float16_and_integer_kernels_across_sizes(loads, device):
    def fn(x, i):
        return (x * 2 + i).sum(1), (i * 3) % 7, i.amax(0), x.mean(0)

    compiled, per_size = sweep(
        fn,
        lambda n: (torch.randn(n, 8, dtype=torch.float16), torch.randint(0, 100, (n, 8))),
        loads,
        device,
        atol=1e-2,
        rtol=1e-2,
        specialised=(1,),  # eager's amax of no rows raises
    )
    assert_one_load_serves(per_size)


def test_training_forward_and_backward_across_sizes(loads):
    if not INTERPRETED:
        pytest.skip("needs Triton's interpreter")
    model = MatmulEpilogue()
    compiled = compiler.compile(model)
    per_size = []
    for n in SIZES:
        x = torch.randn(n, 32, requires_grad=True)
        before = len(loads)
        compiled(x).square().sum().backward()
        per_size.append(len(loads) - before)
        x2 = x.detach().clone().requires_grad_()
        grad = x.grad
        model.zero_grad()
        model(x2).square().sum().backward()
        torch.testing.assert_close(grad, x2.grad, atol=1e-4, rtol=1e-4, msg=f"size {n}")
        model.zero_grad()
    assert per_size[2:] == [0] * (len(per_size) - 2), per_size
    assert {k.graph for k in generic_kernels(compiled)} == {"forward", "backward"}


# ---- block sizes per range of sizes -------------------------------------------------------


def _own(kind: str, xnumel: int, rnumel: int) -> dict:
    from compiler.codegen.triton_writer import default_config

    return {
        **default_config(kind, xnumel, rnumel),
        "xnumel": xnumel,
        "rnumel": rnumel,
        "kind": kind,
    }


def test_a_persistent_reduction_keeps_its_blocks_while_rows_fit_them():
    variant = size_args.Variant((), {}, "k", "", (), dialect="triton")
    first = triton_sized.sized_config(variant, _own("reduction", 8, 17))
    assert first["RBLOCK"] == 128 and first["persistent"]  # room for rows up to 4x longer
    for rows in (9, 40, 100, 128):  # the range's guard: a row fits the block
        assert triton_sized.sized_config(variant, _own("reduction", 8, rows))["RBLOCK"] == 128
    longer = triton_sized.sized_config(variant, _own("reduction", 8, 129))
    assert longer["RBLOCK"] >= 256 and longer["rnumel"] == 129
    # a short row after a long one goes back to the range that holds it
    assert triton_sized.sized_config(variant, _own("reduction", 8, 20))["RBLOCK"] == 128
    assert len(variant.configs) == 2
    # a row far shorter than every block chosen gets a config of its own
    assert triton_sized.sized_config(variant, _own("reduction", 8, 2))["RBLOCK"] == 8


def test_float_literals_become_arguments_only_as_typed_tensors_exact_in_fp32():
    def kernel(n: int) -> size_args.Split:
        source = (
            "@triton.jit\n"
            "def triton_k(in_ptr0, out_ptr0, XBLOCK: tl.constexpr):\n"
            f"    xnumel = {n}\n"
            f"    tmp0 = th.div_rn(tl.load(in_ptr0 + xindex), tl.full([], {float(n)!r}, tl.float32))\n"
            f"    tmp1 = tmp0 * {1 / n!r}\n"
            "\n\ntriton_k_0 = triton_k\n"
        )
        return size_args.split(source, "triton_k_0", "triton")

    size_args.clear()
    size_args.note_sample(kernel(8))
    variant = size_args.find(kernel(10))
    assert isinstance(variant, size_args.Variant)
    # the count is an argument; the bare 1/n is not (its sizes each get their own code)
    assert variant.ctypes == ("int", "float")
    assert "def triton_sized_" in variant.source and "ks0, kf1, XBLOCK" in variant.source
    assert "triton_k_0 = triton_k" not in variant.source
    assert variant.values(kernel(10)) is not None and variant.values(kernel(16)) is None
    size_args.clear()


# ---- the generic kernels compile for a real GPU (no device needed) ------------------------


def test_generic_kernels_compile_for_sm90(loads, tmp_path):
    """The interpreter accepts what Triton's compiler may not (a runtime scalar where a
    literal was): every generic kernel of the families above compiles for sm_90, with the
    pointer dtypes of a size it served."""
    pytest.importorskip("triton.backends.nvidia")
    if not INTERPRETED:
        pytest.skip("needs Triton's interpreter")
    cases = [
        (reductions, lambda n: (torch.randn(n, 40),)),
        (lambda x: (x.mean(0), x.var(0)), lambda n: (torch.randn(n, 24),)),  # kf: a mean's n
        (Attention().eval(), lambda n: (torch.randn(2, n, 32),)),
        (lambda x: (x.sum(1), x.softmax(-1)), lambda n: (torch.randn(3, 1100 + n),)),
    ]
    folder = tmp_path / "generic"
    folder.mkdir()
    for fn, make_args in cases:
        compiled = compiler.compile(fn)
        with torch.no_grad():
            for n in (6, 7, 13):
                compiled(*make_args(n))
        for k in generic_kernels(compiled):
            # the per-size source's pointer comments give the dtypes compile_sm90 reads
            lines = k.source.splitlines()
            pointers = [line for line in lines if re.match(r"\s*# \w+_ptr\d+ = ", line)]
            text = "\n".join([k.generic_source, *pointers, ""])
            (folder / f"{k.size_generic}.py").write_text(text)
    texts = [path.read_text() for path in folder.glob("*.py")]
    assert any("ks0" in t for t in texts) and any("tl.full([], kf" in t for t in texts)
    assert_compile_for_sm90(folder)


# ---- the launcher's side ------------------------------------------------------------------


def test_max_autotune_keeps_what_it_tuned_per_range_of_block_sizes(loads):
    # the sizes of a generic kernel share its source; a tuned persistent config of short
    # rows (RBLOCK 32) must never be read back for rows of 500
    from compiler.codegen.common import KernelSource

    source = (
        "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
        "def triton_sized_k(in_ptr0, ks0, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):\n"
        "    pass\n"
    )
    fn, key = triton_launch.load_function(source, "triton_sized_k")

    def kernel(rows: int) -> triton_launch.TritonKernel:
        config = triton_sized._for_range(
            {**_own("reduction", 4, rows), "xnumel": 4, "rnumel": rows, "kind": "reduction"}
        )
        text = KernelSource("k", "triton", source, "", config={**config, "xnumel": 4})
        return triton_launch.TritonKernel(fn, text, "max-autotune", key, {"ks0": rows})

    assert kernel(20).key == kernel(30).key != kernel(500).key
    assert kernel(20).key != key


def test_launch_notes_name_the_kernels_that_share_a_reason(monkeypatch):
    from types import SimpleNamespace

    monkeypatch.setattr(triton_launch, "direct_launch_off", lambda: None)
    why = "it takes size arguments, which CudaLaunch does not pass"
    kernels = [SimpleNamespace(name=f"k{i}", direct_off=why) for i in range(5)]
    kernels.append(SimpleNamespace(name="odd", direct_off="another reason"))
    notes = triton_launch.launch_notes(kernels)
    assert notes[1:] == [
        f"5 kernels (k0, k1, k2, ...) are launched by Triton's runtime: {why}",
        "odd is launched by Triton's runtime: another reason",
    ]


def test_a_generic_kernel_that_does_not_compile_runs_the_sizes_own_code(loads, monkeypatch):
    """What Triton's compiler refuses on a GPU (the interpreter runs anything) must not reach
    the user: after the warm-up, such a kernel runs its size's own code."""
    from compiler.codegen.common import KernelSource

    if not INTERPRETED:
        pytest.skip("needs Triton's interpreter")
    compiled = compiler.compile(lambda x: x.sin() * 2)
    for n in (6, 7):
        compiled(torch.randn(n, 8))
    records = [k for k in compiler.inspect(compiled).kernels if k.language == "triton"]
    six, seven = (
        KernelSource(k.name, "triton", k.source, "", k.grid, k.config) for k in records[:2]
    )
    size_args.clear()
    triton_sized.note_sample(six)
    (kernel,) = triton_sized.load_sized([seven], None)
    assert kernel.generic is not None

    def warm(self, dtypes):
        if self.generic is not None:
            raise RuntimeError("refused by the compiler")

    monkeypatch.setattr(triton_launch.TritonKernel, "warm", warm)
    variant = kernel.generic
    (note,) = triton_sized.own_code_where_generic_fails([(kernel, [torch.float32] * 2)])
    assert "runs its own code" in note and "refused by the compiler" in note
    assert kernel.generic is None and not kernel.sizes and variant.failed
    x, out = torch.randn(7, 8), torch.empty(7, 8)
    kernel.run(x, out)
    torch.testing.assert_close(out, x.sin() * 2)


def test_a_dynamic_graphs_independent_kernels_run_generic_code_not_combined(loads):
    # a combined kernel's table of program ids is written for its block size, which a
    # generic kernel's range would keep from another size (40 rows: XBLOCK 1024, not 256):
    # a dynamic graph combines none, its parts run size-generic code
    if not INTERPRETED:
        pytest.skip("needs Triton's interpreter")

    def fn(a, b):
        return a.sin() * 2, b.cos() + 1

    compiled = compiler.compile(fn)
    per_size = []
    with compiler.config.patch(combo_kernels=True):  # even where every graph may combine
        for n in (6, 7, 40, 9, 23):
            a, b = torch.randn(n, 8), torch.randn(n + 3, 16)
            before = len(loads)
            torch.testing.assert_close(compiled(a, b), fn(a, b), msg=f"size {n}")
            per_size.append(len(loads) - before)
    assert per_size[2:] == [0, 0, 0], per_size
    kinds = [k.config.get("kind") for k in compiler.inspect(compiled).kernels]
    assert kinds[0] == "combo" and "combo" not in kinds[1:]  # the static first size's
    assert generic_kernels(compiled)
