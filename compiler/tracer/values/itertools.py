"""itertools and functools.reduce over traced values: computed at trace time into an iterator
over the items they give (`IteratorVar`), as zip and map are (builtin_fns.py); count() and
repeat() without a length are endless iterators (`EndlessIteratorVar`), read as far as the
trace reads them; groupby() is an iterator over its groups (`GroupbyVar`) that leaves each
behind as eager's does.

An argument that is itself an iterator is consumed as in eager: the result is linked to it
with, for each number of items taken from the result, how far the argument has been read
(IteratorVar.links), so `first = list(islice(it, 2)); rest = list(it)` splits as eagerly.
"""

from __future__ import annotations

import functools
import itertools
import operator
from typing import TYPE_CHECKING, Any

from compiler.tracer import builtin_fns, calls, generators
from compiler.tracer.breaks import Break, Raised
from compiler.tracer.operations import binary, truth, unpack_iterable
from compiler.tracer.values.table import VALUE_OPS, ValueOps
from compiler.tracer.variables import (
    ConstVar,
    EndlessIteratorVar,
    ExceptionVar,
    GroupbyVar,
    GroupVar,
    IteratorVar,
    TupleVar,
    Var,
    as_python_constant,
    is_python_constant,
)

if TYPE_CHECKING:
    from compiler.tracer.context import Emitter, Tracer

Args = list[Var]
Kwargs = dict[str, Var]


def _items(tx: Tracer, v: Var) -> list[Var]:
    """What an itertools function may read from `v`, without consuming an iterator (the
    result is linked to it instead)."""
    if isinstance(v, EndlessIteratorVar):
        raise Break("an itertools function over an endless iterator", "unsupported")
    if isinstance(v, IteratorVar):
        generators.check_read(tx, v)
        return v.items[v.index :]
    return unpack_iterable(tx, v)


def _link(
    tx: Tracer, out: IteratorVar, arg: Var, positions: list[int], final: tuple[int, bool]
) -> None:
    """`arg`, when an iterator, read `positions[k]` items after `out` gave k, and `final`
    (items read, found empty) after `out` ran out."""
    if isinstance(arg, IteratorVar):
        base = arg.index
        out.links.append((arg, [base + p for p in positions], (base + final[0], final[1])))
        out.made_at = tx.root_pc


def _const(v: Var | None, default: Any = None) -> Any:
    if v is None:
        return default
    if not is_python_constant(v):
        raise Break("an itertools argument that is not a Python constant", "unsupported")
    return as_python_constant(v)


# ---- chain, islice, pairwise, zip_longest, product ------------------------------------------


def _chain_of(tx: Tracer, iterables: Args) -> IteratorVar:
    builtin_fns.read_once(iterables)
    columns = [_items(tx, a) for a in iterables]
    out = IteratorVar([v for c in columns for v in c])
    total, before = len(out.items), 0
    for a, c in zip(iterables, columns):
        # chain reads an argument once the ones before it ran out, and finds it empty
        # only when it asks for one item more
        positions = [min(max(k - before, 0), len(c)) for k in range(total + 1)]
        _link(tx, out, a, positions, (len(c), True))
        before += len(c)
    return generators.follow(tx, out, iterables)


def _chain(tx: Tracer, args: Args, kwargs: Kwargs) -> Var:
    return _chain_of(tx, args)


def _chain_from_iterable(tx: Tracer, args: Args, kwargs: Kwargs) -> Var:
    if isinstance(args[0], IteratorVar):
        raise Break("chain.from_iterable over an iterator of iterables", "unsupported")
    return _chain_of(tx, unpack_iterable(tx, args[0]))


def _islice(tx: Tracer, args: Args, kwargs: Kwargs) -> Var:
    bounds = [_const(a) for a in args[1:]]
    start, stop, step = (None, *bounds, None)[:3] if len(bounds) == 1 else (*bounds, None)[:3]
    start, step = start or 0, step or 1
    if start < 0 or step < 1 or (stop is not None and stop < 0):
        raise Break("islice() with bounds eager rejects", "user_error")
    source = args[0]
    if isinstance(source, EndlessIteratorVar) and stop is not None:
        source.extend(source.index + stop)  # islice(count(), n): as far as it reads
        items = source.items[source.index : source.index + stop]
    else:
        items = _items(tx, source)
    n = len(items)
    end = n if stop is None else min(stop, n)
    picked = list(range(start, end, step))
    out = IteratorVar([items[i] for i in picked])
    # islice reads up to each item it gives, and at the end up to `stop` (or all)
    _link(tx, out, args[0], [0] + [i + 1 for i in picked], (end, stop is None or stop > n))
    return generators.follow(tx, out, args[:1])


