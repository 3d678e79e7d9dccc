"""The image-classification task's objective (train/tasks/classify.py `loss_fn`) against NumPy:
label smoothing with the config's epsilon, and Mixup / CutMix (train/mixing.py) rebuilt here from
the step key's documented stream (fold_in(rng, MIX_STREAM), split in 6), so the loss is the soft
cross-entropy of the model's logits on the mixed images against the mixed smoothed targets."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import linen as nn
from random_params import perturbed

from train.config import apply_override, load_config_file
from train.mixing import MIX_STREAM

EPS, K, B = 0.1, 10, 8


def _task(**overrides):
    from train.tasks.classify import ClassificationTask

    config = load_config_file("configs/vit/fashion_mnist.py:smoke")
    for key, value in {"task.label_smoothing": EPS, **overrides}.items():
        apply_override(config, key, str(value))
    task = ClassificationTask(config)
    assert task.label_smoothing == EPS and task.model_config.num_classes == K
    return task


def _params(task, scale=0.3, seed=0):
    """Perturbed: the zero-initialised head would give every image the uniform prediction."""
    params = task.init_variables(jax.random.PRNGKey(0), task.dummy_inputs(1))["params"]
    return perturbed(nn.meta.unbox(params), scale=scale, seed=seed)


def _batch():
    rng = np.random.default_rng(0)
    return {"image": rng.normal(size=(B, 28, 28, 1)).astype(np.float32),
            "label": np.array([0, 1, 2, 3, 4, 5, 6, 6], np.int32),
            "mask": np.array([1, 1, 1, 1, 1, 1, 1, 0], np.float32)}  # a padded row: weight 0


def _np_log_softmax(logits):
    x = np.asarray(logits, np.float64)
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _np_smoothed(labels):
    """Szegedy et al. 2016, Sec. 7: (1 - eps) onehot + eps / K over all K classes."""
    return (1 - EPS) * np.eye(K)[labels] + EPS / K


def _logits(task, params, images, rng):
    return task.model.apply({"params": params}, np.asarray(images, np.float32), train=True,
                            rngs={"dropout": rng})


def _draws(rng, mixup_alpha, cutmix_alpha):
    """The random draws of mix_batch, from the key the task folds for it (its docstring:
    split(fold_in(rng, MIX_STREAM), 6) = apply, switch, mixup, cutmix, box, perm): only the
    draws are taken from jax.random; the mixing is rebuilt in NumPy below."""
    keys = jax.random.split(jax.random.fold_in(rng, MIX_STREAM), 6)
    _, _, k_mixup, k_cutmix, k_box, k_perm = keys
    partner = np.asarray(jax.random.permutation(k_perm, B))
    lam_mixup = float(jax.random.beta(k_mixup, mixup_alpha, mixup_alpha)) if mixup_alpha else 1.0
    lam_cutmix = (float(jax.random.beta(k_cutmix, cutmix_alpha, cutmix_alpha)) if cutmix_alpha
                  else 1.0)
    ky, kx = jax.random.split(k_box)
    centre = int(jax.random.randint(ky, (), 0, 28)), int(jax.random.randint(kx, (), 0, 28))
    return partner, lam_mixup, lam_cutmix, centre


def _np_mix(images, partner, lam_mixup, lam_cutmix, centre, cutmix):
    """(mixed images, lam): Mixup (Zhang et al. eq. 1) or CutMix (Yun et al. Sec. 3.1: the
    partner's pixels in a box of sides floor(H sqrt(1 - lam)), floor(W sqrt(1 - lam)) around
    the centre, clipped, lam corrected to the area left outside), in NumPy. The targets mix
    with the same lam: lam t_i + (1 - lam) t_partner(i)."""
    if not cutmix:
        return lam_mixup * images + (1 - lam_mixup) * images[partner], lam_mixup
    h = w = 28
    cut = np.sqrt(1.0 - np.float32(lam_cutmix))
    cut_h, cut_w = int(np.floor(h * cut)), int(np.floor(w * cut))
    cy, cx = centre
    top, bottom = np.clip([cy - cut_h // 2, cy + cut_h // 2], 0, h)
    left, right = np.clip([cx - cut_w // 2, cx + cut_w // 2], 0, w)
    mixed = images.copy()
    mixed[:, top:bottom, left:right] = images[partner][:, top:bottom, left:right]
    return mixed, 1.0 - (bottom - top) * (right - left) / (h * w)


def test_unmixed_loss_is_the_label_smoothed_cross_entropy(fashion_mnist_env):
    """Mixing off: the `cross_entropy` term is sum_i mask_i (-sum_k q_ik log p_ik) with the
    config's epsilon = 0.1 (not 0, not eps / (K - 1)), over the real rows only."""
    task = _task()
    assert not task.mixing.enabled
    params, batch, rng = _params(task), _batch(), jax.random.PRNGKey(5)
    log_p = _np_log_softmax(_logits(task, params, batch["image"], rng))
    # Labels the model mostly predicts: smoothing then raises every such row's loss, so the sum
    # tells eps = 0.1 from 0 (random labels' differences cancel in the sum).
    guess = log_p.argmax(-1)
    batch["label"] = np.where(np.arange(B) < 6, guess, (guess + 1) % K).astype(np.int32)
    terms, metrics = task.loss_fn(params, batch, rng)
    per_row = -(_np_smoothed(batch["label"]) * log_p).sum(-1)
    np.testing.assert_allclose(float(terms["cross_entropy"]), (batch["mask"] * per_row).sum(),
                               rtol=1e-5)
    plain = -np.take_along_axis(log_p, batch["label"][:, None], -1)[:, 0]
    # eps = 0 (or eps / (K - 1)) would be told apart: over 100 times the tolerance above
    assert abs((batch["mask"] * (per_row - plain)).sum()) > 1e-3 * (batch["mask"] * plain).sum()
    correct = (log_p.argmax(-1) == batch["label"]) * batch["mask"]
    assert float(metrics["accuracy"][0]) == correct.sum()
    assert float(metrics["accuracy"][1]) == batch["mask"].sum()


