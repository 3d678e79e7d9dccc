"""train/encoder_probe.py on a tiny BERT: the captured sublayer outputs are the ones the post-LN
layer adds, and an encoder made to collapse (every token mapped to one vector) reads as
collapsed and passes no gradient below the collapse, while a random one keeps its tokens."""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models.bert_pretraining import BertForPreTraining
from models.layers import standardize
from tests import tiny_bert
from train import encoder_probe
from train.losses import cross_entropy

CFG = tiny_bert.tiny(num_layers=3, posemb="alibi", dropout_rate=0.0,
                     attention_dropout_rate=0.0)


def _params(cfg=CFG):
    ids, types, mask = tiny_bert.inputs()
    model = BertForPreTraining(cfg)
    variables = model.init(jax.random.PRNGKey(0), ids, types, mask,
                           masked_positions=tiny_bert.POSITIONS)
    return model, nn.meta.unbox(variables["params"])


def _collapse_last_layer(params, token: int):
    """The last layer's output LayerNorm with gain 0 and bias = token's embedding: every
    position's output is that one vector, whatever the input."""
    params = jax.tree.map(lambda x: x, params)
    last = params["bert"]["encoder"][f"layer_{CFG.num_layers - 1}"]["norm_mlp"]
    last["scale"] = jnp.zeros_like(last["scale"])
    last["bias"] = params["bert"]["embeddings"]["word_embeddings"]["embedding"][token]
    return params


def test_captured_sublayers_rebuild_each_layer_output():
    _, params = _params()
    ids, types, mask = tiny_bert.inputs()
    states, layers = encoder_probe.run_encoder(CFG, params["bert"], ids, types, mask)
    assert len(states) == CFG.num_layers + 1 and len(layers) == CFG.num_layers
    for i, layer in enumerate(layers):
        norm = params["bert"]["encoder"][f"layer_{i}"]["norm_mlp"]
        rebuilt = (standardize(layer["attention_norm"] + layer["mlp"], CFG.layer_norm_eps)
                   * norm["scale"] + norm["bias"])
        np.testing.assert_allclose(rebuilt, states[i + 1], atol=1e-5)
        norm = params["bert"]["encoder"][f"layer_{i}"]["norm_attention"]
        rebuilt = (standardize(states[i] + layer["attention"], CFG.layer_norm_eps)
                   * norm["scale"] + norm["bias"])
        np.testing.assert_allclose(rebuilt, layer["attention_norm"], atol=1e-5)
        assert layer["wi"].shape == ids.shape + (CFG.mlp_dim,)
        sums = np.asarray(layer["probs"]).sum(-1)[np.asarray(mask, bool)[:, None, :]
                                                  .repeat(CFG.num_heads, 1)]
        np.testing.assert_allclose(sums, 1.0, rtol=1e-5)


def test_random_encoder_keeps_tokens_and_collapsed_one_does_not():
    _, params = _params()
    ids, types, mask = tiny_bert.inputs()
    report = encoder_probe.encoder_report(CFG, params["bert"], ids, types, mask)
    assert [layer["layer"] for layer in report] == [0, 1, 2, 3]
    assert all(layer["states"]["identity_readout"] == 1.0 for layer in report)
    assert len(report[1]["attention"]["entropy"]) == CFG.num_heads

    token = int(ids[0, 0])
    collapsed = _collapse_last_layer(params, token)
    last = encoder_probe.encoder_report(CFG, collapsed["bert"], ids, types, mask)[-1]["states"]
    assert last["cosine"] == pytest.approx(1.0, abs=1e-5)
    assert last["common_share"] == pytest.approx(1.0, abs=1e-6)
    assert last["effective_rank"] == 0.0
    real = np.asarray(mask, bool)
    assert last["identity_readout"] == pytest.approx(np.mean(np.asarray(ids)[real] == token))


def _mlm_loss(model):
    def loss_fn(params, batch, rng):
        logits = model.apply({"params": params}, batch["input_ids"], batch["segment_ids"],
                             batch["input_mask"], masked_positions=batch["masked_positions"])
        return {"mlm": (cross_entropy(logits["mlm_logits"], batch["masked_ids"])
                        * batch["masked_weights"]).sum()}, {}
    return loss_fn, lambda batch: {"mlm": batch["masked_weights"].sum()}


