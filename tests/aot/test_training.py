"""Compiled training graphs against eager: 3 training steps of an MLP, a CNN with
BatchNorm and a transformer block (C++ kernels, the CPU default), one model through
Triton's interpreter, and the edge cases of the autograd wrapper."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import compiler
from tests.aot.helpers import compile_graph, train_and_compare, training_graphs


def _mlp() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(12, 32), torch.nn.GELU(), torch.nn.Linear(32, 16), torch.nn.Tanh(),
        torch.nn.Linear(16, 5),
    )  # fmt: skip


def _cnn() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4),
    )  # fmt: skip


def test_mlp_three_steps_match_eager():
    report = train_and_compare(
        _mlp(),
        lambda: (torch.randn(6, 12), torch.randint(5, (6,))),
        F.cross_entropy,
        optimizer=lambda p: torch.optim.Adam(p, lr=1e-2),
        atol=1e-5,
        rtol=1e-5,
    )
    (graph,) = training_graphs(report)
    parts = {k.graph for k in graph.kernels}
    assert parts == {"forward", "backward"}
    assert set(graph.aot_graphs) == {"joint", "forward", "backward"}


def test_cnn_with_batchnorm_three_steps_match_eager():
    model = _cnn()
    report = train_and_compare(
        model,
        lambda: (torch.randn(4, 3, 12, 12), torch.randint(4, (4,))),
        F.cross_entropy,
        optimizer=lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
        atol=1e-4,
        rtol=1e-4,
    )
    (graph,) = training_graphs(report)
    part = graph.partition
    # running_mean, running_var, num_batches_tracked of both BatchNorms are written back
    assert len(part.mutated_inputs) == 6
    assert any("running_mean" in name for name in part.mutated_inputs)
    saved = {s.name for s in part.saved}
    assert {"convolution", "convolution_1"} <= saved  # what BatchNorm's backward needs
    assert "relu" in part.recomputed  # cheap pointwise work is redone, not kept


class _AttentionBlock(torch.nn.Module):
    def __init__(self, dim: int = 16, heads: int = 2):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.norm1 = torch.nn.LayerNorm(dim)
        self.norm2 = torch.nn.LayerNorm(dim)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(dim, 2 * dim), torch.nn.GELU(), torch.nn.Linear(2 * dim, dim)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / (d // self.heads) ** 0.5
        y = att.softmax(-1) @ v
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.norm2(x))


def test_transformer_block_three_steps_match_eager():
    model = torch.nn.Sequential(_AttentionBlock(), torch.nn.Flatten(), torch.nn.Linear(5 * 16, 3))
    train_and_compare(
        model,
        lambda: (torch.randn(4, 5, 16), torch.randint(3, (4,))),
        F.cross_entropy,
        # not Adam: the key bias's gradient is zero up to rounding noise, which Adam's
        # normalisation would blow up to a full step in either direction
        optimizer=lambda p: torch.optim.SGD(p, lr=0.1, weight_decay=1e-2),
        atol=1e-4,
        rtol=1e-4,
    )


def test_aot_eager_backend_trains_through_the_partition():
    report = train_and_compare(
        _cnn(),
        lambda: (torch.randn(4, 3, 12, 12), torch.randint(4, (4,))),
        F.cross_entropy,
        backend="aot_eager",
        atol=1e-4,
        rtol=1e-4,
    )
    (graph,) = training_graphs(report)
    assert graph.kernels == [] and set(graph.aot_graphs) == {"joint", "forward", "backward"}


def test_transformer_encoder_layer_three_steps_match_eager():
    layer = torch.nn.TransformerEncoderLayer(
        16, 2, dim_feedforward=32, dropout=0.0, batch_first=True
    )
    train_and_compare(
        layer,
        lambda: (torch.randn(3, 5, 16), torch.randn(3, 5, 16)),
        F.mse_loss,
        atol=1e-4,
        rtol=1e-4,
    )


def test_mlp_through_interpreted_triton(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("COMPILER_CPU_EMITTER", "triton")
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    report = train_and_compare(
        model,
        lambda: (torch.randn(4, 6), torch.randn(4, 3)),
        F.mse_loss,
        atol=1e-5,
        rtol=1e-5,
    )
    (graph,) = training_graphs(report)
    langs = {(k.graph, k.language) for k in graph.kernels}
    assert ("backward", "triton") in langs and ("forward", "triton") in langs


# ---- the autograd wrapper's edge cases, through compile_fx ------------------------------


def _leaf(*shape):
    return torch.randn(*shape).requires_grad_()


def _grads(fn, inputs, backward):
    copies = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
    out = fn(*copies)
    backward(out)
    return out, [c.grad for c in copies]


def _check(fn, inputs, backward, compiled=None):
    compiled = compiled or compile_graph(fn, *inputs)[0]
    expected, e_grads = _grads(fn, inputs, backward)
    got, c_grads = _grads(compiled, inputs, backward)
    torch.testing.assert_close(got, expected)
    for g, e in zip(c_grads, e_grads):
        torch.testing.assert_close(g, e)


def test_outputs_without_grad_and_unused_outputs():
    def fn(x, w):
        y = x @ w
        return y.sin(), y.detach() * 2, y.argmax(1), y.cos()

    x, w = torch.randn(4, 3), _leaf(3, 5)
    compiled, _ = compile_graph(fn, x, w)
    out = compiled(x, w)
    assert out[0].requires_grad and out[3].requires_grad
    assert not out[1].requires_grad and not out[2].requires_grad
    # only the first output reaches the loss: the last one's gradient arrives as zeros
    _check(fn, [x, w], lambda out: out[0].sum().backward(), compiled)


def test_gradient_with_other_strides_than_traced():
    def fn(x, w):
        return (x @ w).relu()

    x, w = _leaf(4, 3), _leaf(3, 5)
    # .sum() sends an expanded (stride 0) gradient; .t() a transposed one
    _check(fn, [x, w], lambda out: out.sum().backward())
    _check(fn, [x, w], lambda out: (out.t() * torch.arange(4.0)).sum().backward())


def test_retain_graph_and_second_backward():
    def fn(x):
        return x.sin() * x

    x = _leaf(5)
    compiled, _ = compile_graph(fn, x)
    out = compiled(x)
    out.sum().backward(retain_graph=True)
    out.sum().backward()
    torch.testing.assert_close(x.grad, 2 * (x.cos() * x + x.sin()).detach())
    out = compiled(x)
    out.sum().backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        out.sum().backward()


def test_double_backward_is_a_clear_error():
    x = _leaf(5)
    compiled, _ = compile_graph(lambda x: x.pow(3), x)
    with pytest.raises(RuntimeError, match="double backward through a compiled training graph"):
        torch.autograd.grad(compiled(x).sum(), x, create_graph=True)


def test_outputs_aliasing_inputs_stay_views_of_them():
    def fn(x, w):
        return x.view(-1), (x * w).sum(), w[1:], x

    x, w = _leaf(2, 3), _leaf(2, 3)
    compiled, record = compile_graph(fn, x, w)
    assert record.partition is not None  # compiled, the views recreated outside the graph
    flat, total, tail, same = compiled(x, w)
    assert flat._base is x and tail._base is w and same is x
    _check(fn, [x, w], lambda out: (out[0].sum() * 2 + out[1] + out[2].sum()).backward(), compiled)
    before = x.detach().clone()
    with torch.no_grad():
        flat.add_(1)  # writes through to x, as eager's view does
    torch.testing.assert_close(x.detach(), before + 1)


def test_reshaped_input_left_in_a_local_at_the_backward_break():
    model = torch.nn.Linear(12, 3)
    twin = copy.deepcopy(model)

    def train(mod, x, y):
        x = x.view(x.shape[0], -1)  # still live at the break: a graph output aliasing x
        loss = F.cross_entropy(mod(x), y)
        loss.backward()
        return loss

    x, y = torch.randn(4, 3, 4), torch.randint(3, (4,))
    compiled = compiler.compile(train)
    torch.testing.assert_close(compiled(twin, x, y), train(model, x, y))
    torch.testing.assert_close(twin.weight.grad, model.weight.grad)
    (graph,) = compiler.inspect(compiled).graphs
    assert graph.partition is not None and not any("eagerly" in n for n in graph.notes)


def test_outputs_that_are_views_of_other_outputs_stay_views():
    def fn(x, w):
        h = x * w
        return h, h.view(-1), h.t()[1], h

    x, w = _leaf(2, 3), _leaf(2, 3)
    compiled, record = compile_graph(fn, x, w)
    assert record.partition is not None
    h, flat, col, same = compiled(x, w)
    assert flat._base is h and col._base is h and same is h

    def backward(out):
        (out[0].sum() + out[1].square().sum() + out[2].exp().sum()).backward()

    _check(fn, [x, w], backward, compiled)


def test_outputs_sharing_memory_nobody_holds_run_eagerly_with_note():
    def fn(x, w):
        h = x * w
        return h[0], h[1]

    x, w = _leaf(2, 3), _leaf(2, 3)
    compiled, record = compile_graph(fn, x, w)
    assert any("share memory" in n for n in record.notes)
    _check(fn, [x, w], lambda out: (out[0].sum() + out[1].square().sum()).backward(), compiled)


def test_outputs_that_are_views_can_be_modified_in_place():
    def fn(x, w):
        return (x @ w).t(), (x * 2).view(-1)

    x, w = torch.randn(2, 3), _leaf(3, 4)

    def backward(out):
        a, b = out
        a.mul_(2)  # eager allows it: the view's base is an intermediate
        (a * a).sum().backward()

    compiled, record = compile_graph(fn, x, w)
    assert not any("eagerly" in n for n in record.notes)
    _check(fn, [x, w], backward, compiled)


def test_no_grad_call_of_a_training_graph_returns_plain_outputs():
    def fn(x, w):
        return (x @ w).tanh()

    x, w = torch.randn(2, 3), _leaf(3, 4)
    compiled, _ = compile_graph(fn, x, w)
    with torch.no_grad():
        out = compiled(x, w)
    assert not out.requires_grad
    torch.testing.assert_close(out, (x @ w).tanh().detach())


class _Affine(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(4, 4))
        self.norm = torch.nn.BatchNorm1d(4)

    def forward(self, x):
        return torch.nn.functional.batch_norm(
            x @ self.weight, self.norm.running_mean, self.norm.running_var,
            self.norm.weight, self.norm.bias, True,
        ).relu()  # fmt: skip


def test_symbolically_traced_parameters_get_gradients():
    """A graph reading parameters and buffers as attributes (get_attr nodes), as
    torch.fx.symbolic_trace makes them: they become inputs of the training graph."""
    model = _Affine()
    twin = copy.deepcopy(model)
    x = torch.randn(6, 4)
    compiled, record = compile_graph(twin, x)
    for _ in range(2):
        model(x).square().sum().backward()
        compiled(x).square().sum().backward()
    for (name, p), (_, q) in zip(model.named_parameters(), twin.named_parameters()):
        torch.testing.assert_close(q.grad, p.grad, msg=name)
    torch.testing.assert_close(twin.norm.running_mean, model.norm.running_mean)
    assert record.partition is not None


def test_submodule_calls_with_parameters_run_eagerly_with_note():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    x = torch.randn(2, 4)
    compiled, record = compile_graph(model, x)
    compiled(x).sum().backward()
    assert model[0].weight.grad is not None
    assert any("calls submodule '0' with parameters" in n for n in record.notes)


def test_backward_needing_an_overwritten_input_runs_eagerly():
    def fn(buf, w):
        y = buf * w
        buf.add_(1)  # eager keeps `buf` for w's gradient, then overwrites it
        return y

    buf, w = torch.randn(3), _leaf(3)
    compiled, record = compile_graph(fn, buf.clone(), w)
    assert any("runs eagerly" in n for n in record.notes)
    out = compiled(buf, w)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


def test_records_name_user_lines_in_backward_kernels():
    def fn(x, w):
        h = torch.tanh(x @ w)
        return (h * h).sum()

    x, w = torch.randn(4, 3), _leaf(3, 5)
    compiled = compiler.compile(fn)
    compiled(x, w).backward()
    (graph,) = compiler.inspect(compiled).graphs
    backward = [k for k in graph.kernels if k.graph == "backward"]
    assert backward and any("tanh" in k.fused_nodes for k in backward)
    assert any("torch.tanh(x @ w)" in s.text for k in backward for s in k.source_lines)
    assert "tangent_0" in graph.aot_graphs["backward"]
    assert graph.wrapper_source.count("def call(args)") == 2


def test_backward_compiles_at_the_first_backward():
    def fn(x, w):
        return (x @ w).relu().sum()

    x, w = torch.randn(4, 3), _leaf(3, 5)
    compiled, record = compile_graph(fn, x, w)
    compiled(x, w)  # a forward with grad on, as an inference call without no_grad is
    assert {k.graph for k in record.kernels} == {"forward"}
    compiled(x, w).backward()
    assert {k.graph for k in record.kernels} == {"forward", "backward"}
    w_eager = w.detach().clone().requires_grad_()
    fn(x, w_eager).backward()
    torch.testing.assert_close(w.grad, w_eager.grad)


def test_reduce_overhead_mode_on_cpu_trains_like_the_default():
    train_and_compare(
        _mlp(),
        lambda: (torch.randn(6, 12), torch.randint(5, (6,))),
        F.cross_entropy,
        mode="reduce-overhead",
        atol=1e-5,
        rtol=1e-5,
    )


@pytest.mark.parametrize("emitter", ["cpp", "triton"])
def test_batch_norm_statistics_and_their_updates_are_one_kernel(emitter, monkeypatch):
    """Training batch norm: the per-channel sums, then mean, invstd and the running
    statistics' updates (shaped [1, C, 1, 1] and [C]) in the same reducing kernel, then one
    kernel normalising; 3 steps match eager."""
    monkeypatch.setenv("COMPILER_CPU_EMITTER", emitter)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 4),
    )  # fmt: skip
    report = train_and_compare(
        model,
        lambda: (torch.randn(4, 3, 6, 6), torch.randint(4, (4,))),
        F.cross_entropy,
        atol=1e-5,
        rtol=1e-5,
    )
    (graph,) = training_graphs(report)
    forward = [k for k in graph.kernels if k.graph == "forward" and k.language != "extern"]
    (statistics,) = [k for k in forward if "var" in k.name.split("_")]
    assert "_red_" in statistics.name and "rsqrt" in statistics.name.split("_")
    # the batch counter, the statistics, the normalisation, then the loss's two kernels
    assert len(forward) == 5, [k.name for k in forward]


def test_channels_last_training_matches_eager(monkeypatch):
    """The NHWC training path (CUDA's): saved activations stay NHWC for the backward, whose
    convolutions take NHWC gradients; parameters' gradients keep eager's layout. Run here on
    the CPU by adding it to the devices that train channels-last."""
    from compiler.backends import inductor as compile_fx_module

    monkeypatch.setattr(compile_fx_module, "TRAINING_CHANNELS_LAST", frozenset({"cpu"}))
    model = _cnn()
    report = train_and_compare(
        model,
        lambda: (torch.randn(4, 3, 12, 12), torch.randint(4, (4,))),
        F.cross_entropy,
        optimizer=lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
        atol=1e-4,
        rtol=1e-4,
    )
    (graph,) = training_graphs(report)
    assert any("channels-last" in n for n in graph.notes)
    assert graph.fallback is None


def test_steps_after_the_first_read_no_input_metadata(monkeypatch):
    """Through compiler.compile, a step's halves find their compiled entries by the global
    state alone: the tracer's guards pin the forward's inputs, and the backward's are laid
    out by its forward. Reading every input's shape and strides again cost ~0.5 ms a
    resnet18 step (hundreds of inputs)."""
    from compiler.aot import training
    from compiler.backends import inductor as fx

    model = _cnn()
    compiled = compiler.compile(lambda m, x: m(x).square().mean())
    calls = {"n": 0}
    for module, name in ((fx, "_signature"), (training, "_key")):
        real = getattr(module, name)

        def counted(args, real=real):
            calls["n"] += 1
            return real(args)

        monkeypatch.setattr(module, name, counted)
    for step in range(3):
        if step == 1:
            calls["n"] = 0  # compiled now: both halves have run once
        x = torch.randn(2, 3, 10, 10)
        loss, expected = compiled(model, x), model(x).square().mean()
        torch.testing.assert_close(loss, expected)
        loss.backward()
    assert calls["n"] == 0


def test_the_record_names_the_attention_kernel_of_a_training_graph_on_cpu():
    """Issue 29: the inspector says which of torch's attention kernels ran (a training graph
    on the CPU keeps the CPU flash attention op whole, forward and backward)."""

    class Attention(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = torch.nn.Linear(32, 3 * 32)

        def forward(self, x):
            q, k, v = self.qkv(x).view(2, 8, 3, 4, 8).permute(2, 0, 3, 1, 4).unbind(0)
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    model = Attention()
    compiled = compiler.compile(model)
    x = torch.randn(2, 8, 32, requires_grad=True)
    compiled(x).sum().backward()
    notes = [n for g in compiler.inspect(compiled).graphs for n in g.notes]
    assert any(n.startswith("attention forward: torch's FLASH_ATTENTION (CPU)") for n in notes)
