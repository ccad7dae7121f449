"""Running bytecode for real, one instruction at a time.

At a graph break the evaluator holds the frame's real locals and stack and runs the breaking
instruction here; when a frame cannot be compiled any further it runs the rest of it here
too. Calls go through `call_real`, so user functions called from here are compiled again.

An exception raised by an instruction run here goes where CPython would send it: the
instruction's entry in the exception table (bytecode.Handler), else out of the frame. While
a handler runs (`RealFrame.unwinding`) the frame evaluator runs it here, instruction by
instruction, with the exception made the one `sys.exc_info()` reports, as in eager.
"""

from __future__ import annotations

import dis
import operator
import sys
import types
from dataclasses import dataclass, field
from typing import Any, Callable

from compiler.tracer.bytecode import PY312, Code, Handler, Instr
from compiler.tracer.calls import REAL_NULL
from compiler.tracer.operations import BINARY_OPS, COMPARE_OPS


@dataclass
class RealFrame:
    code: Code
    globals: dict
    locals: dict[str, Any]
    cells: dict[str, Any]  # name -> real cell
    stack: list[Any] = field(default_factory=list)
    pc: int = 0
    kw_names: tuple | None = None
    fn_name: str = ""
    # Exception handling: the exception the running handler handles (None when none runs),
    # how many handlers run (PUSH_EXC_INFO not yet matched by POP_EXCEPT), and whether an
    # exception is being handled at all (from its dispatch until its last POP_EXCEPT).
    handled: BaseException | None = None
    handling: int = 0
    unwinding: bool = False

    def values(self) -> dict[str, Any]:
        """`L` for guards and sources: locals, cell contents and stack slots by name."""
        if not self.cells and not self.stack:
            return self.locals
        values = dict(self.locals)
        for name, cell in self.cells.items():
            try:
                values[name] = cell.cell_contents
            except ValueError:
                pass
        for i, v in enumerate(self.stack):
            values[f"__stack{i}"] = v
        return values


class Returned(Exception):
    def __init__(self, value: Any):
        self.value = value


CallReal = Callable[[Any, list, dict], Any]


def step(frame: RealFrame, ins: Instr, call_real: CallReal) -> None:
    """Run `ins` for real; sets `frame.pc` to the next instruction, raises Returned at a return."""
    frame.pc = ins.index + 1
    handler = _HANDLERS.get(ins.opname)
    if handler is None:
        raise RuntimeError(f"the frame evaluator cannot run {ins.opname}")
    try:
        if frame.handled is not None:
            _while_handling(frame.handled, handler, frame, ins, call_real)
        else:
            handler(frame, ins, call_real)
    except Returned:
        raise
    except BaseException as e:
        handler = frame.code.handlers[ins.index]
        if handler is None:
            _raise_at_user_line(e, frame, ins)
        _note_user_line(e, frame, ins)
        _unwind(frame, handler, ins, e)


def _unwind(frame: RealFrame, handler: Handler, ins: Instr, exc: BaseException) -> None:
    """Send `exc`, raised by `ins`, to its handler in the exception table."""
    del frame.stack[handler.depth :]
    if handler.lasti:
        frame.stack.append(ins.index)  # the stack layout the handler expects (CPython's lasti)
    frame.stack.append(exc)
    frame.pc = handler.target
    frame.kw_names = None
    frame.unwinding = True


def _while_handling(exc: BaseException, handler: Callable, *args: Any) -> None:
    """Run `handler` with `exc` as the exception being handled, as inside an `except` block:
    sys.exc_info() reports it, a bare `raise` re-raises it, and an exception raised meanwhile
    gets it as its __context__. Raising it here must not change it: its traceback and
    context are put back before the handler runs."""
    tb, context = exc.__traceback__, exc.__context__
    try:
        raise exc
    except BaseException:
        exc.__traceback__, exc.__context__ = tb, context
        handler(*args)


def _raise_at_user_line(exc: BaseException, frame: RealFrame, ins: Instr) -> None:
    """Re-raise `exc` from a frame that carries the user's file, line and function name, so the
    traceback points at the user's line as it does in eager: once per frame, at the line that
    raised it first (a `finally` or `except` that re-raises it adds no line, as in eager)."""
    marked = getattr(exc, "_compiler_user_frames", None)
    if marked is None:
        marked = []
        if hasattr(exc, "__dict__"):  # not an exception class with __slots__
            exc._compiler_user_frames = marked
    if not ins.lineno or not hasattr(exc, "__dict__") or any(f is frame for f in marked):
        raise exc
    marked.append(frame)
    code = compile("\n" * (ins.lineno - 1) + "raise ___exc", frame.code.code.co_filename, "exec")
    code = code.replace(co_name=frame.fn_name or frame.code.code.co_name)
    exec(code, {"___exc": exc})


