from compiler.backends.registry import (
    BackendOptions,
    backend_name,
    current_options,
    list_backends,
    lookup_backend,
    register_backend,
)

__all__ = [
    "BackendOptions",
    "backend_name",
    "current_options",
    "list_backends",
    "lookup_backend",
    "register_backend",
]
