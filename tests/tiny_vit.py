"""A small ViT config (Fashion-MNIST's 28 x 28, 7 x 7 patches), its parameter count and random
parameters, shared by the ViT model tests."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from models.vit import ViT, ViTConfig

from random_params import randomised


# Table 8's other two columns (a table added at every layer, or one shared table added at every
# layer), for the kinds with a table (models/vit_config.py POSEMB_MODES).
EVERY_LAYER = [("learned_1d", "every_layer"), ("learned_1d", "every_layer_shared"),
               ("learned_2d", "every_layer"), ("learned_2d", "every_layer_shared"),
               ("sincos_2d", "every_layer_shared")]


def small(**overrides) -> ViTConfig:
    fields = dict(num_classes=10, image_size=(28, 28), patch_size=7, hidden_size=32, num_layers=2,
                  num_heads=4, mlp_dim=64)
    fields.update(overrides)
    return ViTConfig(**fields)


def count(cfg: ViTConfig, channels=3) -> int:
    shapes = jax.eval_shape(lambda: ViT(cfg).init(
        jax.random.PRNGKey(0), jnp.zeros((1, *cfg.image_size, channels))))
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nn.meta.unbox(shapes)))


def randomised_vit(variables, seed=0):
    """Non-zero parameters everywhere (the head starts at zero, which would hide everything)."""
    return randomised(variables, scale=0.3, seed=seed)
