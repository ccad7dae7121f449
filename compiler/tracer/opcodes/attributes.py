"""Opcodes of attributes, `super()` and imports."""

from __future__ import annotations

import importlib.util
import sys

from compiler.tracer import operations as ops
from compiler.tracer.breaks import Break
from compiler.tracer.calls import REAL_NULL
from compiler.tracer.opcodes.calling import with_null
from compiler.tracer.opcodes.registry import opcode
from compiler.tracer.variables import NULL, ObjVar, SuperVar, as_python_constant


@opcode("LOAD_ATTR", until=(3, 12))
class LoadAttr311:
    def traced(tx, frame, ins):
        tx.push(frame, ops.load_attr(tx, tx.pop(frame), ins.argval))

    def concrete(f, ins, call_real):
        f.stack.append(getattr(f.stack.pop(), ins.argval))


@opcode("LOAD_ATTR", since=(3, 12))
class LoadAttr:
    """Bit 0 of the argument asks for a method load: the slots of a call (calling.py), here
    always the bound attribute with a NULL."""

    def traced(tx, frame, ins):
        attr = ops.load_attr(tx, tx.pop(frame), ins.argval)
        frame.stack.extend(with_null(attr, NULL) if ins.arg & 1 else [attr])

    def concrete(f, ins, call_real):
        attr = getattr(f.stack.pop(), ins.argval)
        f.stack.extend(with_null(attr, REAL_NULL) if ins.arg & 1 else [attr])


@opcode("LOAD_METHOD", until=(3, 12))
class LoadMethod:
    def traced(tx, frame, ins):
        frame.stack.extend(with_null(ops.load_attr(tx, tx.pop(frame), ins.argval), NULL))

    def concrete(f, ins, call_real):
        f.stack.extend(with_null(getattr(f.stack.pop(), ins.argval), REAL_NULL))


@opcode("LOAD_SUPER_ATTR", since=(3, 12))
class LoadSuperAttr:
    """`super().name`: bit 0 of the argument asks for a method load, bit 1 says the call was
    super(cls, obj) (both forms leave [super, cls, obj] on the stack)."""

    def traced(tx, frame, ins):
        obj = tx.pop(frame)
        cls = tx.pop(frame)
        super_fn = tx.pop(frame)
        if not (isinstance(super_fn, ObjVar) and super_fn.value is super):
            raise Break("super() through a name rebound from the builtin")
        attr = ops.load_attr(tx, SuperVar(as_python_constant(cls), obj), ins.argval)
        frame.stack.extend(with_null(attr, NULL) if ins.arg & 1 else [attr])

    def concrete(f, ins, call_real):
        obj, cls, super_fn = f.stack.pop(), f.stack.pop(), f.stack.pop()
        if super_fn is super or ins.arg & 2:
            bound = super_fn(cls, obj)
        else:
            bound = super_fn()
        attr = getattr(bound, ins.argval)
        f.stack.extend(with_null(attr, REAL_NULL) if ins.arg & 1 else [attr])


@opcode("STORE_ATTR")
class StoreAttr:
    def traced(tx, frame, ins):
        obj = tx.resolve(frame.stack[-1])
        value = tx.resolve(frame.stack[-2])
        ops.store_attr(tx, obj, ins.argval, value)
        del frame.stack[-2:]

    def concrete(f, ins, call_real):
        obj, value = f.stack.pop(), f.stack.pop()
        setattr(obj, ins.argval, value)


@opcode("DELETE_ATTR")
class DeleteAttr:
    def traced(tx, frame, ins):
        ops.delete_attr(tx, tx.pop(frame), ins.argval)

    def concrete(f, ins, call_real):
        delattr(f.stack.pop(), ins.argval)


@opcode("IMPORT_NAME")
class ImportName:
    def traced(tx, frame, ins):
        fromlist = ops.as_python_constant_or_none(tx.pop(frame))
        level = ops.as_python_constant_or_none(tx.pop(frame))
        name = _absolute_name(ins.argval, level, frame.globals)
        if name is None or name not in sys.modules or _imports_submodule(name, fromlist):
            raise Break(
                f"import {ins.argval} runs in Python (the module is not imported yet)", "import"
            )
        module = sys.modules[name] if fromlist else sys.modules[name.split(".")[0]]
        tx.push(frame, ObjVar(module))

    def concrete(f, ins, call_real):
        fromlist = f.stack.pop()
        level = f.stack.pop()
        f.stack.append(__import__(ins.argval, f.globals, None, fromlist, level))


def _absolute_name(name: str, level: int, globals_: dict) -> str | None:
    """The module `import` names: a relative import (`from . import x` in a function of a
    package module) resolved against the importing module's package as __import__ does;
    None where __import__ would raise (it then raises in Python)."""
    if not level:
        return name
    package = globals_.get("__package__")
    if package is None:
        spec = globals_.get("__spec__")
        module = globals_.get("__name__", "")
        package = spec.parent if spec is not None else module.rpartition(".")[0]
    if not package:
        return None
    try:
        return importlib.util.resolve_name("." * level + name, package)
    except (ImportError, ValueError):
        return None


def _imports_submodule(name: str, fromlist: tuple | None) -> bool:
    """`from package import name` where `name` is a submodule not imported yet: importing
    it runs the module's code."""
    module = sys.modules[name]
    return any(
        not hasattr(module, item) and f"{name}.{item}" not in sys.modules
        for item in fromlist or ()
        if item != "*"
    )


@opcode("IMPORT_FROM")
class ImportFrom:
    def traced(tx, frame, ins):
        tx.push(frame, ops.load_attr(tx, tx.resolve(frame.stack[-1]), ins.argval))

    def concrete(f, ins, call_real):
        f.stack.append(getattr(f.stack[-1], ins.argval))
