"""Triton compile workers (compiler/runtime/compile_workers.py): a worker compiles a kernel
module of ours into Triton's on-disk cache for a GPU target, with no GPU; a request it cannot
serve comes back as an error, never a hang."""

from __future__ import annotations

import json
import signal

import pytest

from compiler.runtime import compile_workers

KERNEL = """
import triton
import triton.language as tl

from compiler.runtime import triton_helpers as th


@triton.jit
def triton_poi_fused_sin(in_ptr0, out_ptr0, XBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xindex < 1000
    tmp0 = tl.load(in_ptr0 + xindex, xmask, other=0)
    tl.store(out_ptr0 + xindex, th.multiply(tl.sin(tmp0), 2.0), xmask)
"""


@pytest.fixture
def kernel_file(tmp_path, monkeypatch):
    pytest.importorskip("triton.backends.nvidia")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    path = tmp_path / "kernel.py"
    path.write_text(KERNEL)
    return path


def _spec(block: int = 128) -> str:
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend

    options = make_backend(GPUTarget("cuda", 90, 32)).parse_options({"num_warps": 4})
    return json.dumps(
        {
            "signature": {"in_ptr0": "*fp32", "out_ptr0": "*fp32", "XBLOCK": "constexpr"},
            "constant_keys": [[2]],
            "constant_vals": [{"constexpr": block}],
            "attrs_keys": [[0], [1]],
            "attrs_vals": [[["tt.divisibility", 16]], [["tt.divisibility", 16]]],
            "options": options.__dict__,
        },
        default=list,
    )


def test_worker_compiles_into_tritons_cache_without_a_gpu(kernel_file, tmp_path):
    pool = compile_workers.Pool(2)
    try:
        requests = [
            compile_workers.Request(
                str(kernel_file), "k", "triton_poi_fused_sin", _spec(b), ("cuda", 90, 32)
            )
            for b in (128, 256)
        ]
        assert pool.compile_all(requests) == [None, None]
        # one compiled binary per block size, where the parent's Triton looks for it
        assert len(list((tmp_path / "triton").rglob("*.cubin"))) == 2
    finally:
        pool.close()


def test_a_request_a_worker_cannot_serve_is_an_error(kernel_file):
    pool = compile_workers.Pool(1)
    try:
        bad = compile_workers.Request(
            str(kernel_file), "k", "no_such_kernel", _spec(), ("cuda", 90, 32)
        )
        good = compile_workers.Request(
            str(kernel_file), "k", "triton_poi_fused_sin", _spec(), ("cuda", 90, 32)
        )
        errors = pool.compile_all([bad, good])
        assert "no_such_kernel" in errors[0]
        assert errors[1] is None  # the worker goes on after a failed request
    finally:
        pool.close()


def test_dead_workers_leave_requests_to_the_parent(kernel_file):
    pool = compile_workers.Pool(1)
    pool.close()
    pool.procs[0].wait()
    request = compile_workers.Request(
        str(kernel_file), "k", "triton_poi_fused_sin", _spec(), ("cuda", 90, 32)
    )
    assert pool.compile_all([request]) == ["not compiled by a worker"]


def test_a_stuck_worker_is_ended_and_its_request_left_to_the_parent(kernel_file, monkeypatch):
    monkeypatch.setattr(compile_workers, "DEADLINE_S", 0.5)
    pool = compile_workers.Pool(1)
    pool.procs[0].send_signal(signal.SIGSTOP)  # alive, never answering
    request = compile_workers.Request(
        str(kernel_file), "k", "triton_poi_fused_sin", _spec(), ("cuda", 90, 32)
    )
    assert pool.compile_all([request]) == ["not compiled by a worker"]
    assert pool.procs[0].wait(timeout=10) is not None  # ended, not left behind


def test_without_a_usable_triton_driver_the_parent_compiles_alone(monkeypatch):
    """No GPU here: Triton's driver cannot name a target, so no request goes to the workers
    (and nothing raises into the compile that asked)."""
    from compiler.runtime import triton_launch

    class NoRequests:
        def compile_all(self, requests):
            raise AssertionError("nothing should reach the workers")

    monkeypatch.setattr(compile_workers, "_pool", NoRequests())
    triton_launch.in_workers([(object(), [])])


def test_no_processes_to_be_had_means_no_pool(monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError("Resource temporarily unavailable")

    monkeypatch.setattr(compile_workers, "_pool", None)
    monkeypatch.setattr(compile_workers.subprocess, "Popen", refuse)
    assert compile_workers.start(2) is None
    assert compile_workers.pool() is None
