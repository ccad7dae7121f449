"""Every family of value kinds, imported once by the translator (the interpreter that
dispatches over them), so that each registers its kinds in table.VALUE_OPS."""

from compiler.tracer.values import (  # noqa: F401
    autograd_functions,
    cached_functions,
    containers,
    context_managers,
    copies,
    counters,
    dataclass_calls,
    deques,
    functions,
    grad_decorators,
    iterators,
    itertools,
    library_calls,
    module_containers,
    modules,
    numbers,
    partials,
    python_random,
    random_instances,
    sets,
    stdlib_python,
    tensors,
    torch_functions,
    user_objects,
)
