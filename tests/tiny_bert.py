"""The tiny BERT the model tests share: its config, a two-row batch with padding and the
masked positions of a pre-training step."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from models.bert import BertConfig

VOCAB = 50


def tiny(**overrides) -> BertConfig:
    fields = dict(vocab_size=VOCAB, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64,
                  max_position_embeddings=16)
    fields.update(overrides)
    return BertConfig(**fields)


def inputs(batch=2, length=10, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, VOCAB, size=(batch, length)).astype(np.int32)
    types = np.zeros((batch, length), np.int32)
    types[:, length // 2:] = 1
    mask = np.ones((batch, length), np.int32)
    mask[1, length - 3:] = 0                      # second row: 3 padding tokens at the end
    return jnp.asarray(ids), jnp.asarray(types), jnp.asarray(mask)


POSITIONS = jnp.asarray([[1, 4, 6, 0], [2, 3, 5, 0]], jnp.int32)
