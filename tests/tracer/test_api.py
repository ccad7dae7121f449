"""The public API around the tracer: compile as a function and a decorator (with and without
arguments), compiled modules that stay the original module, the backend registry, reset,
inspect and explain's fields."""

import copy

import pytest
import torch
from torch import nn

import compiler

from .helpers import RecordingBackend, assert_same


def sin_cos(x):
    return x.sin() + x.cos()


def test_decorator_without_arguments():
    @compiler.compile
    def f(x):
        return x * 2 + 1

    x = torch.randn(4)
    assert_same(x * 2 + 1, f(x))


def test_decorator_with_arguments():
    backend = RecordingBackend()

    @compiler.compile(backend=backend, fullgraph=True)
    def f(x):
        return x * 2 + 1

    x = torch.randn(4)
    assert_same(x * 2 + 1, f(x))
    assert backend.count == 1


def test_decorator_with_empty_parentheses():
    @compiler.compile()
    def f(x):
        return x - 1

    x = torch.randn(4)
    assert_same(x - 1, f(x))


def test_compiled_function_keeps_name_and_doc():
    def documented(x):
        """Adds one."""
        return x + 1

    cf = compiler.compile(documented, backend="eager")
    assert cf.__name__ == "documented"
    assert cf.__doc__ == "Adds one."
    assert getattr(cf, "__wrapped__", documented) is documented


@pytest.mark.parametrize("mode", [None, "default", "reduce-overhead", "max-autotune"])
def test_modes_are_accepted(mode):
    cf = compiler.compile(sin_cos, mode=mode, backend="eager")
    x = torch.randn(4)
    assert_same(sin_cos(x), cf(x))


def test_dynamic_flag_is_accepted():
    for dynamic in (None, False, True):
        cf = compiler.compile(sin_cos, dynamic=dynamic, backend="eager")
        for n in (3, 5):
            x = torch.randn(n)
            assert_same(sin_cos(x), cf(x))


def test_keyword_arguments_at_call():
    def f(x, *, scale=1.0, shift=None):
        y = x * scale
        return y if shift is None else y + shift

    cf = compiler.compile(f, backend=RecordingBackend())
    x, s = torch.randn(3), torch.randn(3)
    assert_same(f(x, scale=2.0, shift=s), cf(x, scale=2.0, shift=s))
    assert_same(f(x), cf(x))
    assert_same(f(x=x, scale=3.0), cf(x=x, scale=3.0))


# ---- modules ----------------------------------------------------------------------------


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 3)
        self.register_buffer("shift", torch.ones(3))
        self.tag = "net"

    def forward(self, x):
        return self.lin(x) + self.shift

    def extra(self):
        return self.tag * 2


def test_compiled_module_is_the_original_module():
    torch.manual_seed(0)
    mod = Net()
    cmod = compiler.compile(mod, backend="eager")
    assert isinstance(cmod, nn.Module)
    assert cmod.lin is mod.lin
    assert cmod.tag == "net"
    assert cmod.extra() == "netnet"
    assert [id(p) for p in cmod.parameters()] == [id(p) for p in mod.parameters()]
    assert list(cmod.state_dict().keys()) == list(mod.state_dict().keys())
    for k, v in mod.state_dict().items():
        assert cmod.state_dict()[k] is v or torch.equal(cmod.state_dict()[k], v)
    assert dict(cmod.named_buffers()).keys() == dict(mod.named_buffers()).keys()
    x = torch.randn(2, 6)
    assert_same(mod(x), cmod(x))


def test_compiled_module_load_state_dict_and_train_eval():
    torch.manual_seed(0)
    mod = Net()
    cmod = compiler.compile(mod, backend="eager")
    other = Net()
    cmod.load_state_dict(other.state_dict())
    assert torch.equal(mod.lin.weight, other.lin.weight)
    cmod.eval()
    assert not mod.training
    x = torch.randn(2, 6)
    assert_same(other(x), cmod(x))


@pytest.mark.parametrize("copy_of", ["torch.save", "deepcopy"])
def test_a_compiled_module_saves_and_copies_as_a_compiled_module(copy_of):
    import copy
    import io

    torch.manual_seed(0)
    mod = Net()
    cmod = compiler.compile(mod, backend="eager", mode="max-autotune", fullgraph=False)
    x = torch.randn(2, 6)
    cmod(x)
    if copy_of == "torch.save":
        buf = io.BytesIO()
        torch.save(cmod, buf)  # the whole model, as users save one
        buf.seek(0)
        again = torch.load(buf, weights_only=False)
    else:
        again = copy.deepcopy(cmod)
    assert type(again).__name__ == "Net" and isinstance(again, Net)
    config = compiler.inspect(again) and again.__compiled__.config
    assert (config.backend_name, config.mode) == ("eager", "max-autotune")
    assert again.lin is not mod.lin  # a copy, compiled anew
    assert torch.equal(again.lin.weight, mod.lin.weight)
    assert_same(mod(x), again(x))
    assert len(compiler.inspect(again).entries) == 1


def test_compiled_module_attribute_set_through_wrapper():
    torch.manual_seed(0)
    mod = Net()
    cmod = compiler.compile(mod, backend="eager")
    x = torch.randn(2, 6)
    cmod(x)
    cmod.shift = torch.zeros(3)  # writes reach the original and the next call sees them
    assert torch.equal(mod.shift, torch.zeros(3))
    assert_same(mod(x), cmod(x))


