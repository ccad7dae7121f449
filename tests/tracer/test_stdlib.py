"""The standard library as users write it inside a compiled function, one graph each as under
torch.compile: @contextmanager generators as context managers (run a step at a time, the
block's exception thrown in at the yield), collections.deque and Counter, and
dataclasses.replace; compared with eager on results, graph counts and side effects."""

import bisect
import collections
import contextlib
import copy
import dataclasses
import heapq

import pytest
import torch

import compiler

from .helpers import Cases, T, check

case = Cases()

# ---- @contextlib.contextmanager -------------------------------------------------------------


@contextlib.contextmanager
def _scaled(log, k):
    log.append("enter")
    yield k
    log.append("exit")


@contextlib.contextmanager
def _catching(log):
    try:
        yield
    except ValueError as e:
        log.append(f"caught {e}")
    finally:
        log.append("finally")


@contextlib.contextmanager
def _nothing():
    yield


@contextlib.contextmanager
def _converting():
    try:
        yield
    except KeyError as e:
        raise ValueError("converted") from e


@case(T(4), graphs=1, breaks=0)
def contextmanager_enter_and_exit_in_order(x):
    log = []
    with _scaled(log, 2) as k:
        log.append("body")
        y = x * k
    return y, log


@case(T(4), graphs=1, breaks=0)
def contextmanager_suppresses_what_it_catches(x):
    log = []
    with _catching(log):
        x = x + 1
        raise ValueError("boom")
    return x * 2, log


@case(T(4), graphs=1, breaks=0)
def contextmanager_finally_without_exception(x):
    log = []
    with _catching(log):
        y = x + 1
    return y, log


@case(T(4), graphs=1, breaks=0)
def contextmanager_lets_other_exceptions_through(x):
    log = []
    try:
        with _scaled(log, 3):
            raise KeyError("k")
    except KeyError:
        log.append("outer")
    return x + 1, log


@case(T(4), graphs=1, breaks=0)
def contextmanager_raises_a_new_exception(x):
    try:
        with _converting():
            raise KeyError("a")
    except ValueError as e:
        return x + 1, str(e), type(e.__cause__).__name__


@case(T(4), graphs=1, breaks=0)
def contextmanager_nested_and_in_a_loop(x):
    log = []
    with _nothing(), contextlib.nullcontext():
        for i in range(3):
            with _scaled(log, i) as k:
                x = x + k
    return x, log


@case(T(4), graphs=1, breaks=0)
def contextmanager_return_inside_the_block(x):
    log = []

    def inner(t):
        with _scaled(log, 5) as k:
            return t * k

    return inner(x), log


@case(T(4), graphs=1, breaks=0)
def contextmanager_decorating_a_nested_function(x):
    @contextlib.contextmanager
    def ctx(v):
        yield v + 1

    with ctx(4) as v:
        return x + v


@case(T(4, grad=True), graphs=1, breaks=0)
def contextmanager_around_no_grad(x):
    @contextlib.contextmanager
    def frozen():
        with torch.no_grad():
            yield

    with frozen():
        y = x * 2
    return y, x * 3, torch.is_grad_enabled()


@contextlib.contextmanager
def _two_yields():
    yield
    yield


@case(T(4), recompiles=True)
def contextmanager_that_yields_twice_raises_as_eager(x):
    with _two_yields():
        x = x + 1
    return x


_LOG = []


@contextlib.contextmanager
def _logged(tag):
    _LOG.append(("in", tag))
    try:
        yield tag
    finally:
        _LOG.append(("out", tag))


def test_contextmanager_with_a_graph_break_inside_runs_in_python():
    # the generator paused at its yield lives only in the trace: the graph ends before the
    # call that makes the manager, which then runs for real
    def fn(x):
        with _logged(1):
            x = x + 1
            print("", end="")
            x = x * 2
        return x

    x = torch.randn(3)
    _LOG.clear()
    expected = fn(x)
    eager_log = list(_LOG)
    _LOG.clear()
    out = compiler.compile(fn, backend="eager")(x)
    torch.testing.assert_close(out, expected)
    assert _LOG == eager_log


