"""A dict's keys(), values() and items() views follow the dict's later changes, as eager's do,
and come out of compiled code as the dict's own views (values/containers.py). A snapshot
taken at the call missed a key set after it: silently wrong sums and lengths."""

import torch

import compiler


def _keys_after_a_write(x, d):
    k = d.keys()
    d["z"] = x
    return x * len(k), list(k)


def _values_after_writes(x):
    d = {"a": x}
    v = d.values()
    d["b"] = x + 1
    d.update(c=x * 2)
    d.pop("a")
    return sum(v), len(v)


def _items_after_setdefault_and_ior(x):
    d = {"a": x}
    it = d.items()
    d.setdefault("b", x - 1)
    d |= {"c": x * 3}
    return [k for k, _ in it], sum(v for _, v in it)


def _views_returned(x):
    d = {"a": x}
    return d.keys(), d.values(), d.items(), d


def test_views_read_after_the_dict_changed_see_the_change():
    for fn, args in (
        (_keys_after_a_write, lambda: (torch.ones(2), {"a": 1})),
        (_values_after_writes, lambda: (torch.ones(2),)),
        (_items_after_setdefault_and_ior, lambda: (torch.ones(2),)),
    ):
        compiled = compiler.compile(fn)
        ours, eager = compiled(*args()), fn(*args())
        for a, e in zip(ours, eager):
            if isinstance(e, torch.Tensor):
                torch.testing.assert_close(a, e)
            else:
                assert a == e, (fn.__name__, a, e)


def test_views_returned_are_the_dicts_own_views():
    compiled = compiler.compile(_views_returned)
    keys, values, items, d = compiled(torch.ones(2))
    expected = _views_returned(torch.ones(2))
    assert [type(v) for v in (keys, values, items)] == [type(v) for v in expected[:3]]
    d["q"] = torch.zeros(2)  # live: they follow the returned dict
    assert list(keys) == ["a", "q"] and len(values) == 2 and len(items) == 2
