"""Differential tests of side effects: closures, cells, nonlocal and global writes, generators,
containers mutated across graph breaks, and functions returned from compiled code.

Each case (tests/tracer/side_effect_cases.py) is the source of a module that defines
`make()` -> (fn, observe) and `args()`. It is executed twice, into two fresh namespaces (its
globals), so eager and compiled each own their state: closures, cells, globals and containers. Every call draws fresh random inputs
(the same for both sides), and compares the return value, the identity of returned inputs,
the inputs after the call and `observe()` (the cells', globals' and containers' values).

The number of graph breaks is a parameter: each `BREAK` line of a case becomes a graph break
(alternately a `.item()` in the frame and a call of a function that breaks inside) for the
first `breaks` of them and `pass` for the rest.
"""

from __future__ import annotations

import textwrap
import types
from typing import Any

import pytest
import torch

import compiler
from tests.tracer.helpers import RecordingBackend, assert_same
from tests.tracer.side_effect_cases import CASES

CALLS = 4
BREAK_KINDS = (
    "___b = torch.ones(()).add(1).item()",  # a break in the frame itself
    "___pybreak()",  # a call that breaks inside: the trace restarts and breaks at the call
)
PRELUDE = """
import torch

def ___pybreak():
    print(end="")
"""



def _source(case: str, breaks: int) -> str:
    lines = textwrap.dedent(CASES[case]).splitlines()
    out, seen = [], 0
    for line in lines:
        if line.strip() == "BREAK":
            indent = line[: len(line) - len(line.lstrip())]
            kind = BREAK_KINDS[seen % len(BREAK_KINDS)]
            out.append(indent + (kind if seen < breaks else "pass"))
            seen += 1
        else:
            out.append(line)
    return PRELUDE + "\n".join(out) + "\n"


def _load(source: str, name: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": name}
    exec(compile(source, f"<{name}>", "exec"), namespace)
    return namespace


def _objects(value: Any, path: str = "args") -> dict[int, str]:
    """id(object) -> its path, for every tensor, container and object in the arguments."""
    found = {id(value): path}
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found.update(_objects(v, f"{path}[{i}]"))
    elif isinstance(value, dict):
        for k, v in value.items():
            found.update(_objects(v, f"{path}[{k!r}]"))
    return found


def _comparable(value: Any) -> Any:
    """`value` with what assert_same cannot compare made comparable: a function (a closure
    returned by the compiled code) by what it returns for a fixed input, a set sorted, a
    generator by what it yields, an iterator by what remains, an object by its attributes."""
    if isinstance(value, types.FunctionType):
        n = value.__code__.co_argcount
        return ("function", _comparable(value(*[torch.ones(3)] * n)))
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if isinstance(value, types.GeneratorType):  # each side consumes its own
        return ("generator", _comparable(list(value)))
    if isinstance(value, (type(iter([])), type(iter(())))):
        seq, *index = value.__reduce__()[1:]  # what remains, without consuming it
        return ("iterator", _comparable(list(seq[0] if seq else ())[index[0] if index else 0 :]))
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(_comparable(v) for v in value)
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items()}
    if hasattr(value, "__dict__") and not isinstance(value, (torch.Tensor, torch.nn.Module)):
        return (type(value).__name__, _comparable(dict(vars(value))))
    return value


def _assert_same_identity(e_args: Any, e_out: Any, c_args: Any, c_out: Any) -> None:
    """A returned object that is (part of) an argument in eager is the same argument object
    in compiled."""
    e_ids, c_ids = _objects(e_args), _objects(c_args)
    e_outs = e_out if isinstance(e_out, tuple) else (e_out,)
    c_outs = c_out if isinstance(c_out, tuple) else (c_out,)
    for i, (e, c) in enumerate(zip(e_outs, c_outs)):
        if id(e) in e_ids:
            assert c_ids.get(id(c)) == e_ids[id(e)], (
                f"out[{i}]: eager returns {e_ids[id(e)]} itself, compiled returns "
                + (c_ids[id(c)] if id(c) in c_ids else f"a new {type(c).__name__}")
            )


def _call(fn: Any, args: tuple) -> tuple[Any, BaseException | None]:
    try:
        return fn(*args), None
    except Exception as e:  # compared with the other side
        return None, e


def _differential(case: str, breaks: int, backend: Any) -> None:
    """Run `case` eagerly and compiled, CALLS times each on fresh inputs, comparing every
    call's outputs and side effects."""
    source = _source(case, breaks)
    eager_ns, compiled_ns = _load(source, "eager_case"), _load(source, "compiled_case")
    eager_fn, eager_observe = eager_ns["make"]()
    compiled_fn, compiled_observe = compiled_ns["make"]()
    compiled = compiler.compile(compiled_fn, backend=backend)
    for call in range(CALLS):
        torch.manual_seed(100 + call)
        e_args = eager_ns["args"]()
        torch.manual_seed(100 + call)
        c_args = compiled_ns["args"]()
        e_out, e_exc = _call(eager_fn, e_args)
        c_out, c_exc = _call(compiled, c_args)
        where = f"{case}, {breaks} breaks, call {call}"
        assert type(c_exc) is type(e_exc), f"{where}: compiled raised {c_exc!r}, eager {e_exc!r}"
        _assert_same_identity(e_args, e_out, c_args, c_out)
        assert_same(_comparable(e_out), _comparable(c_out), f"{where}: out")
        assert_same(_comparable(e_args), _comparable(c_args), f"{where}: args after the call")
        assert_same(
            _comparable(eager_observe()), _comparable(compiled_observe()), f"{where}: state"
        )


@pytest.mark.parametrize("breaks", [0, 1, 2, 3])
@pytest.mark.parametrize("case", sorted(CASES))
def test_side_effects_match_eager(case: str, breaks: int) -> None:
    _differential(case, breaks, RecordingBackend())


@pytest.mark.parametrize("case", ["list_and_dict_across_breaks", "nonlocal_counter"])
def test_side_effects_match_eager_default_backend(case: str) -> None:
    """The same through the code generator (the C++ backend on CPU): side effects are the
    tracer's, but the graphs' outputs they are built from come from the generated code."""
    _differential(case, 2, "inductor")


def test_breaks_are_real() -> None:
    """The BREAK lines do break the graph: the number of breaks grows with the parameter."""
    counts = []
    for breaks in range(4):
        compiler.reset()
        namespace = _load(_source("list_and_dict_across_breaks", breaks), "count_case")
        fn, _ = namespace["make"]()
        compiled = compiler.compile(fn, backend=RecordingBackend())
        compiled(*namespace["args"]())
        counts.append(compiler.explain(fn)(*namespace["args"]()).graph_break_count)
    assert counts == [0, 1, 2, 3]