def _pairwise(tx: Tracer, args: Args, kwargs: Kwargs) -> Var:
    items = _items(tx, args[0])
    out = IteratorVar([TupleVar([a, b]) for a, b in zip(items, items[1:])])
    positions = [0] + [k + 2 for k in range(len(out.items))]
    _link(tx, out, args[0], positions, (len(items), True))
    return generators.follow(tx, out, args)


def _zip_longest(tx: Tracer, args: Args, kwargs: Kwargs) -> Var:
    fill = kwargs.get("fillvalue", ConstVar(None))
    builtin_fns.read_once(args)
    columns = [_items(tx, a) for a in args]
    rows = max((len(c) for c in columns), default=0)
    out = IteratorVar(
        [TupleVar([c[k] if k < len(c) else fill for c in columns]) for k in range(rows)]
    )
    for a, c in zip(args, columns):
        _link(tx, out, a, [min(k, len(c)) for k in range(rows + 1)], (len(c), True))
    return generators.follow(tx, out, args)


def _consume(tx: Tracer, args: Args) -> list[list[Var]]:
    """Every argument read to its end now, as product() does when it is made."""
    columns = []
    for a in args:
        columns.append(_items(tx, a))
        if isinstance(a, IteratorVar):
            a.move(len(a.items), exhausted=True)
    return columns


def _product(tx: Tracer, args: Args, kwargs: Kwargs) -> Var:
    repeat = _const(kwargs.get("repeat"), 1)
    columns = _consume(tx, args) * repeat
    return IteratorVar([TupleVar(list(row)) for row in itertools.product(*columns)])


def _combinatoric(fn: Any) -> Any:
    def make(tx: Tracer, args: Args, kwargs: Kwargs) -> Var:
        (items,) = _consume(tx, args[:1])
        rest = [_const(a) for a in args[1:]]
        more = {k: _const(v) for k, v in kwargs.items()}
        picks = fn(range(len(items)), *rest, **more)
        return IteratorVar([TupleVar([items[i] for i in row]) for row in picks])

    return make


# ---- accumulate, starmap, reduce: calls ahead of the consumer -------------------------------


def _accumulate(tx: Tracer, args: Args, kwargs: Kwargs) -> Var:
    func = args[1] if len(args) > 1 else kwargs.get("func", ConstVar(None))
    initial = kwargs.get("initial", ConstVar(None))
    items = _items(tx, args[0])
    before = generators.run_started(tx)
    total = None if _is_none(initial) else initial
    values = [] if total is None else [total]
    for item in items:
        if total is None:
            total = item
        elif _is_none(func):
            total = binary(tx, operator.add, total, item)
        else:
            total = calls.call(tx, func, [total, item], {})
        values.append(total)
    own = generators.ran_ahead(tx, "accumulate", before, args)
    out = IteratorVar(values)
    shift = len(values) - len(items)  # the initial value is given before any item is read
    positions = [max(k - shift, 0) for k in range(len(values) + 1)]
    _link(tx, out, args[0], positions, (len(items), True))
    return generators.follow(tx, out, args[:1], own)


def _starmap(tx: Tracer, args: Args, kwargs: Kwargs) -> Var:
    items = _items(tx, args[1])
    before = generators.run_started(tx)
    values = [calls.call(tx, args[0], unpack_iterable(tx, row), {}) for row in items]
    own = generators.ran_ahead(tx, "starmap", before, args)
    out = IteratorVar(values)
    _link(tx, out, args[1], list(range(len(values) + 1)), (len(items), True))
    return generators.follow(tx, out, args[1:], own)


def _reduce(tx: Tracer, args: Args, kwargs: Kwargs) -> Var:
    (items,) = _consume(tx, args[1:2])
    if len(args) > 2:
        total, rest = args[2], items
    elif items:
        total, rest = items[0], items[1:]
    else:
        message = ConstVar("reduce() of empty iterable with no initial value")
        raise Raised(ExceptionVar(TypeError, [message]))
    for item in rest:
        total = calls.call(tx, args[0], [total, item], {})
    return total


# ---- groupby: runs of equal keys ---------------------------------------------------------


