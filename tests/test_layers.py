"""Feed-forward, norms and Transformer blocks against NumPy compositions of their own params."""

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import attention as A
from models import layers as L

RNG = np.random.default_rng(0)


def _normal(*shape):
    return RNG.normal(size=shape).astype(np.float32)


def _params(variables):
    return jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64),
                                  nn.unbox(variables)['params'])


def _randomize(variables):
    """Replace every parameter by a random value (so zero biases / unit scales are exercised)."""
    return {'params': jax.tree_util.tree_map(lambda p: _normal(*np.shape(p)),
                                             nn.unbox(variables)['params'])}


# ---------------------------------------------------------------------------------------------
# NumPy references
# ---------------------------------------------------------------------------------------------

_erf = np.vectorize(math.erf)

NP_ACTIVATIONS = {
    'relu': lambda x: np.maximum(x, 0.0),
    'gelu': lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))),
    'gelu_tanh': lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi)
                                                   * (x + 0.044715 * x ** 3))),
    'swish': lambda x: x / (1.0 + np.exp(-x)),
}


def np_layernorm(x, p, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * p['scale'] + p['bias']


def np_rmsnorm(x, p, eps):
    return x / np.sqrt((x ** 2).mean(-1, keepdims=True) + eps) * p['scale']


def np_ffn(x, p, activation):
    h = NP_ACTIVATIONS[activation](x @ p['wi']['kernel'] + p['wi']['bias'])
    return h @ p['wo']['kernel'] + p['wo']['bias']


def np_mha(p, xq, xkv, mask=None):
    q = np.einsum('ble,ehd->blhd', xq, p['query']['kernel']) + p['query']['bias']
    k = np.einsum('ble,ehd->blhd', xkv, p['key']['kernel']) + p['key']['bias']
    v = np.einsum('ble,ehd->blhd', xkv, p['value']['kernel']) + p['value']['bias']
    b, lq, h, d = q.shape
    g = h // k.shape[2]
    logits = np.zeros((b, h, lq, xkv.shape[1]))
    for hi in range(h):
        logits[:, hi] = np.einsum('bqd,bkd->bqk', q[:, :, hi], k[:, :, hi // g]) / math.sqrt(d)
    mask = np.ones((1, 1, 1, 1), bool) if mask is None else np.asarray(mask, bool)
    w = np.where(mask, np.exp(logits - logits.max(-1, keepdims=True)), 0.0)
    w /= np.maximum(w.sum(-1, keepdims=True), 1e-300)  # a query that sees nothing outputs 0
    o = np.zeros((b, lq, h, d))
    for hi in range(h):
        o[:, :, hi] = np.einsum('bqk,bkd->bqd', w[:, hi], v[:, :, hi // g])
    return np.einsum('blhd,hde->ble', o, p['out']['kernel']) + p['out']['bias']


# ---------------------------------------------------------------------------------------------
# FeedForward and norms
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize('activation', ['relu', 'gelu', 'gelu_tanh', 'swish'])
def test_feed_forward_matches_numpy(activation):
    x = _normal(2, 3, 6)
    module = L.FeedForward(hidden_dim=10, activation=activation)
    variables = _randomize(module.init(jax.random.PRNGKey(0), x))
    out = module.apply(variables, x)
    assert out.shape == x.shape
    np.testing.assert_allclose(out, np_ffn(x.astype(np.float64), _params(variables), activation),
                               atol=1e-4)


def test_gelu_variants_differ():
    x = np.linspace(-3, 3, 7)
    assert not np.allclose(NP_ACTIVATIONS['gelu'](x), NP_ACTIVATIONS['gelu_tanh'](x), atol=1e-5)
    np.testing.assert_allclose(L.ACTIVATIONS['gelu'](jnp.asarray(x, jnp.float32)),
                               NP_ACTIVATIONS['gelu'](x), atol=1e-6)


def test_feed_forward_errors_dropout_and_names():
    x = _normal(1, 2, 4)
    with pytest.raises(ValueError, match="'relu', 'gelu', 'gelu_tanh', 'swish'"):
        L.FeedForward(hidden_dim=8, activation='silu').init(jax.random.PRNGKey(0), x)
    module = L.FeedForward(hidden_dim=8, dropout_rate=0.5)
    variables = module.init(jax.random.PRNGKey(0), x)
    P = jax.sharding.PartitionSpec
    assert nn.get_partition_spec(variables)['params'] == {
        'wi': {'kernel': P('embed', 'mlp'), 'bias': P('mlp')},
        'wo': {'kernel': P('mlp', 'embed'), 'bias': P('embed')}}
    det = module.apply(variables, x)
    np.testing.assert_allclose(det, np_ffn(x.astype(np.float64), _params(variables), 'gelu'),
                               atol=1e-5)
    dropped = module.apply(variables, x, deterministic=False,
                           rngs={'dropout': jax.random.PRNGKey(1)})
    assert not np.allclose(det, dropped)


@pytest.mark.parametrize('kind', ['layernorm', 'rmsnorm'])
def test_norms_match_numpy(kind):
    x = _normal(2, 3, 8) * 3.0 + 5.0
    norm = L.make_norm(kind, epsilon=1e-5)
    variables = _randomize(norm.init(jax.random.PRNGKey(0), x))
    p = _params(variables)
    ref = np_layernorm if kind == 'layernorm' else np_rmsnorm
    np.testing.assert_allclose(norm.apply(variables, x), ref(x.astype(np.float64), p, 1e-5),
                               atol=1e-5)
    specs = nn.get_partition_spec(norm.init(jax.random.PRNGKey(0), x))['params']
    expected = {'scale', 'bias'} if kind == 'layernorm' else {'scale'}
    assert set(specs) == expected
    assert all(s == jax.sharding.PartitionSpec('embed') for s in specs.values())


def np_layernorm_grad(x, g, eps):
    """d(sum(g * standardize(x)))/dx written out by the chain rule in NumPy (float64)."""
    n = x.shape[-1]
    mean = x.mean(-1, keepdims=True)
    centred = x - mean
    var = (centred ** 2).mean(-1, keepdims=True)
    rstd = 1.0 / np.sqrt(var + eps)
    d_centred = g * rstd                                             # through (x - m) * r
    d_var = (g * centred).sum(-1, keepdims=True) * -0.5 * rstd ** 3  # through r = (v + eps)^-1/2
    d_centred = d_centred + d_var * 2.0 * centred / n                # v = mean((x - m)^2)
    return d_centred - d_centred.mean(-1, keepdims=True)             # x - m, m = mean(x)


def test_layernorm_derivatives_match_the_chain_rule():
    x = _normal(3, 16).astype(np.float64) * 2.0 + 1.5
    g = _normal(3, 16).astype(np.float64)
    f = lambda x: jnp.sum(jnp.asarray(g, jnp.float32) * L.standardize(x, 1e-5))  # noqa: E731
    np.testing.assert_allclose(jax.grad(f)(jnp.asarray(x, jnp.float32)),
                               np_layernorm_grad(x, g, 1e-5), rtol=1e-4, atol=1e-5)
    # Forward mode (a custom_jvp, so jvp, jacfwd and Hessian-vector products work) agrees with
    # the reverse-mode gradient: <grad f(x), v> = jvp(f)(x; v).
    v = jnp.asarray(_normal(3, 16))
    _, forward = jax.jvp(f, (jnp.asarray(x, jnp.float32),), (v,))
    np.testing.assert_allclose(forward, np.sum(np_layernorm_grad(x, g, 1e-5) * np.asarray(v)),
                               rtol=1e-4)
    hvp = jax.jvp(jax.grad(lambda x: jnp.sum(L.standardize(x, 1e-5) ** 3)),
                  (jnp.asarray(x, jnp.float32),), (v,))[1]
    assert hvp.shape == x.shape and np.all(np.isfinite(hvp))


def _traced_layernorm(x, scale, bias, epsilon):
    """The textbook formula, left to autodiff: no custom rule, every derivative traced."""
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + epsilon) * scale + bias


def test_layernorm_second_derivatives_match_the_traced_formula():
    """The custom JVP rule must itself be differentiable, with y and rstd depending on x: the
    Hessian-vector products (forward over reverse, and reverse over reverse) of LayerNorm and of
    `standardize` equal those of the traced formula. A rule whose y or rstd were constants to
    autodiff keeps first derivatives right and gets these wrong by their whole size."""
    eps = 1e-5
    x = jnp.asarray(_normal(3, 16) * 2.0 + 1.5)
    v = jnp.asarray(_normal(3, 16))
    norm = L.LayerNorm(epsilon=eps)
    variables = _randomize(norm.init(jax.random.PRNGKey(0), x))
    scale, bias = variables['params']['scale'], variables['params']['bias']
    w = jnp.asarray(_normal(3, 16))

    def loss(apply):  # a non-quadratic function of the output, so its Hessian is not trivial
        return lambda x: jnp.sum(w * apply(x) + apply(x) ** 3 / 3.0)

    cases = [
        (lambda x: norm.apply(variables, x), lambda x: _traced_layernorm(x, scale, bias, eps)),
        (lambda x: L.standardize(x, eps), lambda x: _traced_layernorm(x, 1.0, 0.0, eps)),
    ]
    for ours, reference in cases:
        want = jax.jvp(jax.grad(loss(reference)), (x,), (v,))[1]
        forward_over_reverse = jax.jvp(jax.grad(loss(ours)), (x,), (v,))[1]
        reverse_over_reverse = jax.grad(lambda x: jnp.vdot(jax.grad(loss(ours))(x), v))(x)
        scale_of_hvp = float(jnp.max(jnp.abs(want)))
        assert scale_of_hvp > 1.0  # not vanishing: the comparison below has something to see
        for got in (forward_over_reverse, reverse_over_reverse):
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4 * scale_of_hvp)


def test_layernorm_is_exact_when_the_mean_dwarfs_the_spread():
    # Two-pass variance: a one-pass E[x^2] - E[x]^2 in float32 loses every digit here.
    x = (1e4 + _normal(2, 64)).astype(np.float32)
    expected = np_layernorm(x.astype(np.float64), {'scale': 1.0, 'bias': 0.0}, 1e-6)
    np.testing.assert_allclose(L.standardize(jnp.asarray(x), 1e-6), expected, atol=2e-3)


def test_layernorm_loads_the_parameters_of_flax_layernorm():
    x = _normal(2, 5, 8)
    ours = L.make_norm('layernorm', epsilon=1e-5)
    flax_norm = nn.LayerNorm(epsilon=1e-5, use_fast_variance=False)
    variables = _randomize(flax_norm.init(jax.random.PRNGKey(0), x))
    np.testing.assert_allclose(ours.apply(variables, x), flax_norm.apply(variables, x),
                               atol=1e-5)
    flax_grad = jax.grad(lambda v: jnp.sum(flax_norm.apply(v, x) ** 2))(variables)
    ours_grad = jax.grad(lambda v: jnp.sum(ours.apply(v, x) ** 2))(variables)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5),
                 ours_grad, flax_grad)


def test_make_norm_unknown_kind():
    with pytest.raises(ValueError, match="'layernorm', 'rmsnorm'"):
        L.make_norm('batchnorm')


# ---------------------------------------------------------------------------------------------
# Blocks
# ---------------------------------------------------------------------------------------------

BLOCK = dict(num_heads=2, head_dim=4, mlp_dim=12)


@pytest.mark.parametrize('norm_position,norm,activation,kvh', [
    ('pre', 'layernorm', 'gelu', None),
    ('post', 'layernorm', 'relu', None),
    ('pre', 'rmsnorm', 'gelu_tanh', 1),
])
def test_encoder_block_matches_numpy(norm_position, norm, activation, kvh):
    x = _normal(2, 4, 8)
    mask = A.padding_mask(np.array([[1, 1, 1, 0], [1, 1, 1, 1]]),
                          np.array([[1, 1, 1, 0], [1, 1, 1, 1]]))
    block = L.EncoderBlock(**BLOCK, num_kv_heads=kvh, norm=norm, norm_position=norm_position,
                           activation=activation, norm_epsilon=1e-5)
    variables = _randomize(block.init(jax.random.PRNGKey(0), x))
    p = _params(variables)
    assert set(p) == ({'attention', 'mlp', 'norm_attention', 'norm_mlp'})
    npnorm = np_layernorm if norm == 'layernorm' else np_rmsnorm
    n_att = lambda h: npnorm(h, p['norm_attention'], 1e-5)
    n_mlp = lambda h: npnorm(h, p['norm_mlp'], 1e-5)
    att = lambda h: np_mha(p['attention'], h, h, mask)
    ffn = lambda h: np_ffn(h, p['mlp'], activation)
    h = x.astype(np.float64)
    if norm_position == 'pre':
        h = h + att(n_att(h))
        expected = h + ffn(n_mlp(h))
    else:
        h = n_att(h + att(h))
        expected = n_mlp(h + ffn(h))
    out = block.apply(variables, x, mask=mask)
    assert out.shape == x.shape
    np.testing.assert_allclose(out, expected, atol=2e-4, rtol=1e-4)


def test_encoder_block_respects_padding_mask():
    x = _normal(1, 5, 8)
    valid = np.array([[1, 1, 1, 0, 0]])
    mask = A.padding_mask(valid, valid)
    block = L.EncoderBlock(**BLOCK, rotary_base=10000.0)
    variables = block.init(jax.random.PRNGKey(0), x)
    out = block.apply(variables, x, mask=mask)
    x2 = x.copy()
    x2[0, 3:] = _normal(2, 8) * 10
    out2 = block.apply(variables, x2, mask=mask)
    np.testing.assert_allclose(out[0, :3], out2[0, :3], atol=1e-6)
    # Without the mask the padded tokens would leak in.
    assert not np.allclose(block.apply(variables, x)[0, :3], block.apply(variables, x2)[0, :3])


def test_encoder_block_dropout_and_validation():
    x = _normal(1, 4, 8)
    block = L.EncoderBlock(**BLOCK, dropout_rate=0.2, attention_dropout_rate=0.2)
    variables = block.init(jax.random.PRNGKey(0), x)
    det = block.apply(variables, x)
    np.testing.assert_array_equal(det, L.EncoderBlock(**BLOCK).apply(variables, x))
    dropped = block.apply(variables, x, deterministic=False,
                          rngs={'dropout': jax.random.PRNGKey(1)})
    assert not np.allclose(det, dropped)
    with pytest.raises(ValueError, match="'pre', 'post'"):
        L.EncoderBlock(**BLOCK, norm_position='middle').init(jax.random.PRNGKey(0), x)


def test_decoder_block_is_causal_and_uses_encoder():
    t, s = 5, 4
    x, enc = _normal(2, t, 8), _normal(2, s, 8)
    block = L.DecoderBlock(**BLOCK, num_kv_heads=1, rotary_base=10000.0)
    variables = block.init(jax.random.PRNGKey(0), x, enc)
    assert set(variables['params']) == {'self_attention', 'cross_attention', 'mlp',
                                        'norm_self', 'norm_cross', 'norm_mlp'}
    causal = A.causal_mask(t)
    cross = A.padding_mask(np.ones((2, t)), np.array([[1, 1, 0, 0], [1, 1, 1, 1]]))
    run = lambda x, enc: np.asarray(block.apply(variables, x, enc, self_mask=causal,
                                                cross_mask=cross))
    out = run(x, enc)
    assert out.shape == x.shape
    for step in range(t - 1):
        x2 = x.copy()
        x2[:, step + 1:] = _normal(2, t - step - 1, 8)
        np.testing.assert_allclose(run(x2, enc)[:, :step + 1], out[:, :step + 1], atol=1e-6)
    # Masked-out encoder positions do not matter; visible ones do.
    enc2 = enc.copy()
    enc2[0, 2:] = 0.0
    np.testing.assert_allclose(run(x, enc2)[0], out[0], atol=1e-6)
    enc2[0, 0] = 0.0
    assert not np.allclose(run(x, enc2)[0], out[0])


def test_decoder_block_post_norm_matches_numpy():
    x, enc = _normal(1, 3, 8), _normal(1, 4, 8)
    block = L.DecoderBlock(**BLOCK, norm_position='post', activation='relu', norm_epsilon=1e-5)
    variables = _randomize(block.init(jax.random.PRNGKey(0), x, enc))
    p = _params(variables)
    causal = np.asarray(A.causal_mask(3))
    ln = lambda h, name: np_layernorm(h, p[name], 1e-5)
    h = x.astype(np.float64)
    h = ln(h + np_mha(p['self_attention'], h, h, causal), 'norm_self')
    h = ln(h + np_mha(p['cross_attention'], h, enc.astype(np.float64)), 'norm_cross')
    expected = ln(h + np_ffn(h, p['mlp'], 'relu'), 'norm_mlp')
    out = block.apply(variables, x, enc, self_mask=causal)
    np.testing.assert_allclose(out, expected, atol=2e-4, rtol=1e-4)


def test_decoder_block_rotary_cross_attention_uses_encoded_positions():
    x, enc = _normal(1, 3, 8), _normal(1, 4, 8)
    pos_a, pos_b = np.array([[0, 1, 2, 3]]), np.array([[5, 3, 8, 1]])
    for rotary_cross, should_change in [(False, False), (True, True)]:
        block = L.DecoderBlock(**BLOCK, rotary_base=100.0, rotary_cross_attention=rotary_cross)
        variables = block.init(jax.random.PRNGKey(0), x, enc)
        run = lambda p: np.asarray(block.apply(variables, x, enc, encoded_positions=p))
        assert np.allclose(run(pos_a), run(pos_b), atol=1e-6) != should_change


def test_relative_attention_is_for_encoder_blocks_only():
    """An EncoderBlock's self-attention gets its own relative keys (models/relative_attention.py);
    a DecoderBlock refuses them (its self-attention decodes with a cache, which they lack)."""
    x, enc = _normal(1, 5, 8), _normal(1, 4, 8)
    block = L.EncoderBlock(**BLOCK, relative_positions=4, relative_prefix_tokens=1)
    variables = block.init(jax.random.PRNGKey(0), x)
    assert variables['params']['attention']['relative_attention']['rel_embedding'].value.shape == (
        2 * 4 - 1 + 3, BLOCK['num_heads'], BLOCK['head_dim'])
    with pytest.raises(ValueError, match='DecoderBlock: relative_positions is for EncoderBlock'):
        L.DecoderBlock(**BLOCK, relative_positions=3).init(jax.random.PRNGKey(0), x[:, :3], enc)
