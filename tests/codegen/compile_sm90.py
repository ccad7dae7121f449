"""Compile every generated Triton kernel module in a folder for an sm_90 target, without a
GPU: catches what Triton's interpreter lets through (block shapes of loads and stores,
libdevice calls), and PTX instructions whose results differ from eager's (`IMPRECISE`).
Run without TRITON_INTERPRET: `python compile_sm90.py KERNEL_DIR`."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

POINTERS = {
    "float32": "*fp32",
    "float16": "*fp16",
    "bfloat16": "*bf16",
    "float64": "*fp64",
    "int64": "*i64",
    "int32": "*i32",
    "int16": "*i16",
    "int8": "*i8",
    "uint8": "*u8",
    "bool": "*i1",
}

# Approximate float32 division and square root, which eager's CUDA kernels never use
# (compiler/runtime/triton_helpers.py, div_rn and sqrt_rn, says what they got wrong):
# Triton's `/` and tl.sqrt lower to PTX's div.full.f32 and sqrt.approx.ftz.f32, the
# interpreter computes them exactly. Found in the kernel's Triton IR, where libdevice's
# functions (whose own PTX is eager's too) are still calls.
SIZE_ARGUMENT = re.compile(r"k[sf]\d+")
IMPRECISE = re.compile(r"\b(?:arith\.divf|math\.sqrt) [^:\n]*: (?:tensor<[0-9x]*)?f32\b")


def compile_module(path: Path) -> None:
    spec = importlib.util.spec_from_file_location(f"sm90_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = next(  # the kernel, not a helper it calls (welford_combine)
        v
        for v in vars(module).values()
        if isinstance(v, triton.runtime.jit.JITFunction)
        and v.__module__ == module.__name__
        and "XBLOCK" in v.arg_names
    )
    source = path.read_text()
    signature, constants = {}, {}
    for k, name in enumerate(fn.arg_names):
        if name in ("XBLOCK", "RBLOCK"):
            signature[name] = "constexpr"
            constants[(k,)] = 64
        elif SIZE_ARGUMENT.fullmatch(name):  # a size-generic kernel's (codegen/triton_sized.py)
            signature[name] = "i32" if name.startswith("ks") else "fp32"
        else:
            dtype = re.search(rf"# {name} = \w+: (\w+)\[", source).group(1)
            signature[name] = POINTERS[dtype]
    # gathers assert their indices (th.check_index), compiled in in Triton's debug mode only,
    # as the runtime compiles such kernels (compiler/runtime/triton_launch.py)
    options = {"debug": True, "sanitize_overflow": False} if "th.check_index(" in source else {}
    compiled = triton.compile(
        ASTSource(fn, signature, constants), target=GPUTarget("cuda", 90, 32), options=options
    )
    if options and "__assertfail" not in compiled.asm["ptx"]:
        raise ValueError("the gather's index check was compiled out")
    found = IMPRECISE.findall(compiled.asm["ttir"])
    if found:
        raise ValueError(f"approximate float32 arithmetic: {'; '.join(found)}")


def main(folder: str) -> int:
    failures = 0
    for path in sorted(Path(folder).glob("*.py")):
        try:
            compile_module(path)
        except Exception as exc:
            failures += 1
            print(
                f"FAIL {path.name}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else repr(exc)}"
            )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
