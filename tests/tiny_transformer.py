"""A tiny Transformer config and random tokens, shared by the Transformer and decoding tests."""

from __future__ import annotations

import numpy as np

from models.transformer import TransformerConfig

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
