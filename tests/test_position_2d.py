"""2-D (image-patch) position encodings checked against plain-Python computations."""

import math

import flax.linen as nn
import jax
import numpy as np
import pytest

from models import position_2d as P2

RNG = np.random.default_rng(0)


def _unboxed_params(variables):
    return jax.tree_util.tree_map(np.asarray, nn.unbox(variables)['params'])


def test_sincos_2d_table():
    gh, gw, dim = 3, 4, 16
    table = P2.sincos_2d_table(gh, gw, dim)
    assert table.shape == (gh * gw, dim) and table.dtype == np.float32
    q = dim // 4
    for y in range(gh):
        for x in range(gw):
            row = table[y * gw + x]
            for i in range(q):
                w = 10000.0 ** (-i / q)
                assert row[i] == pytest.approx(math.sin(x * w), abs=1e-6)
                assert row[q + i] == pytest.approx(math.cos(x * w), abs=1e-6)
                assert row[2 * q + i] == pytest.approx(math.sin(y * w), abs=1e-6)
                assert row[3 * q + i] == pytest.approx(math.cos(y * w), abs=1e-6)
    with pytest.raises(ValueError, match='divisible by 4'):
        P2.sincos_2d_table(2, 2, 6)


def test_learned_2d_concatenates_row_and_column():
    gh, gw, f = 3, 2, 8
    module = P2.Learned2DPositionEmbedding(grid_h=gh, grid_w=gw, features=f)
    out, variables = module.init_with_output(jax.random.PRNGKey(0))
    params = _unboxed_params(variables)
    assert out.shape == (1, gh * gw, f)
    assert params['row_embedding'].shape == (gh, f // 2)
    assert params['col_embedding'].shape == (gw, f // 2)
    for y in range(gh):
        for x in range(gw):
            np.testing.assert_allclose(out[0, y * gw + x, :f // 2], params['row_embedding'][y])
            np.testing.assert_allclose(out[0, y * gw + x, f // 2:], params['col_embedding'][x])


def test_relative_position_bias_2d():
    heads, gh, gw, prefix = 2, 3, 4, 1
    module = P2.RelativePositionBias2D(num_heads=heads, grid_h=gh, grid_w=gw,
                                      num_prefix_tokens=prefix)
    variables = module.init(jax.random.PRNGKey(0))
    params = {k: RNG.normal(size=v.shape).astype(np.float32)
              for k, v in _unboxed_params(variables).items()}
    assert params['rel_embedding'].shape == ((2 * gh - 1) * (2 * gw - 1), heads)
    bias = np.asarray(module.apply({'params': params}))
    t = prefix + gh * gw
    assert bias.shape == (1, heads, t, t)
    coords = [(p // gw, p % gw) for p in range(gh * gw)]
    for qi, (yq, xq) in enumerate(coords):
        for ki, (yk, xk) in enumerate(coords):
            row = (yq - yk + gh - 1) * (2 * gw - 1) + (xq - xk + gw - 1)
            np.testing.assert_allclose(bias[0, :, prefix + qi, prefix + ki],
                                       params['rel_embedding'][row])
    # Two pairs with the same offset (dy, dx) = (1, -1) share their bias.
    a = bias[0, :, prefix + 1 * gw + 0, prefix + 0 * gw + 1]
    b = bias[0, :, prefix + 2 * gw + 2, prefix + 1 * gw + 3]
    np.testing.assert_allclose(a, b)
    # Prefix token rows/columns use their own three per-head scalars.
    np.testing.assert_allclose(bias[0, :, 0, 0], params['prefix_to_prefix'])
    for p in range(gh * gw):
        np.testing.assert_allclose(bias[0, :, 0, prefix + p], params['prefix_to_token'])
        np.testing.assert_allclose(bias[0, :, prefix + p, 0], params['token_to_prefix'])
    specs = nn.get_partition_spec(variables)['params']
    assert specs['rel_embedding'] == jax.sharding.PartitionSpec('relpos_buckets', 'heads')
    assert specs['token_to_prefix'] == jax.sharding.PartitionSpec('heads')


def test_relative_position_bias_2d_without_prefix():
    module = P2.RelativePositionBias2D(num_heads=2, grid_h=2, grid_w=2)
    out, variables = module.init_with_output(jax.random.PRNGKey(0))
    assert out.shape == (1, 2, 4, 4)
    assert set(variables['params']) == {'rel_embedding'}
