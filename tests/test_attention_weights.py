"""Attention maps out of the models: MultiHeadAttention sows its probabilities into
'intermediates' only when asked (mutable=['intermediates']); default outputs are unchanged."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from models.attention import MultiHeadAttention, attention_weights, causal_mask
from models.bert import BertConfig, BertModel
from models.position import alibi_bias, apply_rope

TINY_BERT = BertConfig(vocab_size=50, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64,
                       max_position_embeddings=16)


def _bert_inputs():
    ids = jax.random.randint(jax.random.PRNGKey(1), (2, 7), 5, TINY_BERT.vocab_size)
    valid = np.ones((2, 7), np.int32)
    valid[1, 4:] = 0                      # the second sequence has 3 padding tokens
    return ids, jnp.asarray(valid)


def _numpy_softmax_weights(q, k, valid):
    """softmax(q k^T / sqrt(d)) over the real keys, [b, h, q, k], in float64."""
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    logits = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
    logits = np.where(np.asarray(valid, bool)[:, None, None, :], logits, -np.inf)
    logits -= logits.max(-1, keepdims=True)
    e = np.exp(logits)
    return e / e.sum(-1, keepdims=True)


def test_default_init_and_apply_are_unchanged():
    model = BertModel(TINY_BERT)
    ids, valid = _bert_inputs()
    variables = model.init(jax.random.PRNGKey(0), ids, None, valid)
    assert set(variables) == {"params"}                      # nothing sown at init
    default = model.apply(variables, ids, None, valid)
    assert isinstance(default, tuple) and len(default) == 2  # (sequence_output, pooled), no state
    (sequence, pooled), state = model.apply(variables, ids, None, valid,
                                            mutable=["intermediates"])
    np.testing.assert_array_equal(np.asarray(sequence), np.asarray(default[0]))
    np.testing.assert_array_equal(np.asarray(pooled), np.asarray(default[1]))
    assert set(state) == {"intermediates"}


def test_bert_sown_weights_equal_attention_weights_of_its_queries_and_keys():
    model = BertModel(TINY_BERT)
    ids, valid = _bert_inputs()
    variables = model.init(jax.random.PRNGKey(0), ids, None, valid)
    # Sown weights, and the query / key projections of every layer captured beside them.
    _, state = model.apply(variables, ids, None, valid,
                           capture_intermediates=lambda mdl, _: mdl.name in ("query", "key"))
    for i in range(TINY_BERT.num_layers):
        layer = state["intermediates"]["encoder"][f"layer_{i}"]["attention"]
        (sown,) = layer["attention_weights"]
        q, k = layer["query"]["__call__"][0], layer["key"]["__call__"][0]
        assert sown.shape == (2, TINY_BERT.num_heads, 7, 7)
        mask = valid.astype(bool)[:, None, None, :]
        np.testing.assert_array_equal(np.asarray(sown),
                                      np.asarray(attention_weights(q, k, mask=mask)))
        np.testing.assert_allclose(np.asarray(sown), _numpy_softmax_weights(q, k, valid),
                                   rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.asarray(sown).sum(-1), 1.0, rtol=1e-5)
        assert np.all(np.asarray(sown)[1, :, :, 4:] == 0.0)   # padding keys get no attention


def test_rope_grouped_query_and_bias_weights_are_recorded_after_the_rotation():
    heads, kv_heads, length = 4, 2, 6
    mha = MultiHeadAttention(num_heads=heads, head_dim=8, num_kv_heads=kv_heads,
                             rotary_base=10000.0, dropout_rate=0.5)
    x = jax.random.normal(jax.random.PRNGKey(2), (1, length, 16))
    positions = jnp.arange(length)[None]
    bias = alibi_bias(heads, positions, positions, causal=True)
    mask = causal_mask(length)
    variables = mha.init(jax.random.PRNGKey(3), x, mask=mask, bias=bias)
    assert set(variables) == {"params"}
    out, state = mha.apply(variables, x, mask=mask, bias=bias, capture_intermediates=True)
    np.testing.assert_array_equal(np.asarray(out),
                                  np.asarray(mha.apply(variables, x, mask=mask, bias=bias)))
    inter = state["intermediates"]
    (sown,) = inter["attention_weights"]
    q = apply_rope(inter["query"]["__call__"][0], positions)
    k = apply_rope(inter["key"]["__call__"][0], positions)
    np.testing.assert_allclose(np.asarray(sown),
                               np.asarray(attention_weights(q, k, bias=bias, mask=mask)),
                               rtol=1e-6, atol=1e-7)
    assert sown.shape == (1, heads, length, length)
    assert np.all(np.triu(np.asarray(sown)[0, 0], 1) == 0.0)   # causal: no future keys
