"""Model FLOPs for MFU: the formulas against a hand count of a small ViT, and the Transformer's
against the kernels of an initialised model."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models.transformer import Transformer, TransformerConfig
from models.vit import ViTConfig
from train.flops import (TRAIN_FLOPS_FACTOR, bert_train_flops_per_example, encoder_forward_flops,
                         transformer_train_flops_per_example, vit_train_flops_per_example)


def test_encoder_flops_by_hand():
    # 1 layer, 10 tokens, width 4, MLP 8. Per token: Q, K, V, O (4 * 4*4 = 64 weights) and the
    # MLP (4*8 + 8*4 = 64 weights): 128 multiply-adds = 256 FLOPs, times 10 tokens = 2560.
    # Attention: QK^T and AV are each 10*10*4 = 400 multiply-adds: 1600 FLOPs.
    assert encoder_forward_flops(tokens=10, hidden=4, mlp_dim=8, layers=1) == 2560 + 1600
    assert encoder_forward_flops(tokens=10, hidden=4, mlp_dim=8, layers=3) == 3 * (2560 + 1600)


def test_vit_training_flops_by_hand():
    cfg = ViTConfig(num_classes=10, image_size=(8, 8), patch_size=4, hidden_size=4, num_layers=1,
                    num_heads=2, mlp_dim=8, pool="cls")
    patches, tokens = 4, 5  # 2 x 2 patches plus the class token
    patch_embedding = 2 * patches * (4 * 4 * 3) * 4          # 16*3 values -> 4, per patch
    encoder = 2 * tokens * (4 * 4 * 4 + 2 * 4 * 8) + 4 * tokens * tokens * 4
    head = 2 * 4 * 10
    assert vit_train_flops_per_example(cfg, channels=3) == TRAIN_FLOPS_FACTOR * (
        patch_embedding + encoder + head)
    hybrid = ViTConfig(**{**cfg.__dict__, "stem_channels": 2})
    stem = 2 * 8 * 8 * 9 * 3 * 2                               # 3x3x3 -> 2 at each of 64 pixels
    patch_embedding = 2 * patches * (4 * 4 * 2) * 4
    assert vit_train_flops_per_example(hybrid, channels=3) == TRAIN_FLOPS_FACTOR * (
        stem + patch_embedding + encoder + head)


def test_vit_pre_logits_head_flops_by_hand():
    """With a pre-logits layer (ViT Sec. 3.1: tanh(z W1 + b1) W2 + b2, head_hidden_size > 0) the
    head is two matmuls, d -> hidden and hidden -> classes, not one d -> classes."""
    cfg = ViTConfig(num_classes=10, image_size=(8, 8), patch_size=4, hidden_size=4, num_layers=1,
                    num_heads=2, mlp_dim=8, pool="mean", head_hidden_size=6)
    patches = tokens = 4                                      # 2 x 2 patches, no class token
    patch_embedding = 2 * patches * (4 * 4 * 3) * 4
    encoder = 2 * tokens * (4 * 4 * 4 + 2 * 4 * 8) + 4 * tokens * tokens * 4
    head = 2 * 4 * 6 + 2 * 6 * 10                             # 4 -> 6 (tanh), 6 -> 10 classes
    assert vit_train_flops_per_example(cfg, channels=3) == TRAIN_FLOPS_FACTOR * (
        patch_embedding + encoder + head)


@pytest.mark.parametrize("overrides", [
    dict(),                                          # d_k = d_v = d_model / h
    dict(head_dim=4, value_head_dim=16, num_kv_heads=1),  # Table 3 (B)-style and multi-query
    dict(num_encoder_layers=1, num_decoder_layers=3),
])
def test_transformer_flops_match_the_kernels_of_the_model(overrides):
    """The linear part equals 2 x (matmul weights applied per token) x tokens, counted here from
    the initialised model's own kernels; the rest is the attention term written out."""
    cfg = TransformerConfig(vocab_size=50, num_layers=2, d_model=16, d_ff=24, num_heads=4,
                            **overrides)
    source, target = 7, 5
    tokens = jnp.ones((1, 3), jnp.int32)
    params = nn.meta.unbox(Transformer(cfg).init(jax.random.PRNGKey(0), tokens, tokens)["params"])
    per_source, per_target = 0, 0
    for path, leaf in jax.tree_util.tree_leaves_with_path(params):
        names = [getattr(p, "key", "") for p in path]
        if names[-1] != "kernel":
            continue
        size = int(np.prod(leaf.shape))
        if names[0] == "encoder":
            per_source += size
        elif any(n.startswith("cross") for n in names) and names[-2] in ("key", "value"):
            per_source += size   # keys and values of the cross-attention: one per source token
        else:
            per_target += size
    per_target += int(np.prod(params["shared_embedding"]["embedding"].shape))  # output layer
    h, dk, dv = cfg.num_heads, cfg.qk_dim, cfg.v_dim
    scores = (cfg.encoder_layers * source * source
              + cfg.decoder_layers * (target * target + target * source)) * h * (dk + dv)
    expected = TRAIN_FLOPS_FACTOR * 2 * (per_source * source + per_target * target + scores)
    assert transformer_train_flops_per_example(cfg, source, target) == expected


