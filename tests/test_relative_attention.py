"""ViT's 1-D relative attention (models/relative_attention.py, Appendix D.4) against NumPy loops
over every (query, key) pair: the relation of each pair, the logits of the queries against the
relative keys, and a whole MultiHeadAttention layer that adds them to its content logits."""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import relative_attention as R
from models.attention import MultiHeadAttention

from relative_reference import np_relation, np_relative_logits

RNG = np.random.default_rng(0)


def _normal(*shape):
    return RNG.normal(size=shape).astype(np.float32)


@pytest.mark.parametrize("n, prefix", [(1, 0), (5, 0), (4, 1), (3, 2)])
def test_offset_index_names_each_pairs_relation(n, prefix):
    index = R.relative_offset_index(n, prefix)
    t = n + prefix
    assert index.shape == (t, t) and index.dtype == np.int32
    expected = np.array([[np_relation(i, j, n, prefix) for j in range(t)] for i in range(t)])
    np.testing.assert_array_equal(index, expected)
    assert index.max() + 1 == R.num_relations(n, prefix)
    # Every offset -(n-1) .. n-1 of the paper has its row: 2n - 1 of them.
    assert len(np.unique(index[prefix:, prefix:])) == 2 * n - 1
    with pytest.raises(ValueError, match="num_positions >= 1"):
        R.relative_offset_index(0, 1)


@pytest.mark.parametrize("n, prefix", [(6, 0), (4, 1)])
def test_relative_logits_are_the_queries_against_the_offset_keys(n, prefix):
    b, h, d = 2, 3, 4
    query = _normal(b, prefix + n, h, d)
    table = _normal(R.num_relations(n, prefix), h, d)
    got = R.relative_attention_logits(jnp.asarray(query), jnp.asarray(table),
                                      R.relative_offset_index(n, prefix))
    assert got.shape == (b, h, prefix + n, prefix + n) and got.dtype == jnp.float32
    np.testing.assert_allclose(got, np_relative_logits(query, table, n, prefix), rtol=1e-5,
                               atol=1e-5)


def test_the_module_makes_one_key_per_relation_and_head_with_logical_names():
    n, prefix, h, d = 4, 1, 2, 3
    module = R.RelativeAttention1D(num_heads=h, head_dim=d, num_positions=n,
                                   num_prefix_tokens=prefix)
    query = _normal(2, prefix + n, h, d)
    variables = module.init(jax.random.PRNGKey(0), query)
    box = variables["params"]["rel_embedding"]
    assert box.names == ("relpos_buckets", "heads", "kv")
    assert box.value.shape == (2 * n - 1 + 3, h, d)
    table = np.asarray(box.value)
    np.testing.assert_allclose(module.apply(variables, query),
                               np_relative_logits(query, table, n, prefix), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"queries of shape \[batch, 5, 2, 3\] expected .* got "
                                         r"\(2, 6, 2, 3\)"):
        module.apply(variables, _normal(2, 6, h, d))


def np_relative_mha(params, x, n, prefix, bias=None):
    """Self-attention of `x` [b, t, e] from the layer's own parameters, in float64 loops:
    softmax over keys of (q.k + q.E[relation]) / sqrt(d) (+ bias), the values, then `out`.
    Returns the output and the attention probabilities [b, h, t, t]."""
    p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
    x = np.asarray(x, np.float64)
    q = np.einsum("bte,ehd->bthd", x, p["query"]["kernel"]) + p["query"]["bias"]
    k = np.einsum("bte,ehd->bthd", x, p["key"]["kernel"]) + p["key"]["bias"]
    v = np.einsum("bte,ehd->bthd", x, p["value"]["kernel"]) + p["value"]["bias"]
    table = p["relative_attention"]["rel_embedding"]
    b, t, h, d = q.shape
    bias = np.broadcast_to(0.0 if bias is None else np.asarray(bias, np.float64), (b, h, t, t))
    heads, probs = np.zeros((b, t, h, d)), np.zeros((b, h, t, t))
    for bi in range(b):
        for hi in range(h):
            for i in range(t):
                scores = np.zeros(t)
                for j in range(t):
                    key = k[bi, j, hi] + table[np_relation(i, j, n, prefix), hi]
                    scores[j] = q[bi, i, hi] @ key / math.sqrt(d) + bias[bi, hi, i, j]
                w = np.exp(scores - scores.max())
                probs[bi, hi, i] = w / w.sum()
                heads[bi, i, hi] = sum(probs[bi, hi, i, j] * v[bi, j, hi] for j in range(t))
    return np.einsum("bthd,hde->bte", heads, p["out"]["kernel"]) + p["out"]["bias"], probs


@pytest.mark.parametrize("prefix", [0, 1])
def test_attention_layer_adds_the_relative_logits_before_the_softmax(prefix):
    n, h, d, e = 5, 2, 4, 8
    x = _normal(2, prefix + n, e)
    module = MultiHeadAttention(num_heads=h, head_dim=d, relative_positions=n,
                                relative_prefix_tokens=prefix)
    variables = module.init(jax.random.PRNGKey(0), x)
    params = jax.tree.map(lambda a: _normal(*np.shape(a)),
                          nn.meta.unbox(variables)["params"])  # biases and table off zero
    assert params["relative_attention"]["rel_embedding"].shape == (R.num_relations(n, prefix), h, d)
    out, state = module.apply({"params": params}, x, mutable=["intermediates"])
    expected, probs = np_relative_mha(params, x, n, prefix)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
    # The recorded attention maps include the relative logits too.
    (weights,) = state["intermediates"]["attention_weights"]
    np.testing.assert_allclose(weights, probs, rtol=1e-4, atol=1e-6)
    without = MultiHeadAttention(num_heads=h, head_dim=d).apply(
        {"params": {k: v for k, v in params.items() if k != "relative_attention"}}, x)
    assert np.abs(np.asarray(out) - np.asarray(without)).max() > 1e-2
    # An additive bias given by the caller adds on top.
    bias = _normal(1, h, prefix + n, prefix + n)
    np.testing.assert_allclose(module.apply({"params": params}, x, bias=bias),
                               np_relative_mha(params, x, n, prefix, bias)[0], rtol=1e-4,
                               atol=1e-4)


def test_relative_attention_refuses_cross_attention_and_decoding():
    x = _normal(1, 4, 8)
    module = MultiHeadAttention(num_heads=2, head_dim=4, relative_positions=4)
    with pytest.raises(ValueError, match="relative attention .* is for self-attention"):
        module.init(jax.random.PRNGKey(0), x, _normal(1, 4, 8))
    with pytest.raises(ValueError, match="without the decoding cache"):
        module.init(jax.random.PRNGKey(0), x, decode=True)
