"""Helpers the generated Triton kernels call: math functions outside `tl.math`, and the
combine functions of our reductions.

On a GPU the math functions are libdevice's. Triton's interpreter (TRITON_INTERPRET=1, how
kernels are checked on CPU) does not implement libdevice, so there they are evaluated with
numpy on the interpreter's arrays — same results to float rounding.
"""

from __future__ import annotations

import os

import numpy as np
import triton
import triton.language as tl

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
# what an out-of-range gather index raises (the C++ kernels' launcher says the same)
INDEX_ERROR = "index out of range in a gather of a compiled kernel"

_UNARY = {
    "tanh": np.tanh,
    "expm1": np.expm1,
    "log1p": np.log1p,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "trunc": np.trunc,
    "nearbyint": np.rint,
    "isinf": np.isinf,
}
_BINARY = {"atan2": np.arctan2, "pow": np.power, "fmod": np.fmod, "copysign": np.copysign}

if INTERPRET:
    from triton.runtime.interpreter import TensorHandle

    def _wrap(data: np.ndarray, like) -> tl.tensor:
        dtype = tl.int1 if data.dtype == np.bool_ else like.dtype.scalar
        data = data if data.dtype == np.bool_ else data.astype(like.handle.data.dtype)
        ty = (
            like.type
            if dtype == like.dtype.scalar
            else (tl.block_type(dtype, like.shape) if like.shape else dtype)
        )
        return tl.tensor(TensorHandle(data, dtype), ty)

    def _unary(fn):
        def apply(x):
            with np.errstate(all="ignore"):
                return _wrap(fn(x.handle.data), x)

        return apply

    def _binary(fn):
        # either operand may be a number, a constant of the kernel (`th.pow(10.0, x)`),
        # taken in the other operand's dtype as Triton does
        def apply(x, y):
            if isinstance(x, tl.tensor) and isinstance(y, tl.tensor):
                x, y = tl.broadcast(x, y)
            like = x if isinstance(x, tl.tensor) else y

            def data(v):
                if isinstance(v, tl.tensor):
                    return v.handle.data
                return np.asarray(v, dtype=like.handle.data.dtype)

            with np.errstate(all="ignore"):
                return _wrap(fn(data(x), data(y)), like)

        return apply

    tanh, expm1, log1p, tan, asin, acos, atan, sinh, cosh, trunc, nearbyint, isinf = (
        _unary(_UNARY[n])
        for n in (
            "tanh",
            "expm1",
            "log1p",
            "tan",
            "asin",
            "acos",
            "atan",
            "sinh",
            "cosh",
            "trunc",
            "nearbyint",
            "isinf",
        )
    )
    atan2, pow, fmod, copysign = (_binary(_BINARY[n]) for n in ("atan2", "pow", "fmod", "copysign"))

    def check_index(ok) -> None:
        """The interpreter's device assert: an index outside its dimension raises here."""
        if not np.all(ok.handle.data if isinstance(ok, tl.tensor) else ok):
            raise IndexError(INDEX_ERROR)
else:
    from triton.language.extra import libdevice

    # jit wrappers: libdevice functions must be called from jit code that names the
    # libdevice module itself (a bare alias reached through this module is not resolved)
    @triton.jit
    def tanh(x):
        return libdevice.tanh(x)

    @triton.jit
    def expm1(x):
        return libdevice.expm1(x)

    @triton.jit
    def log1p(x):
        return libdevice.log1p(x)

    @triton.jit
    def tan(x):
        return libdevice.tan(x)

    @triton.jit
    def asin(x):
        return libdevice.asin(x)

    @triton.jit
    def acos(x):
        return libdevice.acos(x)

    @triton.jit
    def atan(x):
        return libdevice.atan(x)

    @triton.jit
    def sinh(x):
        return libdevice.sinh(x)

    @triton.jit
    def cosh(x):
        return libdevice.cosh(x)

    @triton.jit
    def trunc(x):
        return libdevice.trunc(x)

    @triton.jit
    def nearbyint(x):
        return libdevice.nearbyint(x)

    @triton.jit
    def isinf(x):
        return libdevice.isinf(x)

    @triton.jit
    def atan2(x, y):
        return libdevice.atan2(x, y)

    @triton.jit
    def pow(x, y):
        return libdevice.pow(x, y)

    @triton.jit
    def fmod(x, y):
        return libdevice.fmod(x, y)

    @triton.jit
    def copysign(x, y):
        return libdevice.copysign(x, y)

    @triton.jit
    def check_index(ok):
        # eager's CUDA gathers make the same device-side assert; compiled in only in
        # Triton's debug mode, which kernels calling this are compiled in
        tl.device_assert(ok, "index out of bounds")


