"""Position encodings inside the Transformer's attentions: each attention's recorded weights
against softmax(q k^T / sqrt(d) + B) computed in NumPy from its own queries and keys, for the
relative biases (ALiBi, T5: bidirectional in the encoder, causal in the decoder) and RoPE."""

from __future__ import annotations

import flax.linen as nn
import numpy as np
import pytest

from models.transformer import Transformer

from rope_reference import np_rope
from tiny_transformer import init, tiny, words


def _np_softmax(logits, mask=None):
    """Softmax over the last axis in float64; masked-out (False) entries get 0."""
    if mask is not None:
        logits = np.where(mask, logits, -np.inf)
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _rotated(x, base):
    """x [b, l, h, d] rotated at positions 0 .. l-1."""
    return np_rope(x, np.broadcast_to(np.arange(x.shape[1]), x.shape[:2]), base)


def _attention_maps(cfg, variables, inputs, targets):
    """Every attention's sown weights [b, h, q, k] and its captured (unrotated) query and key
    projections [b, len, h, d], by 'encoder/block_i/attention'-style path."""
    _, state = Transformer(cfg).apply(
        variables, inputs, targets,
        capture_intermediates=lambda mdl, _: mdl.name in ("query", "key"))
    maps = {}
    for stack, names in (("encoder", ("attention",)),
                         ("decoder", ("self_attention", "cross_attention"))):
        for i in range(cfg.num_layers):
            for name in names:
                layer = state["intermediates"][stack][f"block_{i}"][name]
                (weights,) = layer["attention_weights"]
                maps[f"{stack}/block_{i}/{name}"] = (
                    np.asarray(weights, np.float64),
                    np.asarray(layer["query"]["__call__"][0], np.float64),
                    np.asarray(layer["key"]["__call__"][0], np.float64))
    return maps


def _scores(q, k):
    """q k^T / sqrt(d_k), [b, h, q, k] (Vaswani et al. 2017, eq. 1)."""
    return np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])


@pytest.mark.parametrize("posemb", ["alibi", "t5"])
def test_relative_bias_is_symmetric_in_the_encoder_and_causal_in_the_decoder(posemb):
    """Self-attention weights = softmax(q k^T / sqrt(d) + B) with B[h, i, j]:
    ALiBi (Press et al. 2022, Sec. 3) -m_h |i - j| in the encoder and -m_h (i - j) in the causal
    decoder, slopes m_h = 2^(-8 h / 4) for 4 heads; T5 (Raffel et al. 2020, Sec. 2.1) the stack's
    table row of bucket |i - j| for keys before the query, 16 + |i - j| after it (bidirectional,
    32 buckets, exact below 8) in the encoder, and bucket i - j (causal) in the decoder.
    Cross-attention has no bias."""
    rng = np.random.default_rng(10)
    cfg = tiny(posemb=posemb)
    inputs, targets = words(rng, 2, 7), words(rng, 2, 7)
    variables = init(cfg, inputs, targets)
    params = nn.meta.unbox(variables["params"])
    maps = _attention_maps(cfg, variables, inputs, targets)
    i, j = np.arange(7)[:, None], np.arange(7)[None, :]
    if posemb == "alibi":
        slopes = 2.0 ** (-8.0 * np.arange(1, 5) / 4)[:, None, None]
        biases = {"encoder": -slopes * np.abs(i - j), "decoder": -slopes * (i - j)}
    else:
        buckets = {"encoder": np.abs(i - j) + 16 * (j > i), "decoder": np.maximum(i - j, 0)}
        biases = {stack: np.moveaxis(np.asarray(params[stack]["relative_bias"]["rel_embedding"],
                                                np.float64)[buckets[stack]], -1, 0)
                  for stack in buckets}
    causal = j <= i
    for path, (weights, q, k) in maps.items():
        stack = path.split("/")[0]
        if path.endswith("cross_attention"):
            expected = _np_softmax(_scores(q, k))
        else:
            mask = causal if stack == "decoder" else None
            expected = _np_softmax(_scores(q, k) + biases[stack][None], mask)
        np.testing.assert_allclose(weights, expected, rtol=1e-4, atol=1e-6, err_msg=path)


def test_rope_rotates_the_queries_and_keys_of_every_self_attention():
    """RoPE (Su et al. 2021): every encoder and decoder self-attention has weights
    softmax(R(i) q_i . R(j) k_j / sqrt(d)) (causal in the decoder), R the RoFormer rotation of
    the token's position; cross-attention is not rotated."""
    rng = np.random.default_rng(11)
    cfg = tiny(posemb="rope")
    inputs, targets = words(rng, 2, 7), words(rng, 2, 9)
    variables = init(cfg, inputs, targets)
    causal = np.tril(np.ones((9, 9), bool))
    for path, (weights, q, k) in _attention_maps(cfg, variables, inputs, targets).items():
        if path.endswith("cross_attention"):
            expected = _np_softmax(_scores(q, k))
        else:
            mask = causal if path.startswith("decoder") else None
            expected = _np_softmax(_scores(_rotated(q, cfg.rope_base),
                                           _rotated(k, cfg.rope_base)), mask)
        np.testing.assert_allclose(weights, expected, rtol=1e-4, atol=1e-6, err_msg=path)
