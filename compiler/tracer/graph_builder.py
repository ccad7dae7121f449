"""Building the FX graph: placeholders for input tensors, ops run on fake tensors, outputs."""

from __future__ import annotations

import contextlib
import contextvars
import logging
import operator
import re
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

try:
    import numpy
except ImportError:  # torch runs without numpy; then no value is a numpy scalar
    numpy = None
from torch._dispatch.python import enable_python_dispatcher
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    UnsupportedOperatorException,
)

from compiler.records import ControlRecord, SourceLine
from compiler.support import autocast
from compiler.tracer.breaks import Break
from compiler.tracer.fake_mode import TracerFakeMode
from compiler.tracer.guards import GuardSet
from compiler.tracer.shapes import DynamicPolicy, Shapes, is_symbolic
from compiler.tracer.variables import (
    ConstVar,
    DictVar,
    ListVar,
    ObjVar,
    SliceVar,
    TensorVar,
    TupleVar,
    Var,
)

# Ops that mutate state: they stay in the graph even when nothing reads their result.
_IMPURE_FUNCTIONS = {
    operator.setitem, torch._C._set_grad_enabled, autocast.set_autocast,
    operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv,
    operator.imod, operator.ipow, operator.imatmul, operator.iand, operator.ior, operator.ixor,
    operator.ilshift, operator.irshift,
}  # fmt: skip
# The same as methods, called by name (`x.__setitem__(i, v)`): returning None, they were
# dropped from the graph, and the write with them.
_IMPURE_METHODS = {
    "__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__",
    "__imod__", "__ipow__", "__imatmul__", "__iand__", "__ior__", "__ixor__", "__ilshift__",
    "__irshift__",
}  # fmt: skip


_running_fake = contextvars.ContextVar("running_fake", default=False)


@contextlib.contextmanager
def _applied(states: dict):
    with autocast.preserved():
        autocast.restore(states)
        yield


