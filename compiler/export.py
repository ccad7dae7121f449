"""`compiler.export(fn, *args)`: the whole of `fn` as one GraphModule, called as `fn` is called.

The tracer captures one graph whose inputs are tensors read from the call (`L['xs'][1]`),
from the module (`L['self'].weight`) or from globals, and whose outputs are a flat tuple.
Export rebuilds the calling convention around it, in four steps:

1. run `fn` once under the tracer with `fullgraph=True` and a backend that keeps the graph,
   its example inputs and the tensors it returned on that call;
2. give the graph `fn`'s own parameters: a tensor read from an argument becomes an index or
   attribute path from that parameter; a module parameter, buffer or global becomes an
   attribute of the exported module (the same tensor object);
3. specialise every non-tensor argument to the value of the export call, checked by one
   `expect_argument` node per argument, and check each tensor the graph reads for the sizes
   (bar those marked dynamic) and dtype it was traced for, as torch.export does;
4. return what `fn` returned: each tensor of the eager result is found by identity among the
   call's arguments (returned as that very object) and the graph's outputs (a tensor returned
   twice is one node returned twice); containers are rebuilt, other values are constants.
"""

from __future__ import annotations

import ast
import enum
import inspect
import math
import operator
import types
import warnings
from typing import Any, Callable, NamedTuple

import torch
import torch.fx
from torch.fx.node import has_side_effect

from compiler.records import Guard
from compiler.tracer.breaks import Unsupported
from compiler.tracer.evaluator import CompileConfig, CompileContext, run_function


class ExportResult(NamedTuple):
    graph_module: torch.fx.GraphModule
    guards: list[Guard]


class ExportArgumentError(ValueError):
    """An exported module called with a non-tensor argument other than the one it was
    exported with (the value is baked into the graph)."""


class Slot(enum.Enum):
    """Where a tensor sits in the expected pattern of a container argument."""

    TENSOR = "tensor"


@has_side_effect  # a check: dead-code elimination must keep it
def expect_argument(name: str, value: Any, expected: Any) -> None:
    """Raise unless `value` matches the argument the module was exported with: the same
    constant, or the same container shape with tensors where `Slot.TENSOR` stands."""
    if isinstance(value, torch.fx.Proxy):  # FX tracing the module again (torch.load)
        return value.tracer.create_proxy(
            "call_function", expect_argument, (name, value, expected), {}
        )
    problem = _mismatch(value, expected, name)
    if problem is not None:
        raise ExportArgumentError(
            f"the exported module was specialised to {problem}; export again with the new "
            "value to get a module for it"
        )


@has_side_effect
def expect_tensor(name: str, value: Any, shape: tuple, dtype: torch.dtype) -> None:
    """Raise unless the tensor `value` has the dtype and the sizes the graph was traced for;
    None in `shape` is a dynamic size (mark_dynamic), free."""
    if isinstance(value, torch.fx.Proxy):
        return value.tracer.create_proxy(
            "call_function", expect_tensor, (name, value, shape, dtype), {}
        )
    if not isinstance(value, torch.Tensor):
        raise ExportArgumentError(
            f"the exported module takes a tensor as {name}, but it got {type(value).__name__}"
        )
    if value.dtype == dtype and len(value.shape) == len(shape):
        if all(want is None or want == got for want, got in zip(shape, value.shape)):
            return
    wanted = ", ".join("*" if d is None else str(d) for d in shape)
    raise ExportArgumentError(
        f"the exported module was traced for {name} of shape [{wanted}] and {dtype}, but "
        f"it got shape {list(value.shape)} and {value.dtype}; export again with such a "
        "tensor, or mark the size dynamic (compiler.mark_dynamic) before exporting"
    )


def _mismatch(value: Any, expected: Any, where: str) -> str | None:
    if expected is Slot.TENSOR:
        if isinstance(value, torch.Tensor):
            return None
        return f"a tensor at {where}, but it got {type(value).__name__}"
    container = _container_kind(expected)
    if container is not None:
        if type(value) is not _FX_CONTAINERS.get(type(expected), type(expected)):
            return f"{where} = {type(expected).__name__}, but it got {type(value).__name__}"
        keys = list(expected) if container == "dict" else list(range(len(expected)))
        if (list(value) if container == "dict" else list(range(len(value)))) != keys:
            return f"{where} of {_describe_keys(expected)}, but it got {_describe_keys(value)}"
        for key in keys:
            problem = _mismatch(value[key], expected[key], f"{where}[{key!r}]")
            if problem is not None:
                return problem
        return None
    try:
        same = type(value) is type(expected) and bool(value == expected)
    except Exception:
        same = value is expected
    if same:
        return None
    if _short(expected) == _short(value):  # equal-looking objects compared by identity
        return f"the very {type(expected).__name__} object passed as {where}, but it got another"
    return f"{where} = {_short(expected)}, but it got {_short(value)}"


