"""Model FLOPs per example and the peak they are compared against (MFU).

MFU (model FLOPs utilisation) = model FLOPs per step / step time / peak FLOP/s. Model FLOPs count
only the matrix multiplications the model needs (2 FLOPs per multiply-add), not what an
implementation spends on recomputation, so MFU is comparable across codebases.

A training step costs 3x the forward pass: the backward pass multiplies by each weight twice
(gradient with respect to the input and to the weight).
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp

TRAIN_FLOPS_FACTOR = 3  # forward + backward (2x forward)


def encoder_forward_flops(tokens: int, hidden: int, mlp_dim: int, layers: int) -> float:
    """Forward FLOPs of a stack of Transformer encoder blocks over one sequence.

    Per layer: Q, K, V and output projections (4 d^2 weights per token), the two MLP matrices
    (2 d f), and the attention itself: Q K^T and (weights) V, each t^2 d multiply-adds.
    """
    weights_per_token = 4 * hidden * hidden + 2 * hidden * mlp_dim
    linear = 2 * tokens * weights_per_token
    attention = 2 * 2 * tokens * tokens * hidden
    return float(layers * (linear + attention))


def vit_train_flops_per_example(cfg, channels: int) -> float:
    """Training FLOPs of one image through `models.vit.ViT` with config `cfg`."""
    grid_h, grid_w = cfg.grid
    patches = grid_h * grid_w
    tokens = patches + cfg.num_prefix_tokens
    d = cfg.hidden_size
    forward = 0.0
    if cfg.stem_channels:  # 3x3 convolution at every pixel
        height, width = cfg.image_size
        forward += 2 * height * width * 9 * channels * cfg.stem_channels
        channels = cfg.stem_channels
    forward += 2 * patches * (cfg.patch_size ** 2 * channels) * d         # patch embedding
    forward += encoder_forward_flops(tokens, d, cfg.mlp_dim, cfg.num_layers)
    head_in = cfg.head_hidden_size or d
    if cfg.head_hidden_size:
        forward += 2 * d * cfg.head_hidden_size
    forward += 2 * head_in * cfg.num_classes
    return TRAIN_FLOPS_FACTOR * float(forward)


def measure_matmul_peak(size: int = 2048, repeats: int = 5, dtype=jnp.float32) -> float:
    """Best observed FLOP/s of one square matmul on the default device (a practical peak).

    On a shared CPU the spec sheet is meaningless; the best of a few timed matmuls is what the
    machine can actually do, measured in the same process as the training it is compared with.
    """
    a = jnp.ones((size, size), dtype)
    b = jnp.ones((size, size), dtype)
    matmul = jax.jit(lambda x, y: x @ y)
    matmul(a, b).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        matmul(a, b).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return 2 * size ** 3 / best
