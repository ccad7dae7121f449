"""Differential tests of side effects: closures, cells, nonlocal and global writes, generators,
containers mutated across graph breaks, and functions returned from compiled code.

Each case is the source of a module that defines `make()` -> (fn, observe) and `args()`. It
is executed twice, into two fresh namespaces (its globals), so eager and compiled each own
their state: closures, cells, globals and containers. Every call draws fresh random inputs
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

CASES: dict[str, str] = {
    "nonlocal_box": """
        def make():
            box = None
            def fn(a, b):
                nonlocal box
                box = a * 3 + b
                BREAK
                box = box + a
                BREAK
                box = box * 2
                BREAK
                return a
            return fn, lambda: box

        def args():
            return torch.randn(3), torch.randn(3)
    """,
    "nonlocal_counter": """
        def make():
            n = 0
            def fn(x):
                nonlocal n
                n += 1
                BREAK
                y = x * n
                BREAK
                n += 1
                BREAK
                return y + n
            return fn, lambda: n

        def args():
            return (torch.randn(4),)
    """,
    "cell_shared_by_closures": """
        def make():
            total = torch.zeros(3)
            calls = 0
            def add(v):
                nonlocal total, calls
                total = total + v
                calls += 1
            def read():
                return total * 1
            def fn(x):
                add(x)
                BREAK
                before = read()
                add(x * 2)
                BREAK
                add(before)
                BREAK
                return read() + calls
            return fn, lambda: (total, calls)

        def args():
            return (torch.randn(3),)
    """,
    "cell_holding_list": """
        def make():
            hist = []
            def fn(x):
                hist.append(x + 1)
                BREAK
                hist.append(x * len(hist))
                BREAK
                last = hist.pop(0)
                BREAK
                return last + len(hist)
            return fn, lambda: hist

        def args():
            return (torch.randn(2),)
    """,
    "returned_closure": """
        def make():
            def fn(x):
                s = x.sum()
                k = 2
                BREAK
                def inner(y):
                    return y * k + s
                BREAK
                k = 3
                BREAK
                return inner
            return fn, lambda: None

        def args():
            return (torch.randn(3),)
    """,
    "returned_closure_writes_its_cell": """
        def make():
            made = []
            def fn(x):
                s = x.sum()
                def inc():
                    nonlocal s
                    s = s + 1
                    return s
                BREAK
                inc()
                BREAK
                made.append(inc)
                BREAK
                return inc
            return fn, lambda: [f() for f in made]

        def args():
            return (torch.randn(3),)
    """,
    "global_writes": """
        COUNT = 0
        LAST = None
        ACC = []
        TABLE = {"a": 1}

        def make():
            def fn(x):
                global COUNT, LAST
                COUNT += 1
                BREAK
                LAST = x * COUNT
                ACC.append(LAST + 1)
                BREAK
                TABLE["last"] = x + COUNT
                TABLE.pop("a", None)
                BREAK
                return x * COUNT + len(ACC)
            return fn, lambda: (COUNT, LAST, ACC, TABLE)

        def args():
            return (torch.randn(3),)
    """,
    "list_and_dict_across_breaks": """
        def make():
            def fn(x, items, d):
                items.append(x + 1)
                BREAK
                y = items.pop()
                d.pop("a")
                BREAK
                d["c"] = y * 2
                items.insert(0, x)
                BREAK
                del items[-1]
                d.update(e=x - 1)
                items.extend([y, y * 3])
                return y
            return fn, lambda: None

        def args():
            return torch.randn(3), [torch.zeros(3)], {"a": 1, "b": torch.ones(3)}
    """,
    "aliased_containers": """
        N = [0]
        SHARED = []

        def make():
            def fn(x, a, b):
                a.append(x)
                BREAK
                n = len(b)
                b.append(x * n)
                BREAK
                SHARED.append(len(a))
                BREAK
                return x * len(a) + n
            return fn, lambda: SHARED

        def args():
            # one list passed twice on odd calls, two lists on even calls, the global list
            # itself every third call
            N[0] += 1
            a = [torch.zeros(2)]
            if N[0] % 3 == 0:
                return torch.randn(2), SHARED, a
            return torch.randn(2), a, a if N[0] % 2 else [torch.zeros(2)]
    """,
    "container_read_then_replaced": """
        def make():
            def fn(x, items, d):
                first = items[0]
                old = d["k"]
                items[0] = x
                d["k"] = x * 2
                BREAK
                items[1] = first + old
                BREAK
                d["k"], items[0] = items[0], d["k"]
                BREAK
                return first, old
            return fn, lambda: None

        def args():
            return torch.randn(3), [torch.randn(3), torch.randn(3)], {"k": torch.randn(3)}
    """,
    "set_of_constants": """
        SEEN = set()

        def make():
            def fn(x, tags):
                tags.add(1)
                BREAK
                SEEN.add(len(tags))
                BREAK
                tags.discard(0)
                BREAK
                return x * len(tags)
            return fn, lambda: SEEN

        def args():
            return torch.randn(2), {0, 5}
    """,
    "returns_its_inputs": """
        def make():
            def fn(x, items, d):
                items.append(x * 2)
                BREAK
                d["n"] = len(items)
                BREAK
                y = x + 1
                BREAK
                return x, items, d, y
            return fn, lambda: None

        def args():
            return torch.randn(3), [], {}
    """,
    "attribute_writes": """
        class Box:
            pass

        def make():
            def fn(x, box):
                old = box.value
                box.value = x + 1
                BREAK
                box.count = box.count + 1
                BREAK
                box.value, box.prev = box.value * 2, old
                BREAK
                return old + box.value
            return fn, lambda: None

        def args():
            box = Box()
            box.value = torch.randn(3)
            box.count = 0
            return torch.randn(3), box
    """,
    "generator_expression": """
        def make():
            def fn(x, ts):
                total = sum(t.sum() for t in ts)
                BREAK
                n = sum(1 for t in ts if t.numel() > 1)
                BREAK
                squares = list(t * t for t in ts)
                BREAK
                return total + n, squares
            return fn, lambda: None

        def args():
            return torch.randn(3), [torch.randn(2), torch.randn(1), torch.randn(4)]
    """,
    "generator_with_side_effects": """
        def gen(x, items):
            for i in range(3):
                items.append(i)
                yield x * i

        def make():
            def fn(x, items):
                seen = []
                for v in gen(x, items):
                    seen.append(len(items))
                    BREAK
                g = gen(x, items)
                first = next(g)
                BREAK
                n = len(items)
                BREAK
                return first, n, seen, list(g)
            return fn, lambda: None

        def args():
            return torch.randn(2), []
    """,
    "generator_reads_changed_state": """
        def gen(state):
            for i in range(3):
                yield state["v"] * i

        def make():
            def fn(x, state):
                out = []
                for v in gen(state):
                    out.append(v)
                    state["v"] = state["v"] + x
                    BREAK
                BREAK
                BREAK
                return out
            return fn, lambda: None

        def args():
            return torch.randn(2), {"v": torch.randn(2)}
    """,
    "module_parameter_count": """
        class M(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.l = torch.nn.Linear(5, 3)

            def forward(self, x):
                n = sum(p.numel() for p in self.parameters())
                BREAK
                y = self.l(x) * n
                BREAK
                m = sum(1 for _ in self.parameters())
                BREAK
                return y + m

        MOD = None

        def make():
            global MOD
            torch.manual_seed(0)
            MOD = M()
            return MOD, lambda: None

        def args():
            return (torch.randn(2, 5),)
    """,
    "iterators_shared_and_resumed": """
        def make():
            def fn(x, lst, it_in):
                it = iter(lst)
                it2 = it
                BREAK
                a = next(it)
                b = next(it2)
                BREAK
                lst.append(x * 5)
                c = next(it)
                d = next(it_in)
                BREAK
                rest = [t for t in it]
                return x + a + b * 2 + c * 3 + d, rest, next(it2, None), it_in
            return fn, lambda: None

        def args():
            lst = [torch.randn(2) for _ in range(4)]
            return torch.randn(2), lst, iter((torch.randn(2), torch.randn(2), torch.randn(2)))
    """,
    "iterator_consumed_by_builtins": """
        def make():
            def fn(x):
                it = iter([1, 2, 3, 0, 5])
                a = sum(it)
                b = sum(it)
                BREAK
                it2 = iter([0, 0, 3, 4])
                c = any(it2)
                BREAK
                rest = list(it2)
                BREAK
                return x * (a + b + c), rest
            return fn, lambda: None

        def args():
            return (torch.randn(2),)
    """,
    "container_methods": """
        def make():
            def fn(x, items, d):
                items.remove(items[0])
                items += [x]
                BREAK
                items[1:3] = [x * 2]
                d.setdefault("z", x)
                BREAK
                del d["a"]
                d["a"] = x + 3
                items *= 2
                BREAK
                k = d.popitem()
                items.reverse()
                d |= {"q": x}
                return k
            return fn, lambda: None
        def args():
            return torch.randn(2), [torch.randn(2) for _ in range(4)], {"a": 1, "b": torch.randn(2)}
    """,
    "nested_containers": """
        def make():
            def fn(x, d, lst):
                d["lst"].append(x)
                lst[0]["k"] = x * 2
                BREAK
                inner = d["lst"]
                d["lst"] = [x]
                inner.append(x + 1)
                BREAK
                lst[0] = {"k": inner}
                BREAK
                return len(inner)
            return fn, lambda: None
        def args():
            return torch.randn(2), {"lst": [torch.randn(2)]}, [{"k": 1}, {"k": 2}]
    """,
    "module_cache_list": """
        class M(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.cache = []
                self.stats = {"n": 0}
            def forward(self, x):
                self.cache.append(x * 2)
                BREAK
                self.stats["n"] = self.stats["n"] + 1
                BREAK
                y = self.cache[-1] + self.stats["n"]
                BREAK
                return y
        def make():
            m = M()
            return m, lambda: (m.cache, m.stats)
        def args():
            return (torch.randn(2),)
    """,
    "helper_writes_global_and_returns_closure": """
        G = 0
        def helper(x):
            global G
            G = G + 1
            s = x * G
            def inner(y):
                return y + s
            return inner
        def make():
            def fn(x):
                f = helper(x)
                BREAK
                g = helper(x + 1)
                BREAK
                return f, g
            return fn, lambda: G
        def args():
            return (torch.randn(3),)
    """,
    "exception_after_effects": """
        def make():
            def fn(x, items):
                items.append(x)
                BREAK
                try:
                    items.append(x * 2)
                    raise ValueError("boom")
                except ValueError:
                    items.append(x * 3)
                BREAK
                items.append(x * 4)
                if len(items) > 3:
                    raise KeyError("out")
                return x
            return fn, lambda: None
        def args():
            return torch.randn(2), []
    """,
    "inplace_in_list": """
        def make():
            def fn(x, items):
                items[0].add_(x)
                BREAK
                y = items[0] * 2
                items[1].mul_(y)
                BREAK
                return items[0]
            return fn, lambda: None
        def args():
            return torch.randn(2), [torch.randn(2), torch.randn(2)]
    """,
    "enumerate_zip_over_generator": """
        def gen(state):
            for i in range(3):
                yield state["v"] * i
        def make():
            def fn(x, state):
                out = []
                for i, v in enumerate(gen(state)):
                    out.append(v + i)
                    state["v"] = state["v"] + x
                    BREAK
                for a, b in zip(gen(state), [1, 2, 3]):
                    state["v"] = state["v"] * 2
                    out.append(a * b)
                BREAK
                BREAK
                return out
            return fn, lambda: None
        def args():
            return torch.randn(2), {"v": torch.randn(2)}
    """,
    "map_with_effects": """
        def make():
            def fn(x, items):
                m = map(lambda v: items.append(v) or v * 2, [x, x + 1])
                n = len(items)
                BREAK
                out = list(m)
                BREAK
                BREAK
                return n, out, len(items)
            return fn, lambda: None
        def args():
            return torch.randn(2), []
    """,
    "delete_deref_and_partial": """
        import functools
        def make():
            def fn(x):
                s = x * 2
                def add(a, b):
                    return a + b + s
                p = functools.partial(add, x)
                BREAK
                s = s + 1
                BREAK
                return p
            return fn, lambda: None
        def args():
            return (torch.randn(3),)
    """,
    "lazy_builtins_share_iterators": """
        def gen(xs):
            for t in xs:
                yield t * 2
        def make():
            def fn(x, lst):
                it = iter(lst)
                pairs = list(zip(it, [1]))
                a = next(it)
                BREAK
                for i, v in enumerate(it):
                    if i == 1:
                        break
                b = next(it)
                BREAK
                g = gen(lst)
                big = filter(lambda t: t.sum() > -100, g)
                c = next(big)
                d = next(g)
                m = map(lambda t: t + 1, g)
                e = next(m)
                BREAK
                return pairs, a, b, c, d, e, list(m), list(g), next(it, None)
            return fn, lambda: None
        def args():
            return torch.randn(2), [torch.randn(2) for _ in range(9)]
    """,
    "returns_generator_and_defaults_closure": """
        def make():
            def fn(x, xs):
                s = x.sum()
                BREAK
                def inner(y, s=s, *, k=x * 2):
                    return y + s + k
                g = (t * s for t in xs)
                BREAK
                first = next(g)
                BREAK
                return inner, g, first
            return fn, lambda: None
        def args():
            return torch.randn(3), [torch.randn(3) for _ in range(3)]
    """,
    "function_attribute_writes": """
        def helper(x):
            return x + 1
        helper.calls = 0
        def make():
            def fn(x):
                helper.calls += 1
                BREAK
                y = helper(x) * helper.calls
                BREAK
                fn.last = y
                BREAK
                return y
            return fn, lambda: (helper.calls, getattr(fn, "last", None))
        def args():
            return (torch.randn(3),)
    """,
    "closure_escapes_into_container_then_rebound": """
        def make():
            def fn(x, out):
                k = x * 2
                out.append(lambda: k)
                BREAK
                k = k + 1
                BREAK
                out.append(lambda: k * 2)
                k = k * 3
                BREAK
                return len(out)
            return fn, lambda: None
        def args():
            return torch.randn(3), []
    """,
    "generator_under_grad_modes": """
        def gen(w, xs):
            for t in xs:
                yield t * w
        def make():
            def fn(w, xs):
                g = gen(w, xs)
                a = next(g)
                with torch.no_grad():
                    b = next(g)
                BREAK
                c = next(g)
                BREAK
                BREAK
                return a.requires_grad, b.requires_grad, c.requires_grad, a + b + c
            return fn, lambda: None
        def args():
            return torch.randn(2, requires_grad=True), [torch.randn(2) for _ in range(3)]
    """,
    "dict_iterated_and_resized": """
        def make():
            def fn(x, d, grow):
                out = x
                for k in d:
                    out = out + d[k]
                    BREAK
                    if grow and k == "b":
                        d["z"] = x
                BREAK
                it = iter(d)
                first = next(it)
                BREAK
                return out, first, list(it)
            return fn, lambda: None

        N = [0]

        def args():
            N[0] += 1
            return torch.randn(2), {"a": torch.randn(2), "b": torch.randn(2)}, N[0] % 2 == 0
    """,
}


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