def test_compiled_module_deepcopy_and_parameters_for_optimizer():
    torch.manual_seed(0)
    mod = Net()
    cmod = compiler.compile(mod, backend="eager")
    opt = torch.optim.SGD(cmod.parameters(), lr=0.1)
    before = mod.lin.weight.detach().clone()
    cmod(torch.randn(2, 6)).sum().backward()
    opt.step()
    assert not torch.equal(mod.lin.weight, before), (
        "the optimizer updates the original's parameters"
    )
    copy.deepcopy(cmod)


def test_module_class_decorated_instances():
    torch.manual_seed(0)
    mod = Net()
    cmod = compiler.compile(backend=RecordingBackend())(mod)
    x = torch.randn(2, 6)
    assert_same(mod(x), cmod(x))


# ---- backends -----------------------------------------------------------------------------


def test_list_backends_has_builtins():
    names = compiler.list_backends()
    assert "inductor" in names and "eager" in names


def test_register_backend_by_name():
    calls = []

    def my_counting_backend(gm, example_inputs):
        calls.append(len(example_inputs))
        return gm.forward

    compiler.register_backend(my_counting_backend)
    assert "my_counting_backend" in compiler.list_backends()
    cf = compiler.compile(sin_cos, backend="my_counting_backend")
    x = torch.randn(4)
    assert_same(sin_cos(x), cf(x))
    assert calls == [1]


def test_register_backend_decorator_with_name():
    calls = []

    @compiler.register_backend(name="named_test_backend")
    def _backend(gm, example_inputs):
        calls.append(gm)
        return gm.forward

    cf = compiler.compile(sin_cos, backend="named_test_backend")
    x = torch.randn(4)
    assert_same(sin_cos(x), cf(x))
    assert len(calls) == 1


def test_backend_receives_graph_module_and_example_inputs():
    seen = {}

    def backend(gm, example_inputs):
        seen["gm"], seen["inputs"] = gm, list(example_inputs)
        return gm.forward

    x = torch.randn(2, 3)
    compiler.compile(lambda t: t.relu() * 2, backend=backend)(x)
    assert isinstance(seen["gm"], torch.fx.GraphModule)
    assert len(seen["inputs"]) == 1
    assert seen["inputs"][0].shape == (2, 3) and seen["inputs"][0].dtype == torch.float32


def test_backend_output_is_used():
    def negating_backend(gm, example_inputs):
        def run(*args):
            return [-t for t in gm(*args)] if isinstance(gm(*args), (list, tuple)) else -gm(*args)

        return run

    # a backend that changes results shows they come from the backend's callable
    x = torch.randn(3)
    out = compiler.compile(lambda t: t + 1, backend=negating_backend)(x)
    out = out[0] if isinstance(out, (list, tuple)) else out
    assert torch.allclose(out, -(x + 1))


def test_unknown_backend_name_raises_listing_backends():
    with pytest.raises((ValueError, KeyError, RuntimeError)) as info:
        compiler.compile(sin_cos, backend="no_such_backend")(torch.randn(3))
    message = str(info.value)
    assert "no_such_backend" in message
    assert "inductor" in message and "eager" in message


def test_non_callable_backend_raises():
    with pytest.raises((TypeError, ValueError)):
        compiler.compile(sin_cos, backend=42)(torch.randn(3))


# ---- reset, explain, inspect ------------------------------------------------------------


def test_reset_forgets_compiled_entries():
    backend = RecordingBackend()
    cf = compiler.compile(sin_cos, backend=backend)
    cf(torch.randn(3))
    cf(torch.randn(3))
    assert backend.count == 1
    compiler.reset()
    cf(torch.randn(3))
    assert backend.count == 2


def test_explain_fields_on_break_free_function():
    out = compiler.explain(sin_cos)(torch.randn(3))
    assert out.graph_count == 1
    assert out.graph_break_count == 0
    assert out.break_reasons == []
    assert len(out.graphs) == 1 and isinstance(out.graphs[0], torch.fx.GraphModule)
    assert out.op_count == 3
    assert len(out.ops_per_graph) == 1 and len(out.ops_per_graph[0]) == 3
    assert out.out_guards
    assert out.compile_times is not None
    assert "Graph Count: 1" in str(out) or "1 graph" in str(out).lower()


def test_explain_with_keyword_arguments():
    def f(x, *, k=2):
        return x * k

    out = compiler.explain(f)(torch.randn(3), k=3)
    assert out.graph_count == 1


def test_explain_does_not_leave_the_function_compiled():
    """explain runs on its own: a later compile with another backend still compiles."""
    compiler.explain(sin_cos)(torch.randn(3))
    backend = RecordingBackend()
    compiler.compile(sin_cos, backend=backend)(torch.randn(3))
    assert backend.count == 1


def test_inspect_records_graph_and_source():
    cf = compiler.compile(sin_cos, backend="eager")
    cf(torch.randn(3))
    report = compiler.inspect(cf)
    own = report.functions[0]
    assert own.name == "sin_cos"
    assert "x.sin() + x.cos()" in own.source
    (entry,) = own.entries
    assert entry.graph is not None and entry.graph.op_count == 3
    assert "sin" in entry.graph.code and "cos" in entry.graph.code
    assert entry.graph_break is None
    assert entry.recompile_reason is None
    assert entry.compile_time_s > 0


def test_inspect_records_break_with_source_line():
    def bar(a, b):
        x = a / (torch.abs(a) + 1)
        if b.sum() < 0:
            b = b * -1
        return x * b

    cf = compiler.compile(bar, backend="eager")
    cf(torch.randn(10), -torch.rand(10) - 0.5)
    report = compiler.inspect(cf)
    breaks = [e.graph_break for e in report.entries if e.graph_break is not None]
    assert len(breaks) == 1
    assert "if b.sum() < 0:" in breaks[0].user_stack[-1].text
    assert len(report.graphs) == 2
