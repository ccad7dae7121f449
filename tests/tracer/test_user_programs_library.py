"""Python as users write it, the second half of test_user_programs.py: isinstance, NamedTuple
and typing, math, torch.Size, tensor methods with keyword arguments, enums and the standard
library, modules, side effects on arguments. Graph and break counts are torch.compile's where
ours matches them; the rest (copy, heapq, ChainMap, lru_cache, torch.manual_seed, Generator,
a Sequential built in the trace) check results only."""

# ruff: noqa: E702, E741

import collections
import dataclasses
import enum
import functools
import math
import operator
import typing
from typing import NamedTuple

import pytest
import torch

from .helpers import Cases, T, check

case = Cases()


# ---- isinstance & typing
@case(T(4), graphs=1, breaks=0)
def isinst_tuple(x):
    return isinstance(x, (int, torch.Tensor)), isinstance(3, (float, str)), isinstance([1], collections.abc.Sequence), isinstance({}, collections.abc.Mapping), x + 1

@case(T(4), graphs=1, breaks=0)
def isinst_abc_iterable(x):
    return isinstance(x, collections.abc.Iterable), isinstance((1,), collections.abc.Hashable), isinstance(len, collections.abc.Callable), x * 1

@case(T(4))
def isinst_bool_int(x):
    return isinstance(True, int), type(True) is int, isinstance(x.shape, tuple), isinstance(x.shape[0], int), x

class NT(NamedTuple):
    a: torch.Tensor
    b: int = 2

NT2 = collections.namedtuple("NT2", ["p", "q"])

@case(T(4), graphs=1, breaks=0)
def nt_basic(x):
    n = NT(x)
    m = n._replace(b=5)
    return n.a * n.b + m.b, m, n._fields, n._asdict()

@case(T(4))
def nt_collections(x):
    p = NT2(x, 3)
    a, b = p
    return a * b, p[1], p, isinstance(p, tuple), NT2._make([1, 2])

@case(T(4), graphs=1, breaks=0)
def typing_annotations(x: torch.Tensor) -> torch.Tensor:
    y: typing.Optional[torch.Tensor] = None
    z: typing.List[int] = [1, 2]
    def inner(t: torch.Tensor, k: typing.Union[int, float] = 1) -> torch.Tensor:
        return t * k
    return inner(x, 2) + len(z) if y is None else x

@case(T(4), graphs=1, breaks=0)
def typing_cast(x):
    return typing.cast(torch.Tensor, x) + 1, typing.TYPE_CHECKING

# ---- math
@case(T(4), graphs=1, breaks=0)
def math_fns(x):
    n = x.shape[0]
    return x * math.sqrt(n) + math.log(n) + math.pi + math.floor(2.7) + math.ceil(2.1) + math.exp(0), math.isclose(0.1 + 0.2, 0.3), math.gcd(12, 8), math.prod([1, 2, 3]), math.inf > 1e9, math.isnan(float("nan"))

@case(T(4), graphs=1, breaks=0)
def math_trig(x):
    return x * math.cos(math.pi / 3) + math.atan2(1, 1) + math.hypot(3, 4) + math.degrees(math.pi) + math.fsum([0.1] * 10) + math.comb(5, 2) + math.factorial(4)

@case(T(4), graphs=1, breaks=0)
def math_of_size(x):
    d = x.shape[-1]
    return x / math.sqrt(d), int(math.log2(d)), d ** 0.5, d // 3, d % 3, -d, float(d)

# ---- torch.Size
@case(T(2, 3), graphs=1, breaks=0)
def size_arith(x):
    s = x.shape
    return x.reshape(s[::-1]), s + (1,), s[1:], len(s), s.numel(), list(s), tuple(s) == (2, 3), torch.Size([2, 3]) == s

@case(T(2, 3), graphs=1, breaks=0)
def size_unpack(x):
    a, b = x.size()
    return x.new_zeros(b, a), x.view(-1, *x.shape[1:]), x.size(-1), x.shape.index(3) if hasattr(x.shape, "index") else 0

@case(T(2, 3), graphs=1, breaks=0)
def size_build(x):
    s = torch.Size((x.shape[0] * 2, x.shape[1]))
    return x.repeat(2, 1).reshape(s), s, x.expand(*s) if False else x.expand(2, 3)

# ---- tensor methods with kwargs
@case(T(2, 3), graphs=1, breaks=0)
def tm_kwargs(x):
    return x.sum(dim=1, keepdim=True), x.mean(dim=(0, 1)), x.max(dim=1).values, x.softmax(dim=-1), x.transpose(0, 1).contiguous(), x.clamp(min=-0.5, max=0.5), x.std(dim=0, unbiased=False)

