"""Every example of the seed tutorials (000: torch.compile tutorial, 002: TorchDynamo and
TorchInductor tutorial) under compiler.compile, compared with eager on CPU-sized inputs."""

import copy

import pytest
import scipy.fft
import torch
import torchvision

import compiler

from .helpers import RecordingBackend, T, assert_explain, assert_same, check, neg, pos

# ---- foo / opt_foo2 / MyModule ----------------------------------------------------------


def foo(x, y):
    a = torch.sin(x)
    b = torch.cos(y)
    return a + b


def foo_002(x, y):  # seed 002 reads x twice
    a = torch.sin(x)
    b = torch.cos(x)
    return a + b


def test_foo_default_backend():
    opt_foo1 = compiler.compile(foo)
    x, y = torch.randn(10, 10), torch.randn(10, 10)
    assert torch.allclose(opt_foo1(x, y), foo(x, y), atol=1e-6)


def test_foo_both_seed_versions():
    check(foo, T(10, 10), T(10, 10), graphs=1, breaks=0)
    check(foo_002, T(10, 10), T(10, 10), graphs=1, breaks=0)


def test_opt_foo2_decorator():
    @compiler.compile
    def opt_foo2(x, y):
        a = torch.sin(x)
        b = torch.cos(y)
        return a + b

    x, y = torch.randn(10, 10), torch.randn(10, 10)
    assert torch.allclose(opt_foo2(x, y), foo(x, y), atol=1e-6)


class MyModule(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(100, 10)

    def forward(self, x):
        return torch.nn.functional.relu(self.lin(x))


def test_my_module_default_backend():
    mod = MyModule()
    opt_mod = compiler.compile(mod)
    x = torch.randn(10, 100)
    assert torch.allclose(opt_mod(x), mod(x), atol=1e-5)


def test_my_module_eval_wrapper_002():
    """Seed 002 compiles `eval(mod, inp)` rather than the module itself."""

    def eval_(mod, inp):
        return mod(inp)

    mod = MyModule()
    check(eval_, mod, T(10, 100), graphs=1, breaks=0)


# ---- f1, f2, f3 -------------------------------------------------------------------------


def f1(x, y):
    if x.sum() < 0:
        return -y
    return y


def test_f1_both_signs():
    compile_f1 = compiler.compile(f1, backend="eager")
    inp1, inp2 = torch.randn(5, 5), torch.randn(5, 5)
    assert torch.allclose(f1(inp1, inp2), compile_f1(inp1, inp2))
    assert torch.allclose(f1(-inp1, inp2), compile_f1(-inp1, inp2))
    check(f1, pos(5, 5), T(5, 5))
    check(f1, neg(5, 5), T(5, 5))


def test_f1_default_backend():
    compile_f1 = compiler.compile(f1)
    inp1, inp2 = torch.randn(5, 5), torch.randn(5, 5)
    for x in (inp1, -inp1):
        assert torch.allclose(f1(x, inp2), compile_f1(x, inp2))


def f2(x, y):
    return x + y


def test_f2_with_an_int():
    compile_f2 = compiler.compile(f2, backend="eager")
    inp1 = torch.randn(5, 5)
    assert torch.allclose(f2(inp1, 3), compile_f2(inp1, 3))
    check(f2, T(5, 5), 3, graphs=1, breaks=0)


def f3(x):
    x = x * 2
    x = scipy.fft.dct(x.numpy())
    x = torch.from_numpy(x)
    x = x * 2
    return x


def test_f3_with_scipy():
    compile_f3 = compiler.compile(f3, backend="eager")
    inp2 = torch.randn(5, 5)
    assert torch.allclose(f3(inp2), compile_f3(inp2))
    check(f3, T(5, 5))


# ---- torchvision models with fullgraph=True ----------------------------------------------


@pytest.mark.parametrize("name", ["resnet18", "densenet121"])
def test_torchvision_model_fullgraph(name):
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)().eval()
    backend = RecordingBackend()
    opt_model = compiler.compile(copy.deepcopy(model), backend=backend, fullgraph=True)
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        expected = model(x)
        got = opt_model(x)
    assert_same(expected, got, atol=1e-4, rtol=1e-4)
    assert backend.count == 1


def test_resnet18_train_mode_updates_batchnorm_stats():
    torch.manual_seed(0)
    model = torchvision.models.resnet18()
    comp_model = copy.deepcopy(model)
    opt_model = compiler.compile(comp_model, backend="eager", fullgraph=True)
    x = torch.randn(2, 3, 64, 64)
    assert_same(model(x), opt_model(x.clone()), atol=1e-4, rtol=1e-4)
    assert_same(
        model.state_dict(),
        comp_model.state_dict(),
        "state after a train step",
        atol=1e-5,
        rtol=1e-5,
    )


def test_train_step_with_custom_backend():
    """Seed 000's train(): forward, loss, backward and an optimizer step, all compiled."""
    torch.manual_seed(0)
    model = MyModule()
    comp_model = copy.deepcopy(model)
    opt = torch.optim.Adam(model.parameters())
    comp_opt = torch.optim.Adam(comp_model.parameters())

    def train(mod, optimizer, data):
        optimizer.zero_grad(True)
        pred = mod(data[0])
        loss = torch.nn.CrossEntropyLoss()(pred, data[1])
        loss.backward()
        optimizer.step()
        return loss

    train_opt = compiler.compile(train, backend=RecordingBackend())
    for _ in range(2):
        data = (torch.randn(4, 100), torch.randint(10, (4,)))
        assert_same(
            train(model, opt, data).detach(), train_opt(comp_model, comp_opt, data).detach()
        )
        assert_same(
            model.state_dict(),
            comp_model.state_dict(),
            "weights after the step",
            atol=1e-6,
            rtol=1e-5,
        )


