"""Label-smoothed cross-entropy against an independent NumPy computation."""

from __future__ import annotations

import numpy as np
import pytest

from train.losses import cross_entropy


def numpy_smoothed_cross_entropy(logits, labels, eps):
    """-sum_k q(k) log p(k) with q = (1 - eps) one_hot + eps / K (Szegedy et al. 2016)."""
    logits = logits.astype(np.float64)
    shifted = logits - logits.max(-1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    k = logits.shape[-1]
    q = np.full(logits.shape, eps / k)
    np.put_along_axis(q, labels[..., None], 1.0 - eps + eps / k, axis=-1)
    return -(q * log_p).sum(-1)


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.2])
def test_label_smoothed_cross_entropy_matches_numpy(eps):
    rng = np.random.default_rng(0)
    logits = rng.normal(scale=3.0, size=(3, 5, 11)).astype(np.float32)
    labels = rng.integers(0, 11, size=(3, 5))
    got = np.asarray(cross_entropy(logits, labels, eps))
    np.testing.assert_allclose(got, numpy_smoothed_cross_entropy(logits, labels, eps), rtol=1e-5)


def test_smoothing_penalises_overconfidence():
    """With eps > 0 a near one-hot prediction costs more than a slightly softer one."""
    labels = np.array([0])
    sharp = np.array([[30.0, 0.0, 0.0, 0.0]], np.float32)
    soft = np.array([[4.0, 0.0, 0.0, 0.0]], np.float32)
    assert cross_entropy(sharp, labels, 0.1)[0] > cross_entropy(soft, labels, 0.1)[0]
    assert cross_entropy(sharp, labels, 0.0)[0] < cross_entropy(soft, labels, 0.0)[0]
