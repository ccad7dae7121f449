"""Blocks of torchvision models that benchmarks/models.py found failing, at small sizes."""

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


def test_convnext_block():
    model = torch.nn.Sequential(CNBlock(16, 1e-6, 0.0), CNBlock(16, 1e-6, 0.0))
    check_model(model, lambda: (torch.randn(2, 16, 8, 8),))
