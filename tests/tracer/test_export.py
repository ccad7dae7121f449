"""compiler.export: the exported GraphModule takes fn's arguments and returns fn's result.

Differential: every test calls the module on fresh inputs and compares with `fn` itself."""

from __future__ import annotations

import collections

import pytest
import torch

import compiler
from compiler.export import ExportArgumentError
from tests.tracer.helpers import assert_same

Pair = collections.namedtuple("Pair", "first second")


def _same_tree(expected, got):
    assert type(got) is type(expected), (type(expected), type(got))
    if isinstance(expected, dict):
        assert list(got) == list(expected)
        for k in expected:
            _same_tree(expected[k], got[k])
    elif isinstance(expected, (list, tuple)):
        assert len(got) == len(expected)
        for e, g in zip(expected, got):
            _same_tree(e, g)
    elif isinstance(expected, torch.Tensor):
        assert_same(expected, got)
    else:
        assert got == expected


def _check(fn, make_args, **kwargs):
    """Export on one set of arguments, then compare on fresh ones."""
    gm, _ = compiler.export(fn, *make_args(), **kwargs)
    args = make_args()
    _same_tree(fn(*args, **kwargs), gm(*args, **kwargs))
    return gm


def test_nested_lists_tuples_and_dicts():
    def fn(x, y):
        a = x.sin()
        return {"pair": (a, [y.cos(), a + y]), "sum": [(x + y,)]}

    _check(fn, lambda: (torch.randn(4), torch.randn(4)))


def test_namedtuple_and_ordered_dict_keep_their_types():
    def fn(x):
        return Pair(x * 2, collections.OrderedDict(sq=x * x, neg=-x))

    gm = _check(fn, lambda: (torch.randn(3),))
    assert "Pair" in gm.code and "OrderedDict" in gm.code


def test_single_tensor_result_is_not_a_tuple():
    def fn(x):
        return x.relu()

    gm = _check(fn, lambda: (torch.randn(5),))
    assert isinstance(gm(torch.randn(5)), torch.Tensor)


def test_a_tensor_returned_twice_is_one_object():
    def fn(x):
        y = x + 1
        return y, [y], {"y": y}

    gm, _ = compiler.export(fn, torch.randn(3))
    out = gm(torch.randn(3))
    assert out[0] is out[1][0] is out[2]["y"]


def test_inputs_pass_through_as_the_objects_themselves():
    def fn(x, xs):
        return x, x * 2, xs[1], xs

    gm, _ = compiler.export(fn, torch.randn(2), [torch.randn(2), torch.randn(2)])
    x, xs = torch.randn(2), [torch.randn(2), torch.randn(2)]
    out = gm(x, xs)
    assert out[0] is x and out[2] is xs[1] and out[3] is xs
    _same_tree(fn(x, xs), out)


def test_python_constants_in_the_result():
    def fn(x):
        return x + 1, 3, "label", None, 0.5, torch.float32, (True, [1, 2])

    _check(fn, lambda: (torch.randn(2),))


def test_function_without_tensor_work_returns_its_input():
    def fn(x):
        return x

    gm, _ = compiler.export(fn, torch.randn(2))
    x = torch.randn(2)
    assert gm(x) is x


def test_non_tensor_arguments_are_parameters_of_the_module():
    def fn(x, n, scale=0.5, mode="sum"):
        y = x * scale + n
        return y.sum() if mode == "sum" else y.mean()

    gm = _check(fn, lambda: (torch.randn(4), 3))
    assert "def forward(self, x, n, scale=0.5, mode='sum'):" in gm.code
    x = torch.randn(4)
    assert_same(fn(x, 3, mode="sum"), gm(x, 3, mode="sum"))


def test_keyword_only_and_varargs():
    def fn(x, *rest, alpha, beta=2.0):
        return x * alpha + rest[1] * beta, rest[0]

    def make():
        return torch.randn(3), 7, torch.randn(3)

    gm, _ = compiler.export(fn, *make(), alpha=1.5)
    args = make()
    _same_tree(fn(*args, alpha=1.5), gm(*args, alpha=1.5))
    assert "*rest, alpha, beta=2.0" in gm.code
    with pytest.raises(TypeError):
        gm(*args, 1.5)  # alpha stays keyword-only


def test_keyword_only_without_varargs():
    def fn(x, *, scale):
        return x * scale

    gm = _check(fn, lambda: (torch.randn(3),), scale=3.0)
    assert "def forward(self, x, *, scale):" in gm.code


def test_tensors_inside_container_arguments_and_kwargs():
    def fn(batch, **extra):
        return batch["inputs"][0] + batch["inputs"][1] * extra["w"], batch["k"]

    def make():
        return ({"inputs": (torch.randn(2), torch.randn(2)), "k": 4},)

    gm, _ = compiler.export(fn, *make(), w=torch.randn(2))
    (batch,), w = make(), torch.randn(2)
    _same_tree(fn(batch, w=w), gm(batch, w=w))


