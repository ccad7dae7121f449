"""Relative imports inside a function of a package module: resolved against the module's
package as __import__ does, one graph when the module is already imported (nothing runs);
a module not imported yet, or an import eager rejects, runs in Python."""

import sys

import pytest

from .helpers import T, assert_explain, check
from .relative_imports import funcs


@pytest.mark.parametrize(
    "fn", [funcs.from_dot_import_module, funcs.from_module_import_names, funcs.from_parent_package]
)
def test_relative_import_of_imported_module(fn):
    check(fn, T(3), graphs=1, breaks=0)


def test_relative_import_runs_the_import_once():
    lazy = f"{funcs.__package__}.lazy"
    sys.modules.pop(lazy, None)
    assert_explain(funcs.import_not_yet_imported, [T(3)], graphs=1, breaks=1)
    assert lazy in sys.modules
    check(funcs.import_not_yet_imported, T(3), graphs=1, breaks=0)


def test_relative_import_beyond_top_level_raises_as_eager():
    check(funcs.beyond_top_level, T(3))
