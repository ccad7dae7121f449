"""Blocks of torchvision models that benchmarks/models.py found failing, at small sizes."""

import pytest
import torch
from torchvision.models.convnext import CNBlock
from torchvision.ops import StochasticDepth

from tests.models.helpers import check_model


def test_stochastic_depth_logs_api_usage_without_a_break():
    # torchvision's ops call _log_api_usage_once(fn), which reads fn.__module__ and
    # fn.__class__: convnext and efficientnet broke the graph there, once per block.
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), StochasticDepth(0.0, "row"))
    report = check_model(model, lambda: (torch.randn(4, 8),))
    assert not [e.graph_break for e in report.entries if e.graph_break]


@pytest.mark.parametrize("train", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_convnext_block(train):
    model = torch.nn.Sequential(CNBlock(16, 1e-6, 0.0), CNBlock(16, 1e-6, 0.0))
    check_model(model, lambda: (torch.randn(2, 16, 8, 8),), train=train)


def test_small_vit_takes_the_attention_fast_path():
    # In eval mode under no_grad, nn.MultiheadAttention calls aten._native_multi_head_attention,
    # which returns None for the weights that its meta function gives as an empty tensor:
    # the extern call's outputs were unpacked by count and the graph fell back to eager.
    from torchvision.models import VisionTransformer

    model = VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64,
        num_classes=10,
    )  # fmt: skip
    report = check_model(model, lambda: (torch.randn(2, 3, 32, 32),))
    notes = [n for g in report.graphs for n in g.notes]
    assert any("_native_multi_head_attention" in n for n in notes)
