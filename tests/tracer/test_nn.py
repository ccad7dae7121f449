"""torch.nn.functional calls and nn.Module forward calls: nested containers, buffers,
parameters, the training flag, BatchNorm updating its running statistics."""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import compiler

from .helpers import Cases, RecordingBackend, T, assert_same, check, check_module, pos

case = Cases()

# ---- torch.nn.functional ------------------------------------------------------------------


@case(T(4, 8), graphs=1, breaks=0)
def f_activations(x):
    return F.relu(x), F.gelu(x), F.silu(x), F.leaky_relu(x, 0.1), F.elu(x), F.hardtanh(x)


@case(T(4, 8), graphs=1, breaks=0)
def f_softmax_family(x):
    return F.softmax(x, dim=-1), F.log_softmax(x, dim=1), F.softmin(x, dim=0)


@case(T(4, 8), T(16, 8), T(16), graphs=1, breaks=0)
def f_linear(x, w, b):
    return F.linear(x, w, b), F.linear(x, w)


@case(T(2, 3, 8, 8), T(4, 3, 3, 3), graphs=1, breaks=0)
def f_conv2d_pool(x, w):
    y = F.conv2d(x, w, padding=1)
    return F.max_pool2d(y, 2), F.avg_pool2d(y, 2), F.adaptive_avg_pool2d(y, 1)


@case(T(2, 3, 10), T(5, 3, 3), graphs=1, breaks=0)
def f_conv1d(x, w):
    return F.conv1d(x, w, stride=2)


@case(T(4, 6), graphs=1, breaks=0)
def f_layer_norm(x):
    return F.layer_norm(x, (6,)), F.normalize(x, dim=1)


@case(T(4, 5), T(4, 5), graphs=1, breaks=0)
def f_losses(x, y):
    return F.mse_loss(x, y), F.l1_loss(x, y), F.smooth_l1_loss(x, y, reduction="sum")


@case(T(4, 5), graphs=1, breaks=0)
def f_cross_entropy(x):
    target = torch.tensor([0, 1, 4, 2])
    return F.cross_entropy(x, target), F.nll_loss(F.log_softmax(x, 1), target)


@case(T(2, 3, 4, 4), graphs=1, breaks=0)
def f_pad_interpolate(x):
    return F.pad(x, (1, 1, 2, 0)), F.interpolate(x, scale_factor=2, mode="nearest")


@case(T(4, 6), graphs=1, breaks=0)
def f_dropout_eval(x):
    return F.dropout(x, p=0.5, training=False)


@case(T(5, dtype=torch.int64), T(10, 3), graphs=1, breaks=0)
def f_embedding_one_hot(i, w):
    return F.embedding(i, w), F.one_hot(i, 10)


@case(T(2, 4, 3), graphs=1, breaks=0)
def f_batch_norm_eval(x):
    mean, var = torch.zeros(4), torch.ones(4)
    return F.batch_norm(x, mean, var, training=False)


@case(T(2, 4, 6, grad=True), graphs=1, breaks=0, backward=True)
def f_grad_through_functional(x):
    return F.gelu(F.layer_norm(x, (6,))).sum(dim=-1)


@case(pos(3, 4), T(3, 4), graphs=1, breaks=0)
def f_binary_cross_entropy(p, y):
    return F.binary_cross_entropy_with_logits(y, p / 2)


@case(T(2, 4, 6), graphs=1, breaks=0)
def f_scaled_dot_product_attention(x):
    return F.scaled_dot_product_attention(x, x, x)


@pytest.mark.parametrize("fn,factories,expect", case)
def test_functional(fn, factories, expect):
    check(fn, *factories, **expect)


# ---- nn.Module forward calls --------------------------------------------------------------


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class NestedContainers(nn.Module):
    def __init__(self):
        super().__init__()
        self.seq = nn.Sequential(
            nn.Linear(8, 8), nn.ReLU(), nn.Sequential(nn.Linear(8, 8), nn.Tanh())
        )
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])
        self.heads = nn.ModuleDict({"a": nn.Linear(8, 2), "b": nn.Linear(8, 3)})

    def forward(self, x):
        x = self.seq(x)
        for layer in self.layers:
            x = x + layer(x)
        return {name: head(x) for name, head in self.heads.items()}


