"""Size-generic C++ kernels: one compiled kernel serves every size of a dynamic graph.

A graph with symbolic sizes is still lowered, scheduled and emitted per concrete size
(compiler/backends/per_size.py): the loop IR's index algebra works on integers. What changes
with the size is a kernel's numbers, not its code: loop bounds, strides, mask thresholds,
`1/n` of a mean. So a kernel's text is split into its *skeleton* (the text with every
numeric literal replaced by a marker of its kind) and its *literals*. Two sizes whose kernels
have one skeleton differ only in literals; the positions where they differ become `int64_t`
(or float) parameters of a generic version of the kernel, compiled once; every later size
whose kernel has that skeleton, and the same literals at the other positions, calls the
generic kernel with its own values. That check is the guard: it is exact, since the kernel
run is the concrete kernel's text with its own numbers passed in, so a decision that depends
on the size (a loop split at a concatenation boundary, a mask the emitter could decide) shows
as another skeleton or other fixed literals, and gets its own code rather than a wrong one.

The emitter writes dynamic graphs' kernels with the decisions that would change their
skeleton per size taken at run time or not at all (compiler/codegen/cpp.py, `size_generic`):
OpenMP threads behind an `if(parallel: work >= ...)` clause, no unrolled short reductions.
Static graphs' kernels stay as they were; their compile only notes the skeleton and literals
of each kernel's size-generic text (`note_sample`), so the first dynamic size after a static
one finds a second sample and compiles the generic kernel at once: one static and one
generic compile, as torch.compile's "static, then dynamic" does.

Triton kernels are cut the same way (compiler/codegen/triton_sized.py), in their own
*dialect* (`DIALECTS`): Python literals, `#` comments, size parameters before the block
sizes. Their block sizes are constexprs outside the text, chosen per range of sizes there.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import re
import struct
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Iterator

# Numeric literals of the C++ emitter (compiler/codegen/cpp_ops.py): `INT64_C(5)`, floats
# printed by repr (`0.125f`, `1e-05f`, `0.5`), plain integers (`256*x0`, `x0 < 9`). Digits
# inside identifiers (`tmp12`, `int32_t`, `in_ptr0`) are not literals.
_CPP_LITERAL = re.compile(
    r"INT64_C\((?P<i64>\d+)\)"
    r"|(?<![\w.])(?P<float>(?:\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+))(?P<fsuf>f?)(?![\w.])"
    r"|(?<![\w.])(?P<int>\d+)(?![\w.])"
)
# The Triton emitter's literals (compiler/codegen/triton_writer.py): Python ints and floats
# as repr writes them, never suffixed.
_PY_LITERAL = re.compile(
    r"(?<![\w.])(?P<float>(?:\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+))(?P<fsuf>)(?![\w.])"
    r"|(?<![\w.])(?P<int>\d+)(?![\w.])"
)


@dataclass(frozen=True)
class Dialect:
    """How one kernel language writes literals, comments and parameters."""

    literal: re.Pattern
    comment: str  # a whole-line comment's prefix
    ctypes: dict[str, str]  # literal kind -> its parameter's type in the generic code
    prefix: str  # generic kernels are named <prefix>_<skeleton digest>_<k>
    # What the code before a float literal must end with for the literal to become a
    # parameter (None: any float may)
    float_context: re.Pattern | None = None

    def free(self, kind: str, code: str, start: int) -> bool:
        """Whether the literal of `kind` at `start` of `code` may become a parameter."""
        if kind == "int" or self.float_context is None:
            return True
        return self.float_context.search(code[max(0, start - 16) : start]) is not None


DIALECTS = {
    "cpp": Dialect(
        _CPP_LITERAL, "//", {"int": "int64_t", "float": "float", "double": "double"}, "cpp_sized"
    ),
    # Triton passes a Python int as i32 or i64 by its value and a float as fp32. A float
    # literal becomes a parameter only as the value of a typed 0-d tensor (a mean's count,
    # `tl.full([], 40.0, tl.float32)`): a bare float literal is a weakly typed scalar (a
    # float16 operand stays float16), an fp32 argument is not.
    "triton": Dialect(
        _PY_LITERAL,
        "#",
        {"int": "int", "double": "float"},
        "triton_sized",
        re.compile(r"tl\.full\(\[\], $"),
    ),
}
_MARKER = {"int": "@i@", "float": "@f@", "double": "@d@"}
# Generic variants of one skeleton (another grouping of its parameters) before sizes of it
# are compiled per size again.
MAX_VARIANTS = 3
# Skeletons remembered per process, oldest dropped first.
MAX_SKELETONS = 2048


@dataclass(frozen=True)
class Split:
    """A kernel's text cut into its skeleton and its numeric literals (in order)."""

    skeleton: str  # function name as @kernel@, comment lines dropped, literals as markers
    texts: tuple[str, ...]  # each literal as written
    kinds: tuple[str, ...]  # "int", "float" or "double"
    code: str  # the code lines the literals were found in (comment lines dropped)
    spans: tuple[tuple[int, int], ...]  # each literal's span in `code`
    free: tuple[bool, ...] = ()  # per literal: whether it may become a parameter
    dialect: str = "cpp"


