"""jupyter-compile's compiler: a TorchDynamo-style bytecode tracer and an Inductor-style code
generator. `compiler.compile(fn)` is a drop-in for `torch.compile(fn)`."""

from compiler import records
from compiler.api import (
    ExportResult,
    compile,
    explain,
    export,
    inspect,
    list_backends,
    lookup_backend,
    optimize,
    register_backend,
    reset,
)
from compiler.explain import ExplainOutput
from compiler.records import CompilerWarning
from compiler.tracer.breaks import Unsupported

__all__ = [
    "CompilerWarning",
    "ExplainOutput",
    "ExportResult",
    "Unsupported",
    "compile",
    "explain",
    "export",
    "inspect",
    "list_backends",
    "lookup_backend",
    "optimize",
    "records",
    "register_backend",
    "reset",
]
