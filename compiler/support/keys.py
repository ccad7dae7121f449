"""Keys of compiled entries by input signature, hashed once.

A signature is a tuple with one (shape, strides, dtype, device, ...) tuple per input: for a
training step's graphs, hundreds. Python does not cache a tuple's hash, so looking a key up
hashed all of them again on every call (about 20 µs a lookup for resnet18's backward on a
CI-class CPU). A key made once and kept by its caller is hashed once, and found by identity.
"""

from __future__ import annotations

from collections.abc import Iterable


class SignatureKey(tuple):
    """A tuple that computes its hash once."""

    def __new__(cls, items) -> SignatureKey:
        key = super().__new__(cls, items)
        key._hash = tuple.__hash__(key)
        return key

    def __hash__(self) -> int:
        return self._hash


def kept_key(key: SignatureKey, keys: Iterable[SignatureKey]) -> SignatureKey:
    """The key among `keys` equal to `key` (an entry is stored under it), else `key`: a
    caller that keeps this one finds the entry by identity, not by comparing every input's
    metadata (about 100 µs a call for resnet18's backward)."""
    return next((k for k in keys if k == key), key)