def test_a_different_constant_raises_naming_the_argument():
    def fn(x, n, mode="a"):
        return x * n

    gm, _ = compiler.export(fn, torch.randn(2), 3)
    with pytest.raises(ExportArgumentError, match=r"n = 3, but it got 4"):
        gm(torch.randn(2), 4)
    with pytest.raises(ExportArgumentError, match=r"mode = 'a', but it got 'b'"):
        gm(torch.randn(2), 3, mode="b")


def test_a_container_of_another_shape_raises():
    def fn(xs):
        return xs[0] + xs[1]

    gm, _ = compiler.export(fn, [torch.randn(2), torch.randn(2)])
    with pytest.raises(ExportArgumentError, match=r"xs of length 2, but it got length 3"):
        gm([torch.randn(2)] * 3)
    with pytest.raises(ExportArgumentError, match=r"a tensor at xs\[1\]"):
        gm([torch.randn(2), 1.0])


def test_assume_constant_result_inside_export():
    calls = []

    @compiler.assume_constant_result
    def factor(name):
        calls.append(name)
        return {"double": 2, "triple": 3}[name]

    def fn(x, name):
        k = factor(name)
        return x * k, k

    gm = _check(fn, lambda: (torch.randn(3), "triple"))
    assert calls == ["triple", "triple"]  # once while exporting, once for the eager reference
    with pytest.raises(ExportArgumentError, match="name = 'triple'"):
        gm(torch.randn(3), "double")


def test_module_state_is_shared_with_the_model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU())
    gm = _check(model, lambda: (torch.randn(2, 4),))
    assert model[0].weight in set(gm.parameters())
    with torch.no_grad():
        model[0].weight.mul_(2)
    x = torch.randn(2, 4)
    assert_same(model(x), gm(x))


def test_global_tensor_becomes_an_attribute():
    def fn(x):
        return x + _OFFSET

    _check(fn, lambda: (torch.randn(3),))


_OFFSET = torch.randn(3)


def test_in_place_update_of_an_input():
    def fn(x, y):
        x.add_(y)
        return x

    gm, _ = compiler.export(fn, torch.randn(3), torch.randn(3))
    x, y = torch.randn(3), torch.randn(3)
    expected = x + y
    out = gm(x, y)
    assert out is x
    assert_same(expected, x)


def test_graph_break_raises_naming_the_break_and_its_kind():
    def fn(x):
        y = x * 2
        print("step")
        return y

    with pytest.raises(compiler.Unsupported) as info:
        compiler.export(fn, torch.randn(2))
    message = str(info.value)
    assert "kind 'print'" in message and 'print("step")' in message, message
    assert info.value.kind == "print"
    assert info.value.hint is not None


def test_data_dependent_branch_raises_with_its_kind():
    def fn(x):
        if x.sum() > 0:
            return x
        return -x

    with pytest.raises(compiler.Unsupported) as info:
        compiler.export(fn, torch.randn(4))
    assert info.value.kind == "data_dependent_branch", str(info.value)
    assert "x.sum() > 0" in str(info.value)


def test_returning_an_object_that_holds_tensors_is_refused():
    class Box:
        def __init__(self, t):
            self.t = t

    def fn(x):
        return Box(x + 1)

    with pytest.raises(compiler.Unsupported, match="Box holding tensors"):
        compiler.export(fn, torch.randn(2))


def test_code_and_graph_print():
    def fn(x, k=2):
        return [x * k]

    gm, _ = compiler.export(fn, torch.randn(2))
    assert "def forward(self, x, k=2):" in gm.code
    assert "expect_argument('k', k, 2)" in gm.code
    assert "return [mul]" in gm.code
    assert "placeholder[target=x]" in str(gm.graph)


def test_interpreter_runs_the_exported_graph():
    def fn(x, xs):
        return {"out": x + xs[0]}

    gm, _ = compiler.export(fn, torch.randn(2), [torch.randn(2)])
    x, xs = torch.randn(2), [torch.randn(2)]
    got = torch.fx.Interpreter(gm).run(x, xs)
    assert_same(fn(x, xs)["out"], got["out"])


_LOG: list = []


def test_python_side_effects_are_refused():
    def appends(x, acc):
        y = x * 2
        acc.append(y)
        return y

    with pytest.raises(compiler.Unsupported, match=r"L\['acc'\] is changed in place"):
        compiler.export(appends, torch.randn(2), [])

    def logs(x):
        _LOG.append(1)
        return x + 1

    with pytest.raises(compiler.Unsupported, match=r"G\['_LOG'\] is changed in place"):
        compiler.export(logs, torch.randn(2))


def test_positional_only_parameters():
    def fn(x, y, /, z):
        return x - y * z

    gm = _check(fn, lambda: (torch.randn(2), torch.randn(2), torch.randn(2)))
    assert "def forward(self, x, y, /, z):" in gm.code


def test_a_dynamic_size_of_a_tensor_in_a_list():
    def fn(xs):
        return xs[0].view(xs[0].shape[0], -1) * xs[0].shape[0]

    x = torch.randn(6, 2, 2)
    compiler.mark_dynamic(x, 0)
    gm, _ = compiler.export(fn, [x])
    for n in (3, 6, 11):
        xs = [torch.randn(n, 2, 2)]
        assert_same(fn(xs), gm(xs))


