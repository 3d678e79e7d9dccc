"""Attention masks, dot-product attention and MultiHeadAttention against NumPy references."""

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import attention as A
from models.dropout import dropout, quantized_rate

from rope_reference import np_rope

RNG = np.random.default_rng(0)


def _normal(*shape):
    return RNG.normal(size=shape).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# NumPy references (explicit loops, float64)
# ---------------------------------------------------------------------------------------------

def np_attention(q, k, v, bias=None, mask=None):
    """softmax(q.k / sqrt(d) + bias) v over allowed keys; kv head for query head i is i // g."""
    q, k, v = (np.asarray(t, np.float64) for t in (q, k, v))
    b, lq, h, d = q.shape
    lk, kvh = k.shape[1], k.shape[2]
    g = h // kvh
    bias = np.zeros((1, 1, 1, 1)) if bias is None else np.asarray(bias, np.float64)
    mask = np.ones((1, 1, 1, 1), bool) if mask is None else np.asarray(mask, bool)
    bias = np.broadcast_to(bias, (b, h, lq, lk))
    mask = np.broadcast_to(mask, (b, h, lq, lk))
    out = np.zeros((b, lq, h, d))
    for bi in range(b):
        for hi in range(h):
            for i in range(lq):
                allowed = [j for j in range(lk) if mask[bi, hi, i, j]]
                if not allowed:
                    continue
                scores = np.array([q[bi, i, hi] @ k[bi, j, hi // g] / math.sqrt(d)
                                   + bias[bi, hi, i, j] for j in allowed])
                p = np.exp(scores - scores.max())
                p /= p.sum()
                out[bi, i, hi] = sum(pj * v[bi, j, hi // g] for pj, j in zip(p, allowed))
    return out


def np_mha(params, xq, xkv, bias=None, mask=None, rope=None):
    """Multi-head attention from the module's own parameters, in float64."""
    p = {name: {k: np.asarray(v, np.float64) for k, v in sub.items()}
         for name, sub in params.items()}
    q = np.einsum('ble,ehd->blhd', xq, p['query']['kernel']) + p['query']['bias']
    k = np.einsum('ble,ehd->blhd', xkv, p['key']['kernel']) + p['key']['bias']
    v = np.einsum('ble,ehd->blhd', xkv, p['value']['kernel']) + p['value']['bias']
    if rope is not None:
        base, q_pos, kv_pos = rope
        q, k = np_rope(q, q_pos, base), np_rope(k, kv_pos, base)
    o = np_attention(q, k, v, bias, mask)
    return np.einsum('blhd,hde->ble', o, p['out']['kernel']) + p['out']['bias']


def _params(variables):
    return jax.tree_util.tree_map(np.asarray, nn.unbox(variables)['params'])


# ---------------------------------------------------------------------------------------------
# Masks
# ---------------------------------------------------------------------------------------------

def test_padding_mask():
    q_valid = np.array([[1, 1, 0], [1, 0, 0]])
    kv_valid = np.array([[1, 0, 1, 1], [1, 1, 1, 0]], bool)
    m = np.asarray(A.padding_mask(q_valid, kv_valid))
    assert m.shape == (2, 1, 3, 4) and m.dtype == bool
    for b in range(2):
        for i in range(3):
            for j in range(4):
                assert m[b, 0, i, j] == bool(q_valid[b, i] and kv_valid[b, j])


@pytest.mark.parametrize('q_len,kv_len,offset', [(4, None, 0), (2, 5, 3), (3, 6, 0)])
def test_causal_mask(q_len, kv_len, offset):
    m = np.asarray(A.causal_mask(q_len, kv_len, offset))
    k = q_len if kv_len is None else kv_len
    assert m.shape == (1, 1, q_len, k)
    for i in range(q_len):
        for j in range(k):
            assert m[0, 0, i, j] == (j <= i + offset)


def test_segment_mask():
    q_seg = np.array([[1, 1, 2, 2, 0], [1, 2, 3, 0, 0]])
    kv_seg = np.array([[1, 2, 2, 0], [3, 3, 1, 0]])
    m = np.asarray(A.segment_mask(q_seg, kv_seg))
    assert m.shape == (2, 1, 5, 4)
    for b in range(2):
        for i in range(5):
            for j in range(4):
                expected = q_seg[b, i] == kv_seg[b, j] and q_seg[b, i] != 0
                assert m[b, 0, i, j] == expected
    # Padding (id 0) never attends nor is attended, even to/by other padding.
    assert not m[0, 0, 4].any() and not m[1, 0, :, 3].any()


@pytest.mark.parametrize('causal', [True, False])
def test_sliding_window_mask(causal):
    q_pos = np.array([[0, 1, 2, 3, 4, 5], [3, 4, 5, 6, 7, 8]])
    kv_pos = np.array([[0, 1, 2, 3, 4, 5], [0, 2, 4, 6, 8, 9]])
    window = 3
    m = np.asarray(A.sliding_window_mask(q_pos, kv_pos, window, causal=causal))
    assert m.shape == (2, 1, 6, 6)
    for b in range(2):
        for i in range(6):
            for j in range(6):
                diff = q_pos[b, i] - kv_pos[b, j]
                expected = (0 <= diff < window) if causal else (abs(diff) < window)
                assert m[b, 0, i, j] == expected


def test_combine_masks():
    assert A.combine_masks(None, None) is None
    a = A.causal_mask(3)
    b = A.padding_mask(np.array([[1, 1, 1]]), np.array([[1, 0, 1]]))
    np.testing.assert_array_equal(A.combine_masks(None, a), a)
    np.testing.assert_array_equal(A.combine_masks(a, None, b), np.logical_and(a, b))


# ---------------------------------------------------------------------------------------------
# dot_product_attention
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize('h,kvh', [(4, 4), (4, 2), (4, 1)])
def test_dot_product_attention_matches_numpy(h, kvh):
    b, lq, lk, d = 2, 3, 5, 8
    q, k, v = _normal(b, lq, h, d), _normal(b, lk, kvh, d), _normal(b, lk, kvh, d)
    bias = _normal(1, h, lq, lk)
    mask = RNG.random((b, 1, lq, lk)) > 0.3
    mask[..., 0] = True
    out = A.dot_product_attention(q, k, v, bias=bias, mask=mask)
    assert out.shape == (b, lq, h, d)
    np.testing.assert_allclose(out, np_attention(q, k, v, bias, mask), atol=1e-5)
    # No mask, no bias.
    np.testing.assert_allclose(A.dot_product_attention(q, k, v), np_attention(q, k, v),
                               atol=1e-5)


def test_grouped_query_equals_repeated_kv_heads():
    b, lq, lk, h, kvh, d = 1, 4, 4, 6, 2, 4
    q, k, v = _normal(b, lq, h, d), _normal(b, lk, kvh, d), _normal(b, lk, kvh, d)
    k_full, v_full = np.repeat(k, h // kvh, axis=2), np.repeat(v, h // kvh, axis=2)
    np.testing.assert_allclose(A.dot_product_attention(q, k, v),
                               A.dot_product_attention(q, k_full, v_full), atol=1e-6)
    with pytest.raises(ValueError, match='multiple'):
        A.dot_product_attention(_normal(1, 2, 3, 4), _normal(1, 2, 2, 4), _normal(1, 2, 2, 4))


def test_attention_weights_are_probabilities():
    q, k = _normal(2, 3, 2, 4), _normal(2, 5, 2, 4)
    mask = A.causal_mask(3, 5, offset=2)
    w = np.asarray(A.attention_weights(q, k, mask=mask))
    assert w.shape == (2, 2, 3, 5) and w.dtype == np.float32
    np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-6)
    assert (w[..., ~np.asarray(mask)[0, 0]] == 0).all()


def test_fully_masked_row_gives_zeros_and_finite_gradients():
    q, k, v = _normal(1, 3, 2, 4), _normal(1, 4, 2, 4), _normal(1, 4, 2, 4)
    mask = np.ones((1, 1, 3, 4), bool)
    mask[0, 0, 1] = False  # query 1 sees nothing
    out = np.asarray(A.dot_product_attention(q, k, v, mask=mask))
    assert np.isfinite(out).all()
    np.testing.assert_array_equal(out[0, 1], 0.0)
    np.testing.assert_allclose(out, np_attention(q, k, v, mask=mask), atol=1e-5)
    grads = jax.grad(lambda q: A.dot_product_attention(q, k, v, mask=mask).sum())(q)
    assert np.isfinite(np.asarray(grads)).all()


def test_attention_dropout():
    q, k, v = _normal(1, 4, 2, 4), _normal(1, 6, 2, 4), _normal(1, 6, 2, 4)
    rng = jax.random.PRNGKey(3)
    base = A.dot_product_attention(q, k, v)
    same = A.dot_product_attention(q, k, v, dropout_rate=0.2, dropout_rng=rng, deterministic=True)
    np.testing.assert_array_equal(base, same)
    dropped = A.dot_product_attention(q, k, v, dropout_rate=0.2, dropout_rng=rng,
                                      deterministic=False)
    assert not np.allclose(base, dropped)
    with pytest.raises(ValueError, match='dropout_rng'):
        A.dot_product_attention(q, k, v, dropout_rate=0.5, deterministic=False)
    # With one-hot values (v_j = e_j) the output is the dropped probability matrix itself:
    # each probability is zeroed at the rate (0.2, not 0.5, where a rate taken for a keep
    # probability would pass) and the survivors scaled by 1 / (1 - rate).
    rate, length = 0.2, 64
    q, k = _normal(1, length, 2, 4), _normal(1, length, 2, 4)
    eye = np.broadcast_to(np.eye(length, dtype=np.float32)[None, :, None, :],
                          (1, length, 2, length))
    probs = np.asarray(A.attention_weights(q, k))                      # [1, 2, l, l]
    out = np.asarray(A.dot_product_attention(q, k, eye, dropout_rate=rate, dropout_rng=rng,
                                             deterministic=False))      # [1, l, 2, l]
    out = out.transpose(0, 2, 1, 3)
    kept = out != 0                                 # softmax probabilities are never 0 here
    assert abs((~kept).mean() - rate) < 0.02        # 8,192 draws: 4.5 standard deviations
    np.testing.assert_allclose(out[kept], probs[kept] / (1 - quantized_rate(rate)), rtol=1e-5)


def test_implementation_errors():
    q = _normal(1, 2, 2, 4)
    with pytest.raises(ValueError,
                       match=r"dropout is active \(rate 0.1\) and cuDNN's kernel has none"):
        A.dot_product_attention(q, q, q, dropout_rate=0.1, dropout_rng=jax.random.PRNGKey(0),
                                deterministic=False, implementation='cudnn')
    with pytest.raises(ValueError, match="'xla', 'cudnn'"):
        A.dot_product_attention(q, q, q, implementation='flash')
    module = A.MultiHeadAttention(num_heads=2, head_dim=4, implementation='flash')
    with pytest.raises(ValueError, match="'xla', 'cudnn'"):
        module.init(jax.random.PRNGKey(0), np.zeros((1, 2, 8), np.float32))


# ---------------------------------------------------------------------------------------------
# MultiHeadAttention
# ---------------------------------------------------------------------------------------------

def test_mha_self_attention_matches_numpy():
    b, l, e, h, d = 2, 5, 12, 3, 4
    x = _normal(b, l, e)
    mask = A.padding_mask(np.array([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]),
                          np.array([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]))
    mask = A.combine_masks(mask, A.causal_mask(l))
    bias = _normal(b, h, l, l)
    module = A.MultiHeadAttention(num_heads=h, head_dim=d)
    variables = module.init(jax.random.PRNGKey(0), x)
    out = module.apply(variables, x, mask=mask, bias=bias)
    assert out.shape == (b, l, e)
    expected = np_mha(_params(variables), x, x, bias, np.asarray(mask))
    np.testing.assert_allclose(out, expected, atol=1e-5)


def test_mha_cross_attention_grouped_query_matches_numpy():
    b, lq, lk, e, h, kvh, d, out_features = 2, 3, 6, 8, 4, 2, 5, 7
    xq, xkv = _normal(b, lq, e), _normal(b, lk, e)
    mask = A.padding_mask(np.ones((b, lq)), np.array([[1, 1, 1, 0, 0, 0], [1] * 6]))
    module = A.MultiHeadAttention(num_heads=h, head_dim=d, num_kv_heads=kvh,
                                  out_features=out_features)
    variables = module.init(jax.random.PRNGKey(1), xq, xkv)
    params = _params(variables)
    # Random (non-zero) biases so that they are exercised too.
    params = jax.tree_util.tree_map(lambda p: _normal(*p.shape), params)
    out = module.apply({'params': params}, xq, xkv, mask=mask)
    assert out.shape == (b, lq, out_features)
    assert params['key']['kernel'].shape == (e, kvh, d)
    np.testing.assert_allclose(out, np_mha(params, xq, xkv, mask=np.asarray(mask)), atol=1e-4)


def test_mha_multi_query():
    x = _normal(1, 4, 8)
    module = A.MultiHeadAttention(num_heads=4, head_dim=2, num_kv_heads=1)
    variables = module.init(jax.random.PRNGKey(0), x)
    assert _params(variables)['value']['kernel'].shape == (8, 1, 2)
    np.testing.assert_allclose(module.apply(variables, x), np_mha(_params(variables), x, x),
                               atol=1e-5)


def test_mha_rope():
    b, l, e, h, d, base = 2, 4, 8, 2, 4, 100.0
    x = _normal(b, l, e)
    plain = A.MultiHeadAttention(num_heads=h, head_dim=d)
    rotary = A.MultiHeadAttention(num_heads=h, head_dim=d, rotary_base=base)
    variables = plain.init(jax.random.PRNGKey(0), x)
    params = _params(variables)
    positions = np.array([[0, 1, 2, 3], [5, 6, 9, 20]])
    out_plain = plain.apply(variables, x)
    out_rope = rotary.apply(variables, x, q_positions=positions)
    assert not np.allclose(out_plain, out_rope, atol=1e-3)
    expected = np_mha(params, x, x, rope=(base, positions, positions))
    np.testing.assert_allclose(out_rope, expected, atol=1e-5)
    # Default positions are arange; cross-attention rotates keys by kv_positions.
    default = np.broadcast_to(np.arange(l), (b, l))
    np.testing.assert_allclose(rotary.apply(variables, x),
                               np_mha(params, x, x, rope=(base, default, default)), atol=1e-5)
    kv_pos = np.array([[3, 2, 1, 0], [0, 0, 1, 1]])
    np.testing.assert_allclose(
        rotary.apply(variables, x, x, q_positions=positions, kv_positions=kv_pos),
        np_mha(params, x, x, rope=(base, positions, kv_pos)), atol=1e-5)


def test_mha_dropout(monkeypatch):
    x = _normal(2, 5, 8)
    module = A.MultiHeadAttention(num_heads=2, head_dim=4, dropout_rate=0.3)
    variables = module.init(jax.random.PRNGKey(0), x)
    reference = A.MultiHeadAttention(num_heads=2, head_dim=4).apply(variables, x)
    np.testing.assert_array_equal(module.apply(variables, x, deterministic=True), reference)
    rngs = {'dropout': jax.random.PRNGKey(1)}
    a = module.apply(variables, x, deterministic=False, rngs=rngs)
    b = module.apply(variables, x, deterministic=False, rngs=rngs)
    np.testing.assert_array_equal(a, b)                     # same rng, same mask
    assert not np.allclose(a, reference)
    # The module hands its own rate to the dropout of the [b, h, q, k] probabilities.
    calls = []

    def recording_dropout(x, rate, rng):
        calls.append((x.shape, rate))
        return dropout(x, rate, rng)

    monkeypatch.setattr(A, 'dropout', recording_dropout)
    module.apply(variables, x, deterministic=False, rngs=rngs)
    assert calls == [((2, 2, 5, 5), 0.3)]
    cudnn = A.MultiHeadAttention(num_heads=2, head_dim=4, dropout_rate=0.3,
                                 implementation='cudnn')
    with pytest.raises(ValueError, match='dropout'):
        cudnn.apply(variables, x, deterministic=False, rngs=rngs)


def test_mha_validates_heads():
    module = A.MultiHeadAttention(num_heads=6, head_dim=4, num_kv_heads=4)
    with pytest.raises(ValueError, match='multiple of num_kv_heads'):
        module.init(jax.random.PRNGKey(0), np.zeros((1, 2, 8), np.float32))


def test_mha_params_have_logical_names():
    x = np.zeros((1, 3, 8), np.float32)
    module = A.MultiHeadAttention(num_heads=4, head_dim=2, num_kv_heads=2)
    variables = module.init(jax.random.PRNGKey(0), x)
    leaves = jax.tree_util.tree_leaves(
        variables, is_leaf=lambda t: isinstance(t, nn.LogicallyPartitioned))
    assert leaves and all(isinstance(t, nn.LogicallyPartitioned) for t in leaves)
    P = jax.sharding.PartitionSpec
    expected = {
        'query': {'kernel': P('embed', 'heads', 'kv'), 'bias': P('heads', 'kv')},
        'key': {'kernel': P('embed', 'kv_heads', 'kv'), 'bias': P('kv_heads', 'kv')},
        'value': {'kernel': P('embed', 'kv_heads', 'kv'), 'bias': P('kv_heads', 'kv')},
        'out': {'kernel': P('heads', 'kv', 'embed'), 'bias': P('embed')},
    }
    assert nn.get_partition_spec(variables)['params'] == expected
    shapes = jax.tree_util.tree_map(np.shape, _params(variables))
    assert shapes['query']['kernel'] == (8, 4, 2) and shapes['out']['kernel'] == (4, 2, 8)


@pytest.mark.parametrize('kv_heads', [4, 2])
def test_attention_weights_are_float32_for_bfloat16_inputs(kv_heads):
    """The logits accumulate in float32 and the softmax runs in float32 whatever the compute
    dtype, masked or not, multi-head and grouped-query. With head_dim 16 the scale 1/4 is exact
    in bfloat16 and every product of two bfloat16 numbers is exact in float32, so the weights
    equal a float64 softmax of the very bfloat16 inputs to float32 rounding (a softmax computed
    in bfloat16 keeps 8 significant bits: errors near 1e-3)."""
    q = jnp.asarray(_normal(1, 3, 4, 16), jnp.bfloat16)
    k = jnp.asarray(_normal(1, 8, kv_heads, 16), jnp.bfloat16)
    mask = np.tril(np.ones((3, 8), bool), k=4)[None, None]
    q64, k64 = np.asarray(q, np.float64), np.asarray(k, np.float64)  # the inputs, exactly
    k64 = np.repeat(k64, 4 // kv_heads, axis=2)  # query head i reads key head i // g
    logits = np.einsum('bqhd,bkhd->bhqk', q64, k64) / 4.0
    for m in (None, mask):
        weights = A.attention_weights(q, k, mask=m)
        assert weights.dtype == jnp.float32
        allowed = np.ones(logits.shape, bool) if m is None else np.broadcast_to(m, logits.shape)
        e = np.where(allowed, np.exp(logits - logits.max(-1, keepdims=True)), 0.0)
        reference = e / e.sum(-1, keepdims=True)
        np.testing.assert_allclose(weights, reference, rtol=0, atol=1e-6)


def test_mha_bfloat16_compute():
    x = _normal(1, 3, 8)
    module = A.MultiHeadAttention(num_heads=2, head_dim=4, dtype=jnp.bfloat16)
    variables = module.init(jax.random.PRNGKey(0), x)
    out = module.apply(variables, x)
    assert out.dtype == jnp.bfloat16
    assert jax.tree_util.tree_leaves(_params(variables))[0].dtype == np.float32
    # bfloat16 keeps 8 significant bits (a relative step of 2^-8): measured 5e-3 off on outputs
    # up to 0.93, so 1.5e-2 is 3x that, where a slip of a few percent is not
    np.testing.assert_allclose(np.asarray(out, np.float32), np_mha(_params(variables), x, x),
                               atol=1.5e-2)
    exact = A.MultiHeadAttention(num_heads=2, head_dim=4).apply(variables, x)
    assert not np.allclose(np.asarray(out, np.float32), exact, atol=1e-4)  # bfloat16 did run


def test_the_scale_of_bfloat16_queries_is_not_rounded_first():
    """1/sqrt(d) for d = 24 is not a bfloat16 number: rounding sqrt(24) to 4.90625 before the
    division lowered every logit by 0.15% (a colder softmax than eq. 1's, and another than the
    cuDNN path's exact scale). Each scaled query is now the bfloat16 rounding of the exact
    quotient, so over many elements the ratio to it averages 1 within rounding noise; the same
    in the relative attention's logits (the table's rows pick out single components)."""
    from models.relative_attention import relative_attention_logits

    d = 24
    q = jnp.asarray(_normal(4, 64, 4, d), jnp.bfloat16)
    exact = np.asarray(q, np.float64) / math.sqrt(d)
    scaled = np.asarray(A.scale_query(q), np.float64)
    assert A.scale_query(q).dtype == jnp.bfloat16
    np.testing.assert_array_equal(scaled, np.asarray(jnp.asarray(exact, jnp.bfloat16), np.float64))
    assert abs(np.mean(scaled / exact) - 1) < 2e-4
    table = jnp.asarray(np.repeat(np.eye(d)[:, None, :], 4, axis=1), jnp.bfloat16)  # [d, h, d]
    index = np.tile(np.arange(d), (64, 1))[:, :d]                                   # [q, k=d]
    relative = np.asarray(relative_attention_logits(q, table, index), np.float64)   # [b,h,q,d]
    np.testing.assert_array_equal(relative, scaled.transpose(0, 2, 1, 3))
