"""Random parameter values for the model tests. A model's own initialisation has zero biases and
zero classifier heads, which would hide most of what a test compares (a zero head zeroes every
other gradient), so tests move every parameter off it.

The noise is drawn by NumPy: drawing it with jax.random, one array per leaf, compiled a sampler
for every distinct leaf shape (about ten seconds for a tiny BERT on a 2-core CPU)."""

from __future__ import annotations

import jax
import numpy as np


def _noise_like(tree, scale: float, seed: int):
    rng = np.random.default_rng(seed)
    return jax.tree.map(
        lambda x: (scale * rng.standard_normal(np.shape(x))).astype(np.asarray(x).dtype), tree)


def perturbed(tree, *, scale: float, seed: int = 0):
    """`tree` (unboxed parameters) plus independent N(0, scale^2) noise on every leaf; the same
    shapes and dtypes, as NumPy arrays."""
    return jax.tree.map(lambda x, n: np.asarray(x) + n, tree, _noise_like(tree, scale, seed))


def randomised(tree, *, scale: float, seed: int = 0):
    """Every leaf of `tree` replaced by N(0, scale^2) noise of its shape and dtype."""
    return _noise_like(tree, scale, seed)
