"""A tiny decoder-only LM config, random tokens and random parameters, shared by the LM model,
decoding and checkpoint tests."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from models.decoder_lm import DecoderLM, DecoderLMConfig

VOCAB = 40


def tiny(**overrides) -> DecoderLMConfig:
    fields = dict(vocab_size=VOCAB, num_layers=2, d_model=32, d_ff=64, num_heads=4,
                  dropout_rate=0.0, attention_dropout_rate=0.0, max_length=32)
    fields.update(overrides)
    return DecoderLMConfig(**fields)


def tokens(rng, *shape):
    """Random token ids (any id is a word for the model; 0 is avoided, the tests' padding)."""
    return rng.integers(1, VOCAB, size=shape).astype(np.int32)


def boxed_shapes(cfg: DecoderLMConfig, length: int = 8):
    """The boxed (logically partitioned) variable shapes of the model's init; compiles nothing."""
    return jax.eval_shape(lambda: DecoderLM(cfg).init(jax.random.PRNGKey(0),
                                                      jnp.zeros((1, length), jnp.int32)))


def random_params(cfg: DecoderLMConfig, seed: int = 0, scale: float = 0.3) -> dict:
    """Parameters of the model's structure drawn from N(0, scale^2) by NumPy, biases and norm
    parameters included (an initialisation's zeros and ones would hide swapped tensors)."""
    rng = np.random.default_rng(seed)
    shapes = nn.meta.unbox(boxed_shapes(cfg))["params"]
    return jax.tree.map(lambda s: jnp.asarray(scale * rng.standard_normal(s.shape), s.dtype),
                        shapes)