def _batch():
    ids, types, mask = tiny_bert.inputs()
    return {"input_ids": ids, "segment_ids": types, "input_mask": mask,
            "masked_positions": tiny_bert.POSITIONS,
            "masked_ids": jnp.asarray([[3, 4, 5, 0], [6, 7, 8, 0]], jnp.int32),
            "masked_weights": jnp.asarray([[1, 1, 1, 0], [1, 1, 1, 0]], jnp.float32)}


def test_gradients_per_layer_stop_at_a_collapsed_layer():
    model, params = _params()
    loss_fn, normalizers = _mlm_loss(model)
    batch = _batch()
    groups = encoder_probe.gradient_groups(loss_fn, normalizers, params, batch,
                                           jax.random.PRNGKey(0))
    assert set(groups) == {"embeddings/word", "embeddings/other", "encoder/layer_0",
                           "encoder/layer_1", "encoder/layer_2", "pooler", "head/predictions",
                           "head/seq_relationship"}
    assert all(groups[f"encoder/layer_{i}"]["norm"] > 0 for i in range(3))
    assert groups["pooler"]["norm"] == 0.0            # the MLM loss does not use it

    groups = encoder_probe.gradient_groups(loss_fn, normalizers,
                                           _collapse_last_layer(params, 3), batch,
                                           jax.random.PRNGKey(0))
    for name in ("embeddings/other", "encoder/layer_0", "encoder/layer_1"):
        assert groups[name]["norm"] == 0.0, name
    assert groups["encoder/layer_2"]["norm"] > 0     # its norm_mlp bias still gets one
    assert groups["embeddings/word"]["norm"] > 0     # as the tied output projection


def test_gradient_groups_read_a_scanned_encoder_in_layers():
    scanned = dataclasses.replace(CFG, scan_layers=True)
    model, params = _params(scanned)
    loss_fn, normalizers = _mlm_loss(model)
    groups = encoder_probe.gradient_groups(loss_fn, normalizers, params, _batch(),
                                           jax.random.PRNGKey(0))
    assert {"encoder/layer_0", "encoder/layer_1", "encoder/layer_2"} <= set(groups)
    report = encoder_probe.encoder_report(scanned, params["bert"], *tiny_bert.inputs())
    assert len(report) == CFG.num_layers + 1


def test_dropout_noise_is_zero_without_dropout():
    _, params = _params()
    inputs = tiny_bert.inputs()
    assert encoder_probe.dropout_noise(CFG, params["bert"], *inputs,
                                       jax.random.PRNGKey(1)) == [0.0] * (CFG.num_layers + 1)
    noisy = dataclasses.replace(CFG, dropout_rate=0.3)
    ratios = encoder_probe.dropout_noise(noisy, params["bert"], *inputs, jax.random.PRNGKey(1))
    assert all(r > 0 for r in ratios)


def test_mlm_predictions():
    batch = {"masked_ids": np.array([[1, 2, 3]]), "masked_weights": np.array([[1.0, 1.0, 0.0]]),
             "masked_positions": np.array([[0, 1, 2]]), "input_ids": np.array([[9, 4, 3]])}
    logits = np.full((1, 3, 10), -10.0)
    logits[0, 0, 1] = 10.0      # right
    logits[0, 1, 4] = 10.0      # wrong: copies the random input token 4 (label 2)
    logits[0, 2, 3] = 10.0      # padding
    logits[0, 0, 9] = 0.0       # position 0's input is [MASK] (9): not ranked
    logits[0, 0, 5:9] = 0.0     # 4 + [MASK] of 10 below the answer
    got = encoder_probe.mlm_predictions(logits, batch, mask_id=9)
    assert got["accuracy"] == 0.5
    assert got["random_input_percentile"] == 0.9     # token 4, the top of 10, at position 1
    assert got["kept_input_percentile"] is None      # no chosen position kept its token
    assert got["top1_share"] == 0.5
    assert got["copies_random"] == 1.0 and got["random_positions"] == 1   # [MASK] is not random
    p = np.exp(logits[0, :2]) / np.exp(logits[0, :2]).sum(-1, keepdims=True)
    assert got["entropy"] == pytest.approx(np.mean(-(p * np.log(p)).sum(-1)), rel=1e-9)