def _note_user_line(exc: BaseException, frame: RealFrame, ins: Instr) -> None:
    """Add this frame's line to the traceback of `exc`, which a handler of the frame catches."""
    try:
        _raise_at_user_line(exc, frame, ins)
    except BaseException as raised:
        if raised is not exc:
            raise


def _builtins(frame: RealFrame) -> dict:
    b = frame.globals.get("__builtins__", __builtins__)
    return b if isinstance(b, dict) else b.__dict__


def _load_global(f, ins, call_real):
    if (ins.arg or 0) & 1:
        f.stack.append(REAL_NULL)
    name = ins.argval
    if name in f.globals:
        f.stack.append(f.globals[name])
    else:
        builtins = _builtins(f)
        if name not in builtins:
            raise NameError(f"name {name!r} is not defined")
        f.stack.append(builtins[name])


def _load_fast(f, ins, call_real):
    name = ins.argval
    if name not in f.locals:
        raise UnboundLocalError(
            f"cannot access local variable {name!r} where it is not associated with a value"
        )
    f.stack.append(f.locals[name])


def _store_fast(f, ins, call_real):
    v = f.stack.pop()
    if v is REAL_NULL:
        f.locals.pop(ins.argval, None)
    else:
        f.locals[ins.argval] = v


def _load_attr(f, ins, call_real):
    obj = f.stack.pop()
    if PY312 and (ins.arg or 0) & 1:
        f.stack.append(REAL_NULL)
    f.stack.append(getattr(obj, ins.argval))


def _load_method(f, ins, call_real):
    obj = f.stack.pop()
    f.stack.append(REAL_NULL)
    f.stack.append(getattr(obj, ins.argval))


def _call(f, ins, call_real):
    argc = ins.arg
    kw_names = f.kw_names or ()
    f.kw_names = None
    args = f.stack[len(f.stack) - argc :] if argc else []
    del f.stack[len(f.stack) - argc :]
    fn = f.stack.pop()
    head = f.stack.pop()
    if head is not REAL_NULL:
        args = [fn, *args]
        fn = head
    kwargs = {}
    if kw_names:
        kwargs = dict(zip(kw_names, args[len(args) - len(kw_names) :]))
        args = args[: len(args) - len(kw_names)]
    f.stack.append(call_real(fn, list(args), kwargs))


def _call_function_ex(f, ins, call_real):
    kwargs = f.stack.pop() if ins.arg & 1 else {}
    args = f.stack.pop()
    fn = f.stack.pop()
    if f.stack and f.stack[-1] is REAL_NULL:
        f.stack.pop()
    f.stack.append(call_real(fn, list(args), dict(kwargs)))


def _make_function(f, ins, call_real):
    flags = ins.arg or 0
    code = f.stack.pop()
    closure = f.stack.pop() if flags & 0x08 else None
    annotations = f.stack.pop() if flags & 0x04 else None
    kwdefaults = f.stack.pop() if flags & 0x02 else None
    defaults = f.stack.pop() if flags & 0x01 else None
    fn = types.FunctionType(code, f.globals, code.co_name, defaults, closure)
    if kwdefaults:
        fn.__kwdefaults__ = kwdefaults
    if annotations:
        fn.__annotations__ = (
            dict(zip(annotations[::2], annotations[1::2]))
            if isinstance(annotations, tuple)
            else annotations
        )
    fn.__qualname__ = code.co_qualname
    f.stack.append(fn)


def _jump(f, ins, call_real):
    f.pc = ins.jump_index


def _pop_jump(test: Callable[[Any], bool]):
    def run(f, ins, call_real):
        if test(f.stack.pop()):
            f.pc = ins.jump_index

    return run


def _jump_or_pop(want: bool):
    def run(f, ins, call_real):
        if bool(f.stack[-1]) is want:
            f.pc = ins.jump_index
        else:
            f.stack.pop()

    return run


def _for_iter(f, ins, call_real):
    it = f.stack[-1]
    try:
        f.stack.append(next(it))
    except StopIteration:
        if PY312:
            f.stack.append(REAL_NULL)
        else:
            f.stack.pop()
        f.pc = ins.jump_index