class WithBufferAndParameter(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(8))
        self.register_buffer("offset", torch.randn(8))
        self.register_buffer("calls", torch.zeros((), dtype=torch.int64))

    def forward(self, x):
        self.calls += 1  # a buffer mutated in forward, as BatchNorm's counter is
        return x * self.scale + self.offset


class TrainingFlag(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        if self.training:
            return self.lin(x) * 2
        return self.lin(x) - 1


class ConvBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.pool = nn.AdaptiveAvgPool2d(1)

    def forward(self, x):
        return self.pool(torch.relu(self.bn(self.conv(x)))).flatten(1)


class HelperMethod(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.alpha = 0.5  # a plain Python attribute, specialised

    def _mix(self, x, y):
        return self.alpha * x + (1 - self.alpha) * y

    def forward(self, x):
        return self._mix(self.lin(x), x)


class SubmoduleCalledTwice(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return self.lin(self.lin(x))


class KwargsForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x, *, bias=None, scale=1.0):
        y = self.lin(x) * scale
        return y if bias is None else y + bias


class TransformerBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        self.norm = nn.LayerNorm(8)
        self.ff = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8))

    def forward(self, x):
        a, _ = self.attn(x, x, x, need_weights=False)
        x = self.norm(x + a)
        return x + self.ff(x)


class ParameterList(nn.Module):
    def __init__(self):
        super().__init__()
        self.weights = nn.ParameterList([nn.Parameter(torch.randn(8)) for _ in range(3)])

    def forward(self, x):
        for w in self.weights:
            x = x * w
        return x


