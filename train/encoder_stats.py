"""Statistics of an encoder's activations and gradients, for train/diagnose_encoder.py.

Each function reduces arrays of one batch to a few numbers that tell a working encoder from one
that has collapsed (every position mapped to nearly the same vector, the input tokens no longer
readable from the output). They are pure functions of JAX or NumPy arrays; `valid` marks the real
(not padding) tokens, 1 or True.

  attention_entropy      -sum_k p log p of each query's attention row, per head, and the same
                         divided by log(number of real keys): 1 is uniform attention over the
                         sequence, near 0 attention to a single key
  pairwise_cosine        the mean cosine similarity between the vectors of two different real
                         positions of the same sequence (1: every position the same direction)
  common_share           |mean_i h_i|^2 / mean_i |h_i|^2 over all real tokens of a batch: the
                         share of the vectors' energy that is the same at every token (1: every
                         token the same vector; about 1/N for N independent random vectors)
  effective_rank         Roy & Vetterli 2007 of the centred token matrix: how many directions
                         the part that differs between tokens spans
  identity_readout       how often the input token is the nearest word embedding (largest dot
                         product) to a position's vector: what a tied-embedding MLM head reads
                         as "the token here"
  noise_to_signal        E|noisy - clean|^2 / E|clean - mean clean|^2 over real tokens: how large
                         a perturbation (dropout) is against what differs between tokens
  gelu_activity          of the feed-forward pre-activations, the share that is negative and the
                         share of hidden units that are negative on every token of the batch
                         (GELU passes almost nothing of them: dead units)
  adam_update            Adam's step per unit of learning rate, m_hat / (sqrt(v_hat) + eps),
                         from its saved moments
  group_norms            the L2 norm and root-mean-square of a parameter (or gradient) tree per
                         top-level group, e.g. per encoder layer
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import jax.numpy as jnp
import numpy as np
from flax import traverse_util


def _valid(valid, shape) -> jnp.ndarray:
    return jnp.broadcast_to(jnp.asarray(valid).astype(jnp.float32), shape)


def attention_entropy(probs, valid) -> dict[str, jnp.ndarray]:
    """`probs` [b, h, q, k] (rows sum to 1 over the real keys), `valid` [b, l] (q = k = l).

    Returns {'entropy': [h] nats, 'normalized': [h]}: the mean over real queries of the row
    entropy, and of the row entropy / log(real keys of its sequence) (rows of a sequence with a
    single real token count 0 there)."""
    probs = jnp.asarray(probs, jnp.float32)
    v = _valid(valid, probs.shape[:1] + probs.shape[-1:])                  # [b, l]
    plogp = jnp.where(probs > 0, probs * jnp.log(jnp.where(probs > 0, probs, 1.0)), 0.0)
    entropy = -plogp.sum(-1)                                              # [b, h, q]
    keys = v.sum(-1)                                                      # [b]
    uniform = jnp.log(jnp.maximum(keys, 1.0))[:, None, None]
    normalized = jnp.where(uniform > 0, entropy / jnp.where(uniform > 0, uniform, 1.0), 0.0)
    weights = v[:, None, :]                                               # real queries
    count = jnp.maximum(v.sum(), 1.0)
    return {"entropy": (entropy * weights).sum((0, 2)) / count,
            "normalized": (normalized * weights).sum((0, 2)) / count}


def pairwise_cosine(states, valid) -> jnp.ndarray:
    """Mean over sequences (with 2 or more real tokens) of the mean cosine similarity over the
    ordered pairs i != j of real positions. `states` [b, l, d], `valid` [b, l]."""
    states = jnp.asarray(states, jnp.float32)
    v = _valid(valid, states.shape[:2])
    unit = states / jnp.maximum(jnp.linalg.norm(states, axis=-1, keepdims=True), 1e-12)
    unit = unit * v[..., None]
    n = v.sum(-1)
    # sum_{i != j} u_i . u_j = |sum_i u_i|^2 - sum_i |u_i|^2, and |u_i| = 1 for a real token.
    total = jnp.sum(jnp.square(unit.sum(1)), -1) - n
    pairs = n * (n - 1)
    has_pairs = pairs > 0
    per_sequence = jnp.where(has_pairs, total / jnp.where(has_pairs, pairs, 1.0), 0.0)
    return per_sequence.sum() / jnp.maximum(has_pairs.sum(), 1)


def _token_rows(states, valid) -> np.ndarray:
    """[b, l, d] -> [real tokens, d] (host NumPy, float64)."""
    states = np.asarray(states, np.float64)
    keep = np.broadcast_to(np.asarray(valid).astype(bool), states.shape[:2])
    return states[keep]


def common_share(states, valid) -> float:
    """|mean h|^2 / mean |h|^2 over the real tokens of `states` [b, l, d]."""
    rows = _token_rows(states, valid)
    energy = np.mean(np.sum(rows * rows, -1))
    return float(np.sum(np.square(rows.mean(0))) / energy) if energy > 0 else 0.0


def effective_rank(states, valid) -> float:
    """Roy & Vetterli 2007 ("The effective rank: a measure of effective dimensionality", Eq. 1-3)
    of the centred [real tokens, d] matrix: exp(-sum_k p_k log p_k), p_k = s_k / sum s, s its
    singular values. 1 for a rank-one matrix, d for d equal singular values; 0 when the matrix
    is zero (every token the same vector)."""
    rows = _token_rows(states, valid)
    rows = rows - rows.mean(0)
    s = np.linalg.svd(rows, compute_uv=False)
    if s.sum() <= 1e-12 * max(1.0, np.abs(rows).max(initial=0.0)):
        return 0.0
    p = s / s.sum()
    p = p[p > 0]
    return float(np.exp(-np.sum(p * np.log(p))))


def noise_to_signal(clean, noisy, valid) -> float:
    """Mean squared perturbation |noisy_i - clean_i|^2 over the real tokens of [b, l, d] states,
    divided by their variance around the batch's mean vector, mean_i |clean_i - mean clean|^2:
    above 1, the perturbation moves a token's vector further than tokens differ from each
    other. 0 for no perturbation; infinite when every token has the same clean vector."""
    clean_rows, noisy_rows = _token_rows(clean, valid), _token_rows(noisy, valid)
    signal = np.mean(np.sum(np.square(clean_rows - clean_rows.mean(0)), -1))
    noise = np.mean(np.sum(np.square(noisy_rows - clean_rows), -1))
    return float(noise / signal) if signal > 0 else (0.0 if noise == 0 else float("inf"))


def identity_readout(states, input_ids, embeddings, valid) -> jnp.ndarray:
    """Share of the real positions whose vector in `states` [b, l, d] has its largest dot
    product with the embedding (`embeddings` [V, d]) of the position's own input token."""
    scores = jnp.einsum("bld,vd->blv", jnp.asarray(states, jnp.float32),
                        jnp.asarray(embeddings, jnp.float32))
    hit = (jnp.argmax(scores, -1) == jnp.asarray(input_ids)).astype(jnp.float32)
    v = _valid(valid, hit.shape)
    return (hit * v).sum() / jnp.maximum(v.sum(), 1.0)


