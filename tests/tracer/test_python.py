"""Python around the tensor work, traced without breaks: inlined user functions, closures,
methods, defaults, *args/**kwargs, containers, comprehensions, unpacking, loops, grad-mode
context managers, builtins, f-strings, math on Python numbers, shapes in arithmetic."""

import collections
import dataclasses
import functools
import math

import pytest
import torch

from .helpers import Cases, T, check

case = Cases()

# ---- user functions, closures, methods, arguments ----------------------------------------


def _double(t):
    return t * 2


def _scaled(t, scale=3.0, *, shift=0.0):
    return t * scale + shift


def _varargs(*ts, **named):
    total = sum(ts)
    for value in named.values():
        total = total + value
    return total


def _recursive_depth(t, n):
    return t if n == 0 else _recursive_depth(t + 1, n - 1)


@case(T(4), graphs=1, breaks=0)
def inline_user_function(x):
    return _double(x) + _double(_double(x))


@case(T(4), graphs=1, breaks=0)
def defaults_and_keyword_only(x):
    return _scaled(x), _scaled(x, 2.0), _scaled(x, shift=1.0), _scaled(scale=0.5, t=x)


@case(T(4), T(4), graphs=1, breaks=0)
def star_args_and_kwargs(x, y):
    return _varargs(x, y, a=x * 2, b=y), _varargs(*[x, y]), _varargs(q=x, r=y)


@case(T(4), graphs=1, breaks=0)
def recursion_on_constant(x):
    return _recursive_depth(x, 4)


@case(T(4), graphs=1, breaks=0)
def closure_over_constant(x):
    k = 3

    def inner(t):
        return t * k

    return inner(x)


@case(T(4), T(4), graphs=1, breaks=0)
def closure_over_tensor(x, y):
    def inner(t):
        return t + y

    return inner(x) + inner(y)


@case(T(4), graphs=1, breaks=0)
def closure_cell_mutated(x):
    count = 0

    def bump(t):
        nonlocal count
        count += 1
        return t + count

    return bump(bump(x)), count


@case(T(4), graphs=1, breaks=0)
def lambda_and_map(x):
    sq = lambda t: t * t  # noqa: E731
    return list(map(sq, [x, x + 1]))


@case(T(4), graphs=1, breaks=0)
def functools_partial(x):
    p = functools.partial(_scaled, scale=4.0)
    return p(x), p(x, shift=1.0)


@case(T(4), graphs=1, breaks=0)
def nested_function_default_captured(x, n=2):
    def inner(t, m=n):
        return t * m

    return inner(x), inner(x, 5)


class _Scaler:
    def __init__(self, k):
        self.k = k

    def apply(self, t):
        return t * self.k

    @staticmethod
    def static(t):
        return t - 1

    @classmethod
    def make(cls, k):
        return cls(k)

    @property
    def doubled(self):
        return self.k * 2


_scaler = _Scaler(3.0)


@case(T(4), graphs=1, breaks=0)
def bound_method_of_global_object(x):
    return _scaler.apply(x) + _scaler.doubled


@case(T(4), graphs=1, breaks=0)
def static_and_class_methods(x):
    return _Scaler.static(x), _Scaler.make(2.0).apply(x)


@case(T(4), graphs=1, breaks=0)
def object_created_in_function(x):
    s = _Scaler(5.0)
    s.k = s.k + 1
    return s.apply(x)


@dataclasses.dataclass
class _Pair:
    a: torch.Tensor
    b: torch.Tensor


@case(T(4), T(4), graphs=1, breaks=0)
def dataclass_instance(x, y):
    p = _Pair(x, y)
    return p.a * p.b


_Point = collections.namedtuple("_Point", ["x", "y"])


@case(T(4), T(4), graphs=1, breaks=0)
def namedtuple_return(x, y):
    p = _Point(x + 1, y)
    return _Point(p.y, p.x)


