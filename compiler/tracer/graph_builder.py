"""Building the FX graph: placeholders for input tensors, ops run on fake tensors, outputs."""

from __future__ import annotations

import contextvars
import logging
import operator
import re
from typing import Any

import torch
import torch.fx
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensorMode,
    UnsupportedOperatorException,
)

from compiler.records import SourceLine
from compiler.tracer.breaks import Break
from compiler.tracer.guards import GuardSet
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
    operator.setitem, torch._C._set_grad_enabled,
    operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv,
    operator.imod, operator.ipow, operator.imatmul, operator.iand, operator.ior, operator.ixor,
    operator.ilshift, operator.irshift,
}  # fmt: skip


_running_fake = contextvars.ContextVar("running_fake", default=False)


class _QuietMetaErrors(logging.Filter):
    """FakeTensorMode logs a whole traceback at ERROR when an op's meta function raises. For
    the tracer that is most often the user's own error (a shape mismatch), which it raises
    as eager does by running the op for real; the log would print that traceback twice."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (_running_fake.get() and record.msg.startswith("failed while attempting"))


logging.getLogger("torch._subclasses.fake_tensor").addFilter(_QuietMetaErrors())


class GraphBuilder:
    def __init__(self, guards: GuardSet):
        self.graph = torch.fx.Graph()
        self.fake_mode = FakeTensorMode()
        self.guards = guards
        self.inputs: list[TensorVar] = []
        self._input_by_id: dict[int, TensorVar] = {}
        self._keep_alive: list[torch.Tensor] = []
        self.user_stack: list[SourceLine] = []
        self.grad_enabled = torch.is_grad_enabled()
        self._names: set[str] = set()

    # ---- inputs ---------------------------------------------------------------------------

    def add_input(self, tensor: torch.Tensor, source: str) -> TensorVar:
        same = self._input_by_id.get(id(tensor))
        if same is not None:
            # One tensor reached twice (f(x, x), a tied weight): one placeholder, and a guard
            # that the two stay the same object (none when it was read from the same source).
            if source != same.source:
                self.guards.add("ALIAS", source, f"{source} is {same.source}", f"{source} is {same.source}", self.line)
            return same
        self.guards.tensor(source, tensor, self.line)
        name = self._unique(_placeholder_name(source))
        # Placeholders must come before every other node.
        if self.inputs:
            with self.graph.inserting_after(self.inputs[-1].node):
                node = self.graph.placeholder(name)
        else:
            first = next(iter(self.graph.nodes), None)
            if first is not None:
                with self.graph.inserting_before(first):
                    node = self.graph.placeholder(name)
            else:
                node = self.graph.placeholder(name)
        fake = self.fake_mode.from_tensor(tensor, static_shapes=True)
        node.meta["example_value"] = fake
        node.meta["val"] = fake
        node.meta["source"] = source
        node.meta["is_parameter"] = isinstance(tensor, torch.nn.Parameter)
        var = TensorVar(node, fake, source)
        self.inputs.append(var)
        self._input_by_id[id(tensor)] = var
        self._keep_alive.append(tensor)
        return var

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
        fx_args, fake_args = _convert(args)
        fx_kwargs, fake_kwargs = _convert_dict(kwargs)
        fake_out = self.run_fake(kind, target, fake_args, fake_kwargs)
        mutates = _is_impure(kind, target, kwargs)
        if not _has_tensor(fake_out) and not mutates:
            return _constant_result(fake_out)
        if kind == "call_method":
            node = self.graph.call_method(target, tuple(fx_args), fx_kwargs)
        else:
            node = self.graph.call_function(target, tuple(fx_args), fx_kwargs)
        self._annotate(node, fake_out)
        return self.wrap_output(node, fake_out)

    def run_fake(self, kind: str, target: Any, fake_args: list, fake_kwargs: dict) -> Any:
        token = _running_fake.set(True)
        try:
            with self.fake_mode, torch.set_grad_enabled(self.grad_enabled):
                if kind == "call_method":
                    return getattr(fake_args[0], target)(*fake_args[1:], **fake_kwargs)
                return target(*fake_args, **fake_kwargs)
        except (DataDependentOutputException, DynamicOutputShapeException) as e:
            raise Break(f"{_op_name(kind, target)} has a data-dependent output ({type(e).__name__})") from None
        except UnsupportedOperatorException as e:
            raise Break(f"{_op_name(kind, target)} cannot run on fake tensors ({e})") from None
        except Break:
            raise
        except Exception as e:
            # Most often the user's own error (a shape mismatch): running the op for real
            # raises it exactly as eager does.
            raise Break(f"{_op_name(kind, target)} raised {type(e).__name__} while tracing: {e}") from None
        finally:
            _running_fake.reset(token)

    def set_grad_enabled(self, enabled: bool) -> None:
        if enabled == self.grad_enabled:
            return
        node = self.graph.call_function(torch._C._set_grad_enabled, (enabled,))
        self._annotate(node, None)
        self.grad_enabled = enabled

    def wrap_output(self, node: torch.fx.Node, value: Any) -> Var:
        if isinstance(value, torch.Tensor):
            return TensorVar(node, value)
        if isinstance(value, (tuple, list)):
            items = []
            for i, item in enumerate(value):
                if isinstance(item, torch.Tensor) or _has_tensor(item):
                    sub = self.graph.call_function(operator.getitem, (node, i))
                    self._annotate(sub, item)
                    items.append(self.wrap_output(sub, item))
                else:
                    items.append(_constant_result(item))
            if isinstance(value, list):
                return ListVar(items)
            return TupleVar(items, cls=tuple if type(value) is tuple else type(value))
        return _constant_result(value)

    def _annotate(self, node: torch.fx.Node, fake: Any) -> None:
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
        return sum(1 for n in self.graph.nodes if n.op in ("call_function", "call_method", "call_module"))


def _placeholder_name(source: str) -> str:
    name = re.sub(r"[^0-9a-zA-Z]+", "_", source).strip("_").lower()
    return name or "input"


def _op_name(kind: str, target: Any) -> str:
    if kind == "call_method":
        return f"Tensor.{target}"
    return getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or str(target)


def _convert(args: list[Var]) -> tuple[list, list]:
    fx, fake = [], []
    for a in args:
        f, k = _convert_one(a)
        fx.append(f)
        fake.append(k)
    return fx, fake


def _convert_dict(kwargs: dict[str, Var]) -> tuple[dict, dict]:
    fx, fake = {}, {}
    for name, a in kwargs.items():
        fx[name], fake[name] = _convert_one(a)
    return fx, fake


def _convert_one(v: Var) -> tuple[Any, Any]:
    if isinstance(v, TensorVar):
        return v.node, v.fake
    if isinstance(v, ConstVar):
        return v.value, v.value
    if isinstance(v, (TupleVar, ListVar)):
        fx, fake = _convert(v.items)
        if isinstance(v, ListVar):
            return fx, fake
        if v.cls is torch.Size:
            return torch.Size(fx), torch.Size(fake)
        return tuple(fx), tuple(fake)
    if isinstance(v, DictVar):
        return _convert_dict(v.items)
    if isinstance(v, SliceVar):
        (a, b, c), (fa, fb, fc) = _convert([v.start, v.stop, v.step])
        return slice(a, b, c), slice(fa, fb, fc)
    if isinstance(v, ObjVar) and isinstance(v.value, (torch.dtype, torch.device, torch.memory_format, torch.layout)):
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


def _constant_result(value: Any) -> Var:
    if isinstance(value, (tuple, list)) and not isinstance(value, torch.Size):
        items = [_constant_result(v) for v in value]
        return ListVar(items) if isinstance(value, list) else TupleVar(items)
    return ConstVar(value)


def _is_impure(kind: str, target: Any, kwargs: dict) -> bool:
    if kind == "call_method":
        return target.endswith("_") and not target.endswith("__")
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
    kwargs = {k: ConstVar(v) for k, v in node.kwargs.items() if not isinstance(v, torch.fx.Node)}
    if any(isinstance(v, torch.fx.Node) for v in node.kwargs.values()) and "out" in node.kwargs:
        return True
    if node.target in (torch.nn.functional.batch_norm, torch.batch_norm) or (
        getattr(node.target, "__name__", "") in ("batch_norm", "instance_norm")
    ):
        return True  # updates running statistics in training mode
    return _is_impure(node.op, node.target, kwargs)