def _describe_keys(value: Any) -> str:
    return f"keys {list(value)}" if isinstance(value, dict) else f"length {len(value)}"


def _short(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def _container_kind(value: Any) -> str | None:
    """The containers export looks into (arguments and results): dicts, namedtuples, and
    lists and tuples (their subclasses too: torch.return_types); anything else is a leaf."""
    if isinstance(value, dict):
        return "dict"
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return "namedtuple"
    if isinstance(value, (list, tuple)):
        return "sequence"
    return None


def _is_plain(container: Any) -> bool:
    """A list, tuple or dict that generated code writes as a literal."""
    return _FX_CONTAINERS.get(type(container), type(container)) in (list, tuple, dict)


def _rebuilt(value: Any, items: Any) -> Any:
    """`type(value)(items)`, as generated code rebuilds a subclass of dict, list or tuple;
    None where that does not give back the same items (a constructor of other arguments)."""
    try:
        rebuilt = type(value)(items)
    except TypeError:
        return None
    pairs = items.items() if isinstance(items, dict) else enumerate(items)
    got = rebuilt.items() if isinstance(rebuilt, dict) else enumerate(rebuilt)
    return rebuilt if [(k, id(v)) for k, v in got] == [(k, id(v)) for k, v in pairs] else None


# FX keeps a node's list and dict arguments as its immutable ones (torch.fx.Interpreter hands
# those to the check); the generated code builds plain ones.
_FX_CONTAINERS = {
    torch.fx.immutable_collections.immutable_list: list,
    torch.fx.immutable_collections.immutable_dict: dict,
}

_LITERALS = (bool, int, str, bytes, type(None), torch.dtype)


def _is_literal(value: Any) -> bool:
    """Values whose repr in generated code is the value itself."""
    if isinstance(value, float):
        return math.isfinite(value)
    return type(value) in _LITERALS


# ---- export --------------------------------------------------------------------------------


class _Capture:
    """The backend of the export trace: keeps the graph, its example inputs and what it
    returned on the export call."""

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []
        self.example_inputs: list = []
        self.outputs: tuple = ()

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        self.graphs.append(gm)
        self.example_inputs = list(example_inputs)

        def run(*inputs: Any) -> Any:
            self.outputs = tuple(gm.forward(*inputs))
            return self.outputs

        return run


class _Target(NamedTuple):
    """What the tracer runs for `fn`: a plain function, the arguments bound before the call's
    own (a module or bound method's self), and the signature the call binds to."""

    func: types.FunctionType
    leading: tuple
    signature: inspect.Signature


def _target(fn: Callable) -> _Target:
    if isinstance(fn, torch.nn.Module):
        if "forward" not in fn.__dict__:  # the class's forward, run with the module as self
            return _Target(type(fn).forward, (fn,), inspect.signature(fn.forward))
        fn = fn.__dict__["forward"]  # a forward set on the instance
    if isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType):
        return _Target(fn.__func__, (fn.__self__,), inspect.signature(fn))
    if isinstance(fn, types.FunctionType):
        return _Target(fn, (), inspect.signature(fn))
    target = fn

    def call(*args: Any, **kwargs: Any) -> Any:
        return target(*args, **kwargs)

    return _Target(call, (), inspect.signature(fn))


