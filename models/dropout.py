"""Dropout (Srivastava et al. 2014, "Dropout: A Simple Way to Prevent Neural Networks from
Overfitting", Sec. 2 and 10: inverted dropout), its keep masks drawn from 16 random bits per
element.

Training zeroes each element independently with probability ``rate`` and scales the survivors by
``1 / (1 - rate)``, so every element keeps its expectation; evaluation is the identity. The
Transformer (Vaswani et al. 2017, Sec. 5.4), BERT and ViT apply it to sublayer outputs and
embeddings, and BERT also to the attention probabilities (``models/attention.py``).

Why 16 bits. ``jax.random.bernoulli`` draws a float32 uniform per element: one Threefry-2x32 hash
(20 rounds) per element, which on a CPU is a visible share of a BERT step (the attention
probabilities alone are ``[b, h, l, l]``). A keep decision needs far fewer bits: here each
32-bit draw is split into two 16-bit integers, halving the hashing, and an element is dropped
when its integer is below ``round(rate * 2**16)``. The rate actually applied is that threshold
over ``2**16`` (``quantized_rate``: within ``2**-17`` of ``rate``, e.g. 0.1 -> 0.1000061), and
the survivors are scaled by the exact inverse of its keep probability (in float32 at least,
then rounded to the input's dtype), so the expectation is preserved up to that rounding. The draws keep the leading axes' shape, so sharded activations draw their
bits where they live.

``dropout(x, rate, rng)`` is the function; ``Dropout`` the Linen module (the interface of
``flax.linen.Dropout`` that the models use: ``Dropout(rate)(x, deterministic=...)``, its key from
the ``'dropout'`` RNG stream).

Stochastic depth (Huang et al. 2016, "Deep Networks with Stochastic Depth"; DeiT trains with it,
Touvron et al. 2021, Table 9) drops a whole residual branch for an example instead of single
elements: ``drop_path(x, rate, rng)`` zeroes every element of example ``b`` (the leading axis)
with probability ``rate``, from the same 16-bit keep decisions, one per example, and scales the
kept examples by the inverse keep probability, so a branch keeps its expectation in training
and evaluation runs the whole network as it is (the "inverted" form; Huang et al. instead scale
each branch by its survival probability at test time, the same expectation). ``DropPath`` is its
module, and ``stochastic_depth_rates`` the paper's linear rule over the depth.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

BITS = 16
LEVELS = 1 << BITS


def drop_threshold(rate: float) -> int:
    """The 16-bit integer below which an element is dropped: ``round(rate * 2**16)``."""
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f'dropout rate must be in [0, 1], got {rate}.')
    return min(LEVELS, round(rate * LEVELS))


def quantized_rate(rate: float) -> float:
    """The drop probability actually applied for ``rate``: ``drop_threshold(rate) / 2**16``."""
    return drop_threshold(rate) / LEVELS


def random_uint16(rng, shape: tuple[int, ...]) -> jax.Array:
    """Uniform 16-bit integers of ``shape`` (at least 1-D), two from each 32-bit draw along the
    last axis; the leading axes are drawn as they are."""
    if not shape:
        raise ValueError('random_uint16 needs at least one axis.')
    *lead, n = shape
    words = jax.random.bits(rng, (*lead, (n + 1) // 2), jnp.uint32)
    halves = jax.lax.bitcast_convert_type(words, jnp.uint16)        # [..., ceil(n/2), 2]
    halves = halves.reshape(*lead, 2 * words.shape[-1])
    return halves if n % 2 == 0 else halves[..., :n]


def keep_mask(rng, rate: float, shape: tuple[int, ...]) -> jax.Array:
    """Bool mask of ``shape``, each element True (kept) with probability
    ``1 - quantized_rate(rate)``, independently."""
    threshold = drop_threshold(rate)
    if threshold == 0:
        return jnp.ones(shape, bool)
    if threshold == LEVELS:
        return jnp.zeros(shape, bool)
    full = tuple(shape) if shape else (1,)
    keep = random_uint16(rng, full) >= jnp.uint16(threshold)
    return keep.reshape(shape)


def _drop(x: jax.Array, rate: float, rng, mask_shape: tuple[int, ...]) -> jax.Array:
    """``x`` with the entries of a keep mask of ``mask_shape`` (broadcast over ``x``'s trailing
    axes) kept and scaled by the inverse of their keep probability, the others zeroed."""
    threshold = drop_threshold(rate)
    if threshold == 0:
        return x
    if threshold == LEVELS:
        return jnp.zeros_like(x)
    scale = LEVELS / (LEVELS - threshold)
    keep = keep_mask(rng, rate, mask_shape)
    keep = keep.reshape(mask_shape + (1,) * (x.ndim - len(mask_shape)))
    # bf16 would hold 1/0.9 as 1.109375 and bias every survivor alike: scale in float32.
    wide = x.astype(jnp.promote_types(x.dtype, jnp.float32))
    return jnp.where(keep, wide * scale, 0.0).astype(x.dtype)


def dropout(x: jax.Array, rate: float, rng) -> jax.Array:
    """Inverted dropout of ``x`` (training): elements zeroed with probability
    ``quantized_rate(rate)``, the rest scaled by the inverse of their keep probability."""
    return _drop(x, rate, rng, tuple(x.shape))


class Dropout(nn.Module):
    """``dropout`` as a Linen module: ``Dropout(rate)(x, deterministic)``; the identity when
    ``deterministic`` or ``rate == 0``, else a key from the ``rng_collection`` stream."""

    rate: float
    rng_collection: str = 'dropout'

    @staticmethod
    def _apply(x, rate, rng):
        return dropout(x, rate, rng)

    @nn.compact
    def __call__(self, x, deterministic: bool):
        threshold = drop_threshold(self.rate)  # checks the rate, in evaluation too
        if deterministic or threshold == 0:
            return x
        return self._apply(x, self.rate, self.make_rng(self.rng_collection))


def drop_path(x: jax.Array, rate: float, rng) -> jax.Array:
    """Stochastic depth of a residual branch ``x`` [batch, ...] (training): each example's whole
    branch zeroed with probability ``quantized_rate(rate)``, the kept ones scaled by the inverse
    of their keep probability (module docstring)."""
    return _drop(x, rate, rng, (x.shape[0],))


class DropPath(Dropout):
    """``drop_path`` as a Linen module: ``DropPath(rate)(x, deterministic)``; the identity when
    ``deterministic`` or ``rate == 0``, else a key from the ``rng_collection`` stream."""

    @staticmethod
    def _apply(x, rate, rng):
        return drop_path(x, rate, rng)


def stochastic_depth_rates(rate: float, num_layers: int) -> tuple[float, ...]:
    """The drop rate of each of ``num_layers`` residual blocks, rising linearly to ``rate`` at
    the last one: Huang et al. 2016, eq. 4, the "linear decay rule" of survival probabilities
    p_l = 1 - (l / L) (1 - p_L), i.e. block l (1-based) drops at (l / L) rate. The early blocks,
    whose features every later block reads, are dropped least. (timm's DeiT code spaces the
    rates from 0 at the first block instead, ``linspace(0, rate, L)``.)"""
    if not 0.0 <= rate < 1.0:
        raise ValueError(f'drop_path_rate={rate} must be in [0, 1)')
    return tuple(rate * (layer + 1) / num_layers for layer in range(num_layers))
