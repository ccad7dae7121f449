"""Every family of value kinds, imported once (by table.ops_of, at the first lookup, when
the tracer's modules are all loaded) so that each registers its kinds in VALUE_OPS."""

from compiler.tracer.values import (  # noqa: F401
    autograd_functions,
    containers,
    functions,
    iterators,
    itertools,
    library_calls,
    modules,
    numbers,
    partials,
    sets,
    tensors,
    torch_functions,
    user_objects,
)
