"""jupyter-compile's compiler: a TorchDynamo-style bytecode tracer and an Inductor-style code
generator. `compiler.compile(fn)` is a drop-in for `torch.compile(fn)`, and the controls of
`torch.compiler` (disable, allow_in_graph, set_stance, mark_dynamic, ...) and the settings of
`torch._dynamo.config` (`compiler.config`) have the same names and meanings here."""

from compiler import config, records
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
from compiler.controls import (
    RecompileError,
    allow_in_graph,
    assume_constant_result,
    disable,
    disallow_in_graph,
    is_compiling,
    mark_dynamic,
    mark_static,
    maybe_mark_dynamic,
    set_stance,
)
from compiler.explain import ExplainOutput
from compiler.records import CompilerWarning
from compiler.tracer.breaks import Unsupported
from compiler.verify import VerificationWarning

__all__ = [
    "CompilerWarning",
    "ExplainOutput",
    "ExportResult",
    "RecompileError",
    "Unsupported",
    "VerificationWarning",
    "allow_in_graph",
    "assume_constant_result",
    "compile",
    "config",
    "disable",
    "disallow_in_graph",
    "explain",
    "export",
    "inspect",
    "is_compiling",
    "list_backends",
    "lookup_backend",
    "mark_dynamic",
    "mark_static",
    "maybe_mark_dynamic",
    "optimize",
    "records",
    "register_backend",
    "reset",
    "set_stance",
]
