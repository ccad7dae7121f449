"""Hugging Face transformers models, built from their config classes (random weights, no
downloads) at tiny sizes: each is captured in one graph with no break, as torch.compile
captures it, and gives eager's outputs (ModelOutput objects and key/value caches included)
through the `eager` backend and the default `inductor` backend (C++ kernels on CPU), in eval
mode and, for training, with the same gradients."""

import copy
from collections.abc import Callable

import pytest
import torch

import compiler

transformers = pytest.importorskip("transformers")

BATCH, SEQ, VOCAB = 2, 16, 100
_SMALL = {
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "intermediate_size": 128,
}


def _ids() -> torch.Tensor:
    return torch.randint(0, VOCAB, (BATCH, SEQ))


def _bert():
    return transformers.BertModel(transformers.BertConfig(vocab_size=VOCAB, **_SMALL))


def _distilbert():
    config = transformers.DistilBertConfig(
        vocab_size=VOCAB, n_layers=2, dim=64, n_heads=4, hidden_dim=128
    )
    return transformers.DistilBertModel(config)


def _roberta():
    return transformers.RobertaModel(transformers.RobertaConfig(vocab_size=VOCAB + 3, **_SMALL))


def _gpt2():
    config = transformers.GPT2Config(
        vocab_size=VOCAB,
        n_layer=2,
        n_embd=64,
        n_head=4,
        n_positions=32,
        bos_token_id=0,
        eos_token_id=0,
    )
    return transformers.GPT2Model(config)


def _t5_encoder():
    config = transformers.T5Config(
        vocab_size=VOCAB, num_layers=2, d_model=64, num_heads=4, d_kv=16, d_ff=128
    )
    return transformers.T5EncoderModel(config)


def _vit():
    config = transformers.ViTConfig(image_size=32, patch_size=8, **_SMALL)
    return transformers.ViTModel(config)


def _llama_config():
    return transformers.LlamaConfig(
        vocab_size=VOCAB, num_key_value_heads=2, max_position_embeddings=64, **_SMALL
    )


def _llama():
    return transformers.LlamaModel(_llama_config())


def _llama_lm():
    return transformers.LlamaForCausalLM(_llama_config())


MODELS: dict[str, tuple[Callable[[], torch.nn.Module], Callable[[], tuple]]] = {
    "bert": (_bert, lambda: (_ids(),)),
    "distilbert": (_distilbert, lambda: (_ids(),)),
    "roberta": (_roberta, lambda: (_ids() + 3,)),  # ids 0-2 are special (padding is 1)
    "gpt2": (_gpt2, lambda: (_ids(),)),
    "t5_encoder": (_t5_encoder, lambda: (_ids(),)),
    "vit": (_vit, lambda: (torch.randn(BATCH, 3, 32, 32),)),
    "llama": (_llama, lambda: (_ids(),)),
    "llama_causal_lm": (_llama_lm, lambda: (_ids(),)),
}


