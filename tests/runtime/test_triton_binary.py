"""Kernels compiled to cubins in our cache (compiler/runtime/triton_binary.py), for a GPU
target, with no GPU: the specialisation matches what Triton's JITFunction would compile, a
binary is compiled once and found after, a damaged one is compiled again, and the workers
and the parent share the requests. Loading and launching them needs a GPU
(tests/runtime/test_cuda_runtime.py)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from compiler.runtime import compile_workers, cpp_ext, triton_binary
from tests.runtime.test_compile_workers import _spec

# test_compile_workers' kernel without our helpers module: imported here, in the test's own
# process with the interpreter off, it would leave that module compiled for a GPU for the
# interpreted tests after it
KERNEL = """
import triton
import triton.language as tl


@triton.jit
def triton_poi_fused_sin(in_ptr0, out_ptr0, XBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xindex < 1000
    tmp0 = tl.load(in_ptr0 + xindex, xmask, other=0)
    tl.store(out_ptr0 + xindex, tl.sin(tmp0) * 2.0, xmask)
"""

TARGET = ("cuda", 90, 32)


@pytest.fixture
def kernel(tmp_path, monkeypatch):
    pytest.importorskip("triton.backends.nvidia")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(tmp_path / "ours"))
    # tests/codegen turns the interpreter on for its process: compiled for a GPU, here
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    path = tmp_path / "kernel_mod.py"
    path.write_text(KERNEL)
    spec = importlib.util.spec_from_file_location("kernel_mod", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return path, module.triton_poi_fused_sin


def spec(aligned=(True, True), block=128) -> triton_binary.Spec:
    return triton_binary.Spec(("float32", "float32"), aligned, (("XBLOCK", block),), 4, TARGET)


def test_the_specialisation_is_the_one_jitfunction_would_compile(kernel):
    """The same ASTSource (hence Triton's cache key) as the specialisation data Triton's
    JITFunction hands its jit_cache_hook, rebuilt as the jit workers do."""
    from triton.compiler import ASTSource

    _, fn = kernel
    data = json.loads(_spec(128))
    constexprs = {(2,): 128}
    attrs = {tuple(k): v for k, v in zip(data["attrs_keys"], data["attrs_vals"])}
    theirs = ASTSource(fn, data["signature"], constexprs, attrs)
    assert triton_binary.ast_source(fn, spec()).hash() == theirs.hash()
    # an unaligned pointer has no divisibility attribute, and another key
    ours = triton_binary.ast_source(fn, spec((False, True)))
    assert ours.attrs == {(1,): [["tt.divisibility", 16]]}
    assert triton_binary.key(KERNEL, spec()) != triton_binary.key(KERNEL, spec((False, True)))
    with pytest.raises(ValueError, match="takes 2 pointers"):
        triton_binary.ast_source(
            fn, triton_binary.Spec(("float32",), (True,), (("XBLOCK", 64),), 4, TARGET)
        )


CACHE_CHECK = """
import importlib.util, sys
from pathlib import Path
import triton
from compiler.runtime import triton_binary

path, root = Path(sys.argv[1]), Path(sys.argv[2])
spec = importlib.util.spec_from_file_location("kernel_mod", path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
fn, source = module.triton_poi_fused_sin, path.read_text()


def spec(block=128):
    return triton_binary.Spec(("float32", "float32"), (True, True), (("XBLOCK", block),), 4,
                              ("cuda", 90, 32))


binary = triton_binary.compile_binary(fn, source, spec())
assert binary.cubin[:4] == b"\\x7fELF" and binary.name == "triton_poi_fused_sin", binary.name
assert binary.num_warps == 4
compiles = []
real = triton.compile
triton.compile = lambda *a, **k: compiles.append(1) or real(*a, **k)
assert triton_binary.compile_binary(fn, source, spec()) == binary
assert compiles == [], "found in the cache: not compiled again"
cubin = next((root / "cubins").glob("*.cubin"))
cubin.write_bytes(cubin.read_bytes()[:100])  # truncated: not loaded, compiled again
assert triton_binary.cached(triton_binary.key(source, spec())) is None
assert triton_binary.stored(triton_binary.key(source, spec()))  # there, read as damaged
assert not triton_binary.stored(triton_binary.key(source, spec(512)))
assert triton_binary.compile_binary(fn, source, spec()) == binary
assert compiles == [1]
assert triton_binary.compile_binary(fn, source, spec(256)).cubin != binary.cubin
print("ok")
"""


def test_a_binary_is_compiled_once_then_found_and_a_damaged_one_compiled_again(kernel, tmp_path):
    """In a process of its own: Triton compiles for a GPU only in a process whose Triton
    modules were not imported under the interpreter (tests/codegen's conftest turns it on)."""
    path, _ = kernel
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    run = subprocess.run(
        [sys.executable, "-c", CACHE_CHECK, str(path), str(tmp_path / "ours")],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0 and run.stdout.split()[-1] == "ok", run.stderr[-3000:]


def _requests(path, blocks):
    return [
        compile_workers.Request(
            str(path), "kernel_mod", "triton_poi_fused_sin", spec(block=b).to_json(), TARGET,
            kind="binary",
        )
        for b in blocks
    ]  # fmt: skip


def test_workers_compile_binaries_into_our_cache(kernel):
    path, _ = kernel
    pool = compile_workers.Pool(1)
    try:
        assert pool.compile_all(_requests(path, (64, 128))) == [None, None]
    finally:
        pool.close()
    for b in (64, 128):
        assert triton_binary.cached(triton_binary.key(KERNEL, spec(block=b))) is not None


def test_the_parent_takes_requests_while_the_workers_start(kernel):
    path, _ = kernel
    helped = []
    pool = compile_workers.Pool(1)
    try:
        results = pool.compile_all(_requests(path, (64, 128, 256)), here=helped.append)
    finally:
        pool.close()
    assert results == [None] * 3
    assert helped, "the calling thread took none: a single kernel would wait for a worker"


def test_a_single_kernel_is_compiled_by_the_parent_even_with_workers_ready(kernel):
    path, _ = kernel
    helped = []
    pool = compile_workers.Pool(1)
    try:
        assert pool.ready[0].wait(120), "the worker never started"
        assert pool.compile_all(_requests(path, (64,)), here=helped.append) == [None]
    finally:
        pool.close()
    assert helped == [0]


def test_a_failing_compile_in_the_parent_is_reported_for_that_request(kernel):
    path, _ = kernel
    request = compile_workers.Request(
        str(path), "kernel_mod", "triton_poi_fused_sin", spec().to_json(), TARGET, kind="binary"
    )
    pool = compile_workers.Pool(1)
    pool.close()
    pool.procs[0].wait()

    def fail(k):
        raise RuntimeError("ptxas died")

    assert "ptxas died" in pool.compile_all([request], here=fail)[0]


def test_the_launcher_needs_a_cuda_driver_and_says_so():
    api = cpp_ext.cuda_launch_api()
    if api is None:
        pytest.skip(f"the C++ extension is not built: {cpp_ext.status()}")
    load, launch_type = api
    try:
        import ctypes

        ctypes.CDLL("libcuda.so.1")
        pytest.skip("this machine has a CUDA driver")
    except OSError:
        pass
    with pytest.raises(RuntimeError, match="libcuda"):
        launch_type(1, (1, 1, 1), 4, 0, (True,))
    with pytest.raises(RuntimeError, match="libcuda"):
        load(b"\x7fELF", "k", 0, 0)
    with pytest.raises(TypeError):
        load("not bytes", "k", 0, 0)


def test_spec_round_trips_through_json():
    s = spec((True, False), 1024)
    assert triton_binary.Spec.from_json(s.to_json()) == s


def test_kernels_that_check_indices_compile_with_asserts_and_without_overflow_checks():
    """A gather's kernel asserts its indices are inside (th.check_index). Triton compiles
    device-side asserts in its debug mode only, which also asserts on every int32 overflow,
    where our integer arithmetic wraps as eager's does: such kernels are compiled with the
    one and not the other, by Triton's runtime and into our cache alike."""
    from dataclasses import replace
    from types import SimpleNamespace

    from compiler.runtime.triton_launch import TritonKernel

    config = {"xnumel": 4, "XBLOCK": 4, "num_warps": 1, "kind": "pointwise"}
    text = SimpleNamespace(name="k", source=KERNEL, config={**config, "debug": True})
    assert TritonKernel(None, text, None, "k").options == {
        "enable_fp_fusion": True,
        "debug": True,
        "sanitize_overflow": False,
    }
    text.config = config
    assert TritonKernel(None, text, None, "k").options == {"enable_fp_fusion": True}
    checked = replace(spec(), checks=True)
    assert triton_binary.Spec.from_json(checked.to_json()) == checked
    assert triton_binary.key(KERNEL, checked) != triton_binary.key(KERNEL, spec())
