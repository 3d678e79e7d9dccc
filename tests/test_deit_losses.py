"""DeiT's losses (train/losses.py) against independent NumPy: soft distillation (eq. 2: the
class head's cross-entropy and tau^2 KL of the softened softmaxes), hard distillation (eq. 3:
the teacher's argmax as a label), the soft-target cross-entropy of Mixup / CutMix, and the
averaged heads of the test-time prediction."""

from __future__ import annotations

import numpy as np
import pytest

from train.losses import (averaged_heads, deit_hard_distillation, deit_soft_distillation,
                          one_hot_targets, soft_cross_entropy)


def _softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _logits(seed, shape=(6, 5), scale=3.0):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32) * scale


def _targets(seed, shape=(6, 5)):
    raw = np.random.default_rng(seed).random(shape)
    return (raw / raw.sum(-1, keepdims=True)).astype(np.float32)


def test_soft_cross_entropy_is_minus_the_expected_log_probability():
    logits, targets = _logits(0), _targets(1)
    want = -(targets * np.log(_softmax(logits.astype(np.float64)))).sum(-1)
    np.testing.assert_allclose(soft_cross_entropy(logits, targets), want, rtol=1e-5)


def test_one_hot_targets_are_smoothed_towards_the_uniform():
    got = np.asarray(one_hot_targets(np.array([2, 0]), 4, 0.1))
    want = np.array([[0.025, 0.025, 0.925, 0.025], [0.925, 0.025, 0.025, 0.025]])
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("alpha,tau", [(0.1, 3.0), (0.5, 1.0), (1.0, 2.0)])
def test_soft_distillation_is_eq_2(alpha, tau):
    cls, dist, teacher, targets = _logits(0), _logits(1), _logits(2), _targets(3)
    p_t = _softmax(teacher.astype(np.float64) / tau)
    p_s = _softmax(dist.astype(np.float64) / tau)
    kl = (p_t * (np.log(p_t) - np.log(p_s))).sum(-1)
    ce = -(targets * np.log(_softmax(cls.astype(np.float64)))).sum(-1)
    want = (1 - alpha) * ce + alpha * tau ** 2 * kl
    got = deit_soft_distillation(cls, dist, teacher, targets, alpha, tau)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_soft_distillation_is_zero_kl_when_the_distillation_head_matches_the_teacher():
    teacher, targets = _logits(2), _targets(3)
    loss = deit_soft_distillation(_logits(0), teacher, teacher, targets, 1.0, 3.0)
    np.testing.assert_allclose(loss, 0.0, atol=1e-5)


@pytest.mark.parametrize("alpha", [0.5, 0.25])
def test_hard_distillation_is_eq_3(alpha):
    cls, dist, teacher, targets = _logits(0), _logits(1), _logits(2), _targets(3)
    y_t = teacher.argmax(-1)
    log_dist = np.log(_softmax(dist.astype(np.float64)))
    ce_teacher = -log_dist[np.arange(len(y_t)), y_t]
    ce_labels = -(targets * np.log(_softmax(cls.astype(np.float64)))).sum(-1)
    want = (1 - alpha) * ce_labels + alpha * ce_teacher
    got = deit_hard_distillation(cls, dist, teacher, targets, alpha)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_hard_distillation_ignores_the_teachers_confidence():
    """Only the teacher's decision counts: scaling its logits (same argmax) changes nothing."""
    cls, dist, teacher, targets = _logits(0), _logits(1), _logits(2), _targets(3)
    np.testing.assert_allclose(deit_hard_distillation(cls, dist, teacher, targets),
                               deit_hard_distillation(cls, dist, 10 * teacher, targets),
                               rtol=1e-6)


def test_averaged_heads_is_the_log_of_the_mean_softmax():
    cls, dist = _logits(0, scale=30.0), _logits(1, scale=30.0)
    mean = (_softmax(cls.astype(np.float64)) + _softmax(dist.astype(np.float64))) / 2
    got = np.asarray(averaged_heads(cls, dist))
    np.testing.assert_allclose(np.exp(got), mean, rtol=1e-4, atol=1e-7)
    assert np.isfinite(got).all()
    cls, dist = _logits(0), _logits(1)  # no near-ties between the two heads' favourites
    mean = _softmax(cls.astype(np.float64)) + _softmax(dist.astype(np.float64))
    np.testing.assert_array_equal(np.asarray(averaged_heads(cls, dist)).argmax(-1),
                                  mean.argmax(-1))