def _groupby(tx: Tracer, args: Args, kwargs: Kwargs) -> Var:
    """`itertools.groupby(iterable, key=None)`: its keys computed ahead (the key function
    called once per item, in order, as eager calls it), each compared with its group's first
    key as eager compares them (`==`, the same value first). A group is left behind when the
    groupby moves on (GroupbyVar); both are checked as a generator run ahead is
    (generators.py)."""
    iterable = args[0] if args else kwargs["iterable"]
    key = args[1] if len(args) > 1 else kwargs.get("key", ConstVar(None))
    items = _items(tx, iterable)
    before = generators.run_started(tx)
    keys = items if _is_none(key) else [calls.call(tx, key, [item], {}) for item in items]
    runs: list[tuple[Var, list[Var]]] = []
    for k, item in zip(keys, items):
        if runs and (runs[-1][0] is k or truth(tx, binary(tx, operator.eq, runs[-1][0], k))):
            runs[-1][1].append(item)
        else:
            runs.append((k, [item]))
    own = generators.ran_ahead(tx, "groupby", before, [iterable, key])
    groups = [GroupVar(members) for _, members in runs]
    out = GroupbyVar([TupleVar([k, g]) for (k, _), g in zip(runs, groups)], groups=groups)
    if isinstance(iterable, IteratorVar):
        _reads(tx, out, iterable, [len(members) for _, members in runs])
    for g in groups:
        generators.follow(tx, g, [iterable], own)
    return generators.follow(tx, out, [iterable], own)


def _reads(tx: Tracer, out: GroupbyVar, it: IteratorVar, sizes: list[int]) -> None:
    """Link `out` and its groups to the iterator they read, as eager's groupby reads it: a
    group that gave i items has read it to its i-th item (its first when it gave none, read
    when the groupby gave the group), and ran out having read the next group's first."""
    starts = [it.index + sum(sizes[:k]) for k in range(len(sizes))]
    end = it.index + sum(sizes)
    out.reads = (it, starts, end)
    out.made_at = tx.root_pc
    for k, (g, start) in enumerate(zip(out.groups, starts)):
        positions = [start + max(i, 1) for i in range(sizes[k] + 1)]
        final = (starts[k + 1] + 1, False) if k + 1 < len(starts) else (end, True)
        g.links.append((it, positions, final))
        g.made_at = tx.root_pc


def _is_none(v: Var) -> bool:
    return isinstance(v, ConstVar) and v.value is None


# ---- count, repeat: endless, or as long as asked --------------------------------------------


def _count(tx: Tracer, args: Args, kwargs: Kwargs) -> Var:
    start = _const(args[0] if args else kwargs.get("start"), 0)
    step = _const(args[1] if len(args) > 1 else kwargs.get("step"), 1)
    return EndlessIteratorVar(
        [], maker=itertools.count, args_at=lambda n: [ConstVar(start + n * step), ConstVar(step)]
    )


def _repeat(tx: Tracer, args: Args, kwargs: Kwargs) -> Var:
    value = args[0] if args else kwargs["object"]
    times = args[1] if len(args) > 1 else kwargs.get("times")
    if times is not None:
        return IteratorVar([value] * max(_const(times), 0))
    return EndlessIteratorVar([], maker=itertools.repeat, args_at=lambda n: [value])


def _rebuild_endless(em: Emitter, it: EndlessIteratorVar) -> str:
    args = ", ".join(em.expr(a) for a in it.args_at(it.index))
    return f"{em.ref(it.maker, 'fn')}({args})"


def _endless(tx: Tracer, it: EndlessIteratorVar) -> list[Var]:
    raise Break(f"reading all of an endless itertools.{it.maker.__name__}()", "unsupported")


VALUE_OPS[EndlessIteratorVar] = ValueOps(
    truth=lambda tx, it: True,
    iterate=_endless,
    get_iter=lambda tx, it: it,
    rebuild=_rebuild_endless,
    one_object=True,
    replay_children=lambda it: list(it.args_at(it.index)),
)

builtin_fns.SPECIAL.update(
    {
        itertools.chain: _chain,
        itertools.chain.from_iterable: _chain_from_iterable,
        itertools.islice: _islice,
        itertools.pairwise: _pairwise,
        itertools.zip_longest: _zip_longest,
        itertools.product: _product,
        itertools.combinations: _combinatoric(itertools.combinations),
        itertools.combinations_with_replacement: _combinatoric(
            itertools.combinations_with_replacement
        ),
        itertools.permutations: _combinatoric(itertools.permutations),
        itertools.accumulate: _accumulate,
        itertools.groupby: _groupby,
        itertools.starmap: _starmap,
        itertools.count: _count,
        itertools.repeat: _repeat,
        functools.reduce: _reduce,
    }
)