def _binary_op(f, ins, call_real):
    b = f.stack.pop()
    a = f.stack.pop()
    f.stack.append(BINARY_OPS[ins.argrepr](a, b))


def _compare_op(f, ins, call_real):
    b = f.stack.pop()
    a = f.stack.pop()
    op = ins.argval if isinstance(ins.argval, str) else dis.cmp_op[ins.arg]
    f.stack.append(COMPARE_OPS[op.replace("bool(", "").rstrip(")")](a, b))


def _unpack_sequence(f, ins, call_real):
    items = list(f.stack.pop())
    if len(items) != ins.arg:
        raise ValueError(
            f"too many values to unpack (expected {ins.arg})"
            if len(items) > ins.arg
            else f"not enough values to unpack (expected {ins.arg}, got {len(items)})"
        )
    f.stack.extend(reversed(items))


def _unpack_ex(f, ins, call_real):
    items = list(f.stack.pop())
    before, after = ins.arg & 0xFF, ins.arg >> 8
    if len(items) < before + after:
        raise ValueError(
            f"not enough values to unpack (expected at least {before + after}, got {len(items)})"
        )
    ordered = items[:before] + [items[before : len(items) - after]] + items[len(items) - after :]
    f.stack.extend(reversed(ordered))


def _before_with(f, ins, call_real):
    ctx = f.stack.pop()
    exit_fn = type(ctx).__exit__.__get__(ctx)
    result = type(ctx).__enter__(ctx)
    f.stack.append(exit_fn)
    f.stack.append(result)


def _format_value(f, ins, call_real):
    flags = ins.arg or 0
    spec = f.stack.pop() if flags & 0x04 else ""
    v = f.stack.pop()
    conv = flags & 0x03
    v = {1: str, 2: repr, 3: ascii}.get(conv, lambda x: x)(v)
    f.stack.append(format(v, spec))


def _raise(f, ins, call_real):
    if ins.arg == 0:
        active = sys.exc_info()[1]  # the handled exception, of this frame or of a caller
        if active is None:
            raise RuntimeError("No active exception to reraise")
        raise active
    cause = f.stack.pop() if ins.arg == 2 else None
    exc = f.stack.pop()
    if isinstance(exc, type):
        exc = exc()
    if ins.arg == 2:
        raise exc from cause
    raise exc


def _push_exc_info(f, ins, call_real):
    exc = f.stack.pop()
    f.stack.append(f.handled if f.handled is not None else sys.exc_info()[1])
    f.handled = exc
    f.handling += 1
    f.stack.append(exc)


def _pop_except(f, ins, call_real):
    previous = f.stack.pop()
    f.handling -= 1
    # The last handler's previous exception is the caller's (or none), which is what
    # sys.exc_info() reports without our help.
    f.handled = previous if f.handling else None
    if f.handling == 0 and f.code.instructions[f.pc].opname != "RERAISE":
        f.unwinding = False  # handled (a cleanup block restores the state, then re-raises)


def _check_exc_match(f, ins, call_real):
    match = f.stack.pop()
    classes = match if isinstance(match, tuple) else (match,)
    if not all(isinstance(c, type) and issubclass(c, BaseException) for c in classes):
        raise TypeError("catching classes that do not inherit from BaseException is not allowed")
    f.stack.append(isinstance(f.stack[-1], match))


def _reraise(f, ins, call_real):
    raise f.stack.pop()  # its traceback has the line it was first raised at (its argument's)


def _with_except_start(f, ins, call_real):
    exit_fn, exc = f.stack[-4], f.stack[-1]
    f.stack.append(exit_fn(type(exc), exc, exc.__traceback__))


def _load_super_attr(f, ins, call_real):
    obj, cls, super_fn = f.stack.pop(), f.stack.pop(), f.stack.pop()
    if super_fn is super or ins.arg & 2:
        bound = super_fn(cls, obj)
    else:
        bound = super_fn()
    if ins.arg & 1:
        f.stack.append(REAL_NULL)
    f.stack.append(getattr(bound, ins.argval))


def _return(f, ins, call_real):
    raise Returned(f.stack.pop())


def _load_deref(f, ins, call_real):
    try:
        f.stack.append(f.cells[ins.argval].cell_contents)
    except ValueError:
        raise NameError(
            f"cannot access free variable {ins.argval!r} where it is not associated with a value"
        ) from None


def _store_deref(f, ins, call_real):
    f.cells[ins.argval].cell_contents = f.stack.pop()