def export(fn: Callable, *args: Any, **kwargs: Any) -> ExportResult:
    """One GraphModule for the whole of `fn(*args, **kwargs)`, called with `fn`'s own
    parameters and returning what `fn` returns, plus the guards under which it is valid.
    Non-tensor arguments are baked in, and checked on every call. Raises `Unsupported`
    naming the graph break, and its kind, where `fn` is not one graph."""
    target = _target(fn)
    bound = target.signature.bind(*args, **kwargs)  # a wrong call fails here, as fn's would
    bound.apply_defaults()
    capture = _Capture()
    ctx = CompileContext(CompileConfig(backend=capture, backend_name="export", fullgraph=True))
    name = getattr(target.func, "__qualname__", "fn")
    try:
        result = run_function(ctx, target.func, (*target.leading, *args), kwargs)
    except Unsupported as e:
        raise Unsupported(
            f"compiler.export needs {name} as one graph, and it breaks here "
            f"(kind {e.kind!r}): {e.reason}",
            e.user_stack,
            e.hint,
            e.kind,
        ) from None
    entries = [entry for record in ctx.functions for entry in record.entries]
    if len(entries) != 1 or len(capture.graphs) > 1:
        raise Unsupported(
            f"compiler.export needs {name} as one graph; it was compiled as "
            f"{len(capture.graphs)} graphs in {len(entries)} entries"
        )
    lost = [e.detail for e in entries[0].side_effects if e.kind not in _GRAPH_EFFECTS]
    if lost:
        raise Unsupported(
            f"compiler.export: {name} changes Python state besides returning its result, "
            f"which the exported graph would not do: {'; '.join(lost)}"
        )
    gm = capture.graphs[0] if capture.graphs else _empty_module()
    builder = _Builder(gm, target.signature, bound, name)
    builder.guard_arguments()  # first: a wrong argument fails at its check, not in an index
    builder.take_inputs(capture.example_inputs)
    builder.set_output(result, capture.outputs)
    return ExportResult(builder.finish(), entries[0].guards)


# Side effects the graph itself performs (tracer/effects.py): an in-place write to an input,
# an opaque call; the others (containers, attributes, closure cells) happen in Python.
_GRAPH_EFFECTS = ("tensor_write", "opaque")


def _empty_module() -> torch.fx.GraphModule:
    """The module of a function the tracer found no tensor work in (it returns its inputs
    or constants): a graph of no nodes."""
    graph = torch.fx.Graph()
    graph.output(())
    return torch.fx.GraphModule(torch.nn.Module(), graph)


# ---- rebuilding the graph's calling convention ----------------------------------------------


def _parse_source(source: str) -> tuple[str, str, list[tuple[str, Any]]] | None:
    """`L['xs'][1].t` as ("L", "xs", [("item", 1), ("attr", "t")]); a `.size(d)` step is
    ("size", d). None for a source of another shape."""
    try:
        node = ast.parse(source, mode="eval").body
    except SyntaxError:
        return None
    steps: list[tuple[str, Any]] = []
    while True:
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            if not isinstance(node.slice, ast.Constant):
                return None
            steps.reverse()
            return node.value.id, node.slice.value, steps
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            steps.append(("item", node.slice.value))
            node = node.value
        elif isinstance(node, ast.Attribute):
            steps.append(("attr", node.attr))
            node = node.value
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "size"
            and len(node.args) == 1
            and isinstance(node.args[0], ast.Constant)
        ):
            steps.append(("size", node.args[0].value))
            node = node.func.value
        else:
            return None


