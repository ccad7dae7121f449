"""The models of benchmarks/models.py: torchvision, timm and Hugging Face transformers suites.

Every model is built with random weights (nothing is downloaded): torchvision with
`weights=None`, timm with `pretrained=False`, transformers from their config classes. Random
draws inside the model (dropout, stochastic depth, drop-path) are switched off, because a
compiled model draws different random numbers than eager and its results could not be
compared; in eval mode they are inactive anyway.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

SUITES = ("torchvision", "timm", "transformers")


@dataclass(frozen=True)
class ModelSpec:
    """How to build one model and its inputs."""

    name: str
    suite: str
    build: Callable[[], torch.nn.Module]
    kind: str = "image"  # a key of INPUT_KINDS
    fixed_size: int | None = None  # the input size the model requires: image side, mel frames
    default_size: int = 224  # the image size used where --size is too small for the model
    vocab: int = 0  # text models: ids are drawn from range(vocab); "mel": the mel bins


def _image(spec: ModelSpec, batch: int, size: int, seq: int, device: str, dtype: torch.dtype):
    side = spec.fixed_size or size
    return (torch.randn(batch, 3, side, side, device=device, dtype=dtype),)


def _text(spec: ModelSpec, batch: int, size: int, seq: int, device: str, dtype: torch.dtype):
    return (torch.randint(spec.vocab, (batch, seq), device=device),)


def _seq2seq(spec: ModelSpec, batch: int, size: int, seq: int, device: str, dtype: torch.dtype):
    """Encoder ids, their mask (the last quarter of the second row padded) and decoder ids,
    in the positional order of T5Model and BartModel."""
    ids = torch.randint(spec.vocab, (batch, seq), device=device)
    mask = torch.ones(batch, seq, dtype=torch.long, device=device)
    mask[-1, seq - seq // 4 :] = 0
    return ids, mask, torch.randint(spec.vocab, (batch, seq), device=device)


def _audio(spec: ModelSpec, batch: int, size: int, seq: int, device: str, dtype: torch.dtype):
    """A waveform that wav2vec2's feature encoder (stride 320) turns into about `seq` frames."""
    return (torch.randn(batch, 320 * seq + 80, device=device, dtype=dtype),)


def _mel(spec: ModelSpec, batch: int, size: int, seq: int, device: str, dtype: torch.dtype):
    """Log-mel features in the frames Whisper's encoder requires (twice its positions: its
    strided conv halves them)."""
    return (torch.randn(batch, spec.vocab, spec.fixed_size, device=device, dtype=dtype),)


INPUT_KINDS: dict[str, Callable[..., tuple[torch.Tensor, ...]]] = {
    "image": _image,
    "text": _text,
    "seq2seq": _seq2seq,
    "audio": _audio,
    "mel": _mel,
}


def make_inputs(
    spec: ModelSpec, batch: int, size: int, seq: int, device: str, dtype: torch.dtype
) -> tuple[torch.Tensor, ...]:
    """Fresh random inputs (seeded by the caller); a fixed-size model gets its own size."""
    return INPUT_KINDS[spec.kind](spec, batch, size, seq, device, dtype)


def disable_randomness(model: torch.nn.Module) -> None:
    """Zero every dropout-like probability so a compiled train step can match eager's."""
    for module in model.modules():
        if isinstance(module, torch.nn.modules.dropout._DropoutNd):
            module.p = 0.0
        # torchvision's StochasticDepth (p), timm's DropPath / DropBlock (drop_prob) and the
        # functional dropouts of timm's heads (drop_rate).
        for attr in ("drop_prob", "drop_rate", "drop_path_rate"):
            if isinstance(getattr(module, attr, None), float):
                setattr(module, attr, 0.0)
        if type(module).__name__ == "StochasticDepth":
            module.p = 0.0


# ---- torchvision ------------------------------------------------------------------------------

# Models that only run at one input size (patch grids, window partitions, inception's aux head).
TORCHVISION_FIXED = {
    "inception_v3": 299,
    "maxvit_t": 224,
    "swin_t": 224,
    "swin_s": 224,
    "swin_b": 224,
    "swin_v2_t": 256,
    "swin_v2_s": 256,
    "swin_v2_b": 256,
    "vit_b_16": 224,
    "vit_b_32": 224,
    "vit_l_16": 224,
    "vit_l_32": 224,
    "vit_h_14": 224,
}


