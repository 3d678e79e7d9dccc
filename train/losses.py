"""Losses shared by the tasks. Each formula appears once here, with its source."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def cross_entropy(logits, labels, label_smoothing: float = 0.0):
    """Per-position cross-entropy against one-hot targets smoothed to (1 - eps) + eps / K.

    Label smoothing as in Szegedy et al. 2016 (Sec. 7), used by Vaswani et al. 2017 with
    eps = 0.1: the target distribution is q'(k) = (1 - eps) [k = y] + eps / K over all K classes
    (the true class included). `logits` [..., K], `labels` [...] int; returns [...] float32.
    """
    log_probs = jax.nn.log_softmax(logits.astype(jnp.float32))
    # sum_k q'(k) log p(k) without materialising the one-hot [..., K] targets.
    true_log_prob = jnp.take_along_axis(log_probs, labels[..., None], axis=-1)[..., 0]
    if label_smoothing == 0.0:
        return -true_log_prob
    mean_log_prob = jnp.mean(log_probs, axis=-1)
    return -((1.0 - label_smoothing) * true_log_prob + label_smoothing * mean_log_prob)
