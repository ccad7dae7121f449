"""A package whose functions import from it inside their bodies (test_relative_imports.py):
`helper` is imported with the package, `lazy` only by the first call that imports it."""

from . import helper  # noqa: F401
