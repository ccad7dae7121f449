"""Loaded C++ kernels: building kernel sources into libraries (one translation unit per
core, compiled in parallel through compiler/runtime/cpp_build.py) and the callables the
wrapper launches, size-generic ones (compiler/codegen/size_args.py) with their sizes bound."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence

import torch
import torch.autograd.profiler as _profiler

from compiler.codegen import size_args
from compiler.codegen.common import KernelSource
from compiler.codegen.cpp_prelude import PRELUDE
from compiler.runtime import cpp_build

_CTYPES = {"int64_t": ctypes.c_int64, "float": ctypes.c_float, "double": ctypes.c_double}


class CppKernel:
    """A loaded C++ kernel: call it with the tensors of its parameters, in order. A kernel
    that gathers checks its library's index-error flag after each launch and raises
    IndexError as eager would (it read element 0 in place of the bad index).

    While torch.profiler runs, each launch is bracketed by `record_function(<kernel name>)`,
    so profiles (and the inspector's Kernels tab) show C++ kernels by name; otherwise the
    call costs one flag check."""

    def __init__(
        self,
        name: str,
        function,
        nargs: int,
        index_error=None,
        sizes: dict[str, int | float] | None = None,
        generic: size_args.Variant | None = None,
    ) -> None:
        self.name = name
        self.function = function
        self.nargs = nargs
        self.index_error = index_error  # ctypes.c_int in the library, for gathering kernels
        # A size-generic kernel (compiler/codegen/size_args.py): the values of its size
        # parameters for this size, passed after the pointers.
        self.sizes = sizes or {}
        self.generic = generic
        self._values = tuple(self.sizes.values())
        types = [_CTYPES[c] for c in generic.ctypes] if generic is not None else []
        function.argtypes = [ctypes.c_void_p] * nargs + types
        function.restype = None

    def __call__(self, *tensors: torch.Tensor) -> None:
        if _profiler._is_profiler_enabled:
            with _profiler.record_function(self.name):
                self.function(*[t.data_ptr() for t in tensors], *self._values)
        else:
            self.function(*[t.data_ptr() for t in tensors], *self._values)
        if self.index_error is not None and self.index_error.value:
            self.index_error.value = 0
            raise IndexError(f"index out of range in a gather of the compiled kernel {self.name}")

    def __repr__(self) -> str:
        return f"<C++ kernel {self.name}>"


_CTYPES = {"int64_t": ctypes.c_int64, "float": ctypes.c_float, "double": ctypes.c_double}


def translation_units(kernels: Sequence[KernelSource], parts: int) -> list[list[int]]:
    """Kernel positions split into at most `parts` units of similar source size, so the
    compiler processes (one per core) finish together."""
    parts = max(1, min(parts, len(kernels)))
    units: list[list[int]] = [[] for _ in range(parts)]
    sizes = [0] * parts
    for k in sorted(range(len(kernels)), key=lambda k: -len(kernels[k].source)):
        j = sizes.index(min(sizes))
        units[j].append(k)
        sizes[j] += len(kernels[k].source)
    return [sorted(u) for u in units if u]


def load_sized(kernels: Sequence[KernelSource]) -> list[CppKernel]:
    """A dynamic graph's kernels: each runs size-generic code with its own sizes as
    arguments where size_args.find has some or makes it (compiled here, once for every size),
    else its own code."""
    splits = [size_args.split(k.source, k.name) for k in kernels]
    found = [size_args.find(s) for s in splits]
    new = {
        id(v): (v, kernel) for v, kernel in zip(found, kernels) if isinstance(v, size_args.Variant)
    }
    if new:
        sources = [
            KernelSource(
                v.name, "cpp", v.source, f"{v.name}({kernel.call[len(kernel.name) + 1 : -1]})"
            )
            for v, kernel in new.values()
        ]
        try:
            for (v, _), built in zip(new.values(), build_kernels(sources)):
                v.loaded = built
        except cpp_build.CppCompileError:
            for v, _ in new.values():  # sizes of these skeletons compile per size
                v.failed = True
    out: list[CppKernel | None] = [None] * len(kernels)
    own = []
    for k, (kernel, s, hit) in enumerate(zip(kernels, splits, found)):
        if isinstance(hit, size_args.Variant):
            hit = (hit, hit.values(s))
        if hit is None or hit[0].loaded is None:
            own.append(k)
            continue
        variant, values = hit
        variant.serve(values)
        generic = variant.loaded
        out[k] = CppKernel(
            kernel.name,
            generic.function,
            _nargs(kernel),
            generic.index_error,
            dict(zip(variant.params, values)),
            variant,
        )
    for k, built in zip(own, build_kernels([kernels[k] for k in own])):
        out[k] = built
    return [k for k in out if k is not None]


def _nargs(kernel: KernelSource) -> int:
    """How many pointers a kernel takes: the arguments of its wrapper call line."""
    return len(kernel.call[len(kernel.name) + 1 : -1].split(", "))


def build_kernels(kernels: Sequence[KernelSource]) -> list[CppKernel]:
    """Compile kernels together: one translation unit per core, built in parallel."""
    if not kernels:
        return []
    units = translation_units(kernels, os.cpu_count() or 1)
    sources = [PRELUDE + "\n" + "\n".join(kernels[k].source for k in unit) for unit in units]
    libs = cpp_build.load_many(sources)
    out: list[CppKernel | None] = [None] * len(kernels)
    for unit, lib in zip(units, libs):
        for k in unit:
            kernel = kernels[k]
            flag = (
                ctypes.c_int.in_dll(lib, "jc_index_error") if "jc_index(" in kernel.source else None
            )
            out[k] = CppKernel(kernel.name, getattr(lib, kernel.name), _nargs(kernel), flag)
    return [k for k in out if k is not None]