def test_saved_and_loaded_module_keeps_signature_and_checks():
    import io

    def fn(x, n=2):
        return {"a": [x * n]}, x

    gm, _ = compiler.export(fn, torch.randn(4))
    buffer = io.BytesIO()
    torch.save(gm, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    x = torch.randn(4)
    out = loaded(x)
    _same_tree(fn(x), out)
    assert out[1] is x
    with pytest.raises(ExportArgumentError, match="n = 2, but it got 3"):
        loaded(x, 3)


def test_the_same_tensor_as_two_arguments_is_refused():
    def fn(x, y):
        return x + y

    x = torch.randn(2)
    with pytest.raises(compiler.Unsupported, match=r"same Tensor as x and as y"):
        compiler.export(fn, x, x)
    with pytest.raises(compiler.Unsupported, match=r"as xs\[0\] and as y"):
        compiler.export(lambda xs, y: xs[0] * y, [x], x)


class _Holder:
    def __init__(self, t, k):
        self.t, self.k = t, k


def test_tensor_attribute_of_an_object_argument():
    holder = _Holder(torch.randn(3), 2)

    def fn(x, h):
        return x * h.k + h.t, h.t

    gm, _ = compiler.export(fn, torch.randn(3), holder)
    holder.t = torch.randn(3)  # read at call time, not baked in
    x = torch.randn(3)
    out = gm(x, holder)
    _same_tree(fn(x, holder), out)
    assert out[1] is holder.t
    with pytest.raises(ExportArgumentError, match="h = "):
        gm(x, _Holder(torch.randn(3), 2))  # specialised to that object


def test_an_int_result_of_a_dynamic_graph_is_refused():
    def fn(x):
        return x * 2, x.shape[0]

    x = torch.randn(6, 2)
    compiler.mark_dynamic(x, 0)
    with pytest.raises(compiler.Unsupported, match="returns the int 6 from a graph with dynamic"):
        compiler.export(fn, x)
    gm, _ = compiler.export(fn, torch.randn(6, 2))  # static: the size is checked, a constant
    assert gm(torch.randn(6, 2))[1] == 6
    with pytest.raises(ExportArgumentError):
        gm(torch.randn(3, 2))


def test_a_tensor_of_another_shape_or_dtype_raises():
    def fn(x, xs):
        return x.view(2, -1) + xs[0]

    gm, _ = compiler.export(fn, torch.randn(4, 3), [torch.randn(6)])
    with pytest.raises(ExportArgumentError, match=r"x of shape \[4, 3\] and torch.float32"):
        gm(torch.randn(2, 3), [torch.randn(6)])
    with pytest.raises(ExportArgumentError, match=r"xs\[0\] of shape \[6\]"):
        gm(torch.randn(4, 3), [torch.randn(6, dtype=torch.float64)])


def test_a_dynamic_size_is_free_and_the_others_checked():
    def fn(x):
        return x.sum(0)

    x = torch.randn(5, 3)
    compiler.mark_dynamic(x, 0)
    gm, _ = compiler.export(fn, x)
    assert "(None, 3)" in gm.code
    for n in (2, 9):
        y = torch.randn(n, 3)
        assert_same(fn(y), gm(y))
    with pytest.raises(ExportArgumentError, match=r"shape \[\*, 3\]"):
        gm(torch.randn(5, 4))


class _Named(dict):
    """A dict whose constructor takes a name first."""

    def __init__(self, name, **items):
        super().__init__(**items)
        self.name = name


_TABLE = _Named("table", k=1)


def test_a_dict_type_that_cannot_be_rebuilt_is_refused():
    def fn(x):
        return x + 1, _TABLE

    with pytest.raises(compiler.Unsupported, match="returns a _Named"):
        compiler.export(fn, torch.randn(2))


def test_torch_return_types_are_rebuilt():
    def fn(x):
        return x.max(0), [x.min(1)]

    gm = _check(fn, lambda: (torch.randn(3, 2),))
    out = gm(torch.randn(3, 2))
    assert type(out[0]) is torch.return_types.max and type(out[1][0]) is torch.return_types.min


def test_a_module_argument_is_read_at_call_time_and_checked_by_identity():
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 2)

    def fn(model, x):
        return model(x).relu()

    gm, _ = compiler.export(fn, lin, torch.randn(4, 3))
    x = torch.randn(4, 3)
    assert_same(fn(lin, x), gm(lin, x))
    with pytest.raises(ExportArgumentError, match="the very Linear object passed as model"):
        gm(torch.nn.Linear(3, 2), x)


def test_a_bound_method():
    class Scaler:
        def __init__(self):
            self.w = torch.randn(3)

        def apply(self, x, k=1):
            return x * self.w * k

    scaler = Scaler()
    gm = _check(scaler.apply, lambda: (torch.randn(3),))
    assert "def forward(self, x, k=1):" in gm.code
