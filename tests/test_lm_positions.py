"""The decoder-only LM's input to its blocks (models/decoder_lm.py): token embeddings, times
sqrt(d_model) with `scale_embeddings` (Vaswani et al. 2017, Sec. 3.4; the extrapolation ablation,
configs/ablations/lm_extrapolation.py, sets it), plus the absolute position encoding, against
NumPy: the sinusoid computed here from the paper's formula, the learned table read from the
parameters."""

from __future__ import annotations

import flax.linen as nn
import numpy as np
import pytest

from models.decoder_lm import DecoderLM

from tiny_lm import random_params, tiny, tokens


def _block_input(cfg, params, x) -> np.ndarray:
    """What block_0 receives (the embedding sum after its dropout, off here)."""
    seen = []

    def record(next_fun, args, kwargs, context):
        if context.module.name == "block_0" and context.method_name == "__call__":
            seen.append(np.asarray(args[0]))
        return next_fun(*args, **kwargs)

    with nn.intercept_methods(record):
        DecoderLM(cfg).apply({"params": params}, x)
    assert len(seen) == 1
    return seen[0]


def _sinusoid(length: int, d: int) -> np.ndarray:
    """Vaswani et al. 2017, Sec. 3.5, in float64 with explicit loops: PE(pos, 2i) =
    sin(pos / 10000^(2i/d)), PE(pos, 2i + 1) = cos(pos / 10000^(2i/d))."""
    table = np.zeros((length, d))
    for pos in range(length):
        for i in range(d // 2):
            angle = pos / 10000.0 ** (2 * i / d)
            table[pos, 2 * i], table[pos, 2 * i + 1] = np.sin(angle), np.cos(angle)
    return table


@pytest.mark.parametrize("scale", [True, False], ids=["scaled", "unscaled"])
@pytest.mark.parametrize("posemb", ["sinusoidal", "learned", "rope"])
def test_block_input_is_scaled_token_embedding_plus_position_encoding(posemb, scale):
    """sqrt(d_model) E[x] (+ PE[pos]) with scale_embeddings, E[x] (+ PE[pos]) without: the
    scale multiplies the token embeddings only, never the position encoding; RoPE adds
    nothing at the input."""
    cfg = tiny(posemb=posemb, scale_embeddings=scale, d_model=32, max_length=32)
    params = random_params(cfg, seed=4)
    x = tokens(np.random.default_rng(9), 2, 12)
    table = np.asarray(params["embedding"]["embedding"], np.float64)
    expected = table[x] * (np.sqrt(32.0) if scale else 1.0)
    if posemb == "sinusoidal":
        expected = expected + _sinusoid(12, 32)[None]
    elif posemb == "learned":
        expected = expected + np.asarray(params["posemb"]["embedding"], np.float64)[:12][None]
    np.testing.assert_allclose(_block_input(cfg, params, x), expected, rtol=1e-6, atol=2e-6)
