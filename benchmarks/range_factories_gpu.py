"""Integer linspace and logspace on CUDA, ours against eager, element by element, over the
cases of tests/aot/test_decompositions.py::test_integer_linspace_and_logspace_match_eager_on_cuda
(that test stops at its first difference; this prints them all). For logspace it also says
whether libdevice's powf in a Triton kernel, given eager's own float32 exponents, gives
eager's values: the reason integer logspace on CUDA runs as eager's kernel (an extern call).

    python3 benchmarks/range_factories_gpu.py
"""

from __future__ import annotations

import itertools
import sys

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

import compiler

ENDS = [(0, 7), (4.3, -3), (-2.0, 50), (50, 1), (0, 4), (0, 1.2), (0, -3), (1, 100)]
DTYPES = [torch.uint8, torch.int8, torch.int32, torch.int64]


@triton.jit
def _powf(exp_ptr, out_ptr, base, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    out = libdevice.pow(base, tl.load(exp_ptr + offs, mask))
    tl.store(out_ptr + offs, out, mask)


def _exponents(start, end, steps: int, dtype: torch.dtype) -> torch.Tensor:
    """RangeFactories.cu's integer logspace exponents: ends converted to the dtype, a float
    step, the first half from the start, the rest back from the end, each multiply-add
    rounded once as nvcc's FMA does (exact in float64: a float times an index below 2^24)."""
    s, e = (torch.tensor(v).to(dtype).item() for v in (start, end))
    step = (torch.tensor(float(e - s), dtype=torch.float32) / (steps - 1)).double()
    index = torch.arange(steps, dtype=torch.float64)
    low = s + step * index
    high = e - step * (steps - 1 - index)
    return torch.where(torch.arange(steps) < steps // 2, low, high).float().cuda()


def _libdevice_powf(base: float, exps: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(exps)
    _powf[(triton.cdiv(exps.numel(), 1024),)](exps, out, base, exps.numel(), BLOCK=1024)
    return out


def _diff(a: torch.Tensor, b: torch.Tensor) -> list:
    return (a != b).nonzero().flatten().tolist()


def main() -> int:
    cases = wrong = powf_wrong = 0
    for dtype in DTYPES:
        for (start, end), steps in itertools.product(ENDS, (2, 4, 50, 1000)):
            if dtype == torch.uint8 and min(start, end) < 0:
                continue
            for base in (None, 2.0, 3.0, 10.0):

                def f(x, start=start, end=end, steps=steps, base=base, dtype=dtype):
                    if base is None:
                        return torch.linspace(start, end, steps, dtype=dtype, device="cuda") + x
                    return torch.logspace(start, end, steps, base, dtype=dtype, device="cuda") + x

                x = torch.zeros((), dtype=dtype, device="cuda")
                eager, ours = f(x), compiler.compile(f, fullgraph=True)(x)
                cases += 1
                bad = _diff(ours, eager)
                name = f"{str(dtype)[6:]} {'linspace' if base is None else f'logspace base {base}'}"
                case = f"{name} ({start}, {end}) steps {steps}"
                if bad:
                    wrong += 1
                    shown = ", ".join(
                        f"[{k}] {eager[k].item()} vs {ours[k].item()}" for k in bad[:4]
                    )
                    print(f"DIFF {case}: {len(bad)} of {steps} (eager vs ours) {shown}")
                if base is not None:
                    powf = _libdevice_powf(base, _exponents(start, end, steps, dtype)).to(dtype)
                    off = _diff(powf, eager)
                    if off:
                        powf_wrong += 1
                        k = off[0]
                        print(
                            f"powf {case}: libdevice differs in {len(off)} of {steps} "
                            f"([{k}] eager {eager[k].item()} vs {powf[k].item()})"
                        )
    print(f"{cases} cases, {wrong} with a difference between eager and ours")
    print(f"libdevice powf on eager's exponents differs from eager in {powf_wrong} logspace cases")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