class _QuietMetaErrors(logging.Filter):
    """FakeTensorMode logs a whole traceback at ERROR when an op's meta function raises. For
    the tracer that is most often the user's own error (a shape mismatch), which it raises
    as eager does by running the op for real; the log would print that traceback twice."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (_running_fake.get() and record.msg.startswith("failed while attempting"))


logging.getLogger("torch._subclasses.fake_tensor").addFilter(_QuietMetaErrors())


@dataclass(eq=False)
class SizeInput:
    """A graph input holding a symbolic size (compiler/tracer/shapes.py), read from its
    tensor when the entry runs; or a symbolic int or float read from the frame."""

    node: torch.fx.Node
    fake: torch.SymInt | torch.SymFloat
    source: str  # e.g. "L['x'].size(0)"


class GraphBuilder:
    def __init__(self, guards: GuardSet, dynamic: DynamicPolicy | None = None):
        self.graph = torch.fx.Graph()
        self.controls: list[ControlRecord] = []  # the user's controls that shaped the graph
        self.shapes = Shapes(dynamic, self.controls)
        self.fake_mode = TracerFakeMode(shape_env=self.shapes.env)
        self.guards = guards
        self.inputs: list[TensorVar | SizeInput] = []
        self._input_by_id: dict[int, TensorVar] = {}
        self._real_by_var: dict[int, torch.Tensor] = {}  # id(TensorVar) -> the real input
        self._keep_alive: list[torch.Tensor] = []
        self.user_stack: list[SourceLine] = []
        self.grad_enabled = torch.is_grad_enabled()
        # torch.inference_mode() regions open at this point of the trace: autograd stays
        # off inside, whatever grad mode is asked for (values/torch_functions.py)
        self.inference = 0
        # the root-frame instruction that opened the first of them (Tensor.is_inference)
        self.inference_at: int | None = None
        # autocast per device type as the graph leaves it so far; the fake ops run under it
        self.autocast_at_start = autocast.snapshot()
        self.autocast = dict(self.autocast_at_start)
        self.effects = 0  # in-place writes and grad-mode switches (generators.py)
        self._names: set[str] = set()

    # ---- inputs ---------------------------------------------------------------------------

    def add_input(self, tensor: torch.Tensor, source: str) -> TensorVar:
        same = self._input_by_id.get(id(tensor))
        if same is not None:
            # One tensor reached twice (f(x, x), a tied weight): one placeholder, and a guard
            # that the two stay the same object (none when it was read from the same source).
            self.guards.same_as(source, same.source, "", self.line, kind="ALIAS")
            return same
        fake, dynamic = self.shapes.fake_input(self.fake_mode, tensor, source, self.line)
        self.guards.tensor(source, tensor, self.line, shape=not dynamic)
        if dynamic:
            self.shapes.tensor_guards(self.guards, source, fake, self.line)
        node = self._placeholder(self._unique(_placeholder_name(source)))
        node.meta["example_value"] = fake
        node.meta["val"] = fake
        node.meta["source"] = source
        node.meta["is_parameter"] = isinstance(tensor, torch.nn.Parameter)
        var = TensorVar(node, fake, source)
        self.inputs.append(var)
        self._input_by_id[id(tensor)] = var
        self._real_by_var[id(var)] = tensor
        self._keep_alive.append(tensor)
        return var

    def real_input(self, var: TensorVar) -> torch.Tensor | None:
        """The real tensor a graph input stands for (None for a value the graph computes)."""
        return self._real_by_var.get(id(var))

    def size_input(self, name: str, source: str, value: torch.SymInt) -> torch.fx.Node:
        """A placeholder for a symbolic size, the first time a graph op uses it."""
        node = self._placeholder(self._unique(name))
        node.meta["example_value"] = value
        node.meta["val"] = value
        node.meta["source"] = source
        self.inputs.append(SizeInput(node, value, source))
        return node

    def _placeholder(self, name: str) -> torch.fx.Node:
        # Placeholders must come before every other node.
        if self.inputs:
            with self.graph.inserting_after(self.inputs[-1].node):
                return self.graph.placeholder(name)
        first = next(iter(self.graph.nodes), None)
        if first is not None:
            with self.graph.inserting_before(first):
                return self.graph.placeholder(name)
        return self.graph.placeholder(name)

    def _size_node(self, op: Any, args: tuple, value: Any) -> torch.fx.Node:
        node = self.graph.call_function(op, args)
        self.annotate(node, value)
        return node

    def numpy_scalar(self, value: Any) -> torch.fx.Node:
        """A numpy scalar computed while tracing (`np.sqrt(2.0)`, `np.float32(3)`), as a node
        that makes it from its Python value. FX would write its repr, `np.float64(1.41)`, into
        the graph's code, where `np` is no name (NameError); a Python float instead would
        change what torch infers from it (`torch.tensor(np.float64(1.5))` is float64)."""
        node = self.graph.call_function(type(value), (value.item(),))
        self.annotate(node, value)
        return node

    def graph_arg(self, value: Any) -> Any:
        """A Python value as an FX argument: symbolic sizes become nodes over size inputs."""
        return self.shapes.graph_arg(value, self.size_input, self._size_node)

    @property
    def line(self) -> SourceLine | None:
        return self.user_stack[-1] if self.user_stack else None

    def _unique(self, name: str) -> str:
        base, i = name, 1
        while name in self._names:
            name = f"{base}_{i}"
            i += 1
        self._names.add(name)
        return name

    # ---- ops ------------------------------------------------------------------------------

    def call(self, kind: str, target: Any, args: list[Var], kwargs: dict[str, Var]) -> Var:
        """Add `target(*args, **kwargs)` (kind "call_function") or `args[0].target(...)`
        (kind "call_method") to the graph, computing its result on fake tensors first."""
        fx_args, fake_args = _convert(self, args)
        fx_kwargs, fake_kwargs = _convert_dict(self, kwargs)
        fake_out = self.run_fake(kind, target, fake_args, fake_kwargs)
        mutates = _is_impure(kind, target, kwargs)
        self.effects += mutates  # in-place writes, counted for generators (generators.py)
        if not _has_tensor(fake_out) and not mutates:
            return _constant_result(fake_out)
        if kind == "call_method":
            node = self.graph.call_method(target, tuple(fx_args), fx_kwargs)
        else:
            node = self.graph.call_function(target, tuple(fx_args), fx_kwargs)
        self.annotate(node, fake_out)
        return self.wrap_output(node, fake_out)

    def call_opaque(
        self, fn: Any, args: list[Var], kwargs: dict[str, Var]
    ) -> tuple[Var, torch.fx.Node]:
        """`fn(*args, **kwargs)` as one call_function node, not traced into (a function the
        user passed to compiler.allow_in_graph): run on fake tensors for its outputs, and
        kept even when nothing reads them (it may write to its inputs)."""
        fx_args, fake_args = _convert(self, args)
        fx_kwargs, fake_kwargs = _convert_dict(self, kwargs)
        fake_out = self.run_fake("call_function", fn, fake_args, fake_kwargs)
        if fake_out is not None and not _only_tensors(fake_out):
            raise Break(
                f"{_op_name('call_function', fn)} (compiler.allow_in_graph) returned a "
                f"{type(fake_out).__name__}; an opaque call must return tensors"
            )
        node = self.graph.call_function(fn, tuple(fx_args), fx_kwargs)
        node.meta["opaque"] = True
        self.effects += 1  # it may write to its inputs
        self.annotate(node, fake_out)
        if fake_out is None:
            return ConstVar(None), node
        return self.wrap_output(node, fake_out), node

    def run_fake(self, kind: str, target: Any, fake_args: list, fake_kwargs: dict) -> Any:
        token = _running_fake.set(True)
        # With symbolic sizes the Python dispatcher runs composite ops through their Python
        # decompositions, as torch's own tracing does: their C++ kernels read a symbolic size
        # as an int on some torch versions (matmul on 2.11, F.pad on 2.14), specialising the
        # dynamic dim. A static trace keeps the C++ kernels: faster, and TracerFakeMode sees
        # the ops it corrects (native_batch_norm).
        dispatcher = enable_python_dispatcher() if self.shapes.symbols else contextlib.nullcontext()
        try:
            with (
                self.fake_mode,
                dispatcher,
                torch.set_grad_enabled(self.grad_enabled),
                self._autocast(),
            ):
                if kind == "call_method":
                    return getattr(fake_args[0], target)(*fake_args[1:], **fake_kwargs)
                return target(*fake_args, **fake_kwargs)
        except (DataDependentOutputException, DynamicOutputShapeException) as e:
            raise Break(
                f"{_op_name(kind, target)} has a data-dependent output ({type(e).__name__})",
                "data_dependent_output",
            ) from None
        except UnsupportedOperatorException as e:
            raise Break(f"{_op_name(kind, target)} cannot run on fake tensors ({e})") from None
        except Break:
            raise
        except Exception as e:
            # Most often the user's own error (a shape mismatch): running the op for real
            # raises it exactly as eager does.
            raise Break(
                f"{_op_name(kind, target)} raised {type(e).__name__} while tracing: {e}",
                "user_error",
            ) from None
        finally:
            _running_fake.reset(token)

    def set_grad_enabled(self, enabled: bool) -> None:
        if enabled == self.grad_enabled:
            return
        if enabled and self.inference:
            # eager's enable_grad inside inference_mode records no autograd either, and the
            # values it makes are inference tensors: only the real mode gives both
            raise Break("grad mode enabled inside torch.inference_mode() runs in Python")
        node = self.graph.call_function(torch._C._set_grad_enabled, (enabled,))
        self.annotate(node, None)
        self.grad_enabled = enabled
        self.effects += 1  # a generator run ahead ran its ops under the mode before

    def set_autocast(self, device_type: str, state: tuple) -> None:
        """Autocast for `device_type` switched to `state` (enabled, dtype, cache) from here
        on in the graph."""
        if state == self.autocast[device_type]:
            return
        node = self.graph.call_function(autocast.set_autocast, (device_type, *state))
        self.annotate(node, None)
        self.autocast[device_type] = state

    def _autocast(self):
        """The graph's autocast state where it differs from the real one (a block opened in
        this graph): the fake ops then cast as the real ones will."""
        if self.autocast == self.autocast_at_start:
            return contextlib.nullcontext()
        return _applied(self.autocast)

    def wrap_output(self, node: torch.fx.Node, value: Any) -> Var:
        if isinstance(value, torch.Tensor):
            return TensorVar(node, value)
        if isinstance(value, (tuple, list)):
            items = []
            for i, item in enumerate(value):
                if isinstance(item, torch.Tensor) or _has_tensor(item):
                    sub = self.graph.call_function(operator.getitem, (node, i))
                    self.annotate(sub, item)
                    items.append(self.wrap_output(sub, item))
                else:
                    items.append(_constant_result(item))
            if isinstance(value, list):
                return ListVar(items)
            return TupleVar(items, cls=tuple if type(value) is tuple else type(value))
        return _constant_result(value)

    def annotate(self, node: torch.fx.Node, fake: Any) -> None:
        if fake is not None:
            node.meta["example_value"] = fake
            node.meta["val"] = fake
        line = self.line
        if line is not None:
            node.meta["source_line"] = line
            node.meta["stack_trace"] = "".join(
                f'  File "{s.filename}", line {s.lineno}, in {s.function}\n    {s.text.strip()}\n'
                for s in self.user_stack
            )

    # ---- finishing ------------------------------------------------------------------------

    def finish(self, outputs: list[TensorVar]) -> torch.fx.GraphModule:
        self.graph.output(tuple(v.node for v in outputs))
        _eliminate_dead_code(self.graph)
        self.graph.lint()
        return torch.fx.GraphModule(torch.nn.Module(), self.graph, class_name="CapturedGraph")

    def op_count(self) -> int:
        return sum(
            1 for n in self.graph.nodes if n.op in ("call_function", "call_method", "call_module")
        )


def _placeholder_name(source: str) -> str:
    name = re.sub(r"[^0-9a-zA-Z]+", "_", source).strip("_").lower()
    return name or "input"


def _op_name(kind: str, target: Any) -> str:
    if kind == "call_method":
        return f"Tensor.{target}"
    return getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or str(target)


def _convert(b: GraphBuilder, args: list[Var]) -> tuple[list, list]:
    fx, fake = [], []
    for a in args:
        f, k = _convert_one(b, a)
        fx.append(f)
        fake.append(k)
    return fx, fake


def _convert_dict(b: GraphBuilder, kwargs: dict[str, Var]) -> tuple[dict, dict]:
    fx, fake = {}, {}
    for name, a in kwargs.items():
        fx[name], fake[name] = _convert_one(b, a)
    return fx, fake


def _convert_one(b: GraphBuilder, v: Var) -> tuple[Any, Any]:
    if isinstance(v, TensorVar):
        return v.node, v.fake
    if isinstance(v, ConstVar):
        if is_symbolic(v.value):
            return b.graph_arg(v.value), v.value
        if numpy is not None and isinstance(v.value, numpy.generic):
            return b.numpy_scalar(v.value), v.value
        return v.value, v.value
    if isinstance(v, (TupleVar, ListVar)):
        fx, fake = _convert(b, v.items)
        if isinstance(v, ListVar):
            return fx, fake
        if v.cls is torch.Size:
            # a Size with symbolic sizes holds nodes in the graph: a tuple there
            graph_size = torch.Size(fx) if all(type(i) is int for i in fx) else tuple(fx)
            return graph_size, torch.Size(fake)
        return tuple(fx), tuple(fake)
    if isinstance(v, DictVar):
        return _convert_dict(b, v.items)
    if isinstance(v, SliceVar):
        (start, stop, step), (fa, fb, fc) = _convert(b, [v.start, v.stop, v.step])
        return slice(start, stop, step), slice(fa, fb, fc)
    if isinstance(v, ObjVar) and isinstance(
        v.value, (torch.dtype, torch.device, torch.memory_format, torch.layout)
    ):
        return v.value, v.value
    raise Break(f"a {type(v).__name__} cannot be passed to a graph op")


def _has_tensor(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (tuple, list)):
        return any(_has_tensor(v) for v in value)
    if isinstance(value, dict):
        return any(_has_tensor(v) for v in value.values())
    return False


def _only_tensors(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    return isinstance(value, (tuple, list)) and all(_only_tensors(v) for v in value)


def _constant_result(value: Any) -> Var:
    if isinstance(value, (tuple, list)) and not isinstance(value, torch.Size):
        items = [_constant_result(v) for v in value]
        return ListVar(items) if isinstance(value, list) else TupleVar(items)
    return ConstVar(value)


def _is_impure(kind: str, target: Any, kwargs: dict) -> bool:
    if kind == "call_method":
        return (target.endswith("_") and not target.endswith("__")) or target in _IMPURE_METHODS
    if target in _IMPURE_FUNCTIONS:
        return True
    name = getattr(target, "__name__", "")
    if name.endswith("_") and not name.endswith("__"):
        return True
    inplace = kwargs.get("inplace")
    if isinstance(inplace, ConstVar) and inplace.value:
        return True
    return "out" in kwargs


def _eliminate_dead_code(graph: torch.fx.Graph) -> None:
    for node in reversed(list(graph.nodes)):
        if node.op in ("placeholder", "output") or node.users:
            continue
        if node.op in ("call_function", "call_method") and is_node_impure(node):
            continue
        graph.erase_node(node)


def is_node_impure(node: torch.fx.Node) -> bool:
    if node.meta.get("opaque"):
        return True  # the user's function may write to its inputs
    kwargs = {k: ConstVar(v) for k, v in node.kwargs.items() if not isinstance(v, torch.fx.Node)}
    if any(isinstance(v, torch.fx.Node) for v in node.kwargs.values()) and "out" in node.kwargs:
        return True
    if node.target in (torch.nn.functional.batch_norm, torch.batch_norm) or (
        getattr(node.target, "__name__", "") in ("batch_norm", "instance_norm")
    ):
        return True  # updates running statistics in training mode
    return _is_impure(node.op, node.target, kwargs)