class _Builder:
    """Edits the captured graph in place into the exported one (the steps of the module
    docstring); every node it adds goes before the graph's first computation."""

    def __init__(
        self,
        gm: torch.fx.GraphModule,
        signature: inspect.Signature,
        bound: inspect.BoundArguments,
        name: str,
    ):
        self.gm, self.graph, self.signature, self.name = gm, gm.graph, signature, name
        self.arguments = dict(bound.arguments)
        self.old_placeholders = [n for n in self.graph.nodes if n.op == "placeholder"]
        # symbolic sizes: an int in the result may be one, rebuilt in Python by the tracer
        self.dynamic = any(_is_symbolic(n.meta.get("example_value")) for n in self.old_placeholders)
        self.anchor = next(n for n in self.graph.nodes if n.op != "placeholder")
        self.paths: dict[tuple, torch.fx.Node] = {}
        self.attributes: dict[int, torch.fx.Node] = {}  # id(value) -> its get_attr node
        self.params: dict[str, torch.fx.Node] = {}
        # id(value) -> (parameter, steps) for every tensor, container and object the call
        # passed: the tensors fn returns as they came in are found here
        self.from_arguments: dict[int, tuple[str, tuple]] = {}
        for param, value in self.arguments.items():
            self._index_argument(value, param, ())
        for param in signature.parameters.values():
            prefix = {
                inspect.Parameter.VAR_POSITIONAL: "*",
                inspect.Parameter.VAR_KEYWORD: "**",
            }.get(param.kind, "")
            with self.graph.inserting_before(self.anchor):
                self.params[param.name] = self.graph.placeholder(prefix + param.name)

    # -- inputs

    def take_inputs(self, example_inputs: list) -> None:
        """Replace each captured placeholder with the path it was read from, or with an
        attribute holding the very tensor (module state, globals)."""
        for node, example in zip(self.old_placeholders, example_inputs):
            parsed = _parse_source(node.meta.get("source", ""))
            if parsed is not None and parsed[0] == "L" and parsed[1] in self.params:
                replacement = self._path(parsed[1], tuple(parsed[2]))
                if isinstance(example, torch.Tensor):
                    self._expect_tensor(_spell(parsed[1], tuple(parsed[2])), replacement, node)
            elif isinstance(example, torch.Tensor):
                replacement = self._attribute(example, _attribute_name(node.name))
            else:  # a size of a tensor that is not an argument: fixed, as that tensor is
                replacement = None
            if replacement is None:
                _inline_constant(node, example)
            else:
                replacement.meta.update(node.meta)
                node.replace_all_uses_with(replacement)
            self.graph.erase_node(node)

    def _expect_tensor(self, name: str, value: torch.fx.Node, placeholder: torch.fx.Node) -> None:
        """The sizes and dtype the graph was traced for, checked: the graph has them baked
        in (a view's shape, a size returned), as torch.export checks them."""
        traced = placeholder.meta["example_value"]
        shape = tuple(d if isinstance(d, int) else None for d in traced.shape)
        with self.graph.inserting_before(self.anchor):
            self.graph.call_function(expect_tensor, (name, value, shape, traced.dtype))

    def _path(self, param: str, steps: tuple) -> torch.fx.Node:
        key = (param, steps)
        if key in self.paths:
            return self.paths[key]
        if not steps:
            return self.params[param]
        base = self._path(param, steps[:-1])
        kind, value = steps[-1]
        with self.graph.inserting_before(self.anchor):
            if kind == "item":
                node = self.graph.call_function(operator.getitem, (base, value))
            elif kind == "attr":
                node = self.graph.call_function(getattr, (base, value))
            else:
                node = self.graph.call_method("size", (base, value))
        self.paths[key] = node
        return node

    def _attribute(self, value: Any, name: str) -> torch.fx.Node:
        """A get_attr node for `value` held by the exported module (the object itself: a
        parameter stays shared with the model it came from)."""
        if id(value) in self.attributes:
            return self.attributes[id(value)]
        attr = name if not hasattr(self.gm, name) else f"{name}_{len(self.attributes)}"
        if isinstance(value, torch.nn.Parameter):
            self.gm.register_parameter(attr, value)
        elif isinstance(value, torch.Tensor):
            self.gm.register_buffer(attr, value)
        else:
            setattr(self.gm, attr, value)
        with self.graph.inserting_before(self.anchor), warnings.catch_warnings():
            # FX warns on a get_attr of a plain Python attribute; ours are deliberate (an
            # argument's expected value, a constant in the result)
            warnings.simplefilter("ignore", UserWarning)
            node = self.graph.get_attr(attr)
        self.attributes[id(value)] = node
        return node

    # -- non-tensor arguments

    def guard_arguments(self) -> None:
        for name, value in self.arguments.items():
            if isinstance(value, torch.Tensor):
                continue
            pattern = _pattern(value)
            expected = pattern if _renders(pattern) else self._attribute(pattern, f"_{name}")
            with self.graph.inserting_before(self.anchor):
                self.graph.call_function(expect_argument, (name, self.params[name], expected))

    # -- the result

    def set_output(self, result: Any, graph_outputs: tuple) -> None:
        old = next(n for n in self.graph.nodes if n.op == "output")
        flat = old.args[0] if isinstance(old.args[0], (tuple, list)) else (old.args[0],)
        self.from_graph = {id(value): node for value, node in zip(graph_outputs, flat)}
        self.template = self._output(result)
        self.graph.erase_node(old)
        self.graph.output(self.template)

    def _index_argument(self, value: Any, param: str, steps: tuple) -> None:
        if _is_literal(value):
            return
        kind = _container_kind(value)
        if id(value) in self.from_arguments:
            if isinstance(value, torch.Tensor) or (kind and len(value)) or _holds_tensor(value):
                # the tracer read both through the first one: the graph cannot tell them apart
                first = _spell(*self.from_arguments[id(value)])
                raise Unsupported(
                    f"compiler.export: {self.name} is passed the same "
                    f"{type(value).__name__} as {first} and as {_spell(param, steps)}; "
                    "export with distinct objects"
                )
            return
        self.from_arguments[id(value)] = (param, steps)
        if kind is not None:
            keys = value.keys() if kind == "dict" else range(len(value))
            for key in keys:
                self._index_argument(value[key], param, (*steps, ("item", key)))
        for attr, item in getattr(value, "__dict__", {}).items():
            if isinstance(item, torch.Tensor):  # o.t, read by the graph or returned
                self._index_argument(item, param, (*steps, ("attr", attr)))

    def _output(self, value: Any) -> Any:
        if id(value) in self.from_arguments and not _is_literal(value):
            return self._path(*self.from_arguments[id(value)])
        if isinstance(value, torch.Tensor):
            if id(value) in self.from_graph:
                return self.from_graph[id(value)]
            return self._attribute(value, "_result_constant")
        kind = _container_kind(value)
        if kind == "namedtuple":
            return type(value)(*[self._output(v) for v in value])
        if kind is not None:
            if kind == "dict":
                items: Any = {k: self._output(v) for k, v in value.items()}
            else:
                items = [self._output(v) for v in value]
            rebuilt = type(value)(items) if _is_plain(value) else _rebuilt(value, items)
            if rebuilt is None:
                raise Unsupported(
                    f"compiler.export: {self.name} returns a {type(value).__name__}, which "
                    f"export cannot rebuild by calling its type on a {kind}; return a plain "
                    "dict, list or tuple of it"
                )
            return rebuilt
        if self.dynamic and type(value) is int:
            raise Unsupported(
                f"compiler.export: {self.name} returns the int {value} from a graph with "
                "dynamic sizes, where it may be a size that changes from call to call; "
                "return it as a tensor (torch.tensor(x.shape[0])), or export without "
                "mark_dynamic"
            )
        if _is_literal(value):
            return value
        if _holds_tensor(value):
            raise Unsupported(
                f"compiler.export: {self.name} returns a {type(value).__name__} holding "
                "tensors; an exported module returns tensors in lists, tuples, dicts and "
                "namedtuples (return its tensors in one of those)"
            )
        return self._attribute(value, "_result_constant")

    def finish(self) -> torch.fx.GraphModule:
        for node in reversed(list(self.paths.values())):
            if not node.users:  # read by the tracer, never used (a list it iterated)
                self.graph.erase_node(node)
        self.graph._codegen = _ExportCodeGen(self.signature, self.template)
        self.graph.lint()
        self.gm.recompile()
        return self.gm