def _intrinsic(f, ins, call_real):
    v = f.stack.pop()
    if ins.argrepr == "INTRINSIC_LIST_TO_TUPLE":
        f.stack.append(tuple(v))
    elif ins.argrepr == "INTRINSIC_UNARY_POSITIVE":
        f.stack.append(+v)
    else:
        raise RuntimeError(f"CALL_INTRINSIC_1 {ins.argrepr}")


def _import_name(f, ins, call_real):
    fromlist = f.stack.pop()
    level = f.stack.pop()
    f.stack.append(__import__(ins.argval, f.globals, None, fromlist, level))


def _swap(f, ins, call_real):
    s = f.stack
    s[-1], s[-ins.arg] = s[-ins.arg], s[-1]


def _store_subscr(f, ins, call_real):
    index, obj, value = f.stack.pop(), f.stack.pop(), f.stack.pop()
    obj[index] = value


def _store_slice(f, ins, call_real):
    stop, start, obj, value = f.stack.pop(), f.stack.pop(), f.stack.pop(), f.stack.pop()
    obj[start:stop] = value


def _delete_subscr(f, ins, call_real):
    index, obj = f.stack.pop(), f.stack.pop()
    del obj[index]


def _store_attr(f, ins, call_real):
    obj, value = f.stack.pop(), f.stack.pop()
    setattr(obj, ins.argval, value)


def _build(make: Callable[[list], Any]):
    def run(f, ins, call_real):
        n = ins.arg
        items = f.stack[len(f.stack) - n :] if n else []
        del f.stack[len(f.stack) - n :]
        f.stack.append(make(items))

    return run


def _build_const_key_map(f, ins, call_real):
    keys = f.stack.pop()
    n = ins.arg
    values = f.stack[len(f.stack) - n :]
    del f.stack[len(f.stack) - n :]
    f.stack.append(dict(zip(keys, values)))


def _container_op(fn: Callable[[Any, Any], None], pops_key: bool = False):
    def run(f, ins, call_real):
        if pops_key:
            value = f.stack.pop()
            key = f.stack.pop()
            fn(f.stack[-ins.arg], (key, value))
        else:
            value = f.stack.pop()  # the target is found after popping, as CPython's PEEK(oparg)
            fn(f.stack[-ins.arg], value)

    return run


def _dict_merge(target: dict, other: Any) -> None:
    for k in other.keys():
        if k in target:
            raise TypeError(f"got multiple values for keyword argument '{k}'")
    target.update(other)


def _nop(f, ins, call_real):
    pass


