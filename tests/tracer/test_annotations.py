"""Annotations in traced code: PEP 585 subscripts of builtin and collections.abc classes
(`list[torch.Tensor]`, `dict[str, torch.Tensor]`), typing's forms (`typing.Optional[...]`,
`typing.List[...]`) and Generic classes, in a nested function's annotations and as values:
made at trace time, one graph as under torch.compile, and equal to eager's objects."""

import collections
import collections.abc
import typing

import pytest
import torch

from .helpers import Cases, T, check

case = Cases()
_T = typing.TypeVar("_T")


class Box(typing.Generic[_T]):
    pass


# ---- in the annotations of a nested function (evaluated when it is made: this module does
# not import annotations from __future__) -----------------------------------------------------


@case(T(3), graphs=1, breaks=0)
def pep585(x):
    def inner(ts: list[torch.Tensor], scale: dict[str, float]) -> tuple[torch.Tensor, int]:
        return sum(ts) * scale["s"], len(ts)

    out = inner([x, x * 2], {"s": 3.0})
    return out, inner.__annotations__["ts"], inner.__annotations__["return"]


@case(T(3), graphs=1, breaks=0)
def typing_forms(x):
    def inner(
        t: typing.Optional[torch.Tensor],
        sizes: typing.List[int],
        names: typing.Dict[str, typing.Tuple[int, ...]],
        fn: typing.Callable[[torch.Tensor], torch.Tensor],
        u: typing.Union[int, torch.Tensor],
    ) -> typing.Any:
        return fn(t) + sum(sizes) + u

    return inner(x, [1, 2], {}, torch.sin, 3), inner.__annotations__["fn"]


@case(T(3), graphs=1, breaks=0)
def abc_and_generic(x):
    def inner(
        xs: collections.abc.Sequence[torch.Tensor],
        b: Box[int],
        d: collections.OrderedDict[str, torch.Tensor],
    ) -> collections.abc.Iterator[int]:
        return xs[0] + 1

    return inner([x], Box(), collections.OrderedDict()), inner.__annotations__["b"]


@case(T(3), graphs=1, breaks=0)
def pep604_unions(x):
    def inner(t: torch.Tensor | None, n: int | float | None = None) -> list[int] | None:
        return t * 2 if t is not None else n

    return inner(x), inner(None, 3), inner.__annotations__["n"], None | int


# ---- as values in code --------------------------------------------------------------------------


@case(T(3), graphs=1, breaks=0)
def alias_as_a_value(x):
    kind = list[torch.Tensor]
    return x + 1, kind, kind.__origin__ is list, kind.__args__


@case(T(3), graphs=1, breaks=0)
def typing_alias_as_a_value(x):
    kind = typing.Optional[typing.List[torch.Tensor]]
    return x * 2, kind, kind.__args__


@case(T(3), graphs=1, breaks=0)
def jit_annotate_with_an_alias(x):
    zs = torch.jit.annotate(typing.List[torch.Tensor], [])
    zs.append(x.sin())
    table = torch.jit.annotate(dict[str, torch.Tensor], {})
    table["a"] = x.cos()
    return zs[0] + table["a"]


@case(T(3))
def subscript_that_raises_in_eager(x):
    try:
        typing.Optional[1, 2]
    except TypeError:
        return x + 1
    return x


@pytest.mark.parametrize("fn,factories,expect", case)
def test_annotations(fn, factories, expect):
    check(fn, *factories, **expect)


def test_a_class_with_its_own_class_getitem_is_not_folded():
    calls = []

    class Registry:
        def __class_getitem__(cls, item):
            calls.append(item)  # an effect: the subscript must run as eager runs it
            return cls

    def fn(x):
        Registry[int]
        return x + 1

    check(fn, T(3))
    assert calls == [int] * 4  # two eager calls, two compiled ones
