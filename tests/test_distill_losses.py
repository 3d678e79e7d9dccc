"""The distillation losses of train/losses.py against independent NumPy computations: the soft
targets' T^2 KL (Hinton et al. 2015, as DistilBERT's code computes it), its gradient and its
relation to the soft cross-entropy, and the cosine embedding loss."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from train.losses import cosine_embedding_loss, soft_target_kl


def _softmax(x):
    x = np.asarray(x, np.float64)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def numpy_kl(student, teacher, t):
    """T^2 sum_k p_T(k) (log p_T(k) - log p_S(k)), p = softmax(logits / T)."""
    p_s, p_t = _softmax(student / t), _softmax(teacher / t)
    return t * t * (p_t * (np.log(p_t) - np.log(p_s))).sum(-1)


@pytest.mark.parametrize("temperature", [1.0, 2.0, 4.0])
def test_soft_target_kl_matches_numpy_with_the_t_squared_factor(temperature):
    rng = np.random.default_rng(0)
    student = rng.normal(scale=3.0, size=(3, 5, 11)).astype(np.float32)
    teacher = rng.normal(scale=3.0, size=(3, 5, 11)).astype(np.float32)
    got = np.asarray(soft_target_kl(student, teacher, temperature))
    np.testing.assert_allclose(got, numpy_kl(student, teacher, temperature), rtol=2e-5,
                               atol=1e-6)
    # The KL is the soft cross-entropy -sum p_T log p_S less the teacher's entropy (both x T^2):
    # the same loss for the student, 0 when it matches the teacher.
    p_t = _softmax(teacher / temperature)
    soft_ce = -(p_t * np.log(_softmax(student / temperature))).sum(-1)
    entropy = -(p_t * np.log(p_t)).sum(-1)
    np.testing.assert_allclose(got, temperature ** 2 * (soft_ce - entropy), rtol=2e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(soft_target_kl(teacher, teacher, temperature)), 0.0,
                               atol=1e-5)


@pytest.mark.parametrize("temperature", [1.0, 3.0])
def test_soft_target_gradient_is_t_times_the_probability_gap(temperature):
    """d/dz_S of T^2 KL = T (p_S - p_T): with the T^2 factor the soft targets' gradients keep
    their size as T grows (Hinton et al. 2015, Sec. 2)."""
    rng = np.random.default_rng(1)
    student = rng.normal(size=(4, 7)).astype(np.float32)
    teacher = rng.normal(size=(4, 7)).astype(np.float32)
    grad = jax.grad(lambda s: soft_target_kl(s, teacher, temperature).sum())(student)
    expected = temperature * (_softmax(student / temperature) - _softmax(teacher / temperature))
    np.testing.assert_allclose(np.asarray(grad), expected, rtol=1e-4, atol=1e-6)


def test_soft_target_kl_refuses_a_temperature_that_is_not_positive():
    with pytest.raises(ValueError, match="temperature=0"):
        soft_target_kl(np.zeros((1, 2)), np.zeros((1, 2)), 0.0)


def test_cosine_embedding_loss_matches_numpy():
    rng = np.random.default_rng(2)
    student = rng.normal(size=(2, 6, 8)).astype(np.float32)
    teacher = rng.normal(size=(2, 6, 8)).astype(np.float32)
    teacher[0, 0] = 3.0 * student[0, 0]    # same direction: loss 0
    teacher[0, 1] = -student[0, 1]         # opposite: loss 2
    s, t = student.astype(np.float64), teacher.astype(np.float64)
    expected = 1.0 - (s * t).sum(-1) / (np.linalg.norm(s, axis=-1) * np.linalg.norm(t, axis=-1))
    got = np.asarray(cosine_embedding_loss(student, teacher))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert got[0, 0] == pytest.approx(0.0, abs=1e-6) and got[0, 1] == pytest.approx(2.0)
    # A zero vector (never a real token's state, but padding may be anything) stays finite.
    assert np.isfinite(np.asarray(cosine_embedding_loss(np.zeros((1, 8)), teacher[0, :1]))).all()
