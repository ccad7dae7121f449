from compiler.backends.registry import (
    backend_name,
    list_backends,
    lookup_backend,
    register_backend,
)

__all__ = ["backend_name", "list_backends", "lookup_backend", "register_backend"]