@pytest.mark.parametrize("mixup_alpha, cutmix_alpha", [(0.8, 0.0), (0.0, 1.0)],
                         ids=["mixup", "cutmix"])
def test_mixed_loss_is_the_soft_cross_entropy_of_the_mixed_batch(fashion_mnist_env, mixup_alpha,
                                                                 cutmix_alpha):
    """With label_smoothing 0.1 and Mixup (alpha 0.8) or CutMix (alpha 1.0): the loss term is
    sum_i mask_i (-sum_k t_ik log softmax(f(x~_i))_k), x~ and t the mixed images and smoothed
    targets rebuilt in NumPy; it differs from the unmixed batch's loss; accuracy counts each
    row's larger share's label."""
    task = _task(**{"task.mixup_alpha": mixup_alpha, "task.cutmix_alpha": cutmix_alpha})
    assert task.mixing.enabled and task.mixing.prob == 1.0
    params, batch = _params(task, scale=1.0, seed=1), _batch()  # predictions not all one class
    rng = jax.random.PRNGKey(7)  # its draws give the partners the larger share (lam < 0.5)
    partner, lam_mixup, lam_cutmix, centre = _draws(rng, mixup_alpha, cutmix_alpha)
    assert sorted(partner) == list(range(B))
    moved = partner != np.arange(B)
    assert moved.sum() >= 4, "most rows should have another row as partner"
    images, lam = _np_mix(batch["image"].astype(np.float64), partner, lam_mixup, lam_cutmix,
                          centre, cutmix=cutmix_alpha > 0)
    assert 0.2 < lam < 0.45, "the draw should mix visibly, the partner's share the larger"
    log_p = _np_log_softmax(_logits(task, params, images, rng))
    # Labels (the images do not depend on them) that make the model right about each moved
    # row's partner's label, so accuracy against the larger share differs from the own labels.
    labels = np.arange(B) % K
    labels[partner[moved]] = log_p.argmax(-1)[moved]
    batch["label"] = labels.astype(np.int32)
    terms, metrics = task.loss_fn(params, batch, rng)

    smoothed = _np_smoothed(batch["label"])
    targets = lam * smoothed + (1 - lam) * smoothed[partner]
    np.testing.assert_allclose(targets.sum(-1), 1.0)
    want = (batch["mask"] * -(targets * log_p).sum(-1)).sum()
    np.testing.assert_allclose(float(terms["cross_entropy"]), want, rtol=1e-5)

    plain_log_p = _np_log_softmax(_logits(task, params, batch["image"], rng))
    unmixed = (batch["mask"] * -(smoothed * plain_log_p).sum(-1)).sum()
    assert abs(float(terms["cross_entropy"]) - unmixed) > 1e-2 * unmixed
    correct = (log_p.argmax(-1) == targets.argmax(-1)) * batch["mask"]
    assert float(metrics["accuracy"][0]) == correct.sum()
    own = (log_p.argmax(-1) == batch["label"]) * batch["mask"]
    assert own.sum() != correct.sum(), "the own labels should count otherwise"
