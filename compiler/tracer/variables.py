"""The few kinds of value the symbolic interpreter manipulates.

A value is either a graph value (`TensorVar`), a Python value the graph is specialised on
(`ConstVar`), a real object used read-only (`ObjVar`: modules, functions, classes), or a
container or helper object built during tracing. `source` is the Python expression (over `L`
and `G`) the value was read from at the start of the entry; values with a source are guarded,
and can be fetched again at run time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from compiler.tracer.breaks import Restart


class Var:
    source: str | None = None


@dataclass(eq=False)
class TensorVar(Var):
    node: torch.fx.Node
    fake: torch.Tensor
    source: str | None = None  # set for graph inputs

    def __repr__(self) -> str:
        return f"TensorVar({self.node.name})"


@dataclass(eq=False)
class ConstVar(Var):
    value: Any
    source: str | None = None

    def __repr__(self) -> str:
        return f"ConstVar({self.value!r})"


@dataclass(eq=False)
class ObjVar(Var):
    """A real object the trace reads but never mutates (modules, functions, classes, ...).

    `identity`, where set, is the guard that pins the object itself, added the first time
    the trace reads `value`. An object made at run time (a model's output record, on the
    stack after a graph break) is guarded by its type and by the attributes read through
    its source (`held`, operations.object_getattribute), so that the next call's new
    object reuses the entry; any other use of the object (compared, hashed, passed to
    Python) reads `value` and pins it, as every object was pinned before."""

    held: Any
    source: str | None = None
    identity: Callable[[], None] | None = None

    @property
    def value(self) -> Any:
        if self.identity is not None:
            pin, self.identity = self.identity, None
            pin()
        return self.held
    # A value whose contents the trace must not read as constants (a numpy array handed on
    # by a graph break, made anew at each call): guarded by type only, never folded.
    opaque: bool = False

    def __repr__(self) -> str:
        return f"ObjVar({type(self.held).__name__})"


@dataclass(eq=False)
class ListVar(Var):
    items: list[Var]
    source: str | None = None  # set when the list exists outside the trace
    mutated: bool = False  # an outside list changed during the trace: replayed after the graph
    version: int = 0  # changes made in the trace (generators.py)
    cls: type = list  # list, or torch.nn.ModuleList for a slice of one (made from a list)
    view_of: Any = None  # (DictVar, "values" or "items"): a dict view (values/containers.py)


@dataclass(eq=False)
class DequeVar(ListVar):
    """A collections.deque (values/deques.py): its items, and the most it holds."""

    maxlen: int | None = None


@dataclass(eq=False)
class TupleVar(Var):
    items: list[Var]
    source: str | None = None
    # tuple, torch.Size, a namedtuple class, a structseq (torch.return_types.*) or another
    # tuple subclass: see tuple_kind
    cls: type = tuple


def tuple_kind(cls: type) -> str:
    """How a tuple class names its items and is built from them: "namedtuple" (`_fields`,
    `cls(*items)`), "structseq" (the C struct sequences torch.return_types.* and
    os.stat_result are: `__match_args__`, `cls(items)`), "size" (torch.Size), "tuple", or
    "subclass" (another tuple subclass: no names, `cls(items)` as tuple's own constructor)."""
    if cls is tuple:
        return "tuple"
    if cls is torch.Size:
        return "size"
    if hasattr(cls, "_fields"):
        return "namedtuple"
    if hasattr(cls, "n_sequence_fields"):
        return "structseq"
    return "subclass"


def tuple_fields(cls: type) -> tuple[str, ...]:
    """The attribute names of a tuple's items, in order (none for plain tuples)."""
    kind = tuple_kind(cls)
    if kind == "namedtuple":
        return tuple(cls._fields)
    if kind == "structseq":
        return tuple(getattr(cls, "__match_args__", ()))
    return ()


@dataclass(eq=False)
class DictVar(Var):
    items: dict[Any, Var]  # keys are Python constants
    source: str | None = None
    cls: type = dict
    mutated: bool = False
    version: int = 0  # changes made in the trace (generators.py)
    default: Var | None = None  # a defaultdict's default_factory (values/containers.py)
    views: list[Var] = field(default_factory=list)  # its keys/values/items views, kept live


@dataclass(eq=False)
class CounterVar(DictVar):
    """A collections.Counter built in the trace (values/counters.py)."""


@dataclass(eq=False)
class SetVar(Var):
    """A set, a frozenset, or a dict's keys view (`cls`): its items in the order a real set of
    them iterates (a keys view: its dict's order). values/sets.py keeps them so."""

    items: list[Var]
    source: str | None = None  # set when the set exists outside the trace
    cls: type = set
    mutated: bool = False  # an outside set changed during the trace: replayed after the graph
    version: int = 0  # changes made in the trace (generators.py)
    keys: Any = None  # the real set of the items' keys, changed as eager's (values/sets.py)
    view_of: Any = None  # (DictVar, "keys"): a dict's keys view (values/containers.py)


@dataclass(eq=False)
class SliceVar(Var):
    start: Var
    stop: Var
    step: Var


@dataclass(eq=False)
class FunctionVar(Var):
    """A Python function: a real one (`fn`), or one built by MAKE_FUNCTION during tracing."""

    fn: Any = None
    code: Any = None
    globals: dict | None = None
    name: str = ""
    defaults: Var | None = None  # TupleVar
    kwdefaults: Var | None = None  # DictVar
    annotations: Var | None = None  # DictVar, made when first needed as eager makes it
    closure: list[CellVar] | None = None
    source: str | None = None
    # functools.wraps(wrapped) applied to a function made in the trace: its names are those
    # of `wrapped`, and its rebuild copies them as update_wrapper does
    wrapped: Var | None = None

    def get_code(self):
        return self.fn.__code__ if self.fn is not None else self.code

    def get_globals(self) -> dict:
        return self.fn.__globals__ if self.fn is not None else self.globals


@dataclass(eq=False)
class MethodVar(Var):
    """`obj.method` bound during tracing: a Python function with `self` already supplied."""

    func: Var
    self_var: Var


@dataclass(eq=False)
class AttrCallVar(Var):
    """A method of a tensor or a container, called by name: `x.add`, `lst.append`."""

    obj: Var
    name: str


@dataclass(eq=False)
class CellVar(Var):
    """A closure cell: one created by this frame (symbolic), or a real one (`cell`)."""

    contents: Var | None = None
    cell: Any = None  # the real cell, when it exists outside the trace
    name: str = ""
    source: str | None = None
    dirty: bool = False  # written during the trace: the real cell must be updated


@dataclass(eq=False)
class IteratorVar(Var):
    """An iterator: over `items` from `index` on. Over a list it shares the ListVar's `items`
    (`seq`), so items the trace appends are still reached, as by a real list iterator; over
    a dict (`seq`) its keys are taken when it is made, and a read after the dict changed
    size raises as in eager (generators.check_read)."""

    items: list[Var]
    index: int = 0
    generator: Any = None  # generators.Inlined, for the values of a generator run ahead
    seq: ListVar | DictVar | None = None  # the list or dict iterated
    source: str | None = None  # a real iterator read from the frame: advanced after the graph
    start: int = 0  # `index` when it was read from the frame
    # The iterators this one reads lazily (enumerate, zip, map, filter over an iterator),
    # each with its index after this one gave k items (positions[k]), and its index and
    # whether it ran out after this one ran out.
    links: list[tuple[IteratorVar, list[int], tuple[int, bool]]] = field(default_factory=list)
    made_at: int = 0  # with links: the root-frame instruction that made it

    def move(self, index: int, exhausted: bool = False) -> None:
        """Consumed up to `index`, and then found empty if `exhausted`: the iterators it
        reads move as they would in eager."""
        self.index = index
        for source, positions, final in self.links:
            if exhausted:
                source.move(*final)
            else:
                source.move(positions[index])


@dataclass(eq=False)
class GroupVar(IteratorVar):
    """One group of an itertools.groupby, and whether it was found to have no more items
    (eager's group then read the next group's first item)."""

    ran_out: bool = False

    def move(self, index: int, exhausted: bool = False) -> None:
        super().move(index, exhausted)
        self.ran_out = self.ran_out or exhausted


@dataclass(eq=False)
class GroupbyVar(IteratorVar):
    """`itertools.groupby(...)`: an iterator over (key, group) pairs, `groups` the iterators
    over each group's items. As in eager, moving on to the next pair, or finding no more,
    leaves the groups before behind: reading one then gives nothing.

    Over an iterator (`reads`: it, the position of each group's first item in it, and its
    end), eager's groupby reads it as it goes: the first item of each group it gives, and
    the groups read on from there (their links). Moving on expects the iterator where the
    group given last left it; other code read it in between, eager's groups would differ,
    and the groupby is made in Python."""

    groups: list[GroupVar] = field(default_factory=list)
    reads: tuple[IteratorVar, list[int], int] | None = None

    def move(self, index: int, exhausted: bool = False) -> None:
        before = self.index
        if self.reads is not None and (index != before or exhausted):
            self._read_to(before, index, exhausted)
        super().move(index, exhausted)
        for group in self.groups[: len(self.groups) if exhausted else max(index - 1, 0)]:
            group.index = len(group.items)
            group.links.clear()  # a group left behind no longer reads the iterator

    def _read_to(self, before: int, index: int, exhausted: bool) -> None:
        it, starts, end = self.reads
        if before == 0:
            expected = starts[0] if starts else end
        else:
            group = self.groups[before - 1]
            after = starts[before] + 1 if before < len(starts) else end
            expected = after if group.ran_out else starts[before - 1] + max(group.index, 1)
        if it.index != expected:
            raise Restart(
                self.made_at,
                "the iterator itertools.groupby() reads was read elsewhere in between; the "
                "groupby runs in Python",
                "unsupported",
            )
        if exhausted:
            it.move(end, exhausted=True)
        else:
            it.move(starts[index - 1] + 1)


@dataclass(eq=False)
class EndlessIteratorVar(IteratorVar):
    """`itertools.count(start, step)` or `itertools.repeat(value)`: an iterator that never
    runs out, its items made as far as it is read (always one item ahead of `index`)."""

    maker: Any = None  # itertools.count or itertools.repeat
    # the arguments that make it again `n` items in, the first of which is its next item
    args_at: Callable[[int], list[Var]] | None = None

    def __post_init__(self) -> None:
        self.extend(self.index + 1)

    def extend(self, n: int) -> None:
        """Items made up to position `n` (a reader that takes `n` items at once: zip)."""
        while len(self.items) < n:
            self.items.append(self.args_at(len(self.items))[0])

    def move(self, index: int, exhausted: bool = False) -> None:
        super().move(index, exhausted)
        self.extend(index + 1)


@dataclass(eq=False)
class GradModeVar(Var):
    """`torch.no_grad()`, `torch.enable_grad()`, `torch.set_grad_enabled(b)` as a context;
    `enabled=None` keeps the grad mode (a context that changes nothing, such as
    `torch.autocast(..., enabled=False)` where autocast is off)."""

    enabled: bool | None
    prev: bool | None = None  # set_grad_enabled applies at the call: the mode to restore
    # torch.inference_mode(): the root-frame instruction that made it (its block must not
    # outlive the graph: the rest of it would run outside inference mode)
    inference_at: int | None = None


@dataclass(eq=False)
class GradExitVar(Var):
    """The `__exit__` that BEFORE_WITH left on the stack for a grad-mode block."""

    restore: bool
    inference_at: int | None = None  # of a torch.inference_mode() block (GradModeVar)


@dataclass(eq=False)
class AutocastVar(Var):
    """`torch.autocast(device_type, dtype, enabled, cache_enabled)` as a context, its
    arguments resolved as torch.autocast resolves them."""

    device_type: str
    enabled: bool
    dtype: torch.dtype


@dataclass(eq=False)
class AutocastExitVar(Var):
    """The `__exit__` that BEFORE_WITH left on the stack for an autocast block: it switches
    `device_type` back to `before` ((enabled, dtype, cache), compiler/support/autocast.py)."""

    device_type: str
    before: tuple


@dataclass(eq=False)
class LazyVar(Var):
    """A root-frame local not read yet: wrapped (and guarded) on first use only."""

    def __init__(self, value: Any, source: str):
        self.value = value
        self.source = source


class NullVar(Var):
    """The NULL that PUSH_NULL / LOAD_GLOBAL / LOAD_ATTR push before a callable."""


@dataclass(eq=False)
class SuperVar(Var):
    cls: Any
    obj: Var


@dataclass(eq=False)
class NewObjectVar(Var):
    """An instance of a plain Python class built during tracing (its __init__ inlined); it is
    rebuilt for real, with its attributes, when it leaves the graph."""

    cls: type
    fields: dict[str, Var] = field(default_factory=dict)
    items: DictVar | None = None  # the mapping of an instance of a dict subclass
    version: int = 0  # changes made in the trace (generators.py)


@dataclass(eq=False)
class ExceptionVar(Var):
    """An exception raised by traced code: its class and constructor arguments. It lives in
    the trace while handlers there catch it; one that would leave the graph is raised again
    for real (the graph ends before the instruction that raised it)."""

    cls: type
    args: list[Var]
    cause: Var | None = None  # `raise ... from cause`

    def __repr__(self) -> str:
        return f"ExceptionVar({self.cls.__name__})"


@dataclass(eq=False)
class PartialVar(Var):
    """`functools.partial(func, *args, **kwargs)` built during tracing."""

    func: Var
    args: list[Var]
    kwargs: dict[str, Var]


NULL = NullVar()


class IdentityKey:
    """The dict or set key of a value eager hashes by its address: a tensor, a module, an
    instance of a class that keeps object's __hash__ and __eq__. `obj` is the object whose
    address it is (a tensor's fake, which fake mode shares wherever eager returns the same
    tensor: `x.add_(1)`, `x.contiguous()`), `var` the value it was made from, which iterating
    the dict gives back. It equals the object itself, so that a key filed from the real
    object (a constant) is the same key, as in eager."""

    __slots__ = ("var", "obj")

    def __init__(self, var: Var, obj: Any):
        self.var = var
        self.obj = obj

    def __hash__(self) -> int:
        return object.__hash__(self.obj)

    def __eq__(self, other: object) -> bool:
        return (other.obj if isinstance(other, IdentityKey) else other) is self.obj

    def __repr__(self) -> str:
        return f"IdentityKey({self.var!r})"


def key_var(key: Any) -> Var:
    """The value a dict's key gives back where the dict is iterated."""
    return key.var if isinstance(key, IdentityKey) else ConstVar(key)


def dict_vars(d: DictVar) -> list[Var]:
    """The values a dict holds: its items, and its keys that are values of the trace (a
    tensor, a module: IdentityKey), which come out of the graph with it."""
    keys = [k.var for k in d.items if isinstance(k, IdentityKey)]
    return [*keys, *d.items.values()]


def is_const(v: Var) -> bool:
    return isinstance(v, ConstVar)


def as_python_constant(v: Var) -> Any:
    """The Python value of a var made only of constants; raises TypeError otherwise."""
    if isinstance(v, ConstVar):
        return v.value
    if isinstance(v, TupleVar):
        return (
            v.cls(as_python_constant(i) for i in v.items)
            if v.cls in (tuple, torch.Size)
            else tuple(as_python_constant(i) for i in v.items)
        )
    if isinstance(v, ListVar):
        return [as_python_constant(i) for i in v.items]
    if isinstance(v, DictVar):
        return {
            as_python_constant(k.var) if isinstance(k, IdentityKey) else k: as_python_constant(i)
            for k, i in v.items.items()
        }
    if isinstance(v, SetVar):
        items = {as_python_constant(i) for i in v.items}
        return frozenset(items) if v.cls is frozenset else items
    if isinstance(v, SliceVar):
        return slice(
            as_python_constant(v.start), as_python_constant(v.stop), as_python_constant(v.step)
        )
    if isinstance(v, ObjVar) and not v.opaque:
        if isinstance(v.held, Iterator):
            # a real iterator or generator changes when it is read: folding a call over it
            # at trace time would consume it, and the call made for real would find it empty
            raise TypeError("a real iterator is not a constant")
        return v.value
    raise TypeError(f"{type(v).__name__} is not a constant")


def is_python_constant(v: Var) -> bool:
    try:
        as_python_constant(v)
        return True
    except TypeError:
        return False


def contains_tensor(v: Var) -> bool:
    if isinstance(v, TensorVar):
        return True
    if isinstance(v, (ListVar, TupleVar)):
        return any(contains_tensor(i) for i in v.items)
    if isinstance(v, DictVar):
        return any(contains_tensor(i) for i in dict_vars(v))
    return False


def tensor_vars(v: Var, out: list[TensorVar], seen: set[int]) -> None:
    """Collect the graph values reachable from `v` (for a graph's outputs)."""
    if id(v) in seen:
        return
    seen.add(id(v))
    if isinstance(v, TensorVar):
        out.append(v)
    elif isinstance(v, (ListVar, TupleVar, SetVar, IteratorVar)):
        for i in v.items:
            tensor_vars(i, out, seen)
    elif isinstance(v, DictVar):
        for i in dict_vars(v):
            tensor_vars(i, out, seen)
    elif isinstance(v, SliceVar):
        for i in (v.start, v.stop, v.step):
            tensor_vars(i, out, seen)
    elif isinstance(v, CellVar):
        if v.contents is not None:
            tensor_vars(v.contents, out, seen)
    elif isinstance(v, FunctionVar):
        for part in (v.defaults, v.kwdefaults, v.annotations):
            if part is not None:
                tensor_vars(part, out, seen)
        for c in v.closure or ():
            tensor_vars(c, out, seen)
    elif isinstance(v, NewObjectVar):
        for i in [*v.fields.values(), v.items or NULL]:
            tensor_vars(i, out, seen)
    elif isinstance(v, AttrCallVar):
        tensor_vars(v.obj, out, seen)
    elif isinstance(v, ExceptionVar):
        for i in [*v.args, v.cause or NULL]:
            tensor_vars(i, out, seen)
    elif isinstance(v, MethodVar):
        tensor_vars(v.self_var, out, seen)
        tensor_vars(v.func, out, seen)
    elif isinstance(v, PartialVar):
        for i in [v.func, *v.args, *v.kwargs.values()]:
            tensor_vars(i, out, seen)
    elif isinstance(v, SuperVar):
        tensor_vars(v.obj, out, seen)