class RecurrentLoop(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.GRUCell(4, 6)

    def forward(self, xs):
        h = torch.zeros(xs.shape[1], 6)
        for t in range(xs.shape[0]):
            h = self.cell(xs[t], h)
        return h


MODULE_CASES = [
    pytest.param(MLP, [T(3, 8)], {"graphs": 1, "breaks": 0}, id="mlp"),
    pytest.param(
        NestedContainers,
        [T(3, 8)],
        {"graphs": 1, "breaks": 0},
        id="nested_sequential_modulelist_moduledict",
    ),
    pytest.param(
        WithBufferAndParameter, [T(3, 8)], {"graphs": 1, "breaks": 0}, id="buffer_and_parameter"
    ),
    pytest.param(
        TrainingFlag, [T(3, 8)], {"graphs": 1, "breaks": 0, "train": True}, id="training_flag_train"
    ),
    pytest.param(
        TrainingFlag, [T(3, 8)], {"graphs": 1, "breaks": 0, "train": False}, id="training_flag_eval"
    ),
    pytest.param(
        ConvBN,
        [T(2, 3, 6, 6)],
        {"graphs": 1, "breaks": 0, "train": True},
        id="batchnorm_train_updates_running_stats",
    ),
    pytest.param(
        ConvBN, [T(2, 3, 6, 6)], {"graphs": 1, "breaks": 0, "train": False}, id="batchnorm_eval"
    ),
    pytest.param(
        HelperMethod, [T(3, 8)], {"graphs": 1, "breaks": 0}, id="helper_method_and_python_attribute"
    ),
    pytest.param(
        SubmoduleCalledTwice, [T(3, 8)], {"graphs": 1, "breaks": 0}, id="submodule_called_twice"
    ),
    pytest.param(
        TransformerBlock,
        [T(2, 5, 8)],
        {"graphs": 1, "breaks": 0, "train": False},
        id="transformer_block",
    ),
    pytest.param(ParameterList, [T(3, 8)], {"graphs": 1, "breaks": 0}, id="parameter_list"),
    pytest.param(
        RecurrentLoop, [T(5, 2, 4)], {"graphs": 1, "breaks": 0}, id="recurrent_loop_over_shape"
    ),
    pytest.param(
        MLP, [T(3, 8)], {"graphs": 1, "breaks": 0, "backward": True}, id="mlp_backward_grads"
    ),
    pytest.param(
        ConvBN,
        [T(2, 3, 6, 6)],
        {"graphs": 1, "breaks": 0, "train": True, "backward": True},
        id="conv_bn_backward_grads",
    ),
]


@pytest.mark.parametrize("module_cls,factories,expect", MODULE_CASES)
def test_module(module_cls, factories, expect):
    check_module(module_cls, *factories, **expect)


def test_module_forward_with_keyword_arguments():
    torch.manual_seed(0)
    mod = KwargsForward()
    cmod = compiler.compile(mod, backend=RecordingBackend())
    x, b = torch.randn(3, 8), torch.randn(8)
    assert_same(mod(x, bias=b, scale=2.0), cmod(x, bias=b, scale=2.0))
    assert_same(mod(x), cmod(x))


def test_module_called_from_compiled_function():
    torch.manual_seed(0)
    mlp = MLP()

    def f(x):
        return mlp(x).softmax(-1)

    check(f, T(3, 8), graphs=1, breaks=0)


def test_module_passed_as_argument():
    torch.manual_seed(0)
    mlp = MLP()

    def f(m, x):
        return m(x) + 1

    check(f, mlp, T(3, 8), graphs=1, breaks=0)


class ChildrenLoop(nn.Module):
    """timm's RegStage: the blocks run by iterating the module's own children."""

    def __init__(self):
        super().__init__()
        self.a, self.act = nn.Linear(8, 8), nn.ReLU()
        self.again = self.a  # the same module twice: children() yields it once
        self.register_module("missing", None)  # skipped

    def forward(self, x):
        for block in self.children():
            x = block(x)
        for name, block in self.named_children():
            x = block(x) * len(name)
        return x


class BuildsContainers(nn.Module):
    """nn.Sequential / nn.ModuleList made in forward from the module's own layers."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.act = nn.Linear(8, 8), nn.Linear(8, 8), nn.ReLU()

    def forward(self, x):
        seq = nn.Sequential(self.a, self.act, self.b)
        layers = nn.ModuleList([self.a, self.b])
        same = layers.append(self.act) is layers
        y = seq(x)
        for layer in layers:
            y = layer(y)
        fresh = nn.Sequential(nn.Tanh(), nn.Sigmoid())  # modules without parameters, made here
        return y + seq[0](x) + seq[-1:](x) + fresh[1:](x), len(seq), len(layers), same


def test_sequential_and_module_list_built_in_forward():
    check_module(BuildsContainers, T(3, 8), graphs=1, breaks=0, backward=True)


class ReturnsASequential(BuildsContainers):
    def forward(self, x):
        return self.a(x), nn.Sequential(self.a, self.b)


def test_sequential_built_in_forward_is_made_for_real_from_the_same_layers():
    module = ReturnsASequential()
    compiled = compiler.compile(module, backend=RecordingBackend())
    x = torch.randn(2, 8)
    _, seq = compiled(x)
    _, again = compiled(x)
    assert isinstance(seq, nn.Sequential) and seq is not again
    assert seq[0] is module.a and seq[1] is module.b
    torch.testing.assert_close(seq(x), module.b(module.a(x)))
    assert compiler.explain(module.forward)(x).graph_break_count == 0


def test_module_children_and_named_children():
    check_module(ChildrenLoop, T(3, 8), graphs=1, breaks=0)


class SetsItsWindow(nn.Module):
    """Swin's layers: forward sets plain attributes from the input's size, then reads them."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.window, self.shift = 7, 3

    def forward(self, x):
        if x.shape[1] <= self.window:
            self.shift = 0
            self.window = (x.shape[1], x.shape[1])[0]
        return torch.roll(self.lin(x), self.shift, 1) * self.window


class ReplacesSetattr(SetsItsWindow):
    def __setattr__(self, name, value):
        super().__setattr__(name, value)


@pytest.mark.parametrize("cls", [SetsItsWindow, ReplacesSetattr])
def test_module_sets_plain_attributes_in_forward(cls):
    """`self.shift = 0` in forward is written after the graph as eager writes it, and the
    rest of the trace reads the new value: one graph, where it broke before (Swin: 9
    graphs). A class with its own __setattr__ runs it in Python."""
    eager = cls()
    mod = copy.deepcopy(eager)
    compiled = compiler.compile(mod, backend=RecordingBackend())
    for n in (9, 4, 4, 9):
        x = torch.randn(2, n, 8)
        assert_same(eager(x), compiled(x), f"length {n}")
        assert (mod.window, mod.shift) == (eager.window, eager.shift)
    entries = [e for f in compiler.inspect(compiled).functions for e in f.entries]
    breaks = [e.graph_break for e in entries if e.graph_break is not None]
    assert (not breaks) if cls is SetsItsWindow else breaks


def test_module_attribute_writes_keep_parameters_buffers_and_submodules():
    """nn.Module.__setattr__ registers parameters, buffers and submodules: those names are
    not written as plain attributes."""

    class SetsBuffer(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("steps", torch.zeros(()))
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            self.lin = self.lin  # a submodule: nn.Module.__setattr__'s own path
            return self.lin(x) + self.steps

    eager = SetsBuffer()
    compiled = compiler.compile(copy.deepcopy(eager))
    x = torch.randn(2, 4)
    assert_same(eager(x), compiled(x), "out")


class CountsCalls(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.calls = 0

    def forward(self, x):
        self.calls = self.calls + 1
        return self.lin(x) * self.calls


def test_a_frame_changing_what_its_own_guards_check_runs_eagerly_early():
    """`self.calls += 1` in forward: each entry's write makes its own guard fail on the
    next call. The second such recompile gives up on the frame, which runs eagerly from
    then on with a CompilerWarning naming the guard, where it recompiled on every call
    until config.cache_size_limit (8 compiles: on a real model, seconds each)."""
    eager = CountsCalls()
    mod = copy.deepcopy(eager)
    backend = RecordingBackend()
    compiled = compiler.compile(mod, backend=backend)
    with pytest.warns(compiler.CompilerWarning, match=r"L\['self'\]\.calls"):
        for _ in range(12):
            x = torch.randn(2, 8)
            assert_same(eager(x), compiled(x), "out")
            assert mod.calls == eager.calls
    (forward,) = [
        f for f in compiler.inspect(compiled).functions if f.qualname == "CountsCalls.forward"
    ]
    assert len(forward.entries) == 2  # the Linear it calls is compiled on its own after


# ---- forward hooks and pre-hooks, inlined --------------------------------------------------------


class _Hooked(nn.Module):
    """A submodule with a pre-hook that replaces its input, a hook that replaces its output
    and a hook that only looks (returns None)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.lin.register_forward_pre_hook(lambda m, args: (args[0] + 1,))
        self.lin.register_forward_hook(lambda m, args, out: out * 2)
        self.lin.register_forward_hook(lambda m, args, out: out.shape[0] > 100 or None)

    def forward(self, x):
        return self.lin(x).relu()


def test_forward_hooks_of_a_submodule_are_inlined():
    # each broke the graph ("Linear has hooks"), as torch.compile inlines them
    check_module(_Hooked, T(2, 3), graphs=1, breaks=0, backward=True)


def test_a_hook_added_or_removed_after_the_trace_is_seen():
    m = _Hooked()
    compiled = compiler.compile(m)
    x = torch.randn(2, 3)
    assert_same(m(x), compiled(x))
    handle = m.lin.register_forward_hook(lambda mod, args, out: out - 100)
    assert_same(m(x), compiled(x))
    handle.remove()
    assert_same(m(x), compiled(x))
