"""C++ text for the pieces of a kernel: index and constant printers, one expression per IR
operation (torch semantics: NaN-propagating max/min, Python integer division, half
precisions computed in float), and the accumulators of reductions. compiler/codegen/cpp.py
assembles kernels from these."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from compiler.codegen.common import keeps_float32, rounds_source
from compiler.codegen.cpp_prelude import COMPUTE_TYPE, MATH_FUNCTIONS, STORAGE_TYPE
from compiler.ir.index import FloorDiv, Index, Mod, Var
from compiler.ir.nodes import Constant, Op
from compiler.scheduler.kernel import Step

_HALF = (torch.float16, torch.bfloat16)


# ---- small printers -----------------------------------------------------------------------


def c_index(index: Index) -> str:
    """An Index as C++ (int64_t arithmetic; the IR guarantees no negative `/` or `%`)."""
    parts: list[str] = []
    for atom, coeff in index.terms:
        text = _c_atom(atom)
        term = text if abs(coeff) == 1 else f"{abs(coeff)}*{text}"
        parts.append(("- " if coeff < 0 else "+ ") + term)
    if index.const or not parts:
        parts.append(("- " if index.const < 0 else "+ ") + str(abs(index.const)))
    text = " ".join(parts)
    return text[2:] if text.startswith("+ ") else "-" + text[2:]


def _c_atom(atom: Var | FloorDiv | Mod) -> str:
    if isinstance(atom, Var):
        return atom.name
    base = c_index(atom.base)
    terms = atom.base.terms
    if not (len(terms) == 1 and terms[0][1] == 1 and atom.base.const == 0):
        base = f"({base})"
    if isinstance(atom, FloorDiv):
        return f"({base} / {atom.divisor})"
    return f"({base} % {atom.modulus})"


def c_constant(value: bool | int | float, dtype: torch.dtype) -> str:
    ctype = COMPUTE_TYPE[dtype]
    if dtype == torch.bool:
        return "true" if value else "false"
    if dtype.is_floating_point:
        v = float(value)
        if math.isnan(v):
            return f"static_cast<{ctype}>(NAN)"
        if math.isinf(v):
            return f"static_cast<{ctype}>({'-' if v < 0 else ''}INFINITY)"
        text = repr(v)
        if ctype == "float":
            return f"{text}f" if abs(v) <= 3.4028234663852886e38 else f"static_cast<float>({text})"
        return text
    v = int(value)
    if ctype == "int64_t":
        return "INT64_MIN" if v == -(2**63) else f"INT64_C({v})"
    return f"static_cast<{ctype}>({v})"


def _lit(x: float, ctype: str) -> str:
    return f"{x!r}f" if ctype == "float" else repr(x)


def _math(name: str, ctype: str) -> str:
    assert name in MATH_FUNCTIONS
    if name == "exp" and ctype == "float":
        return "jc_expf"  # libmvec's expf is scalar on large inputs (cpp_prelude.py)
    return f"{name}f" if ctype == "float" else name


# ---- pointwise operations -----------------------------------------------------------------


def op_expr(op: Op, args: list[str]) -> str:
    """C++ for one IR operation whose operands are already C++ expressions."""
    name, dtype = op.op, op.dtype
    ctype = COMPUTE_TYPE[dtype]
    arg_dtype = op.args[0].dtype
    actype = COMPUTE_TYPE[arg_dtype]
    floating = arg_dtype.is_floating_point
    a = args[0]
    b = args[1] if len(args) > 1 else ""
    binary = {"add": "+", "sub": "-", "mul": "*", "truediv": "/"}
    compare = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
    if name in binary:
        return f"({a} {binary[name]} {b})"
    if name in compare:
        return f"({a} {compare[name]} {b})"
    if name == "truncdiv":  # C's integer division truncates already
        return f"{_math('trunc', ctype)}({a} / {b})" if floating else f"({a} / {b})"
    if name in ("floordiv", "remainder", "fmod", "maximum", "minimum"):
        return f"jc_{name}({a}, {b})"
    if name == "neg":
        return f"(-{a})"
    if name in ("abs", "sign"):
        return f"jc_{name}({a})"
    if name == "reciprocal":
        return f"({_lit(1.0, ctype)} / {a})"
    if name == "pow":
        if not floating:
            return f"jc_ipow<{ctype}>({a}, {b})"
        exponent = op.args[1]
        if isinstance(exponent, Constant) and float(exponent.value) == 2.0:
            return f"({a} * {a})"
        return f"{_math('pow', ctype)}({a}, {b})"
    if name == "sqrt":
        return f"{_math('sqrt', ctype)}({a})"
    if name == "rsqrt":
        return f"({_lit(1.0, ctype)} / {_math('sqrt', ctype)}({a}))"
    if name == "sigmoid":
        one = _lit(1.0, ctype)
        return f"({one} / ({one} + {_math('exp', ctype)}(-{a})))"
    if name in ("floor", "ceil", "trunc", "round"):
        if not floating:
            return a
        return f"{_math('nearbyint' if name == 'round' else name, ctype)}({a})"
    if name in MATH_FUNCTIONS:
        return f"{_math(name, ctype)}({', '.join(args)})"
    if name == "logical_not":
        return f"(!static_cast<bool>({a}))"
    if name in ("logical_and", "logical_or", "logical_xor"):
        sym = {"logical_and": "&", "logical_or": "|", "logical_xor": "!="}[name]
        return f"(static_cast<bool>({a}) {sym} static_cast<bool>({b}))"
    if name == "isnan":
        return f"({a} != {a})" if floating else "false"
    if name == "isinf":
        return f"(jc_abs({a}) == static_cast<{actype}>(INFINITY))" if floating else "false"
    if name in ("bitwise_and", "bitwise_or", "bitwise_xor"):
        sym = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}[name]
        return f"({a} {sym} {b})"
    if name == "bitwise_not":
        return f"(!{a})" if dtype == torch.bool else f"(~{a})"
    if name == "where":
        return f"({a} ? {b} : {args[2]})"
    if name == "to_dtype":
        return convert(a, arg_dtype, dtype)
    raise NotImplementedError(f"C++ emitter: no rule for pointwise op {name!r}")


_ROUND = {torch.float16: "jc_round_half", torch.bfloat16: "jc_round_bf16"}


def convert(expr: str, src: torch.dtype, dst: torch.dtype) -> str:
    """A value of dtype `src` as dtype `dst`, both in their compute types (half precisions
    are floats, rounded or not as compiler/codegen/common.py's `keeps_float32` and
    `rounds_source` say)."""
    if rounds_source(src, dst):
        expr = f"{_ROUND[src]}({expr})"
    if dst == torch.bool:
        return f"({expr} != 0)"
    if dst in _HALF:
        if keeps_float32(src, dst):
            return expr if COMPUTE_TYPE[src] == "float" else f"static_cast<float>({expr})"
        return f"{_ROUND[dst]}(static_cast<float>({expr}))"
    if dst == torch.uint8 and src.is_floating_point:
        # through int64, as c10's convert: a negative float wraps (-1.0 -> 255), where a
        # direct conversion is undefined
        return f"static_cast<uint8_t>(static_cast<int64_t>({expr}))"
    if COMPUTE_TYPE[src] == COMPUTE_TYPE[dst]:
        return expr
    return f"static_cast<{COMPUTE_TYPE[dst]}>({expr})"


def load_expr(ptr: str, index: str, dtype: torch.dtype) -> str:
    if dtype == torch.float16:
        return f"jc_half_to_float({ptr}[{index}])"
    if dtype == torch.bfloat16:
        return f"jc_bf16_to_float({ptr}[{index}])"
    return f"{ptr}[{index}]"


def store_expr(value: str, dtype: torch.dtype) -> str:
    if dtype == torch.float16:
        return f"jc_float_to_half({value})"
    if dtype == torch.bfloat16:
        return f"jc_float_to_bf16({value})"
    return f"static_cast<{STORAGE_TYPE[dtype]}>({value})"


# ---- reductions ---------------------------------------------------------------------------


def _lowest(ctype: str) -> str:
    return {
        "float": "-INFINITY", "double": "-INFINITY", "bool": "false", "int64_t": "INT64_MIN",
        "int32_t": "INT32_MIN", "int16_t": "INT16_MIN", "int8_t": "INT8_MIN", "uint8_t": "0",
    }[ctype]  # fmt: skip


def _highest(ctype: str) -> str:
    return {
        "float": "INFINITY", "double": "INFINITY", "bool": "true", "int64_t": "INT64_MAX",
        "int32_t": "INT32_MAX", "int16_t": "INT16_MAX", "int8_t": "INT8_MAX", "uint8_t": "255",
    }[ctype]  # fmt: skip


@dataclass
class Accumulator:
    """The C++ variables of one reduction step."""

    step: Step
    acc: str  # accumulator variable
    ctype: str  # its type
    nan: str | None = None  # NaN flag of a floating max/min
    index: str | None = None  # position variable of argmax/argmin
    value_ctype: str = ""

    @property
    def kind(self) -> str:
        assert self.step.reduction_type is not None
        return self.step.reduction_type

    def declare(self) -> list[str]:
        if self.kind in ("max", "argmax"):
            init = _lowest(self.ctype)
        elif self.kind in ("min", "argmin"):
            init = _highest(self.ctype)
        else:
            init = {"sum": "0", "prod": "1", "any": "0", "all": "1"}[self.kind]
        lines = [f"{self.ctype} {self.acc} = {init};"]
        if self.nan:
            lines.append(f"int {self.nan} = 0;")
        if self.index:
            lines.append(f"int64_t {self.index} = 0;")
        return lines

    def clauses(self) -> list[str]:
        """OpenMP reduction clauses, or [] if the combine cannot be expressed as one."""
        if self.kind in ("argmax", "argmin"):
            return []
        op = {"sum": "+", "prod": "*", "any": "|", "all": "&", "max": "max", "min": "min"}
        out = [f"reduction({op[self.kind]}:{self.acc})"]
        if self.nan:
            out.append(f"reduction(|:{self.nan})")
        return out

    def combine(self, v: str, position: str) -> list[str]:
        a = self.acc
        if self.kind == "sum":
            return [f"{a} = {a} + static_cast<{self.ctype}>({v});"]
        if self.kind == "prod":
            return [f"{a} = {a} * static_cast<{self.ctype}>({v});"]
        if self.kind == "any":
            return [f"{a} |= ({v} != 0);"]
        if self.kind == "all":
            return [f"{a} &= ({v} != 0);"]
        cmp = ">" if self.kind in ("max", "argmax") else "<"
        if self.kind in ("max", "min"):
            if self.nan:
                return [f"{a} = ({v} {cmp} {a}) ? {v} : {a};", f"{self.nan} |= ({v} != {v});"]
            if self.value_ctype in ("float", "double"):  # a NaN wins and then stays
                return [f"{a} = ({v} {cmp} {a} || {v} != {v}) ? {v} : {a};"]
            return [f"{a} = ({v} {cmp} {a}) ? {v} : {a};"]
        nan_wins = (
            f" || ({v} != {v} && {a} == {a})" if self.value_ctype in ("float", "double") else ""
        )
        return [f"if (({v} {cmp} {a}){nan_wins}) {{ {a} = {v}; {self.index} = {position}; }}"]

    def result(self) -> str:
        if self.kind in ("argmax", "argmin"):
            return str(self.index)
        if self.kind in ("any", "all"):
            return f"({self.acc} != 0)"
        if self.nan:
            return f"({self.nan} ? static_cast<{self.ctype}>(NAN) : {self.acc})"
        return self.acc