def _torchvision_builder(name: str) -> Callable[[], torch.nn.Module]:
    def build() -> torch.nn.Module:
        import torchvision

        kwargs = {"init_weights": True} if name == "googlenet" else {}
        return torchvision.models.get_model(name, weights=None, **kwargs)

    return build


def torchvision_specs() -> list[ModelSpec]:
    """Every classification model of torchvision.models."""
    import torchvision

    names = torchvision.models.list_models(module=torchvision.models)
    return [
        ModelSpec(n, "torchvision", _torchvision_builder(n), fixed_size=TORCHVISION_FIXED.get(n))
        for n in names
    ]


# ---- timm -------------------------------------------------------------------------------------

# Small variants across families: the ten the issue names first, then more kinds of blocks
# (attention variants, MLP mixers, re-parameterised convs, normaliser-free nets, ...).
TIMM_MODELS = [
    # resnet / resnext
    "resnet18",
    "resnet26d",
    "resnet50",
    "seresnet18",
    "resnext26ts",
    "resnext50_32x4d",
    # efficientnet
    "efficientnet_b0",
    "efficientnet_lite0",
    "tf_efficientnet_b0",
    "efficientnetv2_rw_t",
    "tinynet_a",
    # mobilenets and other mobile CNNs
    "mobilenetv2_100",
    "mobilenetv3_small_100",
    "mobilenetv3_large_100",
    "tf_mobilenetv3_small_minimal_100",
    "mobilenetv4_conv_small",
    "lcnet_050",
    "fbnetc_100",
    "ghostnet_100",
    "mixnet_s",
    "mobileone_s0",
    # convnext
    "convnext_atto",
    "convnext_nano",
    "convnextv2_atto",
    # vit / deit
    "vit_tiny_patch16_224",
    "vit_small_patch16_224",
    "vit_base_patch32_224",
    "eva02_tiny_patch14_224",
    "deit_tiny_patch16_224",
    "deit_tiny_distilled_patch16_224",
    # swin
    "swin_tiny_patch4_window7_224",
    "swinv2_tiny_window8_256",
    "swinv2_cr_tiny_ns_224",
    # regnet
    "regnetx_002",
    "regnety_002",
    "regnetz_b16",
    # densenet
    "densenet121",
    "densenetblur121d",
    # more families
    "dla34",
    "rexnet_100",
    "hrnet_w18_small",
    "cspresnet50",
    "res2net50_26w_4s",
    "skresnet18",
    "nf_resnet26",
    "repvgg_a0",
    "inception_v3",
    "levit_128s",
    "cait_xxs24_224",
    "xcit_nano_12_p16_224",
    "mobilevit_xxs",
    "efficientformer_l1",
    "poolformer_s12",
    "mixer_s16_224",
    "resmlp_12_224",
    "edgenext_xx_small",
    "fastvit_t8",
    "efficientvit_b0",
    "maxvit_tiny_tf_224",
    "coatnet_0_rw_224",
    "pvt_v2_b0",
    "botnet26t_256",
]


def _timm_builder(name: str) -> Callable[[], torch.nn.Module]:
    def build() -> torch.nn.Module:
        import timm

        return timm.create_model(name, pretrained=False)

    return build


def _timm_spec(name: str) -> ModelSpec:
    """The cfg's input size is the model's fixed size when timm marks it so (patch grids,
    windows), else the size used where --size is too small."""
    import timm

    cfg = timm.get_pretrained_cfg(name)
    cfg = {} if cfg is None else cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg)
    size = cfg.get("input_size", (3, 224, 224))[-1]
    fixed = size if cfg.get("fixed_input_size") else None
    return ModelSpec(name, "timm", _timm_builder(name), fixed_size=fixed, default_size=size)


def timm_specs() -> list[ModelSpec]:
    return [_timm_spec(n) for n in TIMM_MODELS]


# ---- transformers -----------------------------------------------------------------------------