def split(source: str, name: str, dialect: str = "cpp") -> Split:
    """`source` (one kernel, as the C++ or Triton emitter writes it) cut into skeleton and
    literals. Comment lines are not code: they name FX nodes and user lines, which differ
    between graphs whose kernels are the same program."""
    d = DIALECTS[dialect]
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(d.comment)]
    code = "\n".join(lines)
    parts, texts, kinds, spans = [], [], [], []
    last = 0
    for m in d.literal.finditer(code):
        if m.groupdict().get("i64") is not None:
            kind, text = "int", m.group("i64")
        elif m.group("float") is not None:
            kind, text = ("float" if m.group("fsuf") else "double"), m.group("float")
        else:
            kind, text = "int", m.group("int")
        parts.append(code[last : m.start()])
        parts.append(_MARKER[kind])
        texts.append(text)
        kinds.append(kind)
        spans.append((m.start(), m.end()))
        last = m.end()
    parts.append(code[last:])
    skeleton = re.sub(rf"\b{re.escape(name)}\b", "@kernel@", "".join(parts))
    free = tuple(d.free(k, code, start) for k, (start, _) in zip(kinds, spans))
    return Split(skeleton, tuple(texts), tuple(kinds), code, tuple(spans), free, dialect)


@dataclass
class Variant:
    """A generic kernel of one skeleton: the literal positions of each parameter, and the
    literals every other position must have."""

    groups: tuple[tuple[int, ...], ...]  # per parameter, the literal positions it stands for
    fixed: dict[int, str]  # position -> literal text the generic code has there
    name: str  # the generic function's name
    source: str  # the generic function's text
    # per parameter: "int64_t", "float" or "double" (Triton: "int" or "float")
    ctypes: tuple[str, ...]
    loaded: Any = None  # the compiled kernel, once built (CppEmitter.load_many)
    failed: bool = False  # its build failed: sizes of this skeleton compile per size
    dialect: str = "cpp"
    # The parameter values of every size it has served, in order (the inspector lists them)
    served: list[tuple] = field(default_factory=list)
    # Triton: the block-size configs chosen for ranges of sizes (triton_sized.py)
    configs: list[dict] = field(default_factory=list)

    @property
    def params(self) -> list[str]:
        """The parameters' names in the generic code: ks<j> for sizes, kf<j> for floats."""
        return [_param(j, c) for j, c in enumerate(self.ctypes)]

    def values(self, s: Split) -> tuple | None:
        """The parameter values that make this generic kernel run `s`'s code, or None when
        `s` differs at a position the generic code fixes or disagrees within a parameter."""
        for pos, text in self.fixed.items():
            if s.texts[pos] != text:
                return None
        out = []
        for group, ctype in zip(self.groups, self.ctypes):
            text = s.texts[group[0]]
            if any(s.texts[p] != text for p in group[1:]):
                return None
            if ctype in _INTEGER:
                out.append(int(text))
            elif ctype == "float" and self.dialect == "triton" and not _fp32_exact(text):
                return None  # Triton's float argument is fp32: this literal needs its own code
            else:
                out.append(float(text))
        return tuple(out)

    def serve(self, values: tuple) -> None:
        """Note a size this kernel runs (once per size)."""
        with _lock:
            if values not in self.served:
                self.served.append(values)


_INTEGER = ("int64_t", "int")


def _fp32_exact(text: str) -> bool:
    value = float(text)
    return struct.unpack("f", struct.pack("f", value))[0] == value


@dataclass
class _Skeleton:
    samples: list[tuple[str, ...]] = field(default_factory=list)  # literal texts seen
    variants: list[Variant] = field(default_factory=list)


_skeletons: OrderedDict[str, _Skeleton] = OrderedDict()
_lock = threading.Lock()
_generic: contextvars.ContextVar[bool] = contextvars.ContextVar("size_generic", default=False)


def generic_kernels() -> bool:
    """Whether the kernels being compiled are a dynamic graph's (compiled size-generic)."""
    return _generic.get()


@contextlib.contextmanager
def size_generic() -> Iterator[None]:
    """Compile the kernels of the graphs compiled inside as size-generic ones."""
    token = _generic.set(True)
    try:
        yield
    finally:
        _generic.reset(token)


def _entry(skeleton: str) -> _Skeleton:
    # Keyed by a digest: every static CPU kernel leaves a sample, and skeletons are long.
    key = hashlib.sha1(skeleton.encode()).hexdigest()
    entry = _skeletons.get(key)
    if entry is None:
        entry = _skeletons[key] = _Skeleton()
        while len(_skeletons) > MAX_SKELETONS:
            _skeletons.popitem(last=False)
    return entry