@case(T(2, 3), graphs=1, breaks=0)
def tm_topk_sort(x):
    v, i = x.topk(2, dim=1, largest=False)
    s = x.sort(dim=0, descending=True)
    return v, i, s.values, s.indices, x.argmax(dim=1, keepdim=True)

@case(T(2, 3), graphs=1, breaks=0)
def tm_new_factories(x):
    return x.new_ones((2, 2)), x.new_full((3,), 7.0), x.new_tensor([1.0, 2.0]), torch.zeros_like(x, dtype=torch.int64), torch.full_like(x, 2), torch.arange(x.shape[1], dtype=x.dtype)

@case(T(2, 3), graphs=1, breaks=0)
def tm_type_conv(x):
    return x.to(torch.float64), x.to(dtype=torch.int32), x.type(torch.float16), x.float().half().float(), x.bool(), x.long() + 1, x.to(x)

@case(T(2, 3), graphs=1, breaks=0)
def tm_inplace(x):
    y = x.clone()
    y.add_(1, alpha=2); y.mul_(2); y.clamp_(max=3); y[0] = 0; y[:, 1] += 1
    return y

@case(T(2, 3), graphs=1, breaks=0)
def tm_index_ops(x):
    idx = torch.tensor([0, 2])
    return x[:, idx], x.index_select(1, idx), x.gather(1, torch.zeros(2, 1, dtype=torch.long)), x.masked_fill(x > 0, 0.0), torch.where(x > 0, x, -x), x[x > 0].shape if False else x.flatten()

@case(T(2, 3), graphs=1, breaks=0)
def tm_chunk_split(x):
    a, b = x.chunk(2, dim=1) if x.shape[1] % 2 == 0 else (x, x)
    parts = x.split([1, 2], dim=1)
    return a, b, parts, torch.cat(parts, dim=1), torch.stack([x, x], dim=0), x.unbind(0)

@case(T(2, 3), graphs=1, breaks=0)
def tm_item_free_props(x):
    return x.dim(), x.ndim, x.numel(), x.is_floating_point(), x.is_contiguous(), x.dtype.is_floating_point, x.device.type, x.element_size(), x.requires_grad, x.is_leaf, x.T

@case(T(3, grad=True), graphs=2, breaks=1)
def grad_detach_ops(x):
    y = x * 2
    z = y.detach()
    w = z.requires_grad_()
    return y, w.requires_grad, (w * 3).sum()

@case(T(3, grad=True), graphs=1, breaks=0)
def grad_no_grad_block(x):
    with torch.no_grad():
        y = x * 2
    z = x * y
    return z, y.requires_grad, z.requires_grad

@case(T(4), graphs=1, breaks=0)
def ident_returns(x):
    y = x.view(-1)
    return x.detach() is x, x.contiguous() is x, torch.as_tensor(x) is x, x, y

@case(T(4), graphs=1, breaks=0)
def ident_inplace_returns_self(x):
    y = x.add_(1)
    return y is x, y

# ---- enum & misc stdlib
class Color(enum.Enum):
    RED = 1
    BLUE = 2

class Flag(enum.IntFlag):
    A = 1
    B = 2

@case(T(4), graphs=1, breaks=0)
def enum_ops(x):
    c = Color.RED
    return x * c.value, c.name, c is Color.RED, Color(2).name, [m.name for m in Color], Color["BLUE"].value, len(Color)

@case(T(4), graphs=1, breaks=0)
def enum_flag(x):
    f = Flag.A | Flag.B
    return x + int(f), bool(f & Flag.A), Flag.B in f

@case(T(4), recompiles=True)  # still breaks: a recompile per call
def std_functools_reduce_lru(x):
    @functools.lru_cache(maxsize=None)
    def fib(n): return n if n < 2 else fib(n - 1) + fib(n - 2)
    return functools.reduce(operator.mul, [1, 2, 3], 1) * x + fib(10)

@case(T(4), graphs=1, breaks=0)
def std_operator(x):
    return operator.itemgetter(1, 0)([x, x * 2]), operator.attrgetter("shape")(x), operator.methodcaller("sum")(x), operator.neg(x), operator.truediv(x, 2)

@case(T(4), graphs=1, breaks=0)
def std_itertools(x):
    import itertools
    return list(itertools.chain([1], [2, 3])), list(itertools.product([1, 2], "ab")), list(itertools.accumulate([1, 2, 3])), list(itertools.islice(itertools.count(5), 3)), list(itertools.combinations([1, 2, 3], 2)), list(itertools.permutations([1, 2])), list(itertools.repeat(x, 2))[0] + 1, list(itertools.starmap(pow, [(2, 3)])), list(itertools.pairwise([1, 2, 3])), list(itertools.zip_longest([1], [2, 3]))