_HANDLERS: dict[str, Callable] = {
    "NOP": _nop, "RESUME": _nop, "CACHE": _nop, "EXTENDED_ARG": _nop, "PRECALL": _nop,
    "MAKE_CELL": _nop, "COPY_FREE_VARS": _nop,
    "PUSH_NULL": lambda f, i, c: f.stack.append(REAL_NULL),
    "POP_TOP": lambda f, i, c: f.stack.pop(),
    "END_FOR": lambda f, i, c: f.stack.__delitem__(slice(-2, None)),
    "COPY": lambda f, i, c: f.stack.append(f.stack[-i.arg]),
    "SWAP": _swap,
    "LOAD_CONST": lambda f, i, c: f.stack.append(i.argval),
    "RETURN_CONST": lambda f, i, c: (_ for _ in ()).throw(Returned(i.argval)),
    "LOAD_FAST": _load_fast, "LOAD_FAST_CHECK": _load_fast,
    "LOAD_FAST_AND_CLEAR": lambda f, i, c: f.stack.append(f.locals.pop(i.argval, REAL_NULL)),
    "STORE_FAST": _store_fast,
    "DELETE_FAST": lambda f, i, c: f.locals.pop(i.argval, None),
    "LOAD_CLOSURE": lambda f, i, c: f.stack.append(f.cells[i.argval]),
    "LOAD_DEREF": _load_deref, "STORE_DEREF": _store_deref,
    "LOAD_GLOBAL": _load_global,
    "STORE_GLOBAL": lambda f, i, c: f.globals.__setitem__(i.argval, f.stack.pop()),
    "LOAD_ATTR": _load_attr, "LOAD_METHOD": _load_method, "STORE_ATTR": _store_attr,
    "KW_NAMES": lambda f, i, c: setattr(f, "kw_names", i.argval if isinstance(i.argval, tuple) else f.code.code.co_consts[i.arg]),
    "CALL": _call, "CALL_FUNCTION_EX": _call_function_ex, "MAKE_FUNCTION": _make_function,
    "RETURN_VALUE": _return,
    "BINARY_OP": _binary_op, "COMPARE_OP": _compare_op,
    "IS_OP": lambda f, i, c: f.stack.append((f.stack.pop() is f.stack.pop()) != bool(i.arg)),
    "CONTAINS_OP": lambda f, i, c: f.stack.append((f.stack.pop(-2) in f.stack.pop()) != bool(i.arg)),
    "UNARY_NEGATIVE": lambda f, i, c: f.stack.append(-f.stack.pop()),
    "UNARY_POSITIVE": lambda f, i, c: f.stack.append(+f.stack.pop()),
    "UNARY_INVERT": lambda f, i, c: f.stack.append(~f.stack.pop()),
    "UNARY_NOT": lambda f, i, c: f.stack.append(not f.stack.pop()),
    "CALL_INTRINSIC_1": _intrinsic,
    "BINARY_SUBSCR": lambda f, i, c: f.stack.append(operator.getitem(f.stack.pop(-2), f.stack.pop())),
    "BINARY_SLICE": lambda f, i, c: f.stack.append(_slice3(f)),
    "DELETE_ATTR": lambda f, i, c: delattr(f.stack.pop(), i.argval),
    "STORE_SUBSCR": _store_subscr, "STORE_SLICE": _store_slice, "DELETE_SUBSCR": _delete_subscr,
    "BUILD_TUPLE": _build(tuple), "BUILD_LIST": _build(list), "BUILD_SET": _build(set),
    "BUILD_MAP": _build(lambda items: dict(zip(items[::2], items[1::2]))),
    "BUILD_CONST_KEY_MAP": _build_const_key_map,
    "BUILD_SLICE": _build(lambda items: slice(*items)),
    "BUILD_STRING": _build(lambda items: "".join(items)),
    "LIST_APPEND": _container_op(list.append), "LIST_EXTEND": _container_op(list.extend),
    "SET_ADD": _container_op(set.add), "SET_UPDATE": _container_op(set.update),
    "MAP_ADD": _container_op(lambda d, kv: d.__setitem__(*kv), pops_key=True),
    "DICT_UPDATE": _container_op(dict.update), "DICT_MERGE": _container_op(_dict_merge),
    "LIST_TO_TUPLE": lambda f, i, c: f.stack.append(tuple(f.stack.pop())),
    "UNPACK_SEQUENCE": _unpack_sequence, "UNPACK_EX": _unpack_ex,
    "GET_ITER": lambda f, i, c: f.stack.append(iter(f.stack.pop())),
    "FOR_ITER": _for_iter,
    "JUMP_FORWARD": _jump, "JUMP_BACKWARD": _jump, "JUMP_BACKWARD_NO_INTERRUPT": _jump,
    "JUMP": _jump, "JUMP_NO_INTERRUPT": _jump,
    "JUMP_IF_FALSE_OR_POP": _jump_or_pop(False), "JUMP_IF_TRUE_OR_POP": _jump_or_pop(True),
    "FORMAT_VALUE": _format_value,
    "BEFORE_WITH": _before_with,
    "RAISE_VARARGS": _raise, "RERAISE": _reraise,
    "PUSH_EXC_INFO": _push_exc_info, "POP_EXCEPT": _pop_except,
    "CHECK_EXC_MATCH": _check_exc_match, "WITH_EXCEPT_START": _with_except_start,
    "LOAD_SUPER_ATTR": _load_super_attr,
    "LOAD_ASSERTION_ERROR": lambda f, i, c: f.stack.append(AssertionError),
    "IMPORT_NAME": _import_name,
    "IMPORT_FROM": lambda f, i, c: f.stack.append(getattr(f.stack[-1], i.argval)),
}  # fmt: skip
for _name, _test in (
    ("FALSE", lambda v: not v), ("TRUE", lambda v: bool(v)),
    ("NONE", lambda v: v is None), ("NOT_NONE", lambda v: v is not None),
):  # fmt: skip
    for _prefix in ("POP_JUMP_IF_", "POP_JUMP_FORWARD_IF_", "POP_JUMP_BACKWARD_IF_"):
        _HANDLERS[_prefix + _name] = _pop_jump(_test)


def _slice3(f: RealFrame) -> Any:
    stop, start, obj = f.stack.pop(), f.stack.pop(), f.stack.pop()
    return obj[start:stop]
