"""Helpers shared by the tracer, aot, lowering, the IR and the runtime that are not run-time
support of compiled code: the floor every stage may import, which imports no stage."""
