"""What `%%compile` compiled: a function, or an nn.Module class.

A target owns the compiled callable, remembers the most recent call's arguments (the timing
view re-runs them), and asks the compiler for its inspection report. Only the public API is
used: `compiler.compile` and `compiler.inspect`.

Module classes are compiled per instance without replacing the class: the class's `forward`
is swapped for a small function that sends the call to `compiler.compile` of the *original*
forward bound to that instance. `nn.Module.__call__` (hooks included) still runs first, and
the class object, `isinstance`, attributes, parameters and `state_dict` are untouched because
nothing is stored on the instance.
"""

from __future__ import annotations

import abc
import functools
import types
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

import compiler
from compiler.controls import is_compiling
from compiler.records import CompiledReport
from jupyter_compile.calls import CallLog, on_cuda
from jupyter_compile.progress import CompileProgress, SignatureLog, call_signature


@dataclass(frozen=True)
class CompileOptions:
    backend: str = "inductor"
    mode: str | None = None
    fullgraph: bool = False
    dynamic: bool | None = None
    # compiler.config settings for this cell's functions: (name, value) pairs, in order
    config: tuple[tuple[str, Any], ...] = ()
    verify: bool = False  # check every call against eager (compiler/verify.py)

    def kwargs(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "mode": self.mode,
            "fullgraph": self.fullgraph,
            "dynamic": self.dynamic,
            **({"verify": True} if self.verify else {}),
        }

    def describe(self) -> str:
        parts = [f"backend={self.backend}"]
        if self.mode:
            parts.append(f"mode={self.mode}")
        if self.fullgraph:
            parts.append("fullgraph")
        if self.dynamic:
            parts.append("dynamic")
        if self.verify:
            parts.append("verify")
        parts.extend(f"{name}={value!r}" for name, value in self.config)
        return ", ".join(parts)

    def compile(self, fn: Callable) -> Callable:
        """`compiler.compile(fn)` with these options; every call of it (the user's, a timing
        run's) runs under the cell's `compiler.config.patch`, which keeps the compiled
        function's attributes (`compiler.inspect` still accepts it)."""
        compiled = compiler.compile(fn, **self.kwargs())
        return compiler.config.patch(dict(self.config))(compiled) if self.config else compiled


@dataclass
class TimingInputs:
    """Everything a timing run needs: the same call made eagerly and compiled, the plain
    Python callable to hand to torch.compile for the comparison column, and the durations of
    the calls the user made. A timing run re-runs the call only on clones of the arguments,
    and only when the records show that nothing else changes (jupyter_compile/timing.py)."""

    eager: Callable
    compiled: Callable
    uncompiled: Callable
    args: tuple
    kwargs: dict
    calls: CallLog | None = None


class Target(abc.ABC):
    """Base of the two kinds; `name` is the user's name for it in the cell."""

    kind = ""

    def __init__(self, name: str, options: CompileOptions) -> None:
        self.name = name
        self.options = options
        self.signatures = SignatureLog()
        self.last_args: tuple | None = None
        self.last_kwargs: dict | None = None
        self.calls = 0
        self.call_log = CallLog()

    def _run(self, compiled: Callable, args: tuple, kwargs: dict, owner: object = None) -> Any:
        __tracebackhide__ = True  # IPython and pytest leave this frame out
        self.last_args, self.last_kwargs = args, kwargs
        self.calls += 1
        cuda = on_cuda(args, kwargs, owner)
        if not self.signatures.is_new(call_signature(args, kwargs, owner)):
            return self.call_log.call(compiled, args, kwargs, cuda, compiling=False)
        with CompileProgress(self.name):
            return self.call_log.call(compiled, args, kwargs, cuda, compiling=True)

    @abc.abstractmethod
    def report(self) -> CompiledReport | None:
        """The compiler's records, or None before the first call."""

    @abc.abstractmethod
    def timing_inputs(self) -> TimingInputs | None:
        """The last call, ready to re-run; None before the first call."""