# ---- containers, comprehensions, unpacking -----------------------------------------------


@case([T(3), T(3), T(3)], graphs=1, breaks=0)
def list_argument(xs):
    return xs[0] + xs[-1] * len(xs)


@case({"a": T(3), "b": T(3)}, graphs=1, breaks=0)
def dict_argument(d):
    return d["a"] * d["b"], d.get("c", 1.0), sorted(d.keys())


@case((T(3), (T(3), 2.0)), graphs=1, breaks=0)
def nested_tuple_argument(t):
    a, (b, s) = t
    return a * b * s


@case(T(3), graphs=1, breaks=0)
def list_building_and_methods(x):
    out = []
    out.append(x)
    out.extend([x + 1, x + 2])
    out.insert(0, x * 0)
    last = out.pop()
    out.reverse()
    return out, last, len(out)


@case(T(3), graphs=1, breaks=0)
def dict_building_and_methods(x):
    d = {"a": x}
    d["b"] = x + 1
    d.update(c=x * 2)
    d.setdefault("a", x * 100)
    return {k: v.sum() for k, v in d.items()}, list(d), "b" in d


@case(T(3), graphs=1, breaks=0)
def comprehensions(x):
    squares = [x * i for i in range(3)]
    evens = [t for i, t in enumerate(squares) if i % 2 == 0]
    table = {i: x + i for i in range(2)}
    return squares, evens, table, tuple(t.sum() for t in squares)


@case(T(6), graphs=1, breaks=0)
def unpacking_forms(x):
    a, b, *rest = x.split(2)
    (c, d), e = (a, b), rest
    first, *_ = e
    return a + b, c - d, first


@case(T(3), T(3), graphs=1, breaks=0)
def tuple_swap_and_slicing(x, y):
    x, y = y, x
    items = (x, y, x + y, x - y)
    return items[1:3], items[::-1], items[-1]


@case(T(3), graphs=1, breaks=0)
def list_concat_repeat(x):
    return [x] * 2 + [x + 1], (x,) + (x * 2,)


@case(T(3), graphs=1, breaks=0)
def set_of_constants(x):
    s = {1, 2, 3}
    s.add(2)
    return x * len(s), 2 in s


@case([T(2), T(2)], graphs=1, breaks=0)
def list_argument_mutated(xs):
    xs.append(xs[0] * 2)  # the caller sees the appended tensor, as in eager
    xs[0] = xs[1] + 1
    return len(xs)


@case({"w": T(3)}, graphs=1, breaks=0)
def dict_argument_mutated(d):
    d["v"] = d["w"] + 1
    del d["w"]
    return d["v"].sum()


# ---- loops --------------------------------------------------------------------------------


@case(T(3), graphs=1, breaks=0)
def for_over_range(x):
    for i in range(4):
        x = x + i
    return x


@case(T(3), graphs=1, breaks=0)
def for_with_break_continue(x):
    for i in range(10):
        if i % 2:
            continue
        if i > 6:
            break
        x = x * 1.5 + i
    return x


@case(T(3), graphs=1, breaks=0)
def while_loop_on_counter(x):
    i = 0
    while i < 5:
        x = x + 1
        i += 1
    return x, i


@case([T(3), T(3), T(3)], graphs=1, breaks=0)
def for_over_list(xs):
    acc = torch.zeros(3)
    for t in xs:
        acc = acc + t
    return acc


@case({"a": T(3), "b": T(3)}, graphs=1, breaks=0)
def for_over_dict_items(d):
    out = 0
    for k, v in d.items():
        out = out + v * len(k)
    return out


@case([T(3), T(3)], [T(3), T(3)], graphs=1, breaks=0)
def for_enumerate_zip(xs, ys):
    out = []
    for i, (a, b) in enumerate(zip(xs, ys)):
        out.append(a * i + b)
    return out


