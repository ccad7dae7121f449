"""Blocks of timm models that benchmarks/models.py found failing, at small sizes."""

import pytest
import torch
from timm.models.byobnet import MobileOneBlock

from tests.models.helpers import check_model


def test_mobileone_block_adds_branches_to_a_number():
    # `out = 0; out += branch(x)` (kernel size 1 has no scale branch): the tracer recorded
    # operator.iadd on the literal 0, which the graph's Python could not even compile.
    model = torch.nn.Sequential(
        MobileOneBlock(8, 8, kernel_size=1, group_size=1),
        MobileOneBlock(8, 16, kernel_size=3, stride=2),
    )
    check_model(model, lambda: (torch.randn(2, 8, 8, 8),))


@pytest.mark.slow
def test_small_swin():
    # timm's PatchEmbed keeps its output format as a str Enum member: its guard printed the
    # member's repr (<Format.NHWC: 'NHWC'>) into the guard function's source.
    from timm.models.swin_transformer import SwinTransformer

    model = SwinTransformer(
        img_size=32, patch_size=4, window_size=4, embed_dim=16, depths=(1, 1), num_heads=(1, 2),
        num_classes=10,
    )  # fmt: skip
    check_model(model, lambda: (torch.randn(2, 3, 32, 32),))


def test_regnet_stages_iterate_their_children():
    # timm's RegStage.forward is `for block in self.children(): x = block(x)`; Module's
    # named_children dedupes through a set of modules, which broke the graph per stage.
    import timm

    model = timm.create_model("regnetx_002", pretrained=False)
    stages = torch.nn.Sequential(model.stem, model.s1, model.s2)
    check_model(stages, lambda: (torch.randn(2, 3, 32, 32),))


def test_poolformer_blocks():
    # poolformer's block continues a line with `\`; the C++ kernel header quoting it
    # swallowed the kernel's signature into the comment.
    from timm.models.metaformer import MetaFormerBlock

    model = torch.nn.Sequential(
        MetaFormerBlock(16, layer_scale_init_value=1e-5, res_scale_init_value=1.0),
        MetaFormerBlock(16, res_scale_init_value=1.0),
    )
    check_model(model, lambda: (torch.randn(2, 16, 8, 8),))


def test_efficientvit_attention_under_disabled_autocast():
    # LiteMLA runs its attention under torch.autocast(..., enabled=False): the call broke the
    # graph with its keywords dropped (enabled=False became the dtype) and raised.
    from timm.models.efficientvit_mit import LiteMLA

    model = LiteMLA(16, 16, dim=8)
    check_model(model, lambda: (torch.randn(2, 16, 8, 8),))
