"""The table of value kinds: for each kind of tracer value, what attribute access, calls,
methods, subscripts, operators, truth, iteration and rebuilding do with it.

Each family module of this package registers its kinds (`VALUE_OPS[ListVar] = ValueOps(...)`),
and the translator imports them all (families.py) before the first trace. operations.py,
calls.py and reconstruct.py look the handlers up here instead of testing kinds one after the
other, so that a new kind of value is one new module. A slot left at None means the kind does
not support that operation: the dispatcher breaks the graph (or, for rebuilding, raises) with
the message it always gave.

The table sits under the dispatchers and the families, and imports neither: the handlers'
tracer and emitter are the protocols of context.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from compiler.tracer.breaks import Raised
from compiler.tracer.variables import AttrCallVar, ConstVar, ExceptionVar, Var

if TYPE_CHECKING:
    from compiler.tracer.context import Emitter, Tracer

Method = Callable[["Tracer", Any, list[Var], dict[str, Var]], Var]


@dataclass
class ValueOps:
    """What each operation does on one kind of value. Handlers that may decline return
    NotImplemented, and the dispatcher goes on as if the slot were empty."""

    describe: Callable[[Any], str] | None = None  # how break reasons name the value
    attr: Callable[[Tracer, Any, str], Var] | None = None
    store_attr: Callable[[Tracer, Any, str, Var], None] | None = None
    delete_attr: Callable[[Tracer, Any, str], None] | None = None
    call: Callable[[Tracer, Any, list[Var], dict[str, Var]], Var] | None = None
    # methods by name, called as `obj.name(*args, **kwargs)`; `method` takes any other name
    methods: dict[str, Method] = field(default_factory=dict)
    method: Callable[[Tracer, Any, str, list[Var], dict[str, Var]], Var] | None = None
    getitem: Callable[[Tracer, Any, Var], Var] | None = None
    setitem: Callable[[Tracer, Any, Var, Var], None] | None = None
    delitem: Callable[[Tracer, Any, Var], None] | None = None
    # the builtin mapping's dunder, where the class writes none in Python (a dict subclass)
    mapping: Callable[[Tracer, Any, str, list[Var]], Var] | None = None
    # `a op b` with this kind on the left (NotImplemented: not this kind's operator)
    binary: Callable[[Tracer, Callable, Any, Var], Var] | None = None
    # `a op b` with this kind on the right, where the left operand's kind declined
    rbinary: Callable[[Tracer, Callable, Var, Any], Var] | None = None
    # the class's own operator methods come first, even against a graph value (user objects)
    own_operators: bool = False
    # graph values take any operator they appear in, on either side (tensors)
    operators: Callable[[Tracer, Callable, Var, Var], Var] | None = None
    immutable: bool = False  # `a op= b` computes `a op b` (Python numbers and strings)
    foldable: bool = True  # an operator over two constants of this kind runs at trace time
    unary: Callable[[Tracer, Callable, Any], Var] | None = None
    truth: Callable[[Tracer, Any], bool] | None = None
    length: Callable[[Tracer, Any], Var] | None = None  # len(v), where the kind says it
    # `with v:`: what BEFORE_WITH leaves, the exit callable and the value of __enter__()
    enter: Callable[[Tracer, Any], tuple[Var, Var]] | None = None
    same: Callable[[Any, Var], bool | None] | None = None  # `a is b`; None: undecided
    # the object whose address eager's dict hashes the value by (a tensor's fake, a module);
    # NotImplemented, or no handler: the value is hashed as the constant it is
    identity: Callable[[Any], Any] | None = None
    contains: Callable[[Tracer, Any, Var], bool] | None = None
    iterate: Callable[[Tracer, Any], list[Var]] | None = None
    get_iter: Callable[[Tracer, Any], Var] | None = None
    rebuild: Callable[[Emitter, Any], str] | None = None
    # a value that lives only in the trace (a generator paused in it): the root-frame
    # instruction that made it, where the trace restarts if the value outlives the graph
    # (None: this one may outlive it)
    made_at: Callable[[Any], int | None] | None = None
    source_first: bool = True  # rebuilt from its source where it has one
    one_object: bool = False  # a mutable object: rebuilt once, however often referenced
    # the values a replay of side effects visits under this one, and the replay itself
    replay_children: Callable[[Any], list[Var]] | None = None
    replay: Callable[[Emitter, Any, list[str]], None] | None = None


VALUE_OPS: dict[type, ValueOps] = {}
_NONE = ValueOps()
_BY_TYPE: dict[type, ValueOps] = {}


def ops_of(v: Var) -> ValueOps:
    """The operations of `v`'s kind (of its nearest registered base class)."""
    kind = type(v)
    ops = _BY_TYPE.get(kind)
    if ops is None:
        ops = next((VALUE_OPS[k] for k in kind.__mro__ if k in VALUE_OPS), _NONE)
        _BY_TYPE[kind] = ops
    return ops


def describe(v: Var) -> str:
    """How break reasons name `v`."""
    named = ops_of(v).describe
    if named is not None:
        return named(v)
    return type(v).__name__.replace("Var", "").lower()


def class_method(v: Var, cls: type, name: str) -> Var:
    """`v.name` for a value whose attributes are its class's (a list, tuple, dict or set
    built in the trace): the method to call, or the AttributeError eager raises where the
    class has no such attribute (hasattr() and `except AttributeError` see it)."""
    if not hasattr(cls, name):
        message = ConstVar(f"'{cls.__name__}' object has no attribute '{name}'")
        raise Raised(ExceptionVar(AttributeError, [message]))
    return AttrCallVar(v, name)
