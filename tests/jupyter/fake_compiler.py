"""A stand-in for the compiler's public API, for testing the extension's mechanics in
isolation: compile() returns a callable that runs the function eagerly and, on each new
input signature, records an entry (with a real FX graph from torch.fx.symbolic_trace when
the function traces) and notifies subscribers, as the real compiler does."""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from compiler import records
from compiler.records import CompiledReport, EntryRecord, FunctionRecord, GraphRecord, Guard


@dataclass
class FakeCompiled:
    fn: Callable
    options: dict
    record: FunctionRecord
    seen: set = field(default_factory=set)
    calls: int = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        shapes = tuple(tuple(a.shape) if isinstance(a, torch.Tensor) else repr(a) for a in args)
        if shapes not in self.seen:
            reason = None if not self.seen else f"L['x'].size() == {next(iter(self.seen))[0]}"
            self.seen.add(shapes)
            self.record.entries.append(_entry(self.fn, self.record, reason, self.options))
            records.notify(self.record)
        return self.fn(*args, **kwargs)


def _entry(fn: Callable, record: FunctionRecord, reason: str | None, options: dict) -> EntryRecord:
    graph = None
    if not isinstance(fn, types.MethodType):  # methods: no graph, the entry alone is enough
        try:
            gm = torch.fx.symbolic_trace(fn)
            ops = sum(1 for n in gm.graph.nodes if n.op.startswith("call"))
            graph = GraphRecord(gm, gm.code, ops, backend=str(options.get("backend")))
        except Exception:  # not traceable by symbolic_trace: an entry without a graph
            graph = None
    guard = Guard("TENSOR_MATCH", "L['x']", "L['x'].dtype == torch.float32", "x is float32")
    return EntryRecord(record.name, 0, graph, guards=[guard], recompile_reason=reason)


class FakeCompiler:
    def __init__(self) -> None:
        self.compiled: list[FakeCompiled] = []

    def compile(self, fn: Callable, **options: Any) -> FakeCompiled:
        code = getattr(getattr(fn, "__func__", fn), "__code__", None)
        try:
            source = inspect.getsource(fn)
        except (OSError, TypeError):
            source = ""
        record = FunctionRecord(
            name=getattr(fn, "__name__", "?"),
            qualname=getattr(fn, "__qualname__", "?"),
            filename=code.co_filename if code else "?",
            firstlineno=code.co_firstlineno if code else 1,
            source=source,
        )
        compiled = FakeCompiled(fn, options, record)
        self.compiled.append(compiled)
        return compiled

    def inspect(self, compiled: FakeCompiled) -> CompiledReport:
        return CompiledReport([compiled.record] if compiled.record.entries else [], backend="fake")

    def lookup_backend(self, name: Any) -> Any:
        if callable(name) or name in ("eager", "inductor", "aot_eager"):
            return name
        raise KeyError(name)

    def list_backends(self) -> list[str]:
        return ["aot_eager", "eager", "inductor"]

    def install(self, monkeypatch: Any) -> None:
        import compiler

        for name in ("compile", "inspect", "lookup_backend", "list_backends"):
            monkeypatch.setattr(compiler, name, getattr(self, name), raising=False)
