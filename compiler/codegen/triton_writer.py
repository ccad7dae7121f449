"""The Triton emitter's expression writer: values of the loop IR as `tmpN = ...` lines of
Triton, loads and stores with their masks, reductions of a block's lanes, and Welford rows.
compiler/codegen/triton.py assembles these into kernels (loops, header, signature)."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field

import torch

from compiler.codegen.common import LOW_PRECISION, keeps_float32, rounds_source
from compiler.ir.index import Index, Var, render, unflatten
from compiler.ir.nodes import (
    WELFORD_TYPES,
    Constant,
    IndexValue,
    Load,
    Op,
    Ref,
    Value,
    Welford,
    address,
)
from compiler.scheduler.kernel import KernelGroup, Schedule, Step

PERSISTENT_MAX = 1024  # longest row kept whole in registers

TL_DTYPES = {
    torch.float32: "tl.float32",
    torch.float16: "tl.float16",
    torch.bfloat16: "tl.bfloat16",
    torch.float64: "tl.float64",
    torch.int64: "tl.int64",
    torch.int32: "tl.int32",
    torch.int16: "tl.int16",
    torch.int8: "tl.int8",
    torch.uint8: "tl.uint8",
    torch.bool: "tl.int1",
}

_BINARY = {
    "add": "+",
    "sub": "-",
    "mul": "*",
    "truncdiv": "//",
    "eq": "==",
    "ne": "!=",
    "lt": "<",
    "le": "<=",
    "gt": ">",
    "ge": ">=",
    "logical_and": "&",
    "logical_or": "|",
    "logical_xor": "^",
    "bitwise_and": "&",
    "bitwise_or": "|",
    "bitwise_xor": "^",
}
_CALL = {
    "exp": "tl.exp",
    "exp2": "tl.exp2",
    "log": "tl.log",
    "log2": "tl.log2",
    "sqrt": "th.sqrt_rn",
    "rsqrt": "tl.rsqrt",
    "sin": "tl.sin",
    "cos": "tl.cos",
    "sigmoid": "th.sigmoid",
    "erf": "tl.erf",
    "floor": "tl.floor",
    "ceil": "tl.ceil",
    "abs": "tl.abs",
    "tanh": "th.tanh",
    "expm1": "th.expm1",
    "log1p": "th.log1p",
    "tan": "th.tan",
    "asin": "th.asin",
    "acos": "th.acos",
    "atan": "th.atan",
    "sinh": "th.sinh",
    "cosh": "th.cosh",
    "trunc": "th.trunc",
    "round": "th.nearbyint",
    "atan2": "th.atan2",
    "pow": "th.pow",
    "fmod": "th.fmod",
}


def next_pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def default_config(kind: str, xnumel: int, rnumel: int) -> dict:
    """Block sizes and warps before autotuning: large blocks for streaming kernels, whole
    rows for short reductions."""
    interp = os.environ.get("TRITON_INTERPRET") == "1"  # fewer, bigger programs run faster there
    if kind == "pointwise":
        xblock = min(next_pow2(max(xnumel, 1)), 4096 if interp else 1024)
        return {"XBLOCK": xblock, "num_warps": 4 if xblock >= 256 else 1}
    budget = _BUDGET[interp]
    if rnumel <= PERSISTENT_MAX:
        return persistent_config(xnumel, next_pow2(max(rnumel, 1)))
    xblock = 1 if xnumel < 64 else 8
    return {
        "XBLOCK": xblock,
        "RBLOCK": min(budget // xblock, 2048),
        "num_warps": 8,
        "persistent": False,
    }


_BUDGET = {True: 8192, False: 4096}  # a block's elements, interpreted or not


def persistent_config(xnumel: int, rblock: int) -> dict:
    """A persistent reduction's config for rows of up to `rblock` elements (a power of 2)."""
    budget = _BUDGET[os.environ.get("TRITON_INTERPRET") == "1"]
    xblock = max(1, min(next_pow2(max(xnumel, 1)), budget // rblock, 64))
    warps = 8 if rblock >= 512 else (4 if rblock * xblock >= 256 else 1)
    return {"XBLOCK": xblock, "RBLOCK": rblock, "num_warps": warps, "persistent": True}


@dataclass
class Scope:
    lines: list[str]
    indent: str
    cache: dict = field(default_factory=dict)  # Value -> (text, level)
    parent: "Scope | None" = None

    def lookup(self, key):
        scope = self
        while scope is not None:
            if key in scope.cache:
                return scope.cache[key]
            scope = scope.parent
        return None


class KernelWriter:
    def __init__(self, group: KernelGroup, schedule: Schedule):
        self.g = group
        self.buffers = schedule.buffers
        self.reduction = group.kind == "reduction"
        self.config = default_config(group.kind, group.outer_numel, group.reduction_numel)
        self.persistent = self.config.get("persistent", False)
        # common.kernel_arguments' order: a buffer written in place keeps its place among
        # the reads (warm-ups pass dtypes in that order)
        self.args: dict[str, str] = {}
        for k, b in enumerate(group.reads):
            self.args[b] = f"in_ptr{k}"
        for k, b in enumerate(group.writes):
            self.args[b] = f"out_ptr{k}"
        self.count = 0
        self.checks_indices = False  # a load with run-time indices asserts they are inside
        self.steps = {s.name: s for s in group.steps}
        self.values: dict[str, tuple[str, int]] = {}  # step name -> (var, level), once computed
        big = max(
            [group.outer_numel * max(group.reduction_numel, 1)]
            + [self.buffers[b].storage_size() for b in self.args]
        )
        self.int64 = big >= 2**31

    # ---- shapes and levels: 0 scalar, 1 outer block, 2 (outer x reduction) block ---------

    def shape(self, level: int) -> str:
        if not self.reduction:
            return "[XBLOCK]"
        return "[XBLOCK, 1]" if level <= 1 else "[XBLOCK, RBLOCK]"

    def mask(self, level: int) -> str | None:
        if level == 0:
            return None
        return "xmask" if level == 1 or not self.reduction else "xmask & rmask"

    def var_level(self, v: Var) -> int:
        return 2 if v.name.startswith("r") else 1

    def index_level(self, index: Index) -> int:
        return max((self.var_level(v) for v in index.vars()), default=0)

    # ---- expressions ---------------------------------------------------------------------

    def tmp(self, scope: Scope, text: str, level: int, key=None) -> tuple[str, int]:
        name = f"tmp{self.count}"
        self.count += 1
        scope.lines.append(f"{scope.indent}{name} = {text}")
        if key is not None:
            scope.cache[key] = (name, level)
        return name, level

    def value(self, v: Value, scope: Scope) -> tuple[str, int]:
        """(text, level) of `v`; constants come back as literals."""
        if isinstance(v, Constant):
            return _literal(v.value), 0
        if isinstance(v, Ref):
            return self.ref(v.name, scope)
        hit = scope.lookup(v)
        if hit is not None:
            return hit
        if isinstance(v, IndexValue):
            level = self.index_level(v.index)
            text = render(v.index)
            text = (
                f"tl.full({self.shape(level)}, {text}, tl.int64)"
                if level == 0
                else f"({text}).to(tl.int64)"
            )
            if v.dtype != torch.int64:
                text = f"{text}.to({TL_DTYPES[v.dtype]})"
            return self.tmp(scope, text, level, v)
        if isinstance(v, Load):
            return self.load(v, scope)
        assert isinstance(v, Op)
        return self.op(v, scope)

    def tensor(self, v: Value, scope: Scope) -> tuple[str, int]:
        """Like value(), but a constant becomes a typed 0-d tensor (so methods apply)."""
        if isinstance(v, Constant):
            return f"tl.full([], {_literal(v.value)}, {TL_DTYPES[v.dtype]})", 0
        return self.value(v, scope)

    def load(self, v: Load, scope: Scope) -> tuple[str, int]:
        layout = self.buffers[v.buf]
        static, dynamic = address(layout, v.indices)
        parts = [render(static)]
        level = self.index_level(static)
        # A gather's index outside 0 .. size-1 raises in eager: the kernel asserts every one
        # is inside (th.check_index: a device-side assert, as eager's CUDA kernels make, in
        # kernels compiled with Triton's debug option), on every dimension, an expanded one
        # (stride 0, no part of the address) too; the load is masked by it as well, so that
        # no lane reads outside the buffer before the assert stops the kernel.
        inside = []
        for i, size in zip(v.indices, layout.size):
            if not isinstance(i, Index):
                text, lvl = self.value(i, scope)
                inside.append(f"(({text}) >= 0) & (({text}) < {size})")
                level = max(level, lvl)
        for value, stride in dynamic:
            text, _ = self.value(value, scope)
            parts.append(f"{text} * {stride}" if stride != 1 else text)
        mask_parts = list(inside)
        mtext = None
        if v.mask is not None:
            mtext, mlevel = self.value(v.mask, scope)
            level = max(level, mlevel)
            mask_parts.append(mtext)
        loop_mask = self.mask(level)
        if loop_mask:
            mask_parts.insert(0, loop_mask)
        if inside:
            self.checks_indices = True
            ok = " & ".join(inside)
            active = [m for m in (loop_mask, mtext) if m]
            if active:  # lanes past the end or masked off may hold any index
                ok = f"({ok}) | ~({' & '.join(active)})"
            scope.lines.append(f"{scope.indent}th.check_index({ok})")
        addr = " + ".join(parts)
        if level > 0 and self.index_level(static) == 0 and not dynamic:
            addr = f"tl.full({self.shape(level)}, {addr}, tl.int32)"
        ptr = f"{self.args[v.buf]} + ({addr})"
        if mask_parts:
            text = f"tl.load({ptr}, {' & '.join(mask_parts)}, other=0)"
        else:
            text = f"tl.load({ptr})"
        return self.tmp(scope, text, level, v)

    def op(self, v: Op, scope: Scope) -> tuple[str, int]:
        if v.op == "to_dtype":
            (a,) = v.args
            if isinstance(a, Constant):
                return _literal(_convert(a.value, v.dtype)), 0
            text, level = self.value(a, scope)
            return self.tmp(scope, _to_dtype(text, a.dtype, v.dtype), level, v)
        args = [self.value(a, scope) for a in v.args]
        texts = [t for t, _ in args]
        level = max(lv for _, lv in args)
        if all(isinstance(a, Constant) for a in v.args):
            texts = [self.tensor(a, scope)[0] for a in v.args]
        dt = v.args[0].dtype
        o = v.op
        if o in _BINARY:
            text = f"{texts[0]} {_BINARY[o]} {texts[1]}"
        elif o == "truediv":  # correctly rounded, as eager (see triton_helpers.div_rn)
            a, b = (self.tensor(x, scope)[0] for x in v.args)
            text = f"th.div_rn({a}, {b})"
        elif o in ("floordiv", "remainder") and not dt.is_floating_point:
            text = f"th.{o}({texts[0]}, {texts[1]})"
        elif o in ("floordiv", "remainder"):
            # torch's floating forms (c10's div_floor_floating, fmod-based remainder):
            # floor(a / b) rounds the quotient first, a - floor(a / b) * b cancels; typed
            # operands (th.div_rn reads their dtypes)
            a, b = (self.tensor(x, scope)[0] for x in v.args)
            text = f"th.{o}_float({a}, {b})"
        elif o in ("floor", "ceil", "trunc", "round") and not dt.is_floating_point:
            text = texts[0]  # integers are whole already (tl.floor takes floats only)
        elif o == "fmod" and not dt.is_floating_point:
            text = f"{texts[0]} % {texts[1]}"
        elif o in ("maximum", "minimum"):
            if dt.is_floating_point:
                text = f"th.{o}({texts[0]}, {texts[1]})"
            else:
                text = f"tl.{o}({texts[0]}, {texts[1]})"
        elif o == "neg":
            text = f"-{texts[0]}"
        elif o == "reciprocal":
            text = f"th.div_rn(tl.full([], 1.0, {TL_DTYPES[dt]}), {texts[0]})"
        elif o == "sign":
            t = texts[0]
            text = f"({t} > 0).to({TL_DTYPES[v.dtype]}) - ({t} < 0).to({TL_DTYPES[v.dtype]})"
        elif o == "logical_not":
            text = f"{texts[0]} == 0"
        elif o == "bitwise_not":
            if dt == torch.bool:
                text = f"{texts[0]} == 0"
            elif dt == torch.uint8:  # ~ builds -1 as its mask, out of range for uint8
                text = f"{texts[0]} ^ 255"
            else:
                text = f"~{texts[0]}"
        elif o == "isnan":
            text = f"{texts[0]} != {texts[0]}"
        elif o == "isinf":
            text = f"tl.abs({texts[0]}) == float('inf')"
        elif o == "where":
            text = f"tl.where({texts[0]}, {texts[1]}, {texts[2]})"
        elif o == "abs" and dt == torch.bool:
            text = texts[0]
        elif o == "rsqrt" and dt == torch.float64:
            # tl.rsqrt is PTX's rsqrt.approx; eager's float64 kernels compute a correctly
            # rounded 1/sqrt, and PTX has no approximate float64 square root or division
            text = f"1.0 / tl.sqrt({texts[0]})"
        elif o in _CALL:
            fn = _CALL[o]
            text = f"{fn}({', '.join(texts)})"
        else:
            raise NotImplementedError(f"no Triton form for op {o}")
        return self.tmp(scope, text, level, v)

    def ref(self, name: str, scope: Scope) -> tuple[str, int]:
        if name in self.values:
            return self.values[name]
        step = self.steps[name]
        # an inner pointwise step of a looped reduction is recomputed in each loop
        assert step.reduction_type is None, f"reduction {name} read before it is computed"
        return self.value(step.value, scope)

    # ---- statements ----------------------------------------------------------------------

    def store(self, step: Step, var: tuple[str, int], scope: Scope) -> None:
        if step.store is None:
            return
        static, _ = address(self.buffers[step.name], step.store)
        level = 2 if step.loop == "inner" and step.reduction_type is None else 1
        addr = render(static)
        kinds = {self.var_level(v) for v in static.vars()}
        if not kinds:
            addr = f"tl.full({self.shape(level)}, {addr}, tl.int32)"
        elif level == 2 and kinds != {1, 2}:  # tl.store does not broadcast the pointer
            addr = f"{addr} + tl.zeros([XBLOCK, RBLOCK], tl.int32)"
        text, vlevel = var
        if not text.startswith("tmp"):  # a literal
            text = f"tl.full({self.shape(level)}, {text}, {TL_DTYPES[step.dtype]})"
        elif vlevel == 0:  # a scalar load: broadcast to the block
            text = f"{text} + tl.zeros({self.shape(level)}, {TL_DTYPES[step.dtype]})"
        elif self.steps[step.name].value.dtype != step.dtype or step.dtype in LOW_PRECISION:
            # a half-precision value may be float32 in the kernel (see keeps_float32)
            text = f"{text}.to({TL_DTYPES[step.dtype]})"
        scope.lines.append(
            f"{scope.indent}tl.store({self.args[step.name]} + ({addr}), {text}, {self.mask(level)})"
        )

    def define_vars(self, scope: Scope, vars_: tuple[Var, ...], flat: str) -> None:
        if not vars_:
            return
        numel = math.prod(v.size for v in vars_)
        if numel == 0:  # nothing runs; keep every var a block so shapes still agree
            scope.lines += [f"{scope.indent}{var.name} = {flat}" for var in vars_]
            return
        for var, idx in zip(vars_, unflatten(Var(flat, numel), tuple(v.size for v in vars_))):
            scope.lines.append(f"{scope.indent}{var.name} = {render(idx)}")

    def emit_pointwise_steps(self, scope: Scope, steps: list[Step]) -> None:
        for step in steps:
            var = self.value(step.value, scope)
            self.values[step.name] = var
            self.store(step, var, scope)

    def reduce_block(self, step: Step, text: str, scope: Scope) -> str:
        """Reduce a [XBLOCK, RBLOCK] block `text` (already masked) to [XBLOCK, 1]."""
        rt = step.reduction_type
        if rt == "sum":
            return f"tl.sum({text}, 1)[:, None]"
        if rt in ("max", "min"):
            return f"tl.reduce({text}, 1, th.{'maximum' if rt == 'max' else 'minimum'})[:, None]"
        if rt == "prod":
            return f"tl.reduce({text}, 1, th.multiply)[:, None]"
        if rt == "any":
            return f"tl.max({text}.to(tl.int8), 1)[:, None] != 0"
        if rt == "all":
            return f"tl.min({text}.to(tl.int8), 1)[:, None] != 0"
        raise NotImplementedError(rt)

    def identity(self, step: Step) -> str:
        rt, dt = step.reduction_type, step.value.dtype
        if rt in ("sum", "any"):
            return "0"
        if rt in ("prod", "all"):
            return "1"
        largest = rt in ("min", "argmin")
        if dt.is_floating_point:
            return "float('inf')" if largest else "float('-inf')"
        info = torch.iinfo(dt) if dt != torch.bool else None
        if info is None:
            return "1" if largest else "0"
        return str(info.max if largest else info.min)

    def emit_reduction(self, step: Step, scope: Scope) -> None:
        """Persistent: the whole row is in `scope`."""
        rt = step.reduction_type
        if rt in WELFORD_TYPES:
            mean, m2 = self.welford_row(step.value, scope)
            self.finish_reduction(step, (mean if rt == "welford_mean" else m2, 1), scope)
            return
        v, _ = self.value(step.value, scope)
        masked = f"tl.where(xmask & rmask, {v}, {self.identity(step)})"
        self.reduce_lanes(step, masked, "rindex + tl.zeros([XBLOCK, RBLOCK], tl.int32)", scope)

    def reduce_lanes(self, step: Step, block: str, index: str, scope: Scope) -> None:
        """Finish `step` from its [XBLOCK, RBLOCK] `block` of lane values (masked), reduced
        across the lanes; argmax/argmin reduce (value, `index`) pairs and keep the index."""
        rt = step.reduction_type
        if rt in ("argmax", "argmin"):
            scope.lines.append(
                f"{scope.indent}_, {step.name}_idx = tl.reduce(({block}, {index}), 1, th.{rt}_combine)"
            )
            out = self.tmp(scope, f"{step.name}_idx[:, None].to(tl.int64)", 1)
        else:
            out = self.tmp(scope, self.reduce_block(step, block, scope), 1)
        self.finish_reduction(step, out, scope)

    def welford_row(self, body: Welford, scope: Scope) -> tuple[str, str]:
        """(mean, m2) over a whole row held in registers (persistent kernels), computed once
        for the welford_mean and welford_m2 steps of one body. Single elements: the mean,
        then the squared deviations from it, both from registers (two passes cost no extra
        reads here, and are more accurate than a combine per lane); partial states (a split
        reduction's second stage): combined with `welford_combine`."""
        hit = scope.lookup(("welford", body))
        if hit is not None:
            return hit
        acc = TL_DTYPES[body.dtype]
        mean_in, _ = self.value(body.mean, scope)
        weight_in, _ = self.value(body.weight, scope)
        weight, _ = self.tmp(scope, f"tl.where(xmask & rmask, {weight_in}, 0).to({acc})", 2)
        if body.single_elements:
            total, _ = self.tmp(scope, f"tl.sum({weight}, 1)[:, None]", 1)
            x, _ = self.tmp(scope, f"tl.where({weight} != 0, {mean_in}, 0)", 2)
            # an empty row's mean is 0, as `welford_combine` leaves it (its m2 is 0 either way)
            share = f"tl.where({total} == 0, 1, {total})"
            mean, _ = self.tmp(
                scope, f"th.div_rn(tl.sum({x} * {weight}, 1)[:, None], {share}.to({acc}))", 1
            )
            dev, _ = self.tmp(scope, f"tl.where({weight} != 0, {x} - {mean}, 0)", 2)
            m2, _ = self.tmp(scope, f"tl.sum({dev} * {dev} * {weight}, 1)[:, None]", 1)
        else:
            m2_in, _ = self.value(body.m2, scope)
            parts = [
                self.tmp(scope, f"tl.where({weight} != 0, {v}, 0).to({acc})", 2)[0]
                for v in (mean_in, m2_in)
            ]
            mean, m2 = self.combine_lanes(scope, parts[0], parts[1], weight)
        scope.cache[("welford", body)] = (mean, m2)
        return mean, m2

    def combine_lanes(
        self, scope: Scope, mean: str, m2: str, weight: str, pivot: str | None = None
    ) -> tuple[str, str]:
        """The row's (mean, m2), [XBLOCK, 1], from per-lane states [XBLOCK, RBLOCK] (of
        elements less `pivot`). An infinite element makes the mean infinite and, as in eager,
        the variance NaN (Chan's update alone can leave m2 infinite)."""
        row_mean, row_m2 = self.names(2)
        scope.lines.append(
            f"{scope.indent}{row_mean}, {row_m2}, _ = tl.reduce(({mean}, {m2}, {weight}), 1, "
            "welford_combine)"
        )
        mean, _ = self.tmp(scope, f"{row_mean}[:, None]", 1)
        m2, _ = self.tmp(
            scope, f"tl.where(tl.abs({mean}) == float('inf'), float('nan'), {row_m2}[:, None])", 1
        )
        if pivot is not None:
            mean, _ = self.tmp(scope, f"{mean} + {pivot}", 1)
        return mean, m2

    def names(self, n: int) -> list[str]:
        """Fresh tmpN names for values a statement assigns several at a time."""
        out = [f"tmp{self.count + k}" for k in range(n)]
        self.count += n
        return out

    def finish_reduction(self, step: Step, out: tuple[str, int], scope: Scope) -> None:
        if step.value.dtype != step.dtype and step.reduction_type not in ("argmax", "argmin"):
            out = self.tmp(scope, _to_dtype(out[0], step.value.dtype, step.dtype), 1)
        self.values[step.name] = out
        self.store(step, out, scope)


def _literal(value) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, float):
        if math.isnan(value):
            return "float('nan')"
        if math.isinf(value):
            return "float('inf')" if value > 0 else "float('-inf')"
        return repr(value)
    return str(value)


# What the writer renders a constant as (see _literal above): a number, a bool, an infinity
# or a NaN.
_LITERAL = re.compile(r"-?[0-9.]+(e[-+]?[0-9]+)?|True|False|float\('-?(inf|nan)'\)")


def _to_dtype(text: str, src: torch.dtype, dst: torch.dtype) -> str:
    """Triton converting `text`, a `src` value, to `dst` (see compiler/codegen/common.py for
    the half-precision values kept in float32)."""
    if _LITERAL.fullmatch(text):  # `0.to(...)` is not Python: a 0-d tensor of the literal
        text = f"tl.full([], {text}, {TL_DTYPES[src]})"
    if rounds_source(src, dst):
        text = f"{text}.to({TL_DTYPES[src]})"
    if dst == torch.bool:
        return f"{text} != 0"
    if keeps_float32(src, dst):
        return f"{text}.to(tl.float32)"
    if dst in LOW_PRECISION and not src.is_floating_point:
        # through float32, as c10's Half and BFloat16 convert (and Triton's interpreter
        # mangles integers converted to bfloat16 directly)
        return f"{text}.to(tl.float32).to({TL_DTYPES[dst]})"
    if dst == torch.uint8 and src.is_floating_point:
        # through int64, as c10's convert: a negative float wraps (-1.0 -> 255), where
        # the direct conversion gives 0 on a GPU
        return f"{text}.to(tl.int64).to(tl.uint8)"
    return f"{text}.to({TL_DTYPES[dst]})"


def _convert(value, dtype: torch.dtype):
    if dtype == torch.bool:
        return bool(value)
    if dtype.is_floating_point:
        return float(value)
    return int(value)


# ---- kernel assembly ----------------------------------------------------------------------
