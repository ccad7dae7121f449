def from_dot_import_module(x):
    from . import helper

    return helper.double(x) + helper.SCALE


def from_module_import_names(x):
    from .helper import SCALE, double

    return double(x) * SCALE


def from_parent_package(x):
    from ..relative_imports import helper

    return helper.double(x) - 1


def import_not_yet_imported(x):
    from .lazy import triple

    return triple(x) + 1


def beyond_top_level(x):
    from .... import nothing  # noqa: F401

    return x
