"""Opcodes of names: locals, closure cells and globals."""

from __future__ import annotations

from compiler.tracer import calls
from compiler.tracer.breaks import Break
from compiler.tracer.calls import REAL_NULL
from compiler.tracer.opcodes.calling import with_null
from compiler.tracer.opcodes.registry import opcode
from compiler.tracer.variables import NULL, NullVar, Var
from compiler.tracer.wrap import wrap


def load_fast(tx, frame, name: str) -> Var:
    if name not in frame.locals:
        if name in frame.cells:  # 3.13 loads a cell for a closure with LOAD_FAST
            return frame.cells[name]
        raise Break(f"local variable {name!r} referenced before assignment")
    v = frame.locals[name]
    resolved = tx.resolve(v)
    if resolved is not v:  # a root-frame local read for the first time: wrapped once
        frame.locals[name] = resolved
    return resolved


def real_local(f, name: str):
    if name not in f.locals:
        if name in f.cells:  # 3.13 loads a cell for a closure with LOAD_FAST
            return f.cells[name]
        raise UnboundLocalError(
            f"cannot access local variable {name!r} where it is not associated with a value"
        )
    return f.locals[name]


def store_fast(frame, name: str, v) -> None:
    """A NULL stored is 3.12's inlined comprehension restoring a local that was unbound."""
    if isinstance(v, NullVar) or v is REAL_NULL:
        frame.locals.pop(name, None)
    else:
        frame.locals[name] = v


@opcode("LOAD_FAST")
@opcode("LOAD_FAST_CHECK", since=(3, 12))
class LoadFast:
    def traced(tx, frame, ins):
        tx.push(frame, load_fast(tx, frame, ins.argval))

    def concrete(f, ins, call_real):
        f.stack.append(real_local(f, ins.argval))


@opcode("LOAD_FAST_LOAD_FAST", since=(3, 13))
class LoadFastLoadFast:
    """Two LOAD_FASTs in one instruction: its argument's value is the pair of names."""

    def traced(tx, frame, ins):
        first, second = ins.argval
        frame.stack.extend([load_fast(tx, frame, first), load_fast(tx, frame, second)])

    def concrete(f, ins, call_real):
        first, second = ins.argval
        f.stack.extend([real_local(f, first), real_local(f, second)])


@opcode("STORE_FAST_LOAD_FAST", since=(3, 13))
class StoreFastLoadFast:
    def traced(tx, frame, ins):
        stored, loaded = ins.argval
        store_fast(frame, stored, frame.stack.pop())
        tx.push(frame, load_fast(tx, frame, loaded))

    def concrete(f, ins, call_real):
        stored, loaded = ins.argval
        store_fast(f, stored, f.stack.pop())
        f.stack.append(real_local(f, loaded))


@opcode("STORE_FAST_STORE_FAST", since=(3, 13))
class StoreFastStoreFast:
    """Stores the top of the stack in the first name, the item below it in the second."""

    def traced(tx, frame, ins):
        first, second = ins.argval
        store_fast(frame, first, frame.stack.pop())
        store_fast(frame, second, frame.stack.pop())

    def concrete(f, ins, call_real):
        first, second = ins.argval
        store_fast(f, first, f.stack.pop())
        store_fast(f, second, f.stack.pop())


@opcode("LOAD_FAST_AND_CLEAR", since=(3, 12))
class LoadFastAndClear:
    def traced(tx, frame, ins):
        v = frame.locals.pop(ins.argval, None)
        tx.push(frame, tx.resolve(v) if v is not None else NULL)

    def concrete(f, ins, call_real):
        f.stack.append(f.locals.pop(ins.argval, REAL_NULL))


@opcode("STORE_FAST")
class StoreFast:
    def traced(tx, frame, ins):
        store_fast(frame, ins.argval, frame.stack.pop())

    def concrete(f, ins, call_real):
        store_fast(f, ins.argval, f.stack.pop())


@opcode("DELETE_FAST")
class DeleteFast:
    def traced(tx, frame, ins):
        frame.locals.pop(ins.argval, None)

    def concrete(f, ins, call_real):
        f.locals.pop(ins.argval, None)


@opcode("LOAD_CLOSURE")
class LoadClosure:
    def traced(tx, frame, ins):
        tx.push(frame, frame.cells[ins.argval])

    def concrete(f, ins, call_real):
        f.stack.append(f.cells[ins.argval])


@opcode("LOAD_DEREF")
class LoadDeref:
    def traced(tx, frame, ins):
        tx.push(frame, tx.cell_contents(frame.cells[ins.argval]))

    def concrete(f, ins, call_real):
        try:
            f.stack.append(f.cells[ins.argval].cell_contents)
        except ValueError:
            raise NameError(
                f"cannot access free variable {ins.argval!r} where it is not associated with a value"
            ) from None


@opcode("STORE_DEREF")
class StoreDeref:
    def traced(tx, frame, ins):
        cell = frame.cells[ins.argval]
        if cell.cell is not None and cell.source is None:
            # the function was reached without a guarded path: its cells may not be the ones
            # the next call reaches, so the write is not replayed on a baked-in cell
            raise Break(
                f"assignment to closure variable {cell.name!r} of a function without a source"
            )
        cell.contents = tx.pop(frame)
        cell.dirty = True
        tx.changed()

    def concrete(f, ins, call_real):
        f.cells[ins.argval].cell_contents = f.stack.pop()


@opcode("LOAD_GLOBAL")
class LoadGlobal:
    """Bit 0 of the argument asks for a NULL with the global, for a call (calling.py)."""

    def traced(tx, frame, ins):
        value = _traced_global(tx, frame, ins.argval)
        frame.stack.extend(with_null(value, NULL) if (ins.arg or 0) & 1 else [value])

    def concrete(f, ins, call_real):
        value = _real_global(f, ins.argval)
        f.stack.extend(with_null(value, REAL_NULL) if (ins.arg or 0) & 1 else [value])


def _traced_global(tx, frame, name: str) -> Var:
    if name in frame.globals:
        return wrap(tx, frame.globals[name], f"{frame.globals_source}[{name!r}]")
    builtins = frame.globals.get("__builtins__", __builtins__)
    if isinstance(builtins, dict):
        if name in builtins:
            return calls.builtin_var(builtins[name])
    elif hasattr(builtins, name):
        return calls.builtin_var(getattr(builtins, name))
    raise Break(f"name {name!r} is not defined")


def _real_global(f, name: str):
    if name in f.globals:
        return f.globals[name]
    builtins = f.globals.get("__builtins__", __builtins__)
    builtins = builtins if isinstance(builtins, dict) else builtins.__dict__
    if name not in builtins:
        raise NameError(f"name {name!r} is not defined")
    return builtins[name]


@opcode("STORE_GLOBAL")
class StoreGlobal:
    def traced(tx, frame, ins):
        raise Break(f"assignment to global {ins.argval!r} runs in Python", "global_write")

    def concrete(f, ins, call_real):
        f.globals[ins.argval] = f.stack.pop()