@case(T(4, 3), graphs=1, breaks=0)
def for_over_tensor_rows(x):
    total = torch.zeros(3)
    for row in x:
        total = total + row
    return total


@case(T(3), graphs=1, breaks=0)
def nested_loops(x):
    for i in range(2):
        for j in range(3):
            x = x + i * j
    return x


@case(T(3), graphs=1, breaks=0)
def for_else(x):
    for i in range(3):
        x = x + i
    else:
        x = x * 2
    return x


@case(T(3), graphs=1, breaks=0)
def reversed_sorted_builtins(x):
    return [x * i for i in reversed(range(3))], sorted([3, 1, 2]), min(2, 5), max([1, 7, 3])


# ---- grad mode --------------------------------------------------------------------------


@case(T(3, grad=True), graphs=1, breaks=0)
def no_grad_block(x):
    with torch.no_grad():
        y = x * 2
    return y, x * 3


@case(T(3, grad=True), graphs=1, breaks=0)
def enable_grad_inside_no_grad(x):
    with torch.no_grad():
        with torch.enable_grad():
            y = x * 2
        z = x + 1
    return y, z, torch.is_grad_enabled()


@case(T(3, grad=True), graphs=1, breaks=0, backward=True)
def set_grad_enabled_false(x):
    with torch.set_grad_enabled(False):
        y = x.exp()
    return x * y


@torch.no_grad()
def _decorated_no_grad(t):
    return t * 2


@case(T(3, grad=True), graphs=1, breaks=0)
def no_grad_decorated_callee(x):
    return _decorated_no_grad(x), x + 1


# ---- builtins on values ---------------------------------------------------------------


@case(T(3), 2, graphs=1, breaks=0)
def isinstance_checks(x, n):
    if isinstance(x, torch.Tensor) and isinstance(n, int) and not isinstance(n, bool):
        return x * n
    return x


@case(T(3), graphs=1, breaks=0)
def getattr_hasattr(x):
    scale = getattr(_scaler, "k", 1.0)
    missing = getattr(_scaler, "nope", 7.0)
    return x * scale + missing, hasattr(_scaler, "apply"), hasattr(x, "shape")


@case([T(2), T(2), T(2)], graphs=1, breaks=0)
def len_of_containers(xs):
    return xs[0] * len(xs) + len("abc") + len({"a": 1})


@case(T(3), graphs=1, breaks=0)
def callable_type_id_checks(x):
    return x * int(callable(_double)) + float(type(x) is torch.Tensor)


@case(T(3), 2.5, graphs=1, breaks=0)
def int_float_bool_conversions(x, s):
    return x * int(s) + float(3) + bool(s) + round(s) + abs(-s)


@case(T(3), graphs=1, breaks=0)
def any_all_on_constants(x):
    return x * (any([False, True]) + all([True, True]) + sum([1, 2, 3]))


# ---- f-strings and strings on constants ------------------------------------------------


@case(T(3), 3, graphs=1, breaks=0)
def fstring_on_constants(x, n):
    name = f"layer_{n}_{2.5:.1f}"
    return x * len(name), name, "x" + name.upper()


@case(T(3), "relu", graphs=1, breaks=0)
def string_argument_dispatch(x, act):
    if act == "relu":
        return torch.relu(x)
    return torch.tanh(x)


@case(T(3), graphs=1, breaks=0)
def string_methods(x):
    parts = "a,b,c".split(",")
    return x * len(parts), "-".join(parts), "abc".startswith("a"), f"{len(parts)}!"


# ---- math on Python numbers -----------------------------------------------------------


@case(T(3), 2.0, graphs=1, breaks=0)
def math_module(x, s):
    return x * math.sqrt(s) + math.pi + math.log(s) + math.cos(0.0) + math.floor(2.7)


@case(T(3), 3, graphs=1, breaks=0)
def python_arithmetic(x, n):
    k = (n**2 - 1) // 2 % 5 + n / 4
    return x * k, k, divmod(n, 2), -n, n << 1


