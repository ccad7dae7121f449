"""Our kernels compiled to cubins by Triton, kept in our cache, and loaded and launched without
Triton's runtime.

Triton's runtime builds two kinds of C module with gcc: its CUDA driver utilities (about
0.8 s, once per cache) and a launcher per kernel signature (0.2-0.8 s each). On a cold start
those builds cost more than compiling a small kernel, and a warm process still pays Triton's
cache lookup, which first hashes Triton's own installation (about 0.4 s). This module asks
Triton only for the compile (`triton.compile`), with the specialisation its `JITFunction`
would compute for our kernels, whose parameters are pointers and constexpr block sizes. The
cubin and the metadata a launch needs go to our cache, keyed by the kernel's source and that
specialisation; `cuda_launch.h` (in the C++ extension) loads and launches them.

Imported by the compile workers (compiler/runtime/compile_workers.py) too, which have no
torch: this module imports only the standard library and, when compiling, Triton.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from compiler.runtime.cache import cache_dir, write_atomic

# torch dtype names (str(dtype) without "torch.") to Triton's pointer element types
ELEMENT_TYPES = {
    "float32": "fp32",
    "float16": "fp16",
    "bfloat16": "bf16",
    "float64": "fp64",
    "int64": "i64",
    "int32": "i32",
    "int16": "i16",
    "int8": "i8",
    "uint8": "u8",
    "bool": "i1",
}
BLOCK_NAMES = ("XBLOCK", "RBLOCK")


@dataclass(frozen=True)
class Spec:
    """What Triton compiles a kernel for: its pointers' element types and 16-byte alignment,
    its block sizes and warps, the target GPU, whether a multiply and an add may become
    one FMA (not under `emulate_precision_casts`: eager rounds between them), and whether
    its device-side asserts are compiled in (`checks`: Triton's debug mode, for gathers)."""

    dtypes: tuple[str, ...]  # one per pointer parameter, in order
    aligned: tuple[bool, ...]
    blocks: tuple[tuple[str, int], ...]  # (("XBLOCK", 1024),)
    num_warps: int
    target: tuple[str, int, int]  # (backend, arch, warp size), as GPUTarget takes them
    fp_fusion: bool = True
    checks: bool = False

    def to_json(self) -> str:
        return json.dumps(
            [list(self.dtypes), list(self.aligned), [list(b) for b in self.blocks],
             self.num_warps, list(self.target), self.fp_fusion, self.checks]
        )  # fmt: skip

    @staticmethod
    def from_json(text: str) -> "Spec":
        dtypes, aligned, blocks, warps, target, fp_fusion, checks = json.loads(text)
        return Spec(
            tuple(dtypes), tuple(aligned), tuple((n, v) for n, v in blocks), warps,
            tuple(target), fp_fusion, checks,
        )  # fmt: skip


@dataclass(frozen=True)
class Binary:
    """A compiled kernel as the launcher needs it."""

    cubin: bytes
    name: str  # the kernel's symbol in the cubin
    shared: int  # bytes of dynamic shared memory
    num_warps: int


def ast_source(fn: Any, spec: Spec) -> Any:
    """Triton's ASTSource for `fn` (a JITFunction) as JITFunction.run would build it for
    pointers of these types and alignments: each aligned pointer carries Triton's
    divisibility-16 attribute, the block sizes are constexprs."""
    from triton.compiler import ASTSource

    blocks = dict(spec.blocks)
    pointers = [k for k, name in enumerate(fn.arg_names) if name not in blocks]
    if len(pointers) != len(spec.dtypes):
        raise ValueError(
            f"{fn.__name__} takes {len(pointers)} pointers, the spec has {len(spec.dtypes)}"
        )
    signature, constexprs, attrs = {}, {}, {}
    for k, name in enumerate(fn.arg_names):
        if name in blocks:
            signature[name] = "constexpr"
            constexprs[(k,)] = blocks[name]
        else:
            j = pointers.index(k)
            signature[name] = "*" + ELEMENT_TYPES[spec.dtypes[j]]
            if spec.aligned[j]:
                attrs[(k,)] = [["tt.divisibility", 16]]
    return ASTSource(fn, signature, constexprs, attrs)


def key(source: str, spec: Spec) -> str:
    """The cache key of a kernel compiled for `spec`: its module's source, the spec, Triton's
    version and build (the size and time of its library and bundled ptxas), and the helpers
    the kernels call."""
    h = hashlib.sha256()
    for part in (source, spec.to_json(), _toolchain()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:40]


_toolchain_id: str | None = None


def _toolchain() -> str:
    global _toolchain_id
    if _toolchain_id is None:
        import triton

        root = Path(triton.__file__).parent
        tools = [*root.glob("_C/libtriton*"), *root.glob("backends/nvidia/bin/*")]  # ptxas too
        stats = sorted(f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in tools)
        helpers = Path(__file__).with_name("triton_helpers.py").read_bytes()
        env = [os.environ.get(v, "") for v in ("TRITON_DEBUG", "TRITON_PTXAS_PATH")]
        _toolchain_id = "|".join(
            [triton.__version__, *stats, hashlib.sha256(helpers).hexdigest(), *env]
        )
    return _toolchain_id


_prepared = threading.Event()
_preparing = False


def prepare_in_background() -> None:
    """Start what a first compile would otherwise wait for, in a thread: Triton's hash of
    its own installation (about 0.4 s, which `triton.compile` computes once per process
    before its first compile), ours, and the import of Triton's code generator (0.1-0.2 s,
    which `triton.compile` imports at its first use)."""
    global _preparing
    if _preparing:
        return
    _preparing = True

    def prepare() -> None:
        try:
            from triton.runtime.cache import triton_key

            triton_key()
            _toolchain()
            import triton.compiler.code_generator  # noqa: F401
        except Exception:
            pass  # the first compile meets the same error and reports it
        finally:
            _prepared.set()

    threading.Thread(target=prepare, daemon=True).start()


def _paths(cache_key: str) -> tuple[Path, Path]:
    folder = cache_dir() / "cubins"
    return folder / f"{cache_key}.cubin", folder / f"{cache_key}.json"


def stored(cache_key: str) -> bool:
    """Whether a binary is stored under `cache_key` (`cached` checks it when it is read)."""
    return all(path.exists() for path in _paths(cache_key))


def cached(cache_key: str) -> Binary | None:
    """The binary stored under `cache_key`, or None when there is none or it is unreadable
    (then it is compiled again and rewritten)."""
    cubin_path, meta_path = _paths(cache_key)
    try:
        meta = json.loads(meta_path.read_text())
        cubin = cubin_path.read_bytes()
        if hashlib.sha256(cubin).hexdigest() != meta["sha256"]:
            return None
        return Binary(cubin, meta["name"], meta["shared"], meta["num_warps"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


class NotLaunchable(Exception):
    """The compiled kernel needs what our launcher does not do (scratch memory, clusters,
    cooperative or programmatic-dependent launch): Triton's own launcher runs it."""


def compile_binary(fn: Any, source: str, spec: Spec) -> Binary:
    """Compile `fn` for `spec` with Triton (or find it in our cache) and store the binary."""
    cache_key = key(source, spec)
    found = cached(cache_key)
    if found is not None:
        return found
    if _preparing:  # computing the same hashes in a second thread would only slow both
        _prepared.wait(60)
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget

    options = {
        "num_warps": spec.num_warps,
        "debug": knobs.runtime.debug,
        "enable_fp_fusion": spec.fp_fusion,
    }
    if spec.checks:  # the asserts without the int32 overflow ones (our integers wrap)
        options.update(debug=True, sanitize_overflow=False)
    compiled = triton.compile(ast_source(fn, spec), target=GPUTarget(*spec.target), options=options)
    meta = compiled.metadata
    if (
        getattr(meta, "global_scratch_size", 0)
        or getattr(meta, "profile_scratch_size", 0)
        or getattr(meta, "num_ctas", 1) != 1
        or getattr(meta, "launch_cooperative_grid", False)
        or getattr(meta, "launch_pdl", False)
        or getattr(meta, "tmem_size", None)
    ):
        raise NotLaunchable(f"{meta.name} needs Triton's launcher")
    binary = Binary(compiled.asm["cubin"], meta.name, meta.shared, meta.num_warps)
    cubin_path, meta_path = _paths(cache_key)
    cubin_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = cubin_path.with_name(f"{cubin_path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(binary.cubin)
    os.replace(tmp, cubin_path)
    write_atomic(
        meta_path,
        json.dumps(
            {"name": binary.name, "shared": binary.shared, "num_warps": binary.num_warps,
             "sha256": hashlib.sha256(binary.cubin).hexdigest()}
        ),
    )  # fmt: skip
    return binary


def launchable_here() -> str | None:
    """None when kernels can be loaded and launched by cuda_launch.h in this process, else
    why not: the parameter layout it passes is Triton 3.6's."""
    try:
        import triton
    except ImportError:
        return "Triton is not installed"
    if not triton.__version__.startswith("3.6."):
        return f"the launcher passes Triton 3.6's kernel parameters, this is Triton {triton.__version__}"
    return None


def pointer_dtypes(dtypes: Sequence[Any]) -> tuple[str, ...]:
    """torch dtypes as the names Spec keeps (str(dtype) without "torch.")."""
    return tuple(str(d).replace("torch.", "") for d in dtypes)