def note_sample(s: Split) -> None:
    """Remember the literals of a kernel of this skeleton (a static graph's, or a size the
    generic kernels could not serve), so that a later size can see which of them vary."""
    with _lock:
        entry = _entry(s.skeleton)
        if s.texts not in entry.samples and len(entry.samples) < MAX_VARIANTS + 1:
            entry.samples.append(s.texts)


def find(s: Split) -> tuple[Variant, tuple] | Variant | None:
    """For a dynamic graph's kernel: (a compiled-or-to-compile generic variant, its
    parameter values for `s`), or a new Variant to compile first, or None (compile `s`'s
    own code: no sample to compare with, or the skeleton has had its variants)."""
    with _lock:
        entry = _entry(s.skeleton)
        for v in entry.variants:
            if v.failed:
                return None
            values = v.values(s)
            if values is not None:
                return v, values
        others = [t for t in entry.samples if t != s.texts]
        if len(entry.variants) >= MAX_VARIANTS:
            return None
        if not others:
            if not entry.samples:
                entry.samples.append(s.texts)
            return None
        variant = _variant(s, [*others, s.texts], len(entry.variants))
        entry.variants.append(variant)
        return variant


def _variant(s: Split, samples: list[tuple[str, ...]], k: int) -> Variant:
    """The generic code of `s`'s skeleton over `samples`: one parameter per distinct column
    of literals that varies (a loop bound and the stride equal to it are one `ks`)."""
    columns: dict[tuple, list[int]] = {}
    fixed: dict[int, str] = {}
    for pos in range(len(s.texts)):
        column = tuple(t[pos] for t in samples)
        if len(set(column)) == 1 or not s.free[pos]:
            fixed[pos] = s.texts[pos]  # a literal that cannot vary guards sizes with its value
        else:
            columns.setdefault((s.kinds[pos], column), []).append(pos)
    groups = tuple(tuple(ps) for ps in columns.values())
    d = DIALECTS[s.dialect]
    ctypes = tuple(d.ctypes[kind] for kind, _ in columns)
    # Named by its skeleton, so that the disk cache finds it again in another process.
    name = f"{d.prefix}_{hashlib.sha1(s.skeleton.encode()).hexdigest()[:12]}_{k}"
    names = [_param(j, c) for j, c in enumerate(ctypes)]
    param_of = {p: j for j, ps in enumerate(groups) for p in ps}
    out, last = [], 0
    for pos, (start, end) in enumerate(s.spans):
        out.append(s.code[last:start])
        if pos in param_of:
            out.append(names[param_of[pos]])
        else:
            out.append(s.code[start:end])
        last = end
    out.append(s.code[last:])
    code = _SIGNATURES[s.dialect]("".join(out), name, ctypes, names)
    header = f"{d.comment} {name}: size-generic kernel; parameters {', '.join(names)}"
    return Variant(groups, fixed, name, f"{header}\n{code}\n", ctypes, dialect=s.dialect)


def _cpp_signature(code: str, name: str, ctypes: tuple[str, ...], names: list[str]) -> str:
    """The function (the text's one `extern "C"` definition) renamed, its parameters
    appended."""
    extra = ", ".join(f"{c} {n}" for c, n in zip(ctypes, names))
    return re.sub(
        r'extern "C" void \w+\((.*?)\) \{',
        lambda m: f'extern "C" void {name}({", ".join(p for p in (m.group(1), extra) if p)}) {{',
        code,
        count=1,
    )


def _triton_signature(code: str, name: str, ctypes: tuple[str, ...], names: list[str]) -> str:
    """The `@triton.jit` kernel (the one taking XBLOCK) renamed, its size parameters before
    the block sizes and left unspecialised: Triton would otherwise compile it again for a
    size divisible by 16 (or equal to 1), which is what one compile for every size avoids.
    The module's alias line for the per-size name goes (the variant is found by its own)."""
    extra = "".join(f"{n}, " for n in names)
    dns = f"(do_not_specialize=[{', '.join(repr(n) for n in names)}])" if names else ""
    code = re.sub(
        r"@triton\.jit\ndef \w+\(([^)]*?)(XBLOCK: tl\.constexpr[^)]*)\):",
        lambda m: f"@triton.jit{dns}\ndef {name}({m.group(1)}{extra}{m.group(2)}):",
        code,
        count=1,
    )
    return re.sub(r"\n\w+ = \w+\s*$", "\n", code)


_SIGNATURES = {"cpp": _cpp_signature, "triton": _triton_signature}


def _param(j: int, ctype: str) -> str:
    return f"ks{j}" if ctype in _INTEGER else f"kf{j}"


def clear() -> None:
    """Forget every skeleton (compiler.reset())."""
    with _lock:
        _skeletons.clear()
