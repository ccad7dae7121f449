"""C++ kernels of channels-last graphs (compiler/lowering/core.py: NHWC around 2-d
convolutions on CPU) and of loops specialised where padding and concatenation conditions
are constant (compiler/codegen/cpp.py `_specialised`, compiler/ir/ranges.py), each compared
with eager and the IR interpreter."""

from __future__ import annotations

import torch
from torch import nn

from compiler.backends.inductor import compile_fx
from compiler.records import GraphRecord, compiling_graph
from tests.codegen.helpers import check, compile_and_run


def _kernels(record, part: str = "") -> list[str]:
    return [k.source for k in record.kernels if k.language == "cpp" and part in k.name]


def _bn(c: int) -> nn.BatchNorm2d:
    bn = nn.BatchNorm2d(c)
    bn.running_mean.uniform_(-0.5, 0.5)
    bn.running_var.uniform_(0.5, 2.0)
    bn.weight.data.uniform_(0.5, 1.5)
    bn.bias.data.uniform_(-0.2, 0.2)
    return bn


class ConvBlock(nn.Module):
    """conv -> BN -> ReLU -> padded max pool -> conv, returning a 4-d feature map."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 16, 3, padding=1), _bn(16)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.conv2 = nn.Conv2d(16, 8, 1)

    def forward(self, x):
        return self.conv2(self.pool(torch.relu(self.bn1(self.conv1(x))))) + 1


def test_convolution_graph_runs_channels_last_and_returns_eager_strides():
    model = ConvBlock().eval()
    x = torch.randn(2, 3, 13, 11)
    record = check(model, x, rtol=1e-4, atol=1e-4)
    assert any("channels-last" in note for note in record.notes)
    # conv outputs, the pool and the pointwise kernels are NHWC; the graph output is not
    assert "(2, 16, 13, 11), (2288, 1, 176, 16)" in record.wrapper_source
    with torch.no_grad():
        out, _, _ = compile_and_run(model, x)
    assert out.stride() == model(x).stride() == (7 * 6 * 8, 7 * 6, 6, 1)


def test_max_pool_windows_are_specialised_at_the_padding_and_keep_nan():
    x = torch.randn(2, 16, 9, 10)
    x[0, 3, 4, 4] = float("nan")
    x[1, 5, 0, 0] = float("nan")
    x[1, 6, :, :] = -float("inf")
    record = check(ConvBlock().eval(), x[:, :3], rtol=1e-4, atol=1e-4)
    pool = _kernels(record, "max_pool2d")[0]
    assert "if (" in pool and "? in_ptr" not in pool.split("{", 1)[1]  # no masked loads
    for layout in (torch.contiguous_format, torch.channels_last):
        check(
            lambda a: torch.nn.functional.max_pool2d(a.relu(), 3, 2, 1),
            x.contiguous(memory_format=layout),
        )
        check(lambda a: torch.nn.functional.avg_pool2d(a, 3, 1, 1) * 2, x)


class DenseBlock(nn.Module):
    """DenseNet's pattern: each layer reads BN+ReLU of the concatenation of all earlier
    feature maps, so every BN+ReLU kernel reads a growing number of pieces."""

    def __init__(self, c: int = 8, growth: int = 4, layers: int = 4) -> None:
        super().__init__()
        self.norms = nn.ModuleList(_bn(c + k * growth) for k in range(layers))
        self.convs = nn.ModuleList(
            nn.Conv2d(c + k * growth, growth, 3, padding=1) for k in range(layers)
        )

    def forward(self, x):
        features = [x]
        for norm, conv in zip(self.norms, self.convs):
            features.append(conv(torch.relu(norm(torch.cat(features, 1)))))
        return torch.cat(features, 1).mean((2, 3))


def test_dense_block_reads_each_concatenation_piece_in_its_own_loop():
    block = DenseBlock().eval()
    record = check(block, torch.randn(2, 8, 6, 7), rtol=1e-4, atol=1e-4)
    cats = _kernels(record, "cat")
    assert cats
    for source in cats:
        body = source.split("{", 1)[1]
        assert "? in_ptr" not in body  # no masked loads: one piece per loop
    # the last BN+ReLU reads 4 pieces along the channels, the innermost (NHWC) loop
    assert any(src.count("#pragma omp simd") >= 4 for src in cats)


def test_concatenation_and_padding_along_outer_and_inner_dims_without_convolutions():
    a, b, c = torch.randn(3, 5, 7), torch.randn(3, 2, 7), torch.randn(3, 5, 4)
    record = check(lambda p, q: torch.cat([p, q.exp()], 1).relu() * 2, a, b)
    assert "? in_ptr" not in _kernels(record)[0].split("{", 1)[1]
    check(lambda p, r: torch.cat([r, p.sin(), r], 2) + 1, a, c)
    check(lambda p: torch.nn.functional.pad(p, (2, 3, 1, 0), value=-1.5).cos(), a)
    check(lambda p: torch.nn.functional.pad(p, (0, 0, 1, 1)).sum(1), a)


def test_training_graphs_keep_eager_layouts_and_gradients_match():
    model = ConvBlock().eval()
    gm = torch.fx.symbolic_trace(model)
    x = torch.randn(2, 3, 8, 8, requires_grad=True)
    record = GraphRecord(gm, gm.code, len(gm.graph.nodes))
    with compiling_graph(record):
        compiled = compile_fx(gm, [x])
    out = compiled(x)
    out.sum().backward()
    grad, x.grad = x.grad, None
    expected = model(x)
    expected.sum().backward()
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(grad, x.grad, rtol=1e-4, atol=1e-4)
    assert record.fallback is None
    assert not any("channels-last" in note for note in record.notes)


def test_batch_norm_scale_is_computed_once_per_channel():
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), _bn(16), nn.ReLU()).eval()
    record = check(model, torch.randn(2, 3, 20, 20), rtol=1e-4, atol=1e-4)
    per_pixel = [src for src in _kernels(record, "relu") if "16; ++" in src]
    assert per_pixel and all("sqrtf" not in src for src in per_pixel)
    assert any("sqrtf" in src for src in _kernels(record))  # in a kernel over 16 channels


class LateStage(nn.Module):
    """A wide convolution on few pixels (resnet's last stage) after a narrow one."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(8, 256, 3, padding=1)
        self.bn = _bn(256)
        self.conv2 = nn.Conv2d(256, 256, 3, padding=1)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv1(x)))
        return self.conv2(y) + y


