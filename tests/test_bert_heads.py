"""BERT's fine-tuning heads (models/bert_heads.py) alone, against NumPy from their parameters:
the hidden-state combinations of Table 7 and the feature-based heads."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn


def test_hidden_states_and_the_feature_choices_of_table_7():
    from models.bert import BertConfig, BertModel
    from models.bert_heads import combine_hidden_states, feature_width

    cfg = BertConfig(vocab_size=30, hidden_size=8, num_layers=4, num_heads=2, mlp_dim=16,
                     max_position_embeddings=16)
    model = BertModel(cfg)
    ids = jnp.asarray(np.arange(12, dtype=np.int32).reshape(2, 6) + 5)
    variables = model.init(jax.random.PRNGKey(0), ids)
    sequence, pooled = model.apply(variables, ids)  # the default outputs are unchanged
    again, pooled_again, states = model.apply(variables, ids, output_hidden_states=True)
    assert len(states) == 5
    np.testing.assert_array_equal(states[-1], sequence)
    np.testing.assert_array_equal(pooled_again, pooled)
    h = [np.asarray(x, np.float64) for x in states]
    expected = {"last": h[4], "second_to_last": h[3], "sum_last_four": h[1] + h[2] + h[3] + h[4],
                "concat_last_four": np.concatenate(h[1:], -1)}
    for mode, want in expected.items():
        got = combine_hidden_states(states, mode)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        assert got.shape[-1] == feature_width(cfg, mode)


def test_feature_based_sequence_head_averages_the_real_tokens():
    """Feature-based classification: the frozen encoder's states averaged over the real tokens
    only (padding excluded), -> GELU(dense) -> classifier, against NumPy from the parameters;
    changing what stands at the padded positions changes nothing."""
    from math import erf

    from models.bert import BertConfig, BertModel
    from models.bert_heads import BertForSequenceClassification

    cfg = BertConfig(vocab_size=30, hidden_size=8, num_layers=2, num_heads=2, mlp_dim=16,
                     max_position_embeddings=16)
    head = BertForSequenceClassification(cfg, num_labels=3, features="last", head_hidden=5)
    ids = np.arange(12, dtype=np.int32).reshape(2, 6) + 5
    mask = np.array([[1] * 6, [1] * 4 + [0] * 2], np.int32)
    params = nn.meta.unbox(head.init(jax.random.PRNGKey(0), ids, None, mask))["params"]
    params = jax.tree.map(lambda p: p + 0.1 * np.random.default_rng(1).normal(size=p.shape),
                          params)  # the zero-initialised biases would hide nothing
    logits = np.asarray(head.apply({"params": params}, ids, None, mask), np.float64)
    sequence, _ = BertModel(cfg).apply({"params": params["bert"]}, ids, None, mask)
    h = np.asarray(sequence, np.float64)
    pooled = np.stack([h[0].mean(0), h[1, :4].mean(0)])
    hidden = pooled @ params["feature_hidden"]["kernel"] + params["feature_hidden"]["bias"]
    hidden = hidden * 0.5 * (1 + np.vectorize(erf)(hidden / np.sqrt(2)))  # exact GELU
    expected = hidden @ params["classifier"]["kernel"] + params["classifier"]["bias"]
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-5)
    other = ids.copy()
    other[1, 4:] = [7, 9]
    np.testing.assert_allclose(head.apply({"params": params}, other, None, mask), logits,
                               rtol=1e-5, atol=1e-6)


def test_feature_based_token_head_mlp_is_one_gelu_layer_per_token():
    """feature_head='mlp' (the cheaper stand-in for Sec. 5.3's BiLSTM): each token's frozen
    feature -> GELU(dense) -> classifier, against NumPy from the parameters."""
    from math import erf

    from models.bert import BertConfig, BertModel
    from models.bert_heads import BertForTokenClassification

    cfg = BertConfig(vocab_size=30, hidden_size=8, num_layers=2, num_heads=2, mlp_dim=16,
                     max_position_embeddings=16)
    head = BertForTokenClassification(cfg, num_labels=3, features="second_to_last",
                                      head_hidden=5, feature_head="mlp")
    ids = np.arange(12, dtype=np.int32).reshape(2, 6) + 5
    mask = np.array([[1] * 6, [1] * 4 + [0] * 2], np.int32)
    params = nn.meta.unbox(head.init(jax.random.PRNGKey(0), ids, None, mask))["params"]
    assert set(params) == {"bert", "feature_hidden", "classifier"}
    params = jax.tree.map(lambda p: p + 0.1 * np.random.default_rng(1).normal(size=p.shape),
                          params)  # the zero-initialised biases would hide nothing
    logits = np.asarray(head.apply({"params": params}, ids, None, mask), np.float64)
    _, _, states = BertModel(cfg).apply({"params": params["bert"]}, ids, None, mask,
                                        output_hidden_states=True)
    h = np.asarray(states[-2], np.float64)                     # the second-to-last layer
    hidden = h @ params["feature_hidden"]["kernel"] + params["feature_hidden"]["bias"]
    hidden = hidden * 0.5 * (1 + np.vectorize(erf)(hidden / np.sqrt(2)))  # exact GELU
    expected = hidden @ params["classifier"]["kernel"] + params["classifier"]["bias"]
    assert logits.shape == (2, 6, 3)
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-5)


def test_the_bilstm_parameters_carry_logical_axis_names():
    """Every parameter of the feature-based BiLSTM is named for the mesh rules (an unnamed one
    would be replicated silently, even under FSDP)."""
    from models.bert_heads import BiLSTM
    x, lengths = jnp.ones((2, 5, 12)), jnp.array([5, 3])
    variables = BiLSTM(8).init(jax.random.PRNGKey(0), x, lengths)
    boxes = jax.tree.leaves(variables, is_leaf=lambda v: isinstance(v, nn.Partitioned))
    assert boxes and all(isinstance(b, nn.Partitioned) for b in boxes)
    names = {b.names for b in boxes}
    assert names == {("embed", "mlp"), (None, "mlp"), ("mlp",)}
    out = BiLSTM(8).apply(nn.meta.unbox(variables), x, lengths)
    assert out.shape == (2, 5, 16) and bool(jnp.isfinite(out).all())