def test_bert_flops_by_hand():
    """BERT-base at 128 tokens with 20 predictions, written out term by term."""
    from models.bert import BertConfig

    cfg = BertConfig()  # H 768, L 12, F 3072, V 30522, NSP
    h, f, v, t, p = 768, 3072, 30522, 128, 20
    per_layer = 2 * t * (4 * h * h + 2 * h * f) + 2 * 2 * t * t * h
    heads = 2 * p * (h * h + h * v) + 2 * (h * h + 2 * h)
    assert bert_train_flops_per_example(cfg, t, p) == TRAIN_FLOPS_FACTOR * (12 * per_layer + heads)
    no_nsp = BertConfig(nsp=False)
    assert bert_train_flops_per_example(cfg, t, p) - bert_train_flops_per_example(no_nsp, t, p) \
        == TRAIN_FLOPS_FACTOR * 2 * (h * h + 2 * h)


def test_mae_training_flops_by_hand():
    """models/mae.py: the patch embedding of every patch, the encoder over the class token and
    the K visible patches (or all N with mask tokens in the encoder), the decoder's input
    projection of those tokens, its blocks over the class token and all N, the pixel
    prediction of every patch."""
    from models.mae import MAEConfig, MAEDecoderConfig
    from train.flops import mae_train_flops_per_example

    encoder = ViTConfig(num_classes=0, image_size=(8, 8), patch_size=4, hidden_size=4,
                        num_layers=1, num_heads=2, mlp_dim=8, posemb="sincos_2d", pool="cls")
    cfg = MAEConfig(encoder, MAEDecoderConfig(hidden_size=8, num_layers=2, num_heads=2,
                                              mlp_dim=16), mask_ratio=0.5)
    n, k, pixels = 4, 2, 4 * 4 * 3                          # 2 x 2 patches, half visible
    embedding = 2 * n * pixels * 4
    encoded = 1 + k
    blocks = 2 * encoded * (4 * 4 * 4 + 2 * 4 * 8) + 4 * encoded * encoded * 4
    projection = 2 * encoded * 4 * 8
    decoder = 2 * (2 * (1 + n) * (4 * 8 * 8 + 2 * 8 * 16) + 4 * (1 + n) * (1 + n) * 8)
    predict = 2 * n * 8 * pixels
    assert mae_train_flops_per_example(cfg, channels=3) == TRAIN_FLOPS_FACTOR * (
        embedding + blocks + projection + decoder + predict)
    encoded = 1 + n                                          # Table 1c: every patch encoded
    blocks = 2 * encoded * (4 * 4 * 4 + 2 * 4 * 8) + 4 * encoded * encoded * 4
    projection = 2 * encoded * 4 * 8
    tokens = MAEConfig(encoder, cfg.decoder, mask_ratio=0.5, mask_token_in_encoder=True)
    assert mae_train_flops_per_example(tokens, channels=3) == TRAIN_FLOPS_FACTOR * (
        embedding + blocks + projection + decoder + predict)