def _tensors(value) -> list[torch.Tensor]:
    """Every tensor of a model's output, in order: ModelOutput fields, and the keys and values
    of a cache."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, transformers.utils.ModelOutput):
        return _tensors(value.to_tuple())
    if isinstance(value, transformers.cache_utils.Cache):
        return [t for layer in value.layers for t in (layer.keys, layer.values)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def _assert_same_output(eager, compiled) -> None:
    assert type(compiled) is type(eager)
    assert list(compiled.keys()) == list(eager.keys())
    expected, got = _tensors(eager), _tensors(compiled)
    assert len(got) == len(expected)
    for e, c in zip(expected, got):
        torch.testing.assert_close(c, e, atol=1e-4, rtol=1e-4)


def _graphs(compiled) -> int:
    return sum(e.graph is not None for f in compiler.inspect(compiled).functions for e in f.entries)


def _check(name: str, backend: str, train: bool) -> None:
    make, inputs = MODELS[name]
    torch.manual_seed(0)
    eager = make().train(train)
    explained = compiler.explain(copy.deepcopy(eager))(*inputs())
    reasons = [b.reason for b in explained.break_reasons]
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), reasons
    compiler.reset()
    compiled = compiler.compile(copy.deepcopy(eager), backend=backend)
    for _ in range(2):  # the second call, on new inputs, reuses the first call's graph
        args = inputs()
        torch.manual_seed(1)  # the same dropout masks in training
        expected = eager(*args)
        torch.manual_seed(1)
        got = compiled(*args)
        _assert_same_output(expected, got)
        if train:
            sum(t.sum() for t in _tensors(expected) if t.requires_grad).backward()
            sum(t.sum() for t in _tensors(got) if t.requires_grad).backward()
            for (pname, p), q in zip(eager.named_parameters(), compiled.parameters()):
                if p.grad is None:
                    assert q.grad is None, pname
                else:
                    torch.testing.assert_close(q.grad, p.grad, atol=1e-4, rtol=1e-3, msg=pname)
            eager.zero_grad()
            compiled.zero_grad()
    assert _graphs(compiled) == 1


@pytest.mark.parametrize("backend", ["eager", "inductor"])
@pytest.mark.parametrize("name", list(MODELS))
def test_eval(name, backend):
    with torch.no_grad():
        _check(name, backend, train=False)


@pytest.mark.parametrize("name", list(MODELS))
def test_train_forward_backward(name):
    _check(name, "eager", train=True)


@pytest.mark.parametrize("name", ["bert", "llama"])
def test_train_forward_backward_inductor(name):
    _check(name, "inductor", train=True)


# Llama's rotary embedding (`inv_freq @ positions`, a matmul of a broadcast batch) kept the
# symbolic length only once fake ops of dynamic traces ran under the Python dispatcher: torch
# 2.11's C++ matmul read its value (tests/tracer/test_dynamic.py's composite ops).
@pytest.mark.parametrize("name", ["bert", "gpt2", "llama"])
def test_new_sequence_lengths_share_one_dynamic_graph(name):
    """A second sequence length recompiles once with a symbolic length (as torch.compile's
    automatic dynamic shapes do); the third reuses that graph."""
    make, _ = MODELS[name]
    torch.manual_seed(0)
    eager = make().eval()
    compiled = compiler.compile(copy.deepcopy(eager), backend="eager")
    with torch.no_grad():
        for seq in (SEQ, SEQ + 8, SEQ + 16):
            ids = torch.randint(0, VOCAB, (BATCH, seq))
            _assert_same_output(eager(ids), compiled(ids))
    entries = [e for f in compiler.inspect(compiled).functions for e in f.entries]
    assert len(entries) == 2 and all(e.graph_break is None for e in entries)


# The kinds of model issue 30's held-out set broke on: BLOOM's ALiBi bias built in forward
# from the padded attention mask (its slopes from math.log2 and powers, arange, cumsum,
# masked_fill), wav2vec2's and HuBERT's convolutional feature encoder with a padded
# waveform's mask, and Swin's layers, which set their shift and window sizes in forward.
def _bloom():
    config = transformers.BloomConfig(vocab_size=VOCAB, hidden_size=64, n_layer=2, n_head=4)
    return transformers.BloomModel(config)


def _padded_ids() -> dict:
    mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    mask[1, SEQ - 5 :] = 0
    return {"input_ids": _ids(), "attention_mask": mask}


_AUDIO = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "conv_dim": (16, 16, 16),
    "conv_stride": (5, 2, 2),
    "conv_kernel": (10, 3, 3),
    "num_conv_pos_embeddings": 16,
    "num_conv_pos_embedding_groups": 4,
}


def _wav2vec2():
    return transformers.Wav2Vec2Model(
        transformers.Wav2Vec2Config(feat_extract_norm="layer", do_stable_layer_norm=True, **_AUDIO)
    )


def _hubert():
    return transformers.HubertModel(transformers.HubertConfig(**_AUDIO))


def _padded_waveform() -> dict:
    wave = torch.randn(BATCH, 1600)
    mask = torch.ones(BATCH, 1600, dtype=torch.long)
    wave[1, 1200:], mask[1, 1200:] = 0.0, 0
    return {"input_values": wave, "attention_mask": mask}


def _swin():
    config = transformers.SwinConfig(
        image_size=32, patch_size=4, embed_dim=16, depths=(2, 2), num_heads=(2, 4), window_size=4
    )
    return transformers.SwinModel(config)


BROKE: dict[str, tuple[Callable[[], torch.nn.Module], Callable[[], dict]]] = {
    "bloom": (_bloom, _padded_ids),
    "wav2vec2": (_wav2vec2, _padded_waveform),
    "hubert": (_hubert, _padded_waveform),
    "swin": (_swin, lambda: {"pixel_values": torch.randn(BATCH, 3, 32, 32)}),
}


@pytest.mark.parametrize("backend", ["eager", "inductor"])
@pytest.mark.parametrize("name", list(BROKE))
def test_models_that_broke_are_one_graph(name, backend):
    make, inputs = BROKE[name]
    torch.manual_seed(0)
    eager = make().eval()
    with torch.no_grad():
        explained = compiler.explain(copy.deepcopy(eager))(**inputs())
        reasons = [b.reason for b in explained.break_reasons]
        assert (explained.graph_count, explained.graph_break_count) == (1, 0), reasons
        compiler.reset()
        compiled = compiler.compile(copy.deepcopy(eager), backend=backend)
        for _ in range(2):
            kwargs = inputs()
            _assert_same_output(eager(**kwargs), compiled(**kwargs))
    assert _graphs(compiled) == 1
