"""models/dropout.py: the 16-bit keep masks against an independent NumPy reading of the same
random words, the applied rate and its scaling, the statistics of the masks, and the module."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models.dropout import (Dropout, drop_threshold, dropout, keep_mask, quantized_rate,
                            random_uint16)


@pytest.mark.parametrize("rate", [0.0, 1e-6, 0.01, 0.1, 0.15, 0.3, 0.5, 0.9, 1.0])
def test_quantized_rate_is_the_nearest_multiple_of_two_to_the_minus_16(rate):
    levels = np.arange(2 ** 16 + 1) / 2 ** 16
    nearest = levels[np.argmin(np.abs(levels - rate))]
    assert quantized_rate(rate) == pytest.approx(nearest, abs=1e-15)
    assert abs(quantized_rate(rate) - rate) <= 2.0 ** -17
    assert drop_threshold(rate) == round(nearest * 2 ** 16)


@pytest.mark.parametrize("shape", [(6,), (3, 10), (2, 3, 7), (1,)])
def test_uint16_draws_are_the_halves_of_the_32_bit_words(shape):
    """Each 32-bit draw of the last axis (rounded up to even) gives two 16-bit integers: the
    same words, read as NumPy reads little-endian uint32 memory as uint16."""
    rng = jax.random.PRNGKey(7)
    *lead, n = shape
    words = np.asarray(jax.random.bits(rng, (*lead, (n + 1) // 2), jnp.uint32))
    low, high = words & 0xFFFF, words >> 16
    expected = np.stack([low, high], axis=-1).reshape(*lead, -1)[..., :n].astype(np.uint16)
    got = np.asarray(random_uint16(rng, shape))
    assert got.dtype == np.uint16 and got.shape == shape
    np.testing.assert_array_equal(got, expected)


def test_keep_mask_drops_the_draws_below_the_threshold():
    rng = jax.random.PRNGKey(3)
    shape = (4, 5, 9)
    draws = np.asarray(random_uint16(rng, shape))
    np.testing.assert_array_equal(np.asarray(keep_mask(rng, 0.1, shape)),
                                  draws >= round(0.1 * 2 ** 16))
    assert np.asarray(keep_mask(rng, 0.1, ())).shape == ()


@pytest.mark.parametrize("rate", [0.1, 0.5])
def test_masks_drop_at_the_rate_independently(rate):
    """Over 2^20 elements the dropped fraction is within 5 binomial sigmas of the applied rate,
    and the two elements cut from one 32-bit draw are dropped together at rate^2 (independent)."""
    q = quantized_rate(rate)
    dropped = ~np.asarray(keep_mask(jax.random.PRNGKey(0), rate, (1024, 1024)))
    n = dropped.size
    assert abs(dropped.mean() - q) < 5 * np.sqrt(q * (1 - q) / n)
    pairs = dropped.reshape(-1, 2)
    both = (pairs[:, 0] & pairs[:, 1]).mean()
    assert abs(both - q * q) < 5 * np.sqrt(q * q * (1 - q * q) / len(pairs))


def test_dropout_scales_survivors_by_the_inverse_keep_probability():
    x = jnp.asarray(np.random.default_rng(0).normal(size=(256, 512)), jnp.float32)
    rng = jax.random.PRNGKey(1)
    y = np.asarray(dropout(x, 0.1, rng))
    keep = np.asarray(keep_mask(rng, 0.1, x.shape))
    scale = 1.0 / (1.0 - quantized_rate(0.1))
    np.testing.assert_allclose(y[keep], np.asarray(x)[keep] * scale, rtol=1e-6)
    assert np.all(y[~keep] == 0.0)
    # The expectation is kept: the mean of dropout(ones) is 1 up to sampling noise.
    ones = np.asarray(dropout(jnp.ones((1024, 1024)), 0.1, rng))
    q = quantized_rate(0.1)
    assert abs(ones.mean() - 1.0) < 5 * np.sqrt(q / (1 - q) / ones.size)


def test_dropout_edges_and_dtype():
    x = jnp.ones((4, 6), jnp.bfloat16)
    rng = jax.random.PRNGKey(0)
    assert dropout(x, 0.0, rng) is x
    assert np.all(np.asarray(dropout(x, 1.0, rng), np.float32) == 0.0)
    assert dropout(x, 0.3, rng).dtype == jnp.bfloat16
    # bf16 survivors are the float32 products rounded once, not products with a rounded scale.
    z = jnp.asarray(np.random.default_rng(1).normal(size=(64, 64)), jnp.bfloat16)
    keep = np.asarray(keep_mask(rng, 0.1, z.shape))
    wide = np.asarray(z, np.float32) * np.float32(1.0 / (1.0 - quantized_rate(0.1)))
    expected = np.where(keep, np.asarray(jnp.asarray(wide, jnp.bfloat16), np.float32), 0.0)
    np.testing.assert_array_equal(np.asarray(dropout(z, 0.1, rng), np.float32), expected)
    with pytest.raises(ValueError, match=r"dropout rate must be in \[0, 1\]"):
        dropout(x, 1.5, rng)
    with pytest.raises(ValueError, match="dropout rate"):
        Dropout(-0.1).apply({}, x, deterministic=True)


def test_module_is_the_identity_in_evaluation_and_draws_from_the_dropout_stream():
    x = jnp.ones((64, 256))
    module = Dropout(0.25)
    np.testing.assert_array_equal(module.apply({}, x, deterministic=True), x)
    a = module.apply({}, x, deterministic=False, rngs={"dropout": jax.random.PRNGKey(0)})
    b = module.apply({}, x, deterministic=False, rngs={"dropout": jax.random.PRNGKey(0)})
    c = module.apply({}, x, deterministic=False, rngs={"dropout": jax.random.PRNGKey(1)})
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(np.asarray(a), np.asarray(c))
    # Its own rate: a quarter of the 16,384 elements dropped (sd 0.0034), the rest scaled by 4/3.
    dropped = np.asarray(a) == 0
    assert abs(dropped.mean() - 0.25) < 0.015
    np.testing.assert_allclose(np.asarray(a)[~dropped], 4 / 3, rtol=1e-6)
    with pytest.raises(Exception, match="dropout"):
        module.apply({}, x, deterministic=False)  # no 'dropout' key given