def gelu_activity(pre_activations, valid) -> dict[str, float]:
    """`pre_activations` [b, l, F] of a feed-forward layer (before its GELU). Returns the share
    of the real tokens' pre-activations that are negative, the share of the F units that are
    negative on every real token ('dead_units'), and the pre-activations' mean and std."""
    rows = _token_rows(pre_activations, valid)
    negative = rows < 0
    return {"negative_share": float(negative.mean()),
            "dead_units": float(negative.all(0).mean()),
            "mean": float(rows.mean()), "std": float(rows.std())}


def adam_update(mu, nu, count, *, b1: float, b2: float, eps: float) -> np.ndarray:
    """Kingma & Ba 2015 (Adam), Algorithm 1: m_hat = m / (1 - b1^t), v_hat = v / (1 - b2^t),
    the step m_hat / (sqrt(v_hat) + eps) per unit of learning rate (optax.scale_by_adam, eps
    outside the root), from the moments `mu`, `nu` after `count` = t updates. About +-1 where
    the gradient kept its sign and size; far smaller where the recent gradients are small
    against those v still remembers (it decays by b2 a step: 0.999 remembers ~1,000 steps)."""
    t = float(count)
    m_hat = np.asarray(mu, np.float64) / (1.0 - b1 ** t)
    v_hat = np.asarray(nu, np.float64) / (1.0 - b2 ** t)
    return m_hat / (np.sqrt(v_hat) + eps)


def group_norms(tree: Mapping[str, Any], group: Callable[[tuple[str, ...]], str]
                ) -> dict[str, dict[str, float]]:
    """{group: {'norm': L2 norm, 'rms': root-mean-square per element, 'size': elements}} of a
    nested parameter-shaped tree; `group(path)` names the group of the leaf at `path`."""
    sums: dict[str, list[float]] = {}
    for path, leaf in traverse_util.flatten_dict(dict(tree)).items():
        values = np.asarray(leaf, np.float64)
        entry = sums.setdefault(group(tuple(str(p) for p in path)), [0.0, 0])
        entry[0] += float(np.sum(values * values))
        entry[1] += values.size
    return {name: {"norm": math.sqrt(total), "rms": math.sqrt(total / size) if size else 0.0,
                   "size": size} for name, (total, size) in sums.items()}
