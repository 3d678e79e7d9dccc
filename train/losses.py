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


def soft_cross_entropy(logits, targets):
    """Per-position cross-entropy -sum_k q(k) log p(k) against a target distribution `targets`
    [..., K] (rows summing to 1): the loss of Mixup and CutMix, whose targets mix two images'
    (label-smoothed) one-hot labels (Zhang et al. 2018, eq. 1; Yun et al. 2019, eq. 1). With a
    one-hot row it is `cross_entropy`. `logits` [..., K]; returns [...] float32."""
    log_probs = jax.nn.log_softmax(logits.astype(jnp.float32))
    return -jnp.sum(targets.astype(jnp.float32) * log_probs, axis=-1)


def one_hot_targets(labels, num_classes: int, label_smoothing: float = 0.0):
    """The target distribution of `cross_entropy`: one-hot [..., K] smoothed to
    (1 - eps) [k = y] + eps / K (Szegedy et al. 2016, Sec. 7)."""
    one_hot = jax.nn.one_hot(labels, num_classes, dtype=jnp.float32)
    return one_hot * (1.0 - label_smoothing) + label_smoothing / num_classes


# DeiT (Touvron et al. 2021), Sec. 4, eq. 2: "soft distillation"
#   L = (1 - lambda) L_CE(psi(Z_s), y) + lambda tau^2 KL(psi(Z_s / tau), psi(Z_t / tau)).
def deit_soft_distillation(class_logits, distill_logits, teacher_logits, targets,
                           alpha: float, temperature: float):
    """Per-example soft distillation loss: the class head's cross-entropy against `targets`
    (the label distribution: one-hot, smoothed or mixed) weighted 1 - alpha, plus alpha x the
    distillation head's `soft_target_kl` (tau^2 KL of the teacher's and the student's softened
    softmaxes) against the teacher. Without a distillation token the two heads are the same
    logits (the paper's "usual distillation" row of Table 3). This is eq. 2 as the paper
    writes it; the authors' released code divides the KL summed over the batch by the number of
    logits (batch x K), which makes its soft term K times smaller than eq. 2's (10 times on
    Fashion-MNIST's classes, 1000 on ImageNet's), so at the same alpha the teacher weighs more
    here than in their runs."""
    return ((1.0 - alpha) * soft_cross_entropy(class_logits, targets)
            + alpha * soft_target_kl(distill_logits, teacher_logits, temperature))


# DeiT, Sec. 4, eq. 3: "hard-label distillation", y_t = argmax_c Z_t(c):
#   L = 1/2 L_CE(psi(Z_s), y) + 1/2 L_CE(psi(Z_s), y_t)   (alpha = 1/2 below).
def deit_hard_distillation(class_logits, distill_logits, teacher_logits, targets,
                           alpha: float = 0.5):
    """Per-example hard distillation loss: the class head's cross-entropy against `targets`
    weighted 1 - alpha, plus alpha x the distillation head's against the teacher's decision
    y_t = argmax Z_t (a hard label, not smoothed: the paper's code smooths only the true
    labels). The paper's eq. 3 is alpha = 1/2. Without a distillation token both terms are the
    class head's (Table 3's "hard distillation" row)."""
    teacher_labels = jnp.argmax(teacher_logits, axis=-1)
    return ((1.0 - alpha) * soft_cross_entropy(class_logits, targets)
            + alpha * cross_entropy(distill_logits, teacher_labels))


# DeiT, Sec. 4, "Classification with our approach: joint classifiers": at test time "we add the
# softmax output by the two classifiers to make the prediction".
def averaged_heads(class_logits, distill_logits):
    """log of the mean of the two heads' softmaxes, [..., K]: its argmax is the late fusion's
    prediction, its value at the label the fused model's log-likelihood. Computed as
    logaddexp of the two log-softmaxes minus log 2, finite where a softmax underflows. (The
    authors' released model averages the two heads' logits instead, which can decide another
    class where the heads disagree; this follows the paper's text.)"""
    return jnp.logaddexp(jax.nn.log_softmax(class_logits.astype(jnp.float32)),
                         jax.nn.log_softmax(distill_logits.astype(jnp.float32))) - jnp.log(2.0)


# A logit that leaves its position out of a softmax: exp underflows to 0 at any temperature a
# distillation uses, while differences of two such logits stay finite (no 0 x inf = nan in a KL).
PADDED_LOGIT = -1e9


def mask_padding(logits, input_mask):
    """`logits` [b, l] over the positions of a sequence, PADDED_LOGIT where `input_mask` is 0:
    a softmax over positions (a span's start or end) then runs over the real tokens only."""
    return jnp.where(input_mask > 0, logits, PADDED_LOGIT)