@case(T(4))
def std_copy(x):
    import copy
    l = [x, [1, 2]]
    c = copy.copy(l)
    d = copy.deepcopy([1, [2, 3]])
    return c[0] + 1, c[1] is l[1], d

@case(T(4), graphs=1, breaks=0)
def std_ordereddict(x):
    od = collections.OrderedDict()
    od["b"] = x; od["a"] = x * 2
    od.move_to_end("b")
    k, v = od.popitem(last=False)
    return k, v, list(od.keys())

@case(T(4), graphs=1, breaks=0)
def std_defaultdict_list(x):
    dd = collections.defaultdict(list)
    for i, t in enumerate([x, x + 1, x + 2]):
        dd[i % 2].append(t)
    return {k: sum(v) for k, v in dd.items()}

@case(T(4), recompiles=True)  # still breaks: a recompile per call
def std_chainmap(x):
    cm = collections.ChainMap({"a": 1}, {"a": 2, "b": 3})
    return x + cm["a"] + cm["b"], len(cm)

@case(T(4))
def std_heapq_bisect(x):
    import bisect
    import heapq
    h = [5, 1, 3]
    heapq.heapify(h); heapq.heappush(h, 0)
    a = heapq.heappop(h)
    return x + a, bisect.bisect_left([1, 3, 5], 4), heapq.nsmallest(2, [4, 1, 3])

@case(T(4))
def std_dataclass_order(x):
    @dataclasses.dataclass(order=True)
    class P:
        a: int
        b: int = 0
    ps = sorted([P(2), P(1, 5)])
    return x + ps[0].b, ps[0] < ps[1], dataclasses.astuple(ps[1])

@case(T(4), graphs=1, breaks=0)
def std_string_module(x):
    import string
    return x + len(string.ascii_lowercase), string.digits[:3]

# ---- modules (nn)
class Blk(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(2)])
        self.register_buffer("b", torch.ones(4))
    def forward(self, x):
        for l in self.layers:
            x = l(x) + self.b
        return self.lin(x), self.lin.weight.shape, self.training
BLK = Blk()

@case(T(4), graphs=1, breaks=0)
def nn_module_call(x): return BLK(x)

@case(T(4), graphs=1, breaks=0)
def nn_params_iter(x):
    n = sum(p.numel() for p in BLK.parameters())
    names = [k for k, _ in BLK.named_parameters()]
    return x * n, names, next(BLK.parameters()).dtype, len(list(BLK.children())), len(list(BLK.modules()))

@case(T(4), graphs=1, breaks=0)
def nn_functional(x):
    F = torch.nn.functional
    return F.relu(x), F.softmax(x, dim=0), F.pad(x, (1, 1)), F.gelu(x, approximate="tanh"), F.dropout(x, p=0.5, training=False), F.normalize(x, dim=0)

@case(T(4), recompiles=True)  # still breaks: a recompile per call
def nn_sequential_slice(x):
    seq = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Tanh(), torch.nn.Sigmoid())
    return seq[1:](x), len(seq), seq[0](x)

# ---- random with seed
@case(T(4))
def rnd_torch_manual_seed(x):
    torch.manual_seed(0)
    return x + torch.rand(4)

@case(T(4))
def rnd_generator(x):
    g = torch.Generator().manual_seed(1)
    return x + torch.randn(4, generator=g)

# ---- globals and side effects
COUNTER = {"n": 0}
GLIST = []
def _gst(): return (dict(COUNTER), len(GLIST))
def _grs(): COUNTER["n"] = 0; GLIST.clear()



@case(T(4), [1, 2], graphs=1, breaks=0)
def side_mutate_arg_list(x, l):
    l.append(3); l[0] = 9
    return x + len(l)

@case(T(4), {"a": 1}, graphs=1, breaks=0)
def side_mutate_arg_dict(x, d):
    d["b"] = 2; d.pop("a")
    return x + len(d)

class Holder:
    def __init__(self): self.v = 0
HOLD = Holder()
def _hst(): return HOLD.v
def _hrs(): HOLD.v = 0



@case(T(4), graphs=1, breaks=0)
def side_inplace_arg(x):
    x.mul_(2)
    return x.sum()


@pytest.mark.parametrize("fn,factories,expect", case)
def test_user_program_library(fn, factories, expect):
    check(fn, *factories, **expect)
