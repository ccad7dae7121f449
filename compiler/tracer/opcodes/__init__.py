"""The opcodes the tracer knows: one module per family (registry.py says how they register),
and the handler tables of the running Python."""

from compiler.tracer.opcodes import (  # noqa: F401  (importing a family registers it)
    attributes,
    calling,
    containers,
    flow,
    names,
    operators,
    raising,
    stack,
    strings,
)
from compiler.tracer.opcodes.registry import known_opcodes, registrations

_RUNNING = registrations()
TRACED = {name: r.traced for name, r in _RUNNING.items() if r.traced is not None}
CONCRETE = {name: r.concrete for name, r in _RUNNING.items() if r.concrete is not None}
KNOWN = known_opcodes()
