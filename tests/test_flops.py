"""Model FLOPs for MFU: the formulas against a hand count of a small ViT."""

from __future__ import annotations

from models.vit import ViTConfig
from train.flops import TRAIN_FLOPS_FACTOR, encoder_forward_flops, vit_train_flops_per_example


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
