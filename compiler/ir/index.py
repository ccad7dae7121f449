"""Index arithmetic: integer expressions over loop variables, kept in a canonical form.

Every index is an affine combination `sum(coeff * atom) + const` whose atoms are loop
variables, floor divisions or modulos of smaller indices. The constructors simplify as they
build (using each variable's range), so views compose into short expressions: a reshape of a
contiguous tensor back to its own shape gives the plain variable again, and the emitters never
need a general simplifier. Floor division and modulo are only built over indices that cannot
be negative, so Python, C and Triton semantics agree when they are printed.

Operators: `i * 4 + j`, `i // 2`, `i % 3` (integer operands only).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable, Mapping, Union


@dataclass(frozen=True)
class Var:
    """A loop variable ranging over `0 .. size - 1`."""

    name: str
    size: int

    def __str__(self) -> str:
        return self.name


class CachedHash:
    """A memoised hash for nested frozen dataclasses (indices, IR values): the scheduler and
    emitters hash the same trees many times over (dict keys of `Index._build`, the Triton
    writer's value cache), and a dataclass's hash recomputes the whole tree each time. A
    subclass sets `__hash__ = CachedHash.__hash__` (the dataclass decorator would replace an
    inherited one). The memo is per process (string hashes are), so pickling drops it."""

    def __hash__(self) -> int:
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash(tuple(getattr(self, f) for f in self.__dataclass_fields__))
            object.__setattr__(self, "_hash", h)
        return h

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}


@dataclass(frozen=True)
class FloorDiv(CachedHash):
    """`base // divisor` with `base >= 0` and `divisor > 1`."""

    base: "Index"
    divisor: int

    __hash__ = CachedHash.__hash__

    def __str__(self) -> str:
        return f"({self.base} // {self.divisor})"

    @functools.cached_property
    def sort_key(self) -> tuple:
        return (1, str(self))


@dataclass(frozen=True)
class Mod(CachedHash):
    """`base % modulus` with `base >= 0` and `modulus > 1`."""

    base: "Index"
    modulus: int

    __hash__ = CachedHash.__hash__

    def __str__(self) -> str:
        return f"({self.base} % {self.modulus})"

    @functools.cached_property
    def sort_key(self) -> tuple:
        return (2, str(self))


Atom = Union[Var, FloorDiv, Mod]


class IndexError_(ValueError):
    """An index the algebra cannot represent safely (e.g. modulo of a possibly negative value)."""


@dataclass(frozen=True)
class Index(CachedHash):
    """`sum(coeff * atom for atom, coeff in terms) + const`; terms sorted, no zero coefficients.

    Every Index is built by the methods here, so it is always in canonical form (`_build`'s
    fixed point): adding a constant need not re-simplify its terms."""

    terms: tuple[tuple[Atom, int], ...] = ()
    const: int = 0

    __hash__ = CachedHash.__hash__

    # ---- construction -------------------------------------------------------------------

    @staticmethod
    def of(value: "IndexLike") -> "Index":
        if isinstance(value, Index):
            return value
        if isinstance(value, bool) or not isinstance(value, (int, Var, FloorDiv, Mod)):
            raise TypeError(f"not an index: {value!r}")
        if isinstance(value, int):
            return Index((), value)
        return Index(((value, 1),), 0)

    @staticmethod
    def _build(coeffs: dict[Atom, int], const: int) -> "Index":
        coeffs = {a: c for a, c in coeffs.items() if c != 0}
        if any(type(a) is Mod for a in coeffs):  # only a modulo can recombine with a term
            const += _recombine(coeffs)
            coeffs = {a: c for a, c in coeffs.items() if c != 0}
        terms = tuple(sorted(coeffs.items(), key=lambda t: _atom_key(t[0])))
        return Index(terms, const)

    def __add__(self, other: "IndexLike") -> "Index":
        if type(other) is int:
            return Index(self.terms, self.const + other) if other else self
        other = Index.of(other)
        if not other.terms:
            return Index(self.terms, self.const + other.const) if other.const else self
        if not self.terms:
            return Index(other.terms, other.const + self.const) if self.const else other
        coeffs = dict(self.terms)
        for atom, c in other.terms:
            coeffs[atom] = coeffs.get(atom, 0) + c
        return Index._build(coeffs, self.const + other.const)

    __radd__ = __add__

    def __neg__(self) -> "Index":
        return self * -1

    def __sub__(self, other: "IndexLike") -> "Index":
        return self + Index.of(other) * -1

    def __rsub__(self, other: "IndexLike") -> "Index":
        return Index.of(other) - self

    def __mul__(self, k: int) -> "Index":
        if type(k) is int:
            if k == 1:
                return self
            if k == 0:
                return Index()
            return Index(tuple((a, c * k) for a, c in self.terms), self.const * k)
        if isinstance(k, Index) and k.is_constant:
            k = k.const
        if not isinstance(k, int) or isinstance(k, bool):
            raise IndexError_(f"index multiplied by a non-constant: {k!r}")
        if k == 0:
            return Index()
        return Index(tuple((a, c * k) for a, c in self.terms), self.const * k)

    __rmul__ = __mul__

    def __floordiv__(self, d: int) -> "Index":
        if d <= 0:
            raise IndexError_(f"floor division by {d}")
        if d == 1:
            return self
        lo, _ = self.bounds()
        if lo < 0:
            raise IndexError_(f"floor division of a possibly negative index {self}")
        # Pull out the terms (and the part of the constant) that are multiples of d:
        # (q*d + r) // d == q + r // d for integers.
        pulled: dict[Atom, int] = {}
        rest: dict[Atom, int] = {}
        for atom, c in self.terms:
            (pulled if c % d == 0 else rest)[atom] = c // d if c % d == 0 else c
        qc, rc = divmod(self.const, d)
        q = Index._build(pulled, qc)
        r = Index._build(rest, rc)
        r_lo, r_hi = r.bounds()
        if r_lo < 0:  # splitting made the remainder possibly negative: keep the whole
            return Index.of(FloorDiv(self, d))
        if r_hi < d:
            return q
        if (
            r.const == 0
            and len(r.terms) == 1
            and r.terms[0][1] == 1
            and isinstance(r.terms[0][0], FloorDiv)
        ):
            inner = r.terms[0][0]
            return q + Index.of(FloorDiv(inner.base, inner.divisor * d))
        if (
            r.const == 0
            and len(r.terms) == 1
            and r.terms[0][1] == 1
            and isinstance(r.terms[0][0], Mod)
            and r.terms[0][0].modulus % d == 0
        ):
            # (e % (d*k)) // d == (e // d) % k: the form `_recombine` can merge with e % d
            # (a loop over H*W split again by loop fusion folds back into one variable)
            inner = r.terms[0][0]
            return q + (Index.of(inner.base) // d) % (inner.modulus // d)
        split = _common_factor(r, d)
        if split is not None:
            g, whole, _ = split
            return q + whole // (d // g)
        return q + Index.of(FloorDiv(r, d))

    def __mod__(self, m: int) -> "Index":
        if m <= 0:
            raise IndexError_(f"modulo by {m}")
        if m == 1:
            return Index()
        lo, _ = self.bounds()
        if lo < 0:
            raise IndexError_(f"modulo of a possibly negative index {self}")
        rest = {a: c for a, c in self.terms if c % m != 0}
        r = Index._build(rest, self.const % m)
        r_lo, r_hi = r.bounds()
        if r_lo < 0:
            return Index.of(Mod(self, m))
        if r_hi < m:
            return r
        if (
            r.const == 0
            and len(r.terms) == 1
            and r.terms[0][1] == 1
            and isinstance(r.terms[0][0], Mod)
        ):
            inner = r.terms[0][0]
            if inner.modulus % m == 0:
                return Index.of(inner.base) % m
        split = _common_factor(r, m)
        if split is not None:
            g, whole, small = split
            return (whole % (m // g)) * g + small
        return Index.of(Mod(r, m))

    # ---- queries --------------------------------------------------------------------------

    @property
    def is_constant(self) -> bool:
        return not self.terms

    def bounds(self) -> tuple[int, int]:
        """Inclusive (lowest, highest) value over the ranges of the variables."""
        lo = hi = self.const
        for atom, c in self.terms:
            a_lo, a_hi = _atom_bounds(atom)
            lo += min(c * a_lo, c * a_hi)
            hi += max(c * a_lo, c * a_hi)
        return lo, hi

    def vars(self) -> set[Var]:
        out: set[Var] = set()
        for atom, _ in self.terms:
            out |= _atom_vars(atom)
        return out

    def coefficient(self, var: Var) -> int | None:
        """The coefficient of `var` if it only appears as a plain term, else None."""
        coeff = 0
        for atom, c in self.terms:
            if atom == var:
                coeff = c
            elif var in _atom_vars(atom):
                return None
        return coeff

    @functools.cached_property
    def var_names(self) -> frozenset[str]:
        return frozenset(v.name for v in self.vars())

    def subs(self, mapping: Mapping[str, "IndexLike"]) -> "Index":
        """Replace variables (by name) with indices, re-simplifying."""
        if self.var_names.isdisjoint(mapping):
            return self
        out = Index.of(self.const)
        for atom, c in self.terms:
            out = out + _subs_atom(atom, mapping) * c
        return out

    def map_atoms(self, fn: Callable[[Atom], "Index"]) -> "Index":
        out = Index.of(self.const)
        for atom, c in self.terms:
            out = out + fn(atom) * c
        return out

    def __str__(self) -> str:
        return render(self)


IndexLike = Union[Index, Var, FloorDiv, Mod, int]


def render(index: Index, name: Callable[[Var], str] = str) -> str:
    """Print an index as C/Python/Triton text (all agree: no negative division operands)."""
    parts: list[str] = []
    for atom, c in index.terms:
        text = _render_atom(atom, name)
        term = text if abs(c) == 1 else f"{abs(c)}*{text}"
        parts.append(("- " if c < 0 else "+ ") + term)
    if index.const or not parts:
        parts.append(("- " if index.const < 0 else "+ ") + str(abs(index.const)))
    text = " ".join(parts)
    return text[2:] if text.startswith("+ ") else "-" + text[2:]


def _common_factor(e: Index, d: int) -> tuple[int, Index, Index] | None:
    """(g, q, s) with `e == g*q + s`, g > 1 a divisor of d, `0 <= s < g` and q >= 0, when
    there are such: then `e // d == q // (d/g)` and `e % d == g*(q % (d/g)) + s`. A window
    or head split of a flat position (`(r + 48*x) // 2688` with r < 48, Swin's window
    reverse) becomes `x // 56`, free of the inner loop variable, where the division per
    element kept the loop from vectorising."""
    for g in sorted({math.gcd(c, d) for _, c in e.terms} - {1}, reverse=True):
        whole = {a: c // g for a, c in e.terms if c % g == 0}
        small = {a: c for a, c in e.terms if c % g != 0}
        qc, sc = divmod(e.const, g)
        s, q = Index._build(small, sc), Index._build(whole, qc)
        lo, hi = s.bounds()
        if whole and lo >= 0 and hi < g and q.bounds()[0] >= 0:
            return g, q, s
    return None


def _recombine(coeffs: dict[Atom, int]) -> int:
    """Undo splits in place: `m*c*(e // m) + c*(e % m)` is `c*e`, and
    `m*c*((e // m) % k) + c*(e % m)` is `c*(e % (m*k))` — what flattening an unflattened
    index produces. Returns the constant part of the recombined terms."""
    const = 0
    changed = True
    while changed:
        changed = False
        for atom, c in list(coeffs.items()):
            if not isinstance(atom, Mod) or atom not in coeffs:
                continue
            e, m = atom.base, atom.modulus
            div = FloorDiv(e, m)
            if coeffs.get(div) == c * m:
                del coeffs[atom], coeffs[div]
                for a2, c2 in e.terms:
                    coeffs[a2] = coeffs.get(a2, 0) + c2 * c
                    if coeffs[a2] == 0:
                        del coeffs[a2]
                const += e.const * c
                changed = True
                break
            for other, c2 in list(coeffs.items()):
                if isinstance(other, Mod) and other.base == Index.of(div) and c2 == c * m:
                    del coeffs[atom], coeffs[other]
                    merged = e % (m * other.modulus)
                    for a3, c3 in merged.terms:
                        coeffs[a3] = coeffs.get(a3, 0) + c3 * c
                    const += merged.const * c
                    changed = True
                    break
            if changed:
                break
    return const


def _render_atom(atom: Atom, name: Callable[[Var], str]) -> str:
    if isinstance(atom, Var):
        return name(atom)
    base = render(atom.base, name)
    if not (len(atom.base.terms) == 1 and atom.base.terms[0][1] == 1 and atom.base.const == 0):
        base = f"({base})"
    if isinstance(atom, FloorDiv):
        return f"({base} // {atom.divisor})"
    return f"({base} % {atom.modulus})"


def _atom_key(atom: Atom) -> tuple:
    if type(atom) is Var:
        return (0, atom.name)
    return atom.sort_key


def _atom_bounds(atom: Atom) -> tuple[int, int]:
    if isinstance(atom, Var):
        return 0, max(atom.size - 1, 0)
    lo, hi = atom.base.bounds()
    if isinstance(atom, FloorDiv):
        return lo // atom.divisor, hi // atom.divisor
    return 0, min(atom.modulus - 1, hi)


def _atom_vars(atom: Atom) -> set[Var]:
    if isinstance(atom, Var):
        return {atom}
    return atom.base.vars()


def _subs_atom(atom: Atom, mapping: Mapping[str, IndexLike]) -> Index:
    if isinstance(atom, Var):
        return Index.of(mapping[atom.name]) if atom.name in mapping else Index.of(atom)
    base = atom.base.subs(mapping)
    return base // atom.divisor if isinstance(atom, FloorDiv) else base % atom.modulus


def contiguous_strides(size: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for s in reversed(size):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


def flat_index(indices: tuple[IndexLike, ...], strides: tuple[int, ...], offset: int = 0) -> Index:
    """The memory offset of element `indices` of a strided tensor."""
    out = Index.of(offset)
    for i, s in zip(indices, strides):
        out = out + Index.of(i) * s
    return out


def unflatten(flat: IndexLike, size: tuple[int, ...]) -> tuple[Index, ...]:
    """Split a row-major flat index over `size` into one index per dimension."""
    flat = Index.of(flat)
    strides = contiguous_strides(size)
    return tuple((flat // st) % max(s, 1) if s != 1 else Index() for st, s in zip(strides, size))


def make_vars(prefix: str, size: tuple[int, ...]) -> tuple[Var, ...]:
    return tuple(Var(f"{prefix}{k}", s) for k, s in enumerate(size))