def test_weight_heavy_convolutions_stay_nchw_without_copying_the_weight():
    model = LateStage().eval()
    gm = torch.fx.symbolic_trace(model)
    record = check(gm, torch.randn(2, 8, 3, 3), rtol=1e-4, atol=1e-4)
    convs = [line for line in record.wrapper_source.splitlines() if "torch.convolution(" in line]
    # conv1 (tiny weight) runs NHWC on copies; conv2 takes its 256x256x3x3 weight as it is
    # (a parameter: a constant of the graph) and NCHW activations
    assert "ensure_layout(buf2, (2, 256, 3, 3), (2304, 1, 768, 256))" in record.wrapper_source
    assert ", const6, " in convs[1]
    assert "(2, 256, 3, 3), (2304, 9, 3, 1)" in record.wrapper_source


class PatchesThenWindows(nn.Module):
    """Swin's pattern: a convolution embeds patches, the rest works on a sequence: padded
    windows of it as (B, H, W, C) into a linear layer, and attention with a bias gathered
    from a table plus a mask."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Conv2d(3, 16, 4, stride=4)
        self.norm = nn.LayerNorm(16)
        self.proj = nn.Linear(16, 8)
        self.table = nn.Parameter(torch.randn(25, 4))
        self.register_buffer("index", torch.randint(0, 25, (64,)))

    def forward(self, x, mask, q):
        h = self.norm(self.embed(x).flatten(2).transpose(1, 2))  # (2, 64, 16)
        windows = nn.functional.pad(h.view(2, 8, 8, 16), (0, 0, 0, 2, 0, 2))  # (2, 10, 10, 16)
        bias = self.table[self.index].view(8, 8, 4).permute(2, 0, 1).contiguous()
        scores = bias.unsqueeze(0) + mask.masked_fill(mask != 0, -100.0).unsqueeze(1)
        attended = nn.functional.scaled_dot_product_attention(q, q * 2, q, attn_mask=scores)
        return self.proj(windows), attended


def test_four_dimensional_values_of_no_nhwc_activation_keep_eager_strides():
    """In a graph with a convolution every 4-d buffer was NHWC: Swin's (B, H, W, C) windows
    then had their H innermost (a layer norm over C read it 56 floats apart) and its
    attention bias its 3 heads (a kernel vectorised over the heads, and the attention
    copying the bias back)."""
    model = PatchesThenWindows().eval()
    x, mask = torch.randn(2, 3, 32, 32), (torch.rand(3, 8, 8) > 0.5).float()
    q = torch.randn(3, 4, 8, 16)
    record = check(model, x, mask, q, rtol=1e-4, atol=1e-5)
    assert any("channels-last" in note for note in record.notes)
    assert "(2, 16, 8, 8), (1024, 1, 128, 16)" in record.wrapper_source  # the convolution's
    sizes = {"(2, 10, 10, 16)": "(1600, 160, 16, 1)", "(3, 4, 8, 8)": "(256, 64, 8, 1)"}
    for size, strides in sizes.items():
        lines = [s for s in record.wrapper_source.splitlines() if f"empty_strided({size}" in s]
        assert lines and all(strides in line for line in lines), record.wrapper_source
