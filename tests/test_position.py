"""Position encodings checked against independent NumPy / plain-Python computations."""

import math
import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import position as P

import tiny_transformer

RNG = np.random.default_rng(0)


def _unboxed_params(variables):
    return jax.tree_util.tree_map(np.asarray, nn.unbox(variables)['params'])


# ---------------------------------------------------------------------------------------------
# Sinusoidal
# ---------------------------------------------------------------------------------------------

def test_sinusoidal_table_matches_formula():
    length, dim = 50, 16
    table = P.sinusoidal_table(length, dim)
    assert table.shape == (length, dim) and table.dtype == np.float32
    expected = np.zeros((length, dim))
    for pos in range(length):
        for col in range(dim):
            i = col // 2
            angle = pos / 10000.0 ** (2 * i / dim)
            expected[pos, col] = math.sin(angle) if col % 2 == 0 else math.cos(angle)
    np.testing.assert_allclose(table, expected, atol=1e-6)
    # Hand-checked columns: the first pair has wavelength 2*pi.
    for pos in (0, 1, 7):
        assert table[pos, 0] == pytest.approx(math.sin(pos), abs=1e-6)
        assert table[pos, 1] == pytest.approx(math.cos(pos), abs=1e-6)


def test_sinusoidal_halves_layout_is_marians():
    """'halves' (Marian): column i holds sin(pos w_i), column d/2 + i cos(pos w_i), w_i =
    10000^(-2i/d): the interleaved table's columns permuted, written out here element by
    element."""
    length, dim = 30, 12
    table = P.sinusoidal_table(length, dim, layout='halves')
    expected = np.zeros((length, dim))
    for pos in range(length):
        for i in range(dim // 2):
            angle = pos / 10000.0 ** (2 * i / dim)
            expected[pos, i], expected[pos, dim // 2 + i] = math.sin(angle), math.cos(angle)
    np.testing.assert_allclose(table, expected, atol=1e-6)
    interleaved = P.sinusoidal_table(length, dim)
    np.testing.assert_array_equal(table, np.concatenate([interleaved[:, 0::2],
                                                         interleaved[:, 1::2]], axis=1))
    out = P.SinusoidalPositionEmbedding(max_length=length, features=dim, layout='halves').apply(
        {}, np.array([[3, 0, 29]]))
    np.testing.assert_allclose(out[0], table[[3, 0, 29]], atol=1e-7)
    with pytest.raises(ValueError, match="layout='split' is not one of"):
        P.sinusoidal_table(4, 8, layout='split')


def test_sinusoidal_table_odd_dim_raises():
    with pytest.raises(ValueError, match='even'):
        P.sinusoidal_table(4, 7)


def test_sinusoidal_module_gathers_rows():
    positions = np.array([[0, 1, 2, 3], [5, 9, 2, 0]])
    module = P.SinusoidalPositionEmbedding(max_length=10, features=8)
    out, variables = module.init_with_output(jax.random.PRNGKey(0), positions)
    assert not variables  # no parameters
    table = P.sinusoidal_table(10, 8)
    np.testing.assert_allclose(out, table[positions], atol=1e-7)


def test_learned_position_embedding():
    module = P.LearnedPositionEmbedding(max_length=6, features=4)
    positions = np.array([[0, 1, 2], [5, 3, 3]])
    out, variables = module.init_with_output(jax.random.PRNGKey(0), positions)
    table = _unboxed_params(variables)['embedding']
    assert table.shape == (6, 4)
    np.testing.assert_allclose(out, table[positions])
    assert nn.get_partition_spec(variables)['params']['embedding'] == jax.sharding.PartitionSpec(
        'length', 'embed')
    with pytest.raises(ValueError, match='max_length'):
        module.apply(variables, np.zeros((1, 7), np.int32))
    # Traced positions outside the table read NaN rows, never another row: one past the end,
    # and a negative one (which jnp.take would wrap to the last row).
    out = jax.jit(module.apply)(variables, np.array([[6, -1, 2]]))
    assert np.isnan(out[0, :2]).all()
    np.testing.assert_allclose(out[0, 2], table[2])


# ---------------------------------------------------------------------------------------------
# RoPE
# ---------------------------------------------------------------------------------------------

def _np_rope(x, positions, base=10000.0):
    """Per-pair 2x2 rotation matrices, interleaved pairs (x[2i], x[2i+1])."""
    b, l, h, d = x.shape
    out = np.zeros_like(x, dtype=np.float64)
    for bi in range(b):
        for li in range(l):
            m = positions[bi, li]
            for i in range(d // 2):
                theta = base ** (-2.0 * i / d)
                c, s = math.cos(m * theta), math.sin(m * theta)
                rot = np.array([[c, -s], [s, c]])
                out[bi, li, :, 2 * i:2 * i + 2] = x[bi, li, :, 2 * i:2 * i + 2] @ rot.T
    return out


def test_rope_frequencies():
    np.testing.assert_allclose(P.rope_frequencies(8, 100.0),
                               [1.0, 100 ** -0.25, 100 ** -0.5, 100 ** -0.75], rtol=1e-6)
    with pytest.raises(ValueError, match='even'):
        P.rope_frequencies(5)


def test_apply_rope_matches_rotation_matrices():
    x = RNG.normal(size=(2, 5, 3, 8)).astype(np.float32)
    positions = np.array([[0, 1, 2, 3, 4], [7, 3, 100, 0, 2]])
    out = P.apply_rope(jnp.asarray(x), jnp.asarray(positions))
    np.testing.assert_allclose(out, _np_rope(x.astype(np.float64), positions), atol=1e-4)


def test_rope_preserves_norm_and_depends_on_relative_position():
    d = 16
    q = RNG.normal(size=(1, 1, 1, d)).astype(np.float32)
    k = RNG.normal(size=(1, 1, 1, d)).astype(np.float32)

    def score(m, n):
        qm = P.apply_rope(jnp.asarray(q), jnp.array([[m]]))
        kn = P.apply_rope(jnp.asarray(k), jnp.array([[n]]))
        return float(jnp.sum(qm * kn))

    for m, n, s in [(3, 1, 5), (0, 7, 11), (10, 10, 3)]:
        assert score(m, n) == pytest.approx(score(m + s, n + s), abs=1e-4)
    # ... but it does depend on m - n.
    assert abs(score(3, 1) - score(3, 2)) > 1e-3
    rotated = P.apply_rope(jnp.asarray(q), jnp.array([[42]]))
    assert float(jnp.linalg.norm(rotated)) == pytest.approx(float(np.linalg.norm(q)), rel=1e-5)


def _np_rope_axial(x, positions, base=10000.0):
    """Axial RoPE by hand: head part j (width d / k) rotated pair by pair by positions[..., j]."""
    b, l, h, d = x.shape
    k = positions.shape[-1]
    w = d // k
    out = np.zeros_like(x, dtype=np.float64)
    for bi in range(b):
        for li in range(l):
            for j in range(k):
                m = positions[bi, li, j]
                for i in range(w // 2):
                    angle = m * base ** (-2.0 * i / w)       # frequencies of a w-wide head
                    c, s = math.cos(angle), math.sin(angle)
                    lo = j * w + 2 * i
                    a, bb = x[bi, li, :, lo], x[bi, li, :, lo + 1]
                    out[bi, li, :, lo] = a * c - bb * s
                    out[bi, li, :, lo + 1] = a * s + bb * c
    return out


def test_apply_rope_2d_positions_match_axial_rotation():
    x = RNG.normal(size=(2, 5, 3, 12)).astype(np.float32)
    positions = RNG.integers(0, 9, size=(2, 5, 2))
    for base in (10000.0, 100.0):
        out = P.apply_rope(jnp.asarray(x), jnp.asarray(positions), base)
        assert out.shape == x.shape and out.dtype == x.dtype
        np.testing.assert_allclose(out, _np_rope_axial(x.astype(np.float64), positions, base),
                                   atol=1e-5)
    # Each half is an ordinary 6-wide RoPE of its own axis: rows first, then columns.
    out = np.asarray(P.apply_rope(jnp.asarray(x), jnp.asarray(positions)))
    np.testing.assert_allclose(out[..., :6], _np_rope(x[..., :6].astype(np.float64),
                                                      positions[..., 0]), atol=1e-5)
    np.testing.assert_allclose(out[..., 6:], _np_rope(x[..., 6:].astype(np.float64),
                                                      positions[..., 1]), atol=1e-5)


def test_apply_rope_one_position_axis_equals_1d():
    x = jnp.asarray(RNG.normal(size=(2, 7, 3, 16)).astype(np.float32))
    positions = jnp.asarray(RNG.integers(0, 500, size=(2, 7)))
    np.testing.assert_array_equal(P.apply_rope(x, positions[..., None], 500.0),
                                  P.apply_rope(x, positions, 500.0))


def test_apply_rope_rejects_parts_that_are_not_even():
    x = jnp.zeros((1, 2, 1, 6))
    with pytest.raises(ValueError, match=r'2 position axes split head_dim=6 .* divisible by 4'):
        P.apply_rope(x, jnp.zeros((1, 2, 2), jnp.int32))        # two parts of width 3
    with pytest.raises(ValueError, match=r'4 position axes split head_dim=6 .* divisible by 8'):
        P.apply_rope(x, jnp.zeros((1, 2, 4), jnp.int32))        # 6 is not divisible by 4
    with pytest.raises(ValueError, match=r'positions must be \[batch, length\] or'):
        P.apply_rope(x, jnp.zeros((2,), jnp.int32))


def test_rope_2d_scores_depend_only_on_the_2d_offset():
    d = 16
    q = jnp.asarray(RNG.normal(size=(1, 1, 1, d)).astype(np.float32))
    k = jnp.asarray(RNG.normal(size=(1, 1, 1, d)).astype(np.float32))

    def score(query_rc, key_rc):
        qm = P.apply_rope(q, jnp.array([[query_rc]]))
        kn = P.apply_rope(k, jnp.array([[key_rc]]))
        return float(jnp.sum(qm * kn))

    for (qr, qc), (kr, kc), (dr, dc) in [((0, 0), (3, 1), (2, 5)), ((4, 2), (1, 1), (-1, 3)),
                                         ((2, 2), (2, 2), (7, 0)), ((1, 3), (0, 0), (0, -4))]:
        assert score((qr, qc), (kr, kc)) == pytest.approx(
            score((qr + dr, qc + dc), (kr + dr, kc + dc)), abs=1e-4)
    # ... and on both components of the offset, which are not interchangeable.
    base = score((2, 2), (2, 2))
    assert abs(score((2, 2), (3, 2)) - base) > 1e-3        # row offset only
    assert abs(score((2, 2), (2, 3)) - base) > 1e-3        # column offset only
    assert abs(score((2, 2), (3, 2)) - score((2, 2), (2, 3))) > 1e-3
    # Rotation by (0, 0) is the identity (the ViT's class token).
    np.testing.assert_array_equal(P.apply_rope(q, jnp.zeros((1, 1, 2), jnp.int32)), q)


# ---------------------------------------------------------------------------------------------
# ALiBi
# ---------------------------------------------------------------------------------------------

def test_alibi_slopes_powers_of_two():
    np.testing.assert_allclose(P.alibi_slopes(8), [1 / 2 ** k for k in range(1, 9)])
    np.testing.assert_allclose(P.alibi_slopes(16), [2 ** (-k / 2) for k in range(1, 17)])


def test_alibi_slopes_other_counts():
    # 6 heads: slopes of 4 heads (2^-2, 2^-4, 2^-6, 2^-8), then every other slope of 8 heads
    # (2^-1, 2^-3, 2^-5, ...) until 6.
    np.testing.assert_allclose(P.alibi_slopes(6),
                               [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8, 2 ** -1, 2 ** -3])
    # 12 heads: slopes of 8 heads, then 16-head slopes 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5.
    np.testing.assert_allclose(P.alibi_slopes(12),
                               [2 ** -k for k in range(1, 9)] + [2 ** -0.5, 2 ** -1.5,
                                                                 2 ** -2.5, 2 ** -3.5])
    np.testing.assert_allclose(P.alibi_slopes(1), [2 ** -8])


def test_alibi_bias_values():
    h = 4
    q_pos = np.array([[0, 1, 2], [3, 4, 5]])
    kv_pos = np.array([[0, 1, 2, 3], [0, 2, 4, 6]])
    slopes = [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8]
    for causal in (True, False):
        bias = np.asarray(P.alibi_bias(h, jnp.asarray(q_pos), jnp.asarray(kv_pos), causal=causal))
        assert bias.shape == (2, h, 3, 4)
        for b in range(2):
            for hh in range(h):
                for i in range(3):
                    for j in range(4):
                        dist = q_pos[b, i] - kv_pos[b, j]
                        dist = dist if causal else abs(dist)
                        assert bias[b, hh, i, j] == pytest.approx(-slopes[hh] * dist, abs=1e-6)


@pytest.mark.parametrize('heads, slopes', [
    (4, [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8]),
    (6, [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8, 2 ** -1, 2 ** -3])])
def test_alibi_2d_bias_values(heads, slopes):
    gh, gw, prefix = 3, 4, 1
    bias = P.alibi_2d_bias(heads, gh, gw, num_prefix_tokens=prefix)
    t = prefix + gh * gw
    assert bias.shape == (heads, t, t) and bias.dtype == np.float32
    expected = np.zeros((heads, t, t))
    for qi in range(gh * gw):
        for ki in range(gh * gw):
            (yq, xq), (yk, xk) = divmod(qi, gw), divmod(ki, gw)   # row-major patches
            distance = math.sqrt((yq - yk) ** 2 + (xq - xk) ** 2)
            for h in range(heads):
                expected[h, prefix + qi, prefix + ki] = -slopes[h] * distance
    np.testing.assert_allclose(bias, expected, rtol=1e-6, atol=1e-7)
    # The class token's row and column carry no bias.
    assert not bias[:, :prefix, :].any() and not bias[:, :, :prefix].any()
    # Hand-checked, head 0 (slope 1/4): patch (0, 0) to (1, 1) is sqrt(2) apart, to (2, 3) sqrt(13).
    assert bias[0, prefix + 0, prefix + 1 * gw + 1] == pytest.approx(-math.sqrt(2) / 4)
    assert bias[0, prefix + 2 * gw + 3, prefix + 0] == pytest.approx(-math.sqrt(13) / 4)
    without_prefix = P.alibi_2d_bias(heads, gh, gw)
    assert without_prefix.shape == (heads, gh * gw, gh * gw)
    np.testing.assert_array_equal(without_prefix, bias[:, prefix:, prefix:])


# ---------------------------------------------------------------------------------------------
# T5 relative buckets
# ---------------------------------------------------------------------------------------------

def _t5_bucket_reference(rel, bidirectional, num_buckets, max_distance):
    """Scalar plain-Python version of the T5 bucketing (rel = key position - query position)."""
    back = -rel  # how many positions the key lies before the query
    offset = 0
    if bidirectional:
        half = num_buckets // 2
        if back < 0:
            offset = half
        back = abs(back)
        side = half
    else:
        back = max(back, 0)
        side = num_buckets
    exact = side // 2
    if back < exact:
        return offset + back
    log_part = math.log(back / exact) / math.log(max_distance / exact) * (side - exact)
    return offset + min(exact + int(log_part), side - 1)


@pytest.mark.parametrize('bidirectional', [True, False])
@pytest.mark.parametrize('num_buckets,max_distance', [(32, 128), (8, 20), (16, 64)])
def test_t5_buckets_match_reference(bidirectional, num_buckets, max_distance):
    rel = np.arange(-300, 301)
    got = np.asarray(P.t5_relative_position_bucket(jnp.asarray(rel), bidirectional, num_buckets,
                                                   max_distance))
    expected = [_t5_bucket_reference(int(r), bidirectional, num_buckets, max_distance)
                for r in rel]
    np.testing.assert_array_equal(got, expected)
    assert got.min() >= 0 and got.max() < num_buckets


@pytest.mark.parametrize('bidirectional, num_buckets, max_distance, message', [
    (True, 32, 8, "max_distance must be > 8; got 8"),         # log(1) = 0: int32 overflow
    (True, 32, 4, "max_distance must be > 8; got 4"),         # negative buckets
    (False, 32, 16, "max_distance must be > 16; got 16"),
    (True, 3, 128, "bidirectional T5 buckets need num_buckets >= 4"),
    (False, 1, 128, "causal T5 buckets need num_buckets >= 2"),
])
def test_t5_buckets_reject_settings_without_a_log_range(bidirectional, num_buckets,
                                                        max_distance, message):
    """Settings where the formula breaks (buckets out of [0, num_buckets) that jnp.take would
    turn into NaN or wrap) are refused by the function and by the Transformer's config."""
    with pytest.raises(ValueError, match=re.escape(message)):
        P.t5_relative_position_bucket(jnp.arange(-5, 5), bidirectional, num_buckets, max_distance)
    with pytest.raises(ValueError, match=re.escape(f"t5_num_buckets={num_buckets}, "
                                                   f"t5_max_distance={max_distance}: ")):
        tiny_transformer.tiny(posemb="t5", t5_num_buckets=num_buckets,
                              t5_max_distance=max_distance)
    smallest = 4 if bidirectional else 2        # the least that works, for the record
    P.check_t5_buckets(smallest, smallest // (2 if bidirectional else 1) // 2 + 1, bidirectional)


def test_t5_buckets_known_values():
    bucket = lambda r, bi=True: int(P.t5_relative_position_bucket(jnp.array(r), bi, 32, 128))
    assert [bucket(r) for r in (0, -1, -7)] == [0, 1, 7]         # exact, key before query
    assert [bucket(r) for r in (1, 7)] == [17, 23]               # key after query: upper half
    assert bucket(-1000) == 15 and bucket(1000) == 31            # beyond max_distance
    assert bucket(5, bi=False) == 0 and bucket(-5, bi=False) == 5


def test_t5_relative_position_bias_gathers_table():
    heads, buckets = 3, 8
    module = P.T5RelativePositionBias(num_heads=heads, num_buckets=buckets, max_distance=16)
    q_pos = np.array([[0, 1, 2, 3], [10, 11, 12, 13]])
    kv_pos = np.array([[0, 1, 2, 3, 4, 30], [0, 5, 10, 15, 20, 25]])
    variables = module.init(jax.random.PRNGKey(0), q_pos, kv_pos)
    table = RNG.normal(size=(buckets, heads)).astype(np.float32)
    bias = np.asarray(module.apply({'params': {'rel_embedding': table}}, q_pos, kv_pos))
    assert bias.shape == (2, heads, 4, 6)
    for b in range(2):
        for i in range(4):
            for j in range(6):
                k = _t5_bucket_reference(kv_pos[b, j] - q_pos[b, i], True, buckets, 16)
                np.testing.assert_allclose(bias[b, :, i, j], table[k])
    assert nn.get_partition_spec(variables)['params']['rel_embedding'] == \
        jax.sharding.PartitionSpec('relpos_buckets', 'heads')