def test_contextmanager_writes_a_global_in_order():
    def fn(x):
        with _logged("g") as t:
            _LOG.append(("body", t))
            return x.sin()

    check(fn, T(3), graphs=1, breaks=0, calls=1)  # _LOG grows: its length is guarded
    _LOG.clear()
    compiler.reset()
    compiler.compile(fn, backend="eager")(torch.randn(3))
    assert _LOG == [("in", "g"), ("body", "g"), ("out", "g")]


# ---- collections.deque ----------------------------------------------------------------------


@case(T(4), graphs=1, breaks=0)
def deque_methods(x):
    d = collections.deque([1, 2, 3])
    d.append(4)
    d.appendleft(0)
    a, b = d.pop(), d.popleft()
    d.extend([7, 8])
    d.extendleft([9, 10])
    d.rotate(2)
    e = d.copy()
    e.rotate(-1)
    return x + a + b, list(d), list(e), len(d), d[0], d[-1], 7 in d


@case(T(4), graphs=1, breaks=0)
def deque_with_maxlen_drops_from_the_other_end(x):
    d = collections.deque(maxlen=3)
    for i in range(5):
        d.append(x * i)
    d.appendleft(x)
    return sum(d), len(d), d.maxlen, list(d)


@case(T(4), graphs=1, breaks=0)
def deque_as_a_queue_of_tensors(x):
    d = collections.deque([x])
    out = 0
    while d:
        t = d.popleft()
        out = out + t
        if t.dim() == 1:
            d.append(t.unsqueeze(0))
    return out


@case(T(4), graphs=1, breaks=0)
def deque_search_and_edit(x):
    d = collections.deque([3, 1, 2, 1])
    c, i = d.count(1), d.index(2)
    d.remove(1)
    d.insert(0, 5)
    d.reverse()
    d[0] = 6
    return x + c + i, list(d), list(reversed(d)), d == collections.deque([6, 2, 1, 3, 5][::-1])


@case(T(4))
def deque_errors_as_eager(x):
    d = collections.deque()
    try:
        d.pop()
    except IndexError as e:
        return x + 1, str(e)


@case(T(4))
def deque_takes_no_slices(x):
    return collections.deque([x])[0:1]


@case(T(3), lambda: collections.deque([1, 2], maxlen=4), graphs=1, breaks=0)
def deque_argument_changed_in_place(x, d):
    d.append(3)
    d.appendleft(0)
    return x + sum(d)


# ---- collections.Counter --------------------------------------------------------------------


@case(T(4), graphs=1, breaks=0)
def counter_counts_and_ranks(x):
    c = collections.Counter("abracadabra")
    return x + c["a"], c.most_common(2), c["z"], len(c)


@case(T(4), graphs=1, breaks=0)
def counter_update_subtract_and_arithmetic(x):
    c = collections.Counter([1, 2, 2, 3])
    c.update([2, 3, 3])
    d = collections.Counter({1: 5})
    s, m = c + d, c - d
    c.subtract({2: 1})
    c += collections.Counter(a=1)
    return x * c[2], dict(s), dict(m), sorted(c.elements(), key=str), c.total(), c


@case(T(4), graphs=1, breaks=0)
def counter_of_tensor_ranks(x):
    c = collections.Counter()
    for t in [x, x.unsqueeze(0), x + 1]:
        c[t.dim()] += 1
    return x + c[1], dict(c), c.most_common(1)


# ---- dataclasses ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Config:
    a: int = 1
    b: int = 2


@dataclasses.dataclass
class _Point:
    x: torch.Tensor
    scale: float = 2.0
    n: int = dataclasses.field(default=0, init=False)


