"""Mixup and CutMix (train/mixing.py) against NumPy: the blended images and targets share one
lam, CutMix pastes the partner inside the box and corrects lam to the area outside it, and the
box's sides follow sqrt(1 - lam)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from train.mixing import MixConfig, box_mask, cutmix_box, mix_batch


def _batch(b=8, h=12, w=10, k=4, seed=0):
    rng = np.random.default_rng(seed)
    images = rng.normal(size=(b, h, w, 2)).astype(np.float32)
    labels = rng.integers(0, k, size=b)
    return images, np.eye(k, dtype=np.float32)[labels]


def test_mixup_blends_images_and_targets_with_one_lam():
    images, targets = _batch()
    mixed = mix_batch(jax.random.PRNGKey(1), images, targets, MixConfig(mixup_alpha=0.8))
    lam, partner = float(mixed.lam), np.asarray(mixed.partner)
    assert 0.0 < lam < 1.0 and not bool(mixed.cutmix)
    assert sorted(partner) == list(range(len(images)))  # a permutation of the batch
    np.testing.assert_allclose(mixed.images, lam * images + (1 - lam) * images[partner],
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(mixed.targets, lam * targets + (1 - lam) * targets[partner],
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(mixed.targets).sum(-1), 1.0, rtol=1e-6)


@pytest.mark.parametrize("seed", range(4))
def test_cutmix_pastes_the_box_and_its_lam_is_the_area_outside(seed):
    images, targets = _batch(seed=seed)
    h, w = images.shape[1:3]
    mixed = mix_batch(jax.random.PRNGKey(seed), images, targets, MixConfig(cutmix_alpha=1.0))
    assert bool(mixed.cutmix)
    partner = np.asarray(mixed.partner)
    from_partner = np.all(np.asarray(mixed.images) == images[partner], axis=(0, 3))
    from_self = np.all(np.asarray(mixed.images) == images, axis=(0, 3))
    assert np.all(from_partner | from_self)
    inside = from_partner & ~from_self  # images differ from their partners everywhere
    rows, cols = np.nonzero(inside)
    area = 0 if not len(rows) else (np.ptp(rows) + 1) * (np.ptp(cols) + 1)
    assert area == inside.sum()  # one rectangle
    lam = 1.0 - area / (h * w)
    np.testing.assert_allclose(float(mixed.lam), lam, rtol=1e-6)
    np.testing.assert_allclose(mixed.targets, lam * targets + (1 - lam) * targets[partner],
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("lam", [0.0, 0.3, 0.75, 0.99])
def test_cutmix_box_sides_follow_sqrt_one_minus_lam(lam):
    """Yun et al. eq. 2: r_h = H sqrt(1 - lam), r_w = W sqrt(1 - lam) (floored) around the
    centre drawn from the key, clipped to the image."""
    h, w = 40, 30
    cut_h, cut_w = int(np.floor(h * np.sqrt(1 - lam))), int(np.floor(w * np.sqrt(1 - lam)))
    for seed in range(10):
        key = jax.random.PRNGKey(seed)
        ky, kx = jax.random.split(key)  # the centre, as cutmix_box draws it
        cy, cx = int(jax.random.randint(ky, (), 0, h)), int(jax.random.randint(kx, (), 0, w))
        want = (np.clip(cy - cut_h // 2, 0, h), np.clip(cx - cut_w // 2, 0, w),
                np.clip(cy + cut_h // 2, 0, h), np.clip(cx + cut_w // 2, 0, w))
        box = np.asarray(cutmix_box(key, lam, h, w))
        np.testing.assert_array_equal(box, want)
        mask = np.asarray(box_mask(box, h, w))
        assert mask.sum() == (box[2] - box[0]) * (box[3] - box[1])
        assert mask[box[0]:box[2], box[1]:box[3]].all()


def test_switching_picks_each_method_and_prob_zero_mixes_nothing():
    images, targets = _batch()
    both = MixConfig(mixup_alpha=0.8, cutmix_alpha=1.0, switch_prob=0.5)
    picks = {bool(mix_batch(jax.random.PRNGKey(s), images, targets, both).cutmix)
             for s in range(20)}
    assert picks == {True, False}
    unmixed = mix_batch(jax.random.PRNGKey(0), images, targets,
                        MixConfig(mixup_alpha=0.8, prob=0.0))
    np.testing.assert_array_equal(unmixed.images, images)
    np.testing.assert_array_equal(unmixed.targets, targets)
    assert float(unmixed.lam) == 1.0


@pytest.mark.parametrize("bad", [dict(mixup_alpha=-1.0), dict(prob=1.5), dict(switch_prob=-0.1)])
def test_bad_settings_are_refused(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        MixConfig(**bad)
