"""Standard-library modules written in Python whose functions are traced like user code:
heapq and bisect (in their pure-Python versions, which CPython's C accelerators mirror),
and collections.ChainMap.

heapq.heappush and bisect.bisect_left are C functions: the trace cannot see inside them. The
standard library keeps the same algorithms in Python, used where the C module is missing;
each C function is traced as its Python twin, loaded once from the module's own file with
the accelerator blocked. They only compare items and change the list they are given, which
the trace does as eagerly (a comparison of tensors breaks the graph, as anywhere).
"""

from __future__ import annotations

import bisect
import collections
import heapq
import importlib.util
import sys
import types
from collections.abc import Callable
from typing import TYPE_CHECKING

from compiler.tracer import builtin_fns, calls
from compiler.tracer.breaks import Break
from compiler.tracer.variables import FunctionVar, ListVar, Var

if TYPE_CHECKING:
    from compiler.tracer.context import Tracer


def _pure_python(name: str, accelerator: str) -> types.ModuleType:
    """A fresh copy of module `name` with its C accelerator blocked, as on a Python built
    without it (the module's `from _heapq import *` fails and its Python functions stay)."""
    spec = importlib.util.find_spec(name)
    saved = sys.modules.get(accelerator)
    sys.modules[accelerator] = None  # type: ignore[assignment]  # blocks the import
    try:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        if saved is None:
            del sys.modules[accelerator]
        else:
            sys.modules[accelerator] = saved
    return module


def _as_python(
    fn: types.FunctionType, list_first: bool
) -> Callable[[Tracer, list[Var], dict[str, Var]], Var]:
    """The call of `fn`'s C twin, traced as `fn`. `list_first`: the C function takes only a
    list as its first argument (heapq's heap), where the Python one takes any sequence."""

    def call(tx: Tracer, args: list[Var], kwargs: dict[str, Var]) -> Var:
        if list_first and not (args and type(args[0]) is ListVar and args[0].cls is list):
            raise Break(f"{fn.__module__}.{fn.__name__}() of a value that is not a list")
        return calls.call(tx, FunctionVar(fn=fn), args, kwargs)

    return call


def _trace_module_as_python(real: types.ModuleType, accelerator: str, heap: bool) -> None:
    pure = _pure_python(real.__name__, accelerator)
    for value in vars(pure).values():
        if isinstance(value, types.FunctionType):
            calls.TRACED_STDLIB.add(value.__code__)
    for name, fn in vars(pure).items():
        # the module's functions (bisect has no __all__), not what it imported
        if isinstance(fn, types.FunctionType) and fn.__module__ == real.__name__:
            twin = getattr(real, name)
            list_first = heap and isinstance(twin, types.BuiltinFunctionType)
            builtin_fns.SPECIAL[twin] = _as_python(fn, list_first)


_trace_module_as_python(heapq, "_heapq", heap=True)
_trace_module_as_python(bisect, "_bisect", heap=False)

# ChainMap is plain Python over its list of mappings (the mixin methods of
# collections.abc.Mapping it inherits, get and __contains__ among them, are its own here).
for _cls in (collections.ChainMap, collections.abc.Mapping, collections.abc.MutableMapping):
    for _value in vars(_cls).values():
        _fn = getattr(_value, "fget", _value)
        if isinstance(_fn, types.FunctionType):
            calls.TRACED_STDLIB.add(_fn.__code__)
