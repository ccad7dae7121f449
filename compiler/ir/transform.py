"""Rewrites over Values: substituting loop variables and replacing loads (inlining)."""

from __future__ import annotations

from typing import Callable, Mapping

import torch

from compiler.ir.index import Index
from compiler.ir.nodes import BOOL_FORMS, Constant, IndexValue, Load, Op, Ref, Value, Welford


def rewrite(
    value: Value,
    on_load: Callable[[Load, tuple, "Value | None"], Value],
    on_index: Callable[[Index], Index],
    on_ref: Callable[[Ref], Value] = lambda r: r,
    on_op: Callable[[Op], Value] = lambda o: o,
) -> Value:
    """Rebuild `value` bottom-up: every Index goes through `on_index`, every Load (with its
    indices and mask already rewritten) through `on_load(load, indices, mask)`, every Ref
    through `on_ref`, every Op (with its operands rewritten) through `on_op`. Shared
    sub-values are rewritten once."""
    memo: dict[int, Value] = {}

    def go(v: Value) -> Value:
        key = id(v)
        if key in memo:
            return memo[key]
        if isinstance(v, Op):
            out: Value = on_op(Op(v.op, tuple([go(a) for a in v.args]), v.dtype))
        elif isinstance(v, Load):
            indices = tuple([on_index(i) if isinstance(i, Index) else go(i) for i in v.indices])
            mask = go(v.mask) if v.mask is not None else None
            out = on_load(v, indices, mask)
        elif isinstance(v, IndexValue):
            out = IndexValue(on_index(v.index), v.dtype)
        elif isinstance(v, Welford):
            out = Welford(go(v.mean), go(v.m2), go(v.weight), v.dtype)
        elif isinstance(v, Ref):
            out = on_ref(v)
        elif isinstance(v, Constant):
            out = v
        else:
            raise TypeError(f"not a Value: {v!r}")
        memo[key] = out
        return out

    return go(value)


def substitute(value: Value, mapping: Mapping[str, Index]) -> Value:
    """Replace loop variables (by name) everywhere in `value`."""
    return substitute_indices(value, substitution(mapping))


def substitute_indices(value: Value, on_index: Callable[[Index], Index]) -> Value:
    """Every Index of `value` through `on_index`."""
    return rewrite(value, lambda ld, idx, mask: Load(ld.buf, idx, ld.dtype, mask), on_index)


def substitution(mapping: Mapping[str, Index]) -> Callable[[Index], Index]:
    """`Index.subs(mapping)`, computed once per distinct index: the loads of a body repeat
    indices (the same point of several buffers)."""
    done: dict[Index, Index] = {}

    def call(i: Index) -> Index:
        out = done.get(i)
        if out is None:
            out = done[i] = i.subs(mapping)
        return out

    return call


def inline_loads(value: Value, bodies: Mapping[str, tuple[tuple[str, ...], Value]]) -> Value:
    """Replace each Load of a buffer in `bodies` (buffer -> (its var names, its body)) with the
    body evaluated at the load's indices. A masked load stays masked: every load inside the
    inlined body gets the mask too (its indices may be out of range where the mask is off),
    and the result is 0 there."""

    def on_load(ld: Load, indices: tuple, mask: Value | None) -> Value:
        if ld.buf not in bodies or any(not isinstance(i, Index) for i in indices):
            return Load(ld.buf, indices, ld.dtype, mask)  # gathers read the stored buffer
        names, body = bodies[ld.buf]
        inlined = substitute(body, dict(zip(names, indices)))
        if mask is None:
            return inlined
        inlined = add_mask(inlined, mask)
        zero = Constant(False if inlined.dtype == torch.bool else 0, inlined.dtype)
        return Op("where", (mask, inlined, zero), inlined.dtype)

    return rewrite(value, on_load, lambda i: i)


def add_mask(value: Value, mask: Value) -> Value:
    """Every load in `value` only happens where `mask` holds."""

    def on_load(ld: Load, indices: tuple, inner: Value | None) -> Value:
        both = mask if inner is None else Op("logical_and", (mask, inner), torch.bool)
        return Load(ld.buf, indices, ld.dtype, both)

    return rewrite(value, on_load, lambda i: i)


def bool_arithmetic(value: Value) -> Value:
    """`value` with its arithmetic on bool values in the logical forms of `BOOL_FORMS`.
    Neither emitter has torch's bool arithmetic: Triton's int1 wraps (True + True is False
    on a GPU) and C++'s bool promotes to int; the IR never asks them for it."""

    def on_op(op: Op) -> Value:
        if op.dtype != torch.bool or op.op not in BOOL_FORMS:
            return op
        form = BOOL_FORMS[op.op]
        return op.args[0] if form is None else Op(form, op.args, torch.bool)

    return rewrite(
        value, lambda ld, idx, mask: Load(ld.buf, idx, ld.dtype, mask), lambda i: i, on_op=on_op
    )