def _attribute_name(placeholder: str) -> str:
    """`l_self_0_weight` -> `self_0_weight`: the tracer's placeholder names say where the
    tensor came from (L or G), which the module's attribute need not repeat."""
    rest = placeholder[2:] if placeholder[:2] in ("l_", "g_") else placeholder
    return rest if rest.isidentifier() else placeholder


def _is_symbolic(value: Any) -> bool:
    if isinstance(value, torch.SymInt):
        return True
    return isinstance(value, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in value.shape)


def _spell(param: str, steps: tuple) -> str:
    return param + "".join(f"[{v!r}]" if k == "item" else f".{v}" for k, v in steps)


def _inline_constant(node: torch.fx.Node, value: Any) -> None:
    def swap(n: torch.fx.Node) -> Any:
        return value if n is node else n

    for user in list(node.users):
        user.args = torch.fx.node.map_arg(user.args, swap)
        user.kwargs = torch.fx.node.map_arg(user.kwargs, swap)


def _pattern(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return Slot.TENSOR
    kind = _container_kind(value)
    if kind == "namedtuple":
        return type(value)(*[_pattern(v) for v in value])
    if kind == "dict":
        items: Any = {k: _pattern(v) for k, v in value.items()}
    elif kind == "sequence":
        items = [_pattern(v) for v in value]
    else:
        return value
    if _is_plain(value):
        return type(value)(items)
    rebuilt = _rebuilt(value, items)
    return value if rebuilt is None else rebuilt  # not rebuildable: compared as it is


def _renders(value: Any) -> bool:
    """Whether FX prints `value` as an argument that reads back as itself."""
    if value is Slot.TENSOR or _is_literal(value):
        return True
    if isinstance(value, dict):
        return type(value) is dict and all(
            _is_literal(k) and _is_literal(v) for k, v in value.items()
        )
    if _container_kind(value) in ("sequence", "namedtuple"):
        return (_is_plain(value) or hasattr(value, "_fields")) and all(_renders(v) for v in value)
    return False


def _holds_tensor(value: Any) -> bool:
    return any(isinstance(v, torch.Tensor) for v in getattr(value, "__dict__", {}).values())


# ---- code generation ------------------------------------------------------------------------


def _torch_name(value: Any) -> str | None:
    """`torch.return_types.max` for an object reachable by that path from torch."""
    path = f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', '')}"
    if not path.startswith("torch."):
        return None
    found: Any = torch
    for part in path.split(".")[1:]:
        found = getattr(found, part, None)
    return path if found is value else None


class _Code(str):
    """Text that reprs as itself: a default value as the generated code spells it."""

    def __repr__(self) -> str:
        return str(self)


class _ExportCodeGen(torch.fx.graph.CodeGen):
    """`def forward(self, <fn's parameters>)` and a return statement that rebuilds fn's
    result: dict subclasses and namedtuples by their own type, named as globals."""

    def __init__(self, signature: inspect.Signature, template: Any):
        super().__init__()
        self.signature, self.template = signature, template
        self.named: dict[str, Any] = {}

    def _global(self, value: Any, hint: str) -> str:
        dotted = _torch_name(value)
        if dotted is not None:  # FX names torch's objects by their path from `torch`
            return dotted
        for name, known in self.named.items():
            if known is value:
                return name
        name = f"_{hint}_{len(self.named)}"
        self.named[name] = value
        return name

    def gen_fn_def(
        self, free_vars: list[str], maybe_return_annotation: str, *, expanded_def: bool = False
    ) -> str:
        # inspect prints the `/`, `*`, `*args` and `**kwargs` of fn's own signature
        params = [
            p.replace(
                annotation=inspect.Parameter.empty,
                default=p.default
                if p.default is inspect.Parameter.empty
                else _Code(self._constant(p.default, f"default_{p.name}")),
            )
            for p in self.signature.parameters.values()
        ]
        shown = str(inspect.Signature(params))[1:]
        return (
            f"def {self._func_name}(self{', ' if params else ''}{shown}{maybe_return_annotation}:"
        )

    def _constant(self, value: Any, hint: str) -> str:
        if _is_literal(value):
            return repr(value)
        return self._global(value, hint)

    def generate_output(self, output_args: Any, *, descs: Any = None, repr_fn: Any = None) -> str:
        return "return " + self._render(output_args, self.template)

    def _render(self, value: Any, like: Any) -> str:
        """`value` (the output node's argument, with FX's own container types) as code
        building the container types of `like` (the result as fn returned it)."""
        if isinstance(value, torch.fx.Node):
            return repr(value)
        if isinstance(value, dict):
            like = like if isinstance(like, dict) else {}
            body = ", ".join(
                f"{self._constant(k, 'key')}: {self._render(v, like.get(k))}"
                for k, v in value.items()
            )
            if _is_plain(like):
                return "{" + body + "}"
            return f"{self._global(type(like), type(like).__name__)}({{{body}}})"
        if isinstance(value, (list, tuple)):
            like = like if isinstance(like, (list, tuple)) else value
            parts = [self._render(v, w) for v, w in zip(value, list(like))]
            if hasattr(like, "_fields"):
                return f"{self._global(type(like), type(like).__name__)}({', '.join(parts)})"
            if isinstance(like, tuple):
                text = "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
            else:
                text = "[" + ", ".join(parts) + "]"
            if _is_plain(like):
                return text
            return f"{self._global(type(like), type(like).__name__)}({text})"
        if isinstance(value, float) and not math.isfinite(value):
            return f"float({str(value)!r})"
        return self._constant(value, "constant")

    def additional_globals(self) -> list[tuple[str, Any]]:
        self._render(self.template, self.template)  # names the globals before they are read
        for param in self.signature.parameters.values():
            if param.default is not inspect.Parameter.empty:
                self._constant(param.default, f"default_{param.name}")
        return list(self.named.items())
