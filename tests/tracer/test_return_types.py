"""Ops that return a torch.return_types structseq (sort, topk, max(dim), ...): returned from
a compiled function, inside containers, left on the stack or in locals at a graph break, and
read inside the graph by field name and by index. A structseq is built from one sequence
(`torch.return_types.sort((values, indices))`), not from one argument per field as a
namedtuple is (compiler/tracer/variables.py `tuple_kind`); its field names are its
`__match_args__`.

Each case runs through the recording backend (the tracer's graphs, compared with eager,
with the number of graphs and breaks) and through the default backend (our kernels)."""

from __future__ import annotations

import collections

import pytest
import torch

import compiler
from tests.tracer.helpers import T, assert_same, check


def _square(x):
    return x[:4, :4] @ x[:4, :4].T + torch.eye(4)


# One call per op of the class: every op of torch.return_types our lowering or the extern
# calls run, in the ways a user calls them (function, method, keyword arguments).
RETURN_TYPES = {
    "sort": lambda x: torch.sort(x),
    "sort_method": lambda x: x.sort(dim=0, descending=True),
    "argsort_stable": lambda x: torch.sort(x, stable=True),
    "topk": lambda x: torch.topk(x, 2),
    "max_dim": lambda x: torch.max(x, 0),
    "max_keepdim": lambda x: x.max(dim=1, keepdim=True),
    "min_dim": lambda x: torch.min(x, 1),
    "kthvalue": lambda x: torch.kthvalue(x, 2, 0),
    "mode": lambda x: torch.mode(x.round(), 0),
    "median_dim": lambda x: torch.median(x, 0),
    "nanmedian_dim": lambda x: torch.nanmedian(x, 1),
    "aminmax": lambda x: torch.aminmax(x),
    "aminmax_dim": lambda x: torch.aminmax(x, dim=0),
    "cummax": lambda x: torch.cummax(x, 0),
    "cummin": lambda x: x.cummin(1),
    "frexp": lambda x: torch.frexp(x),
    "slogdet": lambda x: torch.linalg.slogdet(_square(x)),
    "qr": lambda x: torch.linalg.qr(x),
    "eigh": lambda x: torch.linalg.eigh(_square(x)),
    "svd": lambda x: torch.linalg.svd(x, full_matrices=False),
    "lu_factor": lambda x: torch.linalg.lu_factor(_square(x)),
}


def _default_backend_matches(fn, *factories) -> None:
    args = [f() for f in factories]
    expected = fn(*[a.clone() for a in args])
    got = compiler.compile(fn)(*[a.clone() for a in args])
    assert_same(expected, got, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("op", RETURN_TYPES)
def test_returned(op):
    fn = RETURN_TYPES[op]
    check(fn, T(5, 4), graphs=1, breaks=0, atol=1e-4, rtol=1e-4)
    _default_backend_matches(fn, T(5, 4))


def _fields(x):
    r = torch.sort(x, dim=0)
    m = x.max(1)
    return r.values * 2 + r.indices, m.indices, m[0] + m.values


def _index_and_unpack(x):
    values, indices = torch.topk(x, 2)
    r = torch.aminmax(x)
    return values[0] + indices[-1], r[0] - r[1], r.min, len(r)


def _in_containers(x):
    return [torch.sort(x)], {"max": torch.max(x, 0), "n": 1}, (torch.topk(x, 1), x + 1)


_Pair = collections.namedtuple("_Pair", ["best", "rest"])


def _in_a_namedtuple(x):
    return _Pair(torch.max(x, 0), torch.min(x, 0).values)


@pytest.mark.parametrize("fn", [_fields, _index_and_unpack, _in_containers, _in_a_namedtuple])
def test_read_in_the_graph_and_returned_in_containers(fn):
    check(fn, T(5, 4), graphs=1, breaks=0)
    _default_backend_matches(fn, T(5, 4))


def test_kept_across_a_graph_break():
    # the structseq is a local at the break and on the stack around print: rebuilt there
    def fn(x):
        r = torch.sort(x)
        print("", end="")
        return r, r.values + 1

    check(fn, T(5, 4), graphs=2, breaks=1)
    _default_backend_matches(fn, T(5, 4))


def test_a_structseq_argument():
    # a structseq passed in: read by field inside the graph, returned as it came (the
    # helpers' clone would make it a plain tuple: compared here by hand)
    def fn(r):
        return r, r.values * r.indices

    for backend in ("eager", "inductor"):
        compiled = compiler.compile(fn, backend=backend)
        for _ in range(2):
            r = torch.sort(torch.randn(5, 4))
            got, expected = compiled(r), fn(r)
            assert got[0] is r
            assert_same(expected, got)
    out = compiler.explain(fn)(torch.sort(torch.randn(5, 4)))
    assert (out.graph_count, out.graph_break_count) == (1, 0)


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["sort", "topk", "max_dim", "aminmax", "cummax", "frexp"])
def test_returned_on_the_gpu(op):
    fn = RETURN_TYPES[op]
    x = torch.randn(5, 4, device="cuda")
    assert_same(fn(x), compiler.compile(fn)(x), atol=1e-4, rtol=1e-4)
