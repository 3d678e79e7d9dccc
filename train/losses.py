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


def soft_target_kl(student_logits, teacher_logits, temperature: float):
    """Per-position distillation loss T^2 KL(p_T || p_S), p = softmax(logits / T).

    Hinton et al. 2015 ("Distilling the Knowledge in a Neural Network", Sec. 2): the student
    learns the teacher's soft targets p_T = softmax(z_T / T) at a temperature T > 1, which
    spreads the teacher's probability over the wrong-but-plausible classes. The gradients of the
    soft loss scale as 1 / T^2, so it is multiplied by T^2 to keep its weight against the hard
    loss independent of T. DistilBERT (Sanh et al. 2019, Sec. 2) writes its L_ce as the soft
    cross-entropy sum_i t_i log s_i; its code computes KLDivLoss(log p_S, p_T) * T^2, which
    differs from the cross-entropy by the teacher's entropy, a constant for the student: the same
    gradient, T (p_S - p_T) for the student's logits, and 0 when the student matches the teacher.
    `[..., K]` logits -> `[...]` float32.
    """
    if temperature <= 0:
        raise ValueError(f"temperature={temperature} must be > 0")
    log_student = jax.nn.log_softmax(student_logits.astype(jnp.float32) / temperature)
    log_teacher = jax.nn.log_softmax(teacher_logits.astype(jnp.float32) / temperature)
    kl = jnp.sum(jnp.exp(log_teacher) * (log_teacher - log_student), axis=-1)
    return temperature ** 2 * kl


def cosine_embedding_loss(student_hidden, teacher_hidden, eps: float = 1e-12):
    """Per-position 1 - cos(h_S, h_T) between hidden-state vectors.

    DistilBERT (Sanh et al. 2019, Sec. 2): a cosine embedding loss L_cos "which will tend to
    align the directions of the student and teacher hidden states vectors" (its code: PyTorch's
    CosineEmbeddingLoss with target 1 on the last layer's states of the real tokens). `eps` only
    keeps a zero vector finite: cos = h_S . h_T / sqrt((|h_S|^2 + eps)(|h_T|^2 + eps)).
    `[..., H]` -> `[...]` float32; the caller weights the positions (padding out).
    """
    s = student_hidden.astype(jnp.float32)
    t = teacher_hidden.astype(jnp.float32)
    dot = jnp.sum(s * t, axis=-1)
    norms = jnp.sqrt((jnp.sum(s * s, axis=-1) + eps) * (jnp.sum(t * t, axis=-1) + eps))
    return 1.0 - dot / norms
