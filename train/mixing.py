"""Mixup and CutMix, on the device inside the train step: DeiT's recipe (Touvron et al. 2021,
Table 9: Mixup alpha 0.8, CutMix alpha 1.0, one of the two for each batch).

  Mixup   Zhang et al. 2018, "mixup: Beyond Empirical Risk Minimization", eq. 1:
          x~ = lam x_i + (1 - lam) x_j,  y~ = lam y_i + (1 - lam) y_j,  lam ~ Beta(a, a).
  CutMix  Yun et al. 2019, "CutMix: Regularization Strategy to Train Strong Classifiers with
          Localizable Features", Sec. 3.1, eq. 1-2: x~ = M * x_i + (1 - M) * x_j, M 0 inside a
          box B and 1 outside, lam ~ Beta(a, a) (the paper: a = 1, uniform); B's sides
          r_w = W sqrt(1 - lam), r_h = H sqrt(1 - lam) (floored) around a centre
          r_x ~ U{0..W-1}, r_y ~ U{0..H-1}, clipped to the image (`cutmix_box`); lam is then
          corrected to the share the box leaves of image i, 1 - |B| / (W H), as in the paper's
          code, and y~ = lam y_i + (1 - lam) y_j.

Which one: with both alphas > 0, CutMix with probability `switch_prob` (DeiT / timm: 0.5), else
Mixup; with one alpha > 0, that one. With probability 1 - `prob` the batch is left unmixed (DeiT:
prob 1). One lam, one box and one pairing per batch, as both papers' code and timm's default
'batch' mode: x_j is row j = perm(i) of a random permutation of the batch. The label side y is
each row's target distribution (one-hot or label-smoothed, train/losses.py one_hot_targets),
learned with `soft_cross_entropy`.

Everything is drawn from the step's key, so a run replays exactly (a resume continues the same
stream) and the host does no extra work. Under gradient accumulation (train/train_step.py) each
microbatch is mixed by itself, its rows paired among themselves. Training batches hold no
padding rows (the image pipeline drops an incomplete last batch), so a real image is never mixed
with an empty one.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp

# The fold_in constant of the mixing key, kept apart from the dropout key of the same step.
MIX_STREAM = 0x6D6978


@dataclasses.dataclass(frozen=True)
class MixConfig:
    """config.task's mixing settings (train/tasks/classify.py)."""

    mixup_alpha: float = 0.0      # Beta(a, a) of Mixup's lam; 0: no Mixup
    cutmix_alpha: float = 0.0     # Beta(a, a) of CutMix's lam; 0: no CutMix
    prob: float = 1.0             # probability that a batch is mixed at all
    switch_prob: float = 0.5      # with both alphas > 0: probability of CutMix over Mixup

    def __post_init__(self):
        for name in ("mixup_alpha", "cutmix_alpha"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 0 (0: off)")
        for name in ("prob", "switch_prob"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name}={getattr(self, name)} must be a probability in [0, 1]")

    @property
    def enabled(self) -> bool:
        return (self.mixup_alpha > 0 or self.cutmix_alpha > 0) and self.prob > 0


class Mixed(NamedTuple):
    images: jax.Array     # [b, H, W, C] the mixed images
    targets: jax.Array    # [b, K] the mixed target distributions
    lam: jax.Array        # () the share of each row's own image (1: unmixed)
    partner: jax.Array    # [b] int32: row i was mixed with row partner[i]
    cutmix: jax.Array     # () bool: CutMix (else Mixup, or nothing where lam = 1)


def cutmix_box(rng, lam, height: int, width: int) -> jax.Array:
    """CutMix's box for the share `lam` of image i (module docstring): int32 [4] = (top, left,
    bottom, right), rows top..bottom-1 and columns left..right-1, clipped to the image."""
    ky, kx = jax.random.split(rng)
    cut = jnp.sqrt(1.0 - lam)
    cut_h = jnp.floor(height * cut).astype(jnp.int32)
    cut_w = jnp.floor(width * cut).astype(jnp.int32)
    cy = jax.random.randint(ky, (), 0, height)
    cx = jax.random.randint(kx, (), 0, width)
    top, bottom = jnp.clip(cy - cut_h // 2, 0, height), jnp.clip(cy + cut_h // 2, 0, height)
    left, right = jnp.clip(cx - cut_w // 2, 0, width), jnp.clip(cx + cut_w // 2, 0, width)
    return jnp.stack([top, left, bottom, right]).astype(jnp.int32)


def box_mask(box, height: int, width: int) -> jax.Array:
    """bool [H, W], True inside `box` (= 1 - M of Yun et al.: where the partner's pixels go)."""
    rows = jnp.arange(height)[:, None]
    cols = jnp.arange(width)[None, :]
    return (rows >= box[0]) & (rows < box[2]) & (cols >= box[1]) & (cols < box[3])


def mix_batch(rng, images, targets, cfg: MixConfig) -> Mixed:
    """Mixup or CutMix of a batch (module docstring): `images` [b, H, W, C] float, `targets`
    [b, K] target distributions."""
    batch, height, width = images.shape[:3]
    k_apply, k_switch, k_mixup, k_cutmix, k_box, k_perm = jax.random.split(rng, 6)
    partner = jax.random.permutation(k_perm, batch)
    other_images, other_targets = images[partner], targets[partner]
    one = jnp.ones((), jnp.float32)
    lam_mixup = (jax.random.beta(k_mixup, cfg.mixup_alpha, cfg.mixup_alpha)
                 if cfg.mixup_alpha > 0 else one)
    lam_cutmix = (jax.random.beta(k_cutmix, cfg.cutmix_alpha, cfg.cutmix_alpha)
                  if cfg.cutmix_alpha > 0 else one)
    box = cutmix_box(k_box, lam_cutmix, height, width)
    inside = box_mask(box, height, width)
    lam_box = 1.0 - (box[2] - box[0]) * (box[3] - box[1]) / (height * width)
    if cfg.mixup_alpha > 0 and cfg.cutmix_alpha > 0:
        cutmix = jax.random.uniform(k_switch) < cfg.switch_prob
    else:
        cutmix = jnp.asarray(cfg.cutmix_alpha > 0)
    applied = jax.random.uniform(k_apply) < cfg.prob
    lam = jnp.where(applied, jnp.where(cutmix, lam_box, lam_mixup), one).astype(jnp.float32)
    blended = lam * images + (1.0 - lam) * other_images
    pasted = jnp.where(inside[None, :, :, None], other_images, images)
    mixed = jnp.where(applied, jnp.where(cutmix, pasted, blended), images).astype(images.dtype)
    mixed_targets = lam * targets + (1.0 - lam) * other_targets
    return Mixed(mixed, mixed_targets, lam, partner, cutmix)