@case(T(4), graphs=1, breaks=0)
def dataclasses_replace(x):
    c = _Config(a=3)
    d = dataclasses.replace(c, b=5)
    p = dataclasses.replace(_Point(x), scale=3.0)
    return x + d.a * d.b, c, d, p.x * p.scale, p.n


@case(T(4))
def dataclasses_replace_of_an_init_false_field_raises_as_eager(x):
    return dataclasses.replace(_Point(x), n=3)


# ---- copy.copy and copy.deepcopy --------------------------------------------------------------


class _Holder:
    def __init__(self, t):
        self.t = t
        self.log = [1]


@case(T(4), graphs=1, breaks=0)
def copy_copy_is_shallow(x):
    lst = [x, [1, 2]]
    c = copy.copy(lst)
    c.append(3)
    d = copy.copy({"a": x, "b": lst})
    d["c"] = 1
    h = _Holder(x * 2)
    g = copy.copy(h)
    g.log.append(2)
    g.t = x
    return c[0] + 1, c[1] is lst[1], lst, d["b"] is lst, d, h.t, h.log, g.log is h.log, vars(g)


@case(T(4), graphs=1, breaks=0)
def copy_deepcopy_clones_tensors_and_keeps_aliasing(x):
    y = x * 2
    e = copy.deepcopy({"a": y, "b": [y, y], "n": [1, (2, 3)]})
    e["n"].append(4)
    h = _Holder(y)
    k = copy.deepcopy(h)
    k.log.append(2)
    k.t.add_(1)  # the clone, not y
    return e["a"] is y, e["b"][0] is e["b"][1], e["a"] + 1, e, y, h.log, k.t, k.log, vars(k)


@case(T(4, grad=True), graphs=1, breaks=1)
def copy_deepcopy_of_a_tensor_that_requires_grad_runs_in_python(x):
    return copy.deepcopy([x])[0] * 2


# ---- heapq, bisect, dict.fromkeys, ChainMap ------------------------------------------------------


@case(T(4), lambda: [5, 1, 3], graphs=1, breaks=0)
def heapq_and_bisect_change_lists_as_eager(x, heap):
    heapq.heapify(heap)
    heapq.heappush(heap, 0)
    low = heapq.heappop(heap)
    top = heapq.heapreplace(heap, 7)
    scored = []
    for i, s in enumerate([0.5, 0.25, 0.75]):
        heapq.heappush(scored, (s, i))
    sorted_ = [1, 3, 5]
    bisect.insort(sorted_, 4)
    at = bisect.bisect_left(sorted_, 4) + bisect.bisect_right(sorted_, 3, key=lambda v: v)
    small = heapq.nsmallest(2, [4, 1, 3])
    large = heapq.nlargest(2, [4, 1, 3], key=lambda v: -v)
    return x * low + top + at, heap, scored, sorted_, small, large, heapq.heappop(scored)


@case(T(4))
def heapq_of_a_deque_raises_as_eager(x):
    heapq.heappush(collections.deque([1]), 2)  # TypeError: the C function takes only lists
    return x


@case(T(4), graphs=1, breaks=0)
def dict_fromkeys_shares_its_value(x):
    d = dict.fromkeys(["a", "b"], [])
    d["a"].append(x + 1)
    od = collections.OrderedDict.fromkeys("xy")
    return d, d["a"] is d["b"], od, dict.fromkeys(range(3), 0)


@case(T(4), lambda: {"a": 2, "b": 3}, graphs=1, breaks=0)
def chainmap_reads_through_and_writes_the_first_map(x, base):
    cm = collections.ChainMap({"a": 1}, base)
    cm["c"] = x * 2
    child = cm.new_child({"b": 10})
    del cm["a"]
    return x + cm["a"] + child["b"], len(cm), "b" in cm, cm.get("z", 7), sorted(cm), cm.maps


@pytest.mark.parametrize("fn,factories,expect", case)
def test_stdlib(fn, factories, expect):
    check(fn, *factories, **expect)
