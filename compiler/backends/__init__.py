from compiler.backends.options import BackendOptions, current_options
from compiler.backends.registry import (
    backend_name,
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
