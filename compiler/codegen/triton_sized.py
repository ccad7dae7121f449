"""Size-generic Triton kernels: one `@triton.jit` function serves every size of a dynamic
graph, as compiler/codegen/cpp_kernels.py's `load_sized` does for C++.

Each size's kernel text is cut into skeleton and literals by compiler/codegen/size_args.py
(its "triton" dialect); literals that differ between two sizes of one skeleton become
parameters of a generic function, loaded once, that every later size with that skeleton
(and the same fixed literals) calls with its own values: `xnumel`, `rnumel`, strides that
depend on the sizes, a mean's count. Masks and loop bounds are written over `xnumel` and
`rnumel` already, so they follow the arguments.

Block sizes are constexprs, outside the text: each size picks the config of its variant
whose *range* holds it (`sized_config`), and a size that none holds chooses one from its
own size (the hint) that is kept for a range around it. A persistent reduction (the whole
row in RBLOCK lanes) is correct only for rows of at most RBLOCK: that is its range's
guard; the new range is chosen with room to grow (`WIDEN`), so a generation loop's
attention rows of 17 to 272 keys take two configs rather than one per power of two. Each
config is one Triton compile on a GPU (the size arguments are not specialised: a size
divisible by 16 or equal to 1 compiles nothing new). Sizes 0 and 1 are specialised by the
tracer before any of this, as Inductor does.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Sequence

from compiler.codegen import size_args
from compiler.codegen.common import KernelSource
from compiler.codegen.triton_writer import PERSISTENT_MAX, persistent_config
from compiler.runtime import triton_launch

# A persistent reduction's new range takes rows up to WIDEN times the size's own block.
WIDEN = 4
# A config is kept for sizes whose own block is at most WASTE times smaller than its one
# (more lanes masked off than that: a config of its own runs faster).
WASTE = 8
_CONFIG_KEYS = ("XBLOCK", "RBLOCK", "num_warps", "persistent")
# Kernels whose text holds nothing computed from their block sizes. A combined kernel's
# table of program ids is written for its XBLOCK (compiler/codegen/combo.py): its own code.
SIZED_KINDS = ("pointwise", "reduction")
_lock = threading.Lock()


def _holds(chosen: dict, own: dict) -> bool:
    """Whether `chosen` (a config of the variant) serves a size whose own config is `own`."""
    if own.get("persistent") != chosen.get("persistent"):
        return False
    if own["kind"] == "pointwise":
        return (
            own["XBLOCK"] <= WASTE * chosen["XBLOCK"] and chosen["XBLOCK"] <= WASTE * own["XBLOCK"]
        )
    if own.get("persistent"):  # the guard: the whole row fits the block
        return own["rnumel"] <= chosen["RBLOCK"] <= WASTE * own["RBLOCK"]
    return True  # a looped reduction walks any row with any block


def _for_range(own: dict) -> dict:
    """The config a new range starts with: the size's own, a persistent reduction's with
    room for rows up to WIDEN times longer."""
    if own["kind"] != "pointwise" and own.get("persistent"):
        return persistent_config(own["xnumel"], min(own["RBLOCK"] * WIDEN, PERSISTENT_MAX))
    return {k: own[k] for k in _CONFIG_KEYS if k in own}


def sized_config(variant: size_args.Variant, own: dict) -> dict:
    """The block sizes one size of `variant` launches with (`own`: the size's own config)."""
    with _lock:
        for chosen in variant.configs:
            if _holds(chosen, own):
                break
        else:
            chosen = _for_range(own)
            variant.configs.append(chosen)
    return {**own, **chosen}


def _loaded(variant: size_args.Variant) -> bool:
    """Load the variant's function once; one that does not import marks the variant failed
    (its sizes load their own code)."""
    if variant.loaded is None and not variant.failed:
        try:
            variant.loaded = triton_launch.load_function(variant.source, variant.name)
        except Exception:
            variant.failed = True
    return variant.loaded is not None


def load_sized(
    kernels: Sequence[KernelSource], mode: str | None
) -> list[triton_launch.TritonKernel]:
    """A dynamic graph's kernels: each runs its skeleton's generic function with its own
    sizes where size_args.find has one or makes it, else its own code."""
    out = []
    for kernel in kernels:
        if kernel.config.get("kind") not in SIZED_KINDS:
            out.append(triton_launch.load_kernel(kernel, mode))
            continue
        s = size_args.split(kernel.source, kernel.name, "triton")
        hit = size_args.find(s)
        if isinstance(hit, size_args.Variant):
            hit = (hit, hit.values(s))
        if hit is None or hit[1] is None or not _loaded(hit[0]):
            out.append(triton_launch.load_kernel(kernel, mode))
            continue
        variant, values = hit
        fn, key = variant.loaded
        variant.serve(values)
        sized = replace(kernel, config=sized_config(variant, kernel.config))
        sizes = dict(zip(variant.params, values))
        loaded = triton_launch.TritonKernel(fn, sized, mode, key, sizes, variant)
        loaded.own = kernel  # the size's own code, should the generic one not compile
        out.append(loaded)
    return out


def own_code_where_generic_fails(kernels: Sequence[tuple]) -> list[str]:
    """On a GPU, after the warm-up: a size-generic kernel that did not compile (the
    interpreter accepts what Triton's compiler may not) runs its size's own code instead,
    and its variant serves no later size. Returns notes for the graph's record."""
    notes = []
    for kernel, dtypes in kernels:
        variant = kernel.generic
        if variant is None:
            continue
        try:
            kernel.warm(dtypes)  # compiled by warm_all already, unless it failed there
        except Exception as e:
            variant.failed = True
            own = triton_launch.load_kernel(kernel.own, kernel.mode)
            kernel.__dict__.update(own.__dict__)  # the wrapper holds this very object
            notes.append(
                f"{kernel.name} runs its own code: the size-generic {variant.name} did not "
                f"compile ({type(e).__name__}: {str(e)[:200]})"
            )
    return notes


def note_sample(kernel: KernelSource) -> None:
    """A static graph's kernel noted as a sample of its skeleton, so that the first dynamic
    size after it finds two and loads the generic function at once."""
    if kernel.config.get("kind") in SIZED_KINDS:
        size_args.note_sample(size_args.split(kernel.source, kernel.name, "triton"))
