"""A tiny Transformer config, random tokens and random variables, shared by the Transformer and
decoding tests."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from models.transformer import Transformer, TransformerConfig

PAD, EOS, BOS = 0, 1, 2
VOCAB = 50


def tiny(**overrides) -> TransformerConfig:
    fields = dict(vocab_size=VOCAB, num_layers=2, d_model=32, d_ff=64, num_heads=4,
                  dropout_rate=0.0, max_length=32)
    fields.update(overrides)
    return TransformerConfig(**fields)


def words(rng, *shape):
    """Random non-special tokens (0 pad, 1 EOS, 2 BOS are avoided)."""
    return rng.integers(3, VOCAB, size=shape).astype(np.int32)


def init(cfg, inputs, targets, seed=0):
    """Random variables of the model's structure (boxed, with axis names). ``jax.eval_shape``
    compiles nothing, and random (not zero/one) biases and norm scales are exercised too."""
    shapes = jax.eval_shape(lambda: Transformer(cfg).init(
        jax.random.PRNGKey(0), jnp.asarray(inputs), jnp.asarray(targets)))
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda s: jnp.asarray(0.3 * rng.standard_normal(s.shape), s.dtype), shapes)
