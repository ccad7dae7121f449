"""The opcode registry: what each opcode does, symbolically and for real, per Python version.

An opcode family is a class used as a namespace, registered with `@opcode(NAMES...)`:

    @opcode("LOAD_FAST", "LOAD_FAST_CHECK")
    class LoadFast:
        def traced(tx, frame, ins): ...          # over tracer values (translator.py)
        def concrete(frame, ins, call_real): ... # over real values (concrete.py)

`traced` runs in the trace and may return `Return(value)` to end the frame; `concrete` runs
at a graph break in the frame evaluator and raises `Returned` to end it. A family whose
meaning changed between Python versions is registered once per version range (`since` is
the first version with that meaning, `until` the first without it): the differences live in
the registration, not in `if` tests inside the handlers. Several `@opcode` lines may stack on
one class, for names that differ by version (3.11's POP_JUMP_FORWARD_IF_FALSE is 3.12's
POP_JUMP_IF_FALSE).

The opcodes the tracer knows for a Python version are those registered for it
(`known_opcodes`); a code object with any other opcode runs natively (bytecode.py).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable

Version = tuple[int, int]
PYTHON: Version = sys.version_info[:2]
OLDEST: Version = (3, 11)  # the Pythons whose bytecode the tracer decodes
NEWEST: Version = (3, 13)


@dataclass(frozen=True)
class Registration:
    name: str
    family: type
    since: Version
    until: Version | None  # the first version without this meaning; None: still current

    def covers(self, version: Version) -> bool:
        return self.since <= version and (self.until is None or version < self.until)

    @property
    def traced(self) -> Callable | None:
        return vars(self.family).get("traced")

    @property
    def concrete(self) -> Callable | None:
        return vars(self.family).get("concrete")


REGISTRATIONS: list[Registration] = []


def opcode(*names: str, since: Version = OLDEST, until: Version | None = None):
    """Register the decorated family for `names` in the Python versions [since, until)."""

    def register(family: type) -> type:
        for name in names:
            new = Registration(name, family, since, until)
            for old in REGISTRATIONS:
                if old.name == name and _overlap(old, new):
                    raise ValueError(f"{name} is registered twice for one Python version")
            REGISTRATIONS.append(new)
        return family

    return register


def _overlap(a: Registration, b: Registration) -> bool:
    a_end = a.until or (99, 0)
    b_end = b.until or (99, 0)
    return a.since < b_end and b.since < a_end


def registrations(version: Version = PYTHON) -> dict[str, Registration]:
    return {r.name: r for r in REGISTRATIONS if r.covers(version)}


def known_opcodes(version: Version = PYTHON) -> frozenset[str]:
    return frozenset(registrations(version))


@dataclass
class Return:
    """What a traced handler returns to end its frame with `value`."""

    value: Any


class Returned(Exception):
    """Raised by a concrete handler to end the real frame with `value`."""

    def __init__(self, value: Any):
        self.value = value