# ---- shapes in Python arithmetic --------------------------------------------------------


@case(T(4, 6), graphs=1, breaks=0)
def shape_arithmetic(x):
    n, m = x.shape
    return x.reshape(n * m // 2, 2) / math.sqrt(m), x.size(0) + x.size()[1]


@case(T(2, 3, 4), graphs=0, breaks=0)
def shape_values_only(x):
    return x.shape[0] * 2, x.size(), x.dim(), x.numel(), x.ndim, len(x)


@case(T(2, 3, 4), graphs=1, breaks=0)
def shape_dependent_python_branch(x):
    if x.shape[-1] > 3 and x.dim() == 3:
        return x.sum(-1)
    return x


@case(T(4, 6), graphs=1, breaks=0)
def view_with_computed_shape(x):
    b = x.shape[0]
    return x.view(b, -1, 2).mean(1), x.new_ones(b, x.shape[1] // 3)


@case(T(3, dtype=torch.float64), graphs=1, breaks=0)
def dtype_and_device_attributes(x):
    y = torch.zeros(3, dtype=x.dtype, device=x.device)
    return x + y, x.dtype == torch.float64, str(x.device), x.is_floating_point()


@case(T(3), graphs=0, breaks=0)
def returns_input_unchanged(x):
    return x


@case(T(3), graphs=0, breaks=0)
def returns_constants_only(x):
    return 1, "two", None, (3.0, [4])


# ---- other statements: eager's answer whether traced or run eagerly ----------------------


_COUNTER = [0]
_GLOBAL_SCALE = 2.0


@case(T(3), graphs=1, breaks=0)
def walrus_and_ternary(x):
    y = (n := x.shape[0]) * x if x.dim() == 1 else x
    return y, n


@case(T(3), graphs=1, breaks=0)
def try_finally_without_exception(x):
    try:
        y = x + 1
    finally:
        y = y * 2
    return y


@case(T(3), 2, graphs=1, breaks=0)
def match_statement(x, n):
    match n:
        case 1:
            return x
        case 2:
            return x * 2
        case _:
            return -x


@case(T(3), graphs=1, breaks=0)
def del_local_and_reassign(x):
    y = x + 1
    del y
    y = x - 1
    return y


@case(T(3), graphs=None, breaks=None)
def writes_a_global(x):
    global _GLOBAL_SCALE
    _GLOBAL_SCALE = 2.0  # same value each call: the caller sees it as in eager
    return x * _GLOBAL_SCALE


@case(T(3), graphs=None, breaks=None, recompiles=True)
def mutates_global_list(x):
    _COUNTER[0] += 1  # a side effect on a global object happens once per call
    return x + 1


@case(T(3), graphs=None, breaks=None)
def generator_consumed(x):
    def gen():
        for i in range(3):
            yield x * i

    return list(gen())


# A class statement inside the function may break, and the class is a new object on every
# call, so a guard on it may recompile (TorchDynamo does both).
@case(T(3), graphs=None, breaks=None, recompiles=True)
def class_defined_in_function(x):
    class Local:
        scale = 3

    return x * Local.scale


@case(T(3), graphs=1, breaks=0)
def star_call_and_dict_merge(x):
    args = (x, 2.0)
    base = {"shift": 1.0}
    opts = {**base, "shift": 0.5}
    return _scaled(*args, **opts)


@case(T(3), graphs=1, breaks=0)
def chained_comparisons_on_constants(x):
    n = x.shape[0]
    return x * (1 < n <= 3), 0 <= n < 2


@case(T(3), graphs=1, breaks=0)
def integer_and_float_builtins(x):
    return x * pow(2, 3) + x * divmod(7, 3)[1] + hash(3) % 2 + int("4") + float("0.5")


@pytest.mark.parametrize("fn,factories,expect", case)
def test_python(fn, factories, expect):
    check(fn, *factories, **expect)