def _hf_builder(model_cls: str, config_cls: str, **config: object) -> Callable[[], torch.nn.Module]:
    def build() -> torch.nn.Module:
        import transformers

        cfg = getattr(transformers, config_cls)(**config)
        # Dropout probabilities live in the config (some reach F.dropout / SDPA as floats).
        for key, value in list(vars(cfg).items()):
            if isinstance(value, float) and ("dropout" in key or "pdrop" in key):
                setattr(cfg, key, 0.0)
        if hasattr(cfg, "use_cache"):
            cfg.use_cache = False
        return getattr(transformers, model_cls)(cfg)

    return build


def transformers_specs() -> list[ModelSpec]:
    """Base-size configs (their defaults), except the Llama-style decoder, which is small."""
    rows = [
        ("bert", "BertModel", "BertConfig", {}, 30522),
        ("distilbert", "DistilBertModel", "DistilBertConfig", {}, 30522),
        ("roberta", "RobertaModel", "RobertaConfig", {}, 50265),
        ("gpt2", "GPT2LMHeadModel", "GPT2Config", {}, 50257),
        ("t5_encoder", "T5EncoderModel", "T5Config", {}, 32128),
        (
            "llama_small",
            "LlamaForCausalLM",
            "LlamaConfig",
            {
                "hidden_size": 256,
                "intermediate_size": 688,
                "num_hidden_layers": 4,
                "num_attention_heads": 8,
                "num_key_value_heads": 4,
                "vocab_size": 32000,
                "max_position_embeddings": 512,
            },
            32000,
        ),
    ]
    specs = [
        ModelSpec(name, "transformers", _hf_builder(m, c, **cfg), kind="text", vocab=vocab)
        for name, m, c, cfg, vocab in rows
    ]
    specs.append(
        ModelSpec(
            "vit",
            "transformers",
            _hf_builder("ViTForImageClassification", "ViTConfig", num_labels=1000),
            fixed_size=224,
        )
    )
    return specs + _small_transformers()


# Decoders with rotary embeddings and grouped-query attention, ALiBi, windowed attention, an
# encoder-decoder and audio encoders, from small configs (issue 30's kinds of model).
_DECODER = {
    "hidden_size": 256,
    "intermediate_size": 688,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "vocab_size": 32000,
    "max_position_embeddings": 512,
}
_AUDIO = {
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "intermediate_size": 1024,
    "conv_dim": (256,) * 7,
}


def _small_transformers() -> list[ModelSpec]:
    rows = [
        ("mistral_small", "MistralForCausalLM", "MistralConfig", _DECODER, "text", 32000, None),
        ("qwen2_small", "Qwen2ForCausalLM", "Qwen2Config", _DECODER, "text", 32000, None),
        (
            "bloom_small",
            "BloomModel",
            "BloomConfig",
            {"hidden_size": 256, "n_layer": 4, "n_head": 8, "vocab_size": 32000},
            "text",
            32000,
            None,
        ),
        (
            "t5_small",
            "T5Model",
            "T5Config",
            {"d_model": 256, "d_ff": 1024, "num_layers": 4, "num_heads": 4, "d_kv": 64},
            "seq2seq",
            32128,
            None,
        ),
        (
            "swin_tiny",
            "SwinModel",
            "SwinConfig",
            {"embed_dim": 48, "depths": (2, 2, 2, 2), "num_heads": (3, 6, 12, 24)},
            "image",
            0,
            224,
        ),
        ("wav2vec2_small", "Wav2Vec2Model", "Wav2Vec2Config", _AUDIO, "audio", 0, None),
        (
            "whisper_encoder",
            "WhisperForAudioClassification",
            "WhisperConfig",
            {
                "d_model": 256,
                "encoder_layers": 4,
                "encoder_attention_heads": 4,
                "encoder_ffn_dim": 1024,
                "num_mel_bins": 80,
                "max_source_positions": 32,
            },
            "mel",
            80,
            64,
        ),
    ]
    return [
        ModelSpec(name, "transformers", _hf_builder(m, c, **cfg), kind, fixed_size=size, vocab=v)
        for name, m, c, cfg, kind, v, size in rows
    ]


def suite_specs(suite: str) -> list[ModelSpec]:
    """The models of one suite, or of all of them for "all"."""
    if suite == "all":
        return [s for name in SUITES for s in suite_specs(name)]
    return {
        "torchvision": torchvision_specs,
        "timm": timm_specs,
        "transformers": transformers_specs,
    }[suite]()