# ---- correctly rounded float32 arithmetic, as eager's CUDA kernels compute it -------------
#
# Triton's float32 `/` is PTX's div.full.f32 (up to 2 ulp: 4.6875 / 0.9375 gives 5.0000005)
# and tl.sqrt is sqrt.approx.ftz.f32 (subnormals flushed to 0); eager's are correctly
# rounded. trunc, floor or an integer cast of a quotient or root that falls just below a
# whole number turns the ulp into an integer off by one (`torch.div(a, b,
# rounding_mode="trunc")`, `(x / y).long()`, `sqrt(49.0).floor()`). float64 is correctly
# rounded either way; half-precision operands are divided in float32 and rounded back, as
# c10's Half does.


@triton.jit
def div_rn(a, b):
    if a.dtype == tl.float64:
        return a / b
    elif b.dtype == tl.float64:
        return a / b
    else:
        q = tl.div_rn(a.to(tl.float32), b.to(tl.float32))
        if a.dtype == tl.float16:
            if b.dtype == tl.float16:
                q = q.to(tl.float16)
        elif a.dtype == tl.bfloat16:
            if b.dtype == tl.bfloat16:
                q = q.to(tl.bfloat16)
        return q


@triton.jit
def sqrt_rn(x):
    if x.dtype == tl.float64:
        return tl.sqrt(x)
    else:
        return tl.sqrt_rn(x.to(tl.float32)).to(x.dtype)


@triton.jit
def sigmoid(x):
    # eager's 1 / (1 + exp(-x)); tl.sigmoid divides with div.full.f32
    if x.dtype == tl.float64:
        return tl.sigmoid(x)
    else:
        one = tl.full([], 1.0, tl.float32)
        return tl.div_rn(one, one + tl.exp(-x.to(tl.float32))).to(x.dtype)


# ---- reduction combine functions (NaN-propagating like torch) -------------------------------


@triton.jit
def maximum(a, b):
    return tl.where((a > b) | (a != a), a, b)


@triton.jit
def minimum(a, b):
    return tl.where((a < b) | (a != a), a, b)


@triton.jit
def multiply(a, b):
    return a * b


@triton.jit
def argmax_combine(v1, i1, v2, i2):
    # the larger value wins, NaN counts as largest, ties go to the smaller index
    nan1 = v1 != v1
    nan2 = v2 != v2
    take2 = (v2 > v1) | (nan2 & ~nan1) | ((v2 == v1) & (i2 < i1)) | (nan1 & nan2 & (i2 < i1))
    return tl.where(take2, v2, v1), tl.where(take2, i2, i1)


@triton.jit
def argmin_combine(v1, i1, v2, i2):
    nan1 = v1 != v1
    nan2 = v2 != v2
    take2 = (v2 < v1) | (nan2 & ~nan1) | ((v2 == v1) & (i2 < i1)) | (nan1 & nan2 & (i2 < i1))
    return tl.where(take2, v2, v1), tl.where(take2, i2, i1)


@triton.jit
def floordiv(a, b):
    # integer division rounding toward -inf (Triton's // truncates)
    q = a // b
    return q - ((q * b != a) & ((a < 0) != (b < 0))).to(q.dtype)


@triton.jit
def remainder(a, b):
    # Python's %: the result has the divisor's sign (Triton's % follows the dividend)
    r = a % b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)


@triton.jit
def floordiv_float(a, b):
    # c10's div_floor_floating: the quotient of a - fmod(a, b), which is exact, not
    # floor(a / b) (1.0 // 0.1 is 9.0: a / b rounds up to 10.0); IEEE's a / b for b == 0
    mod = fmod(a, b)
    div = div_rn(a - mod, b)
    div = tl.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1.0, div)
    floor = tl.floor(div)
    floor = tl.where(div - floor > 0.5, floor + 1.0, floor)
    quotient = div_rn(a, b)
    floor = tl.where(div == 0, copysign(div * 0.0, quotient), floor)
    return tl.where(b == 0, quotient, floor)


@triton.jit
def remainder_float(a, b):
    # torch's remainder: C's fmod (exact), moved to the divisor's sign; a - floor(a / b) * b
    # loses up to a whole b where a / b rounds across an integer
    r = fmod(a, b)
    return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)