class FunctionTarget(Target):
    """A top-level function (decorators already applied) rebound to a recording wrapper."""

    kind = "function"

    def __init__(self, name: str, original: Callable, options: CompileOptions) -> None:
        super().__init__(name, options)
        self.original = original
        self.compiled = options.compile(original)
        self.callable = self._wrapper()

    def _wrapper(self) -> Callable:
        target, compiled, original = self, self.compiled, self.original

        def compiled_call(*args, **kwargs):
            __tracebackhide__ = True  # IPython and pytest leave this frame out
            if is_compiling():  # traced from a compiled caller: trace the user's function
                return original(*args, **kwargs)
            return target._run(compiled, args, kwargs)

        try:
            functools.update_wrapper(compiled_call, self.original)
        except (AttributeError, TypeError):  # a callable object without __name__ and friends
            compiled_call.__name__ = self.name
        compiled_call.__jupyter_compile__ = self
        # What compiler.inspect and compiler.explain look for, so they accept the name as bound
        # in the notebook, e.g. `compiler.inspect(f)` after `%%compile` defined f.
        for attr in ("__compiled__", "_orig_fn"):
            if hasattr(self.compiled, attr):
                setattr(compiled_call, attr, getattr(self.compiled, attr))
        return compiled_call

    def report(self) -> CompiledReport | None:
        return compiler.inspect(self.compiled)

    def timing_inputs(self) -> TimingInputs | None:
        if self.last_args is None:
            return None
        return TimingInputs(
            self.original,
            self.compiled,
            self.original,
            self.last_args,
            dict(self.last_kwargs or {}),
            self.call_log,
        )


def is_module_class(obj: object) -> bool:
    return isinstance(obj, type) and issubclass(obj, torch.nn.Module)


class ModuleClassTarget(Target):
    """An nn.Module subclass whose instances run their forward through the compiler."""

    kind = "nn.Module class"

    def __init__(self, name: str, cls: type, options: CompileOptions) -> None:
        super().__init__(name, options)
        self.cls = cls
        forward = cls.forward
        inherited = getattr(forward, "__jupyter_compile__", None)
        # A subclass of a class compiled earlier, inheriting its forward: compile the
        # user's forward, not the parent's dispatching wrapper.
        self.forward = inherited.forward if isinstance(inherited, ModuleClassTarget) else forward
        self._compiled: weakref.WeakKeyDictionary[torch.nn.Module, Callable] = (
            weakref.WeakKeyDictionary()
        )
        self._last_instance: weakref.ref | None = None
        self._install()

    def _install(self) -> None:
        target = self

        def forward(module, *args, **kwargs):
            __tracebackhide__ = True  # IPython and pytest leave this frame out
            if is_compiling():  # traced from a compiled caller: trace the user's forward
                return user_forward(module, *args, **kwargs)
            return target.call(module, args, kwargs)

        user_forward = self.forward
        functools.update_wrapper(forward, self.forward)
        forward.__jupyter_compile__ = self
        self.cls.forward = forward

    def compiled_for(self, module: torch.nn.Module) -> Callable:
        compiled = self._compiled.get(module)
        if compiled is None:
            bound = types.MethodType(self.forward, module)
            compiled = self.options.compile(bound)
            self._compiled[module] = compiled
        return compiled

    def call(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> Any:
        __tracebackhide__ = True  # IPython and pytest leave this frame out
        self._last_instance = weakref.ref(module)
        return self._run(self.compiled_for(module), args, kwargs, owner=module)

    def last_instance(self) -> torch.nn.Module | None:
        return self._last_instance() if self._last_instance is not None else None

    def report(self) -> CompiledReport | None:
        module = self.last_instance()
        return compiler.inspect(self.compiled_for(module)) if module is not None else None

    def timing_inputs(self) -> TimingInputs | None:
        module = self.last_instance()
        if module is None or self.last_args is None:
            return None
        bound = types.MethodType(self.forward, module)
        return TimingInputs(
            bound,
            self.compiled_for(module),
            bound,
            self.last_args,
            dict(self.last_kwargs or {}),
            self.call_log,
        )