# ---- bar: custom backend, explain, fullgraph, export --------------------------------------


def bar(a, b):
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
    return x * b


def test_custom_backend_sees_three_graphs_over_both_signs(capsys):
    graphs = []

    def custom_backend(gm, example_inputs):
        print("custom backend called with FX graph:")
        gm.graph.print_tabular()
        graphs.append(gm)
        return gm.forward

    opt_bar = compiler.compile(bar, backend=custom_backend)
    inp1, inp2 = torch.randn(10), torch.randn(10)
    assert_same(bar(inp1, inp2), opt_bar(inp1, inp2))
    assert_same(bar(inp1, -inp2), opt_bar(inp1, -inp2))
    assert len(graphs) == 3
    assert capsys.readouterr().out.count("custom backend called with FX graph:") == 3


def test_recording_backend_three_distinct_graphs():
    backend = RecordingBackend()
    opt_bar = compiler.compile(bar, backend=backend)
    inp1, inp2 = torch.randn(10), torch.randn(10)
    opt_bar(inp1, inp2)
    opt_bar(inp1, -inp2)
    assert backend.count == 3
    codes = {gm.code for gm in backend.graphs}
    assert len(codes) == 3, "graph 1 (x = a / (abs(a) + 1)), 2 (b * -1; x * b) and 3 (x * b) differ"
    # further calls on either sign reuse those three graphs
    for sign in (1, -1, 1, -1):
        assert_same(bar(inp1, sign * inp2), opt_bar(inp1, sign * inp2))
    assert backend.count == 3


def test_explain_bar_two_graphs_one_break():
    explain_output = compiler.explain(bar)(torch.randn(10), torch.randn(10))
    assert explain_output.graph_count == 2
    assert explain_output.graph_break_count == 1
    assert len(explain_output.graphs) == 2
    assert len(explain_output.ops_per_graph) == 2
    assert explain_output.op_count == sum(len(ops) for ops in explain_output.ops_per_graph)
    assert explain_output.out_guards
    (reason,) = explain_output.break_reasons
    assert "if b.sum() < 0:" in reason.user_stack[-1].text
    assert reason.user_stack[-1].lineno == bar.__code__.co_firstlineno + 2
    text = str(explain_output)
    assert (
        "Graph Count: 2" in text or "graph count: 2" in text.lower() or "2 graphs" in text.lower()
    ), text
    assert "b.sum() < 0" in text or str(reason.user_stack[-1].lineno) in text, text


def test_explain_bar_each_sign():
    assert_explain(bar, [T(10), pos(10)], graphs=2, breaks=1)
    assert_explain(bar, [T(10), neg(10)], graphs=2, breaks=1)


def test_fullgraph_bar_raises_naming_the_branch():
    opt_bar = compiler.compile(bar, fullgraph=True)
    with pytest.raises(Exception) as info:
        opt_bar(torch.randn(10), torch.randn(10))
    assert "b.sum() < 0" in str(info.value), str(info.value)


def test_export_bar_raises_naming_the_break():
    with pytest.raises(Exception) as info:
        compiler.export(bar, torch.randn(10), torch.randn(10))
    assert "b.sum() < 0" in str(info.value), str(info.value)


def _single(out):
    return out[0] if isinstance(out, (tuple, list)) and len(out) == 1 else out


@pytest.mark.parametrize("name", ["resnet18"])
def test_export_model(name):
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)().eval()
    gm, guards = compiler.export(model, torch.randn(1, 3, 64, 64))
    assert isinstance(gm, torch.fx.GraphModule)
    assert guards is not None
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        assert_same(model(x), _single(gm(x)), atol=1e-4, rtol=1e-4)


def test_export_function_without_break():
    gm, _ = compiler.export(foo, torch.randn(10, 10), torch.randn(10, 10))
    x, y = torch.randn(10, 10), torch.randn(10, 10)
    assert_same(foo(x, y), _single(gm(x, y)))


# ---- seed 002's spelling: dynamo.optimize(backend, nopython=...) -------------------------


def test_optimize_spelling_002():
    opt_foo1 = compiler.optimize("inductor")(foo_002)
    x, y = torch.randn(10, 10), torch.randn(10, 10)
    assert torch.allclose(opt_foo1(x, y), foo_002(x, y), atol=1e-6)

    @compiler.optimize("eager")
    def opt_foo2(x, y):
        a = torch.sin(x)
        b = torch.cos(x)
        return a + b

    assert torch.allclose(opt_foo2(x, y), foo_002(x, y), atol=1e-6)


def test_optimize_custom_backend_and_nopython_002():
    backend = RecordingBackend()
    opt_bar = compiler.optimize(backend)(bar)
    inp1, inp2 = torch.randn(10), torch.randn(10)
    assert_same(bar(inp1, inp2), opt_bar(inp1, inp2))
    assert_same(bar(inp1, -inp2), opt_bar(inp1, -inp2))
    assert backend.count == 3
    strict_bar = compiler.optimize("eager", nopython=True)(bar)
    with pytest.raises(Exception) as info:
        strict_bar(torch.randn(10), torch.randn(10))
    assert "b.sum() < 0" in str(info.value), str(info.value)
