"""The decoder-only LM (models/decoder_lm.py): GPT-2's parameter counts, logical axes, causality,
packed documents, every position encoding, the learned table's limit, GPT-2's initialisation
and dropout sites, remat and scan, config validation."""

from __future__ import annotations

import dataclasses
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models.decoder_lm import (POSEMB_KINDS, DecoderLM, DecoderLMConfig, document_positions,
                               loop_layout, with_layer_layout)
from models.sizes import GPT2_PARAMETERS, GPT2_SIZES
from train.partitioning import LOGICAL_RULES

from dropout_sites import dropout_sites
from remat_checks import REMATS, assert_same_loss_and_grads, grad_has_remat
from tiny_lm import VOCAB, boxed_shapes, random_params, tiny, tokens


def _count(cfg) -> int:
    return sum(math.prod(x.shape) for x in jax.tree.leaves(nn.meta.unbox(boxed_shapes(cfg))))


# ---------------------------------------------------------------------------------------------
# Sizes
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("size", list(GPT2_SIZES))
def test_gpt2_presets_have_hugging_faces_parameter_counts(size):
    """Counted from jax.eval_shape (nothing materialised), against transformers' own
    GPT2LMHeadModel shapes (built with _do_init=False: shapes only, nothing downloaded)."""
    import transformers

    cfg = DecoderLMConfig.from_size(size)
    assert _count(cfg) == GPT2_PARAMETERS[size]
    fields = GPT2_SIZES[size]
    hf = transformers.FlaxGPT2LMHeadModel(
        transformers.GPT2Config(n_embd=fields["d_model"], n_layer=fields["num_layers"],
                                n_head=fields["num_heads"]), _do_init=False)
    assert sum(math.prod(x.shape) for x in jax.tree.leaves(hf.params_shape_tree)) == \
        GPT2_PARAMETERS[size]
    if size == "small":
        assert GPT2_PARAMETERS[size] == 124_439_808
        # Untied: one more [vocab, d_model] matrix.
        assert _count(dataclasses.replace(cfg, tie_embeddings=False)) == 124_439_808 + 50257 * 768


def test_from_size_and_validation():
    cfg = DecoderLMConfig.from_size("medium", posemb="alibi")
    assert (cfg.num_layers, cfg.d_model, cfg.num_heads, cfg.d_ff, cfg.vocab_size,
            cfg.max_length, cfg.posemb) == (24, 1024, 16, 4096, 50257, 1024, "alibi")
    assert (cfg.activation, cfg.norm_epsilon, cfg.norm_position, cfg.tie_embeddings) == (
        "gelu_tanh", 1e-5, "pre", True)
    with pytest.raises(ValueError, match="unknown GPT-2 size 'huge'"):
        DecoderLMConfig.from_size("huge")
    for overrides, message in ((dict(posemb="rotary"), "posemb="),
                               (dict(num_heads=5), "num_heads=5 does not divide d_model=32"),
                               (dict(num_kv_heads=3), "num_kv_heads=3 must divide num_heads=4"),
                               (dict(head_dim=0), "head_dim=0 must be an integer >= 1"),
                               (dict(num_layers=0), "num_layers=0 must be an integer >= 1"),
                               (dict(norm_position="middle"), "norm_position="),
                               (dict(activation="tanh"), "activation="),
                               (dict(remat="all"), "remat="),
                               (dict(dropout_rate=1.0), r"dropout_rate=1.0 must be in \[0, 1\)"),
                               (dict(initializer_range=0.0), "initializer_range=0.0 must be > 0"),
                               (dict(posemb="t5", t5_num_buckets=1), "t5_num_buckets=1"),
                               (dict(posemb="rope", num_heads=1, head_dim=5), "even head_dim"),
                               (dict(posemb="sinusoidal", d_model=33, num_heads=3),
                                "even d_model")):
        with pytest.raises(ValueError, match=message):
            tiny(**overrides)


@pytest.mark.parametrize("cfg", [tiny(posemb="t5", tie_embeddings=False),
                                 tiny(posemb="learned", scan_layers=True)],
                         ids=["t5-untied", "learned-scan"])
def test_every_parameter_has_logical_axes_the_rules_know(cfg):
    params = boxed_shapes(cfg)["params"]
    boxes = jax.tree.leaves(params, is_leaf=lambda x: isinstance(x, nn.LogicallyPartitioned))
    assert boxes and all(isinstance(b, nn.LogicallyPartitioned) for b in boxes)
    known = {name for name, _ in LOGICAL_RULES}
    for box in boxes:
        assert len(box.names) == box.value.ndim and set(box.names) <= known, box.names
    assert ("logits" in params) == (not cfg.tie_embeddings)


# ---------------------------------------------------------------------------------------------
# Behaviour
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("posemb", POSEMB_KINDS)
def test_every_posemb_runs_and_is_causal(posemb):
    cfg = tiny(posemb=posemb)
    params = random_params(cfg)
    assert ("posemb" in params) == (posemb == "learned")
    assert ("relative_bias" in params) == (posemb == "t5")
    rng = np.random.default_rng(1)
    x = tokens(rng, 2, 9)
    model = DecoderLM(cfg)
    logits = model.apply({"params": params}, x)
    assert logits.shape == (2, 9, VOCAB) and logits.dtype == jnp.float32
    assert np.all(np.isfinite(logits))
    t = 4   # the logits at t see tokens 0..t only
    changed = x.copy()
    changed[:, t + 1:] = tokens(rng, 2, 9 - t - 1)
    changed_logits = model.apply({"params": params}, changed)
    np.testing.assert_allclose(changed_logits[:, :t + 1], logits[:, :t + 1], atol=1e-5)
    assert not np.allclose(changed_logits[:, t + 1:], logits[:, t + 1:], atol=1e-3)


def test_document_positions_restart_per_segment():
    ids = np.array([[1, 1, 1, 2, 2, 3, 0, 0], [1, 2, 2, 2, 2, 2, 2, 2]])
    expected = np.zeros_like(ids)
    for row in range(2):
        for j in range(1, ids.shape[1]):
            same = ids[row, j] == ids[row, j - 1]
            expected[row, j] = expected[row, j - 1] + 1 if same else 0
    np.testing.assert_array_equal(document_positions(ids), expected)


@pytest.mark.parametrize("posemb", POSEMB_KINDS)
def test_packed_documents_equal_each_document_alone(posemb):
    """Two documents and padding in one row (segment ids 1, 2, 0; positions restart, here
    derived from the segment ids) give each document the logits it has alone."""
    cfg = tiny(posemb=posemb)
    params = random_params(cfg, seed=2)
    rng = np.random.default_rng(3)
    first, second = tokens(rng, 4), tokens(rng, 3)
    packed = np.concatenate([first, second, [0, 0]])[None]
    segment_ids = np.array([[1] * 4 + [2] * 3 + [0] * 2])
    model = DecoderLM(cfg)
    got = model.apply({"params": params}, packed, segment_ids=segment_ids)
    for doc, where in ((first, slice(0, 4)), (second, slice(4, 7))):
        alone = model.apply({"params": params}, doc[None])
        np.testing.assert_allclose(got[0, where], alone[0], atol=2e-5, rtol=1e-5)
    # Without the segment ids the second document sees the first: different logits.
    mixed = model.apply({"params": params}, packed)
    assert not np.allclose(mixed[0, 4:7], got[0, 4:7], atol=1e-3)


def test_learned_positions_past_the_table_raise_and_the_others_extrapolate():
    x = tokens(np.random.default_rng(4), 1, 9)
    with pytest.raises(ValueError, match="9 positions exceed max_length=8 of posemb='learned'"):
        DecoderLM(tiny(max_length=8)).apply({"params": random_params(tiny(max_length=8))}, x)
    for posemb in ("sinusoidal", "rope", "alibi", "t5", "none"):
        cfg = tiny(posemb=posemb, max_length=8)
        logits = DecoderLM(cfg).apply({"params": random_params(cfg)}, x)
        assert logits.shape == (1, 9, VOCAB) and np.all(np.isfinite(logits)), posemb


@pytest.mark.parametrize("posemb", ["sinusoidal", "rope", "alibi", "t5", "none"])
def test_positions_past_max_length_are_the_positions_themselves(posemb):
    """max_length bounds only the learned table: 16 tokens under max_length=8 give the logits
    they give under max_length=16 and 32, where every position has its own encoding, so
    positions 8..15 are neither clamped to 7 nor wrapped."""
    x = tokens(np.random.default_rng(8), 2, 16)
    params = random_params(tiny(posemb=posemb, max_length=16), seed=3)
    short, long, longer = (DecoderLM(tiny(posemb=posemb, max_length=n)).apply(
        {"params": params}, x) for n in (8, 16, 32))
    np.testing.assert_allclose(short, long, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(short, longer, rtol=1e-6, atol=1e-6)


def test_tied_output_layer_and_post_ln():
    """Tied: logits = h E^T with the token embeddings (no 'logits' parameter); post-LN has no
    final norm; both change the function."""
    cfg = tiny(norm_position="post")
    params = random_params(cfg)
    assert "norm" not in params and "logits" not in params
    assert "norm" in random_params(tiny()) and "logits" in random_params(tiny(
        tie_embeddings=False))
    x = tokens(np.random.default_rng(5), 2, 6)
    logits, hidden = (DecoderLM(cfg).apply({"params": params}, x, hidden_only=flag)
                      for flag in (False, True))
    np.testing.assert_allclose(logits, np.asarray(hidden) @ np.asarray(
        params["embedding"]["embedding"]).T, atol=1e-4, rtol=1e-5)


def test_gpt2_initialisation_scales_the_residual_projections():
    """Radford et al. 2019, Sec. 2.3: every kernel and embedding ~ N(0, 0.02^2), the attention
    output and the second feed-forward kernel of each block N(0, (0.02 / sqrt(2 L))^2)."""
    cfg = tiny(num_layers=4, d_model=128, d_ff=512, num_heads=4, posemb="learned")
    params = nn.meta.unbox(jax.jit(lambda: DecoderLM(cfg).init(
        jax.random.PRNGKey(0), jnp.zeros((1, 4), jnp.int32)))())["params"]
    block = params["block_2"]
    residual = 0.02 / math.sqrt(2 * 4)
    for array, std in ((params["embedding"]["embedding"], 0.02),
                       (params["posemb"]["embedding"], 0.02),
                       (block["attention"]["query"]["kernel"], 0.02),
                       (block["mlp"]["wi"]["kernel"], 0.02),
                       (block["attention"]["out"]["kernel"], residual),
                       (block["mlp"]["wo"]["kernel"], residual)):
        assert abs(float(np.std(array)) / std - 1) < 0.05, (array.shape, np.std(array), std)
    assert np.all(np.asarray(block["attention"]["out"]["bias"]) == 0)
    unscaled = nn.meta.unbox(jax.jit(lambda: DecoderLM(dataclasses.replace(
        cfg, scale_residual_init=False)).init(jax.random.PRNGKey(0),
                                              jnp.zeros((1, 4), jnp.int32)))())["params"]
    assert abs(float(np.std(unscaled["block_2"]["mlp"]["wo"]["kernel"])) / 0.02 - 1) < 0.05
    # embedding_std: the token embeddings alone (fairseq's 1 / sqrt(d_model)).
    apart = nn.meta.unbox(jax.jit(lambda: DecoderLM(dataclasses.replace(
        cfg, embedding_std=128 ** -0.5)).init(jax.random.PRNGKey(0),
                                             jnp.zeros((1, 4), jnp.int32)))())["params"]
    assert abs(float(np.std(apart["embedding"]["embedding"])) * 128 ** 0.5 - 1) < 0.05
    assert abs(float(np.std(apart["posemb"]["embedding"])) / 0.02 - 1) < 0.05
    with pytest.raises(ValueError, match="embedding_std=0.0 must be > 0"):
        dataclasses.replace(cfg, embedding_std=0.0)


def test_dropout_sites_and_rates():
    """GPT-2's sites: the embedding sum, each sublayer output (resid_pdrop) and the attention
    probabilities (attn_pdrop); not the feed-forward hidden layer; nothing in evaluation."""
    cfg = tiny(dropout_rate=0.1, attention_dropout_rate=0.2)
    x = tokens(np.random.default_rng(6), 2, 5)
    variables = boxed_shapes(cfg)

    def sites(train):
        return dropout_sites(lambda: jax.eval_shape(
            lambda v: DecoderLM(cfg).apply(v, x, train=train,
                                           rngs={"dropout": jax.random.PRNGKey(1)}), variables))

    expected = {("Dropout_0", 0.1)}
    for i in range(cfg.num_layers):
        expected |= {(f"block_{i}/attention:probabilities", 0.2), (f"block_{i}/Dropout_0", 0.1),
                     (f"block_{i}/Dropout_1", 0.1)}
    assert sites(train=True) == expected
    assert sites(train=False) == set()


# ---------------------------------------------------------------------------------------------
# remat and scan
# ---------------------------------------------------------------------------------------------

def _loss(cfg):
    x = tokens(np.random.default_rng(7), 2, 8)
    segment_ids = np.array([[1] * 5 + [2] * 3, [1] * 6 + [0] * 2])

    def loss(params, train=False):
        logits = DecoderLM(cfg).apply({"params": params}, x[:, :-1],
                                      segment_ids=segment_ids[:, :-1], train=train,
                                      rngs={"dropout": jax.random.key(1, impl="rbg")})
        logp = jnp.take_along_axis(jax.nn.log_softmax(logits), x[:, 1:, None], -1)[..., 0]
        return -jnp.mean(logp * (segment_ids[:, 1:] > 0))

    return loss


def test_remat_and_scan_keep_loss_and_gradients():
    """remat: the same loss and gradients with dropout on (the same masks). scan: the same
    function with the blocks stacked (its dropout masks differ from the loop's by design,
    models/stack.py, so compared in evaluation)."""
    cfg = tiny(posemb="t5", dropout_rate=0.2, attention_dropout_rate=0.1)
    params = random_params(cfg, scale=0.1)

    def value_and_grad(cfg, params, train):
        return jax.jit(lambda p: jax.value_and_grad(_loss(cfg))(p, train))(params)

    expected = value_and_grad(cfg, params, train=True)
    assert not np.allclose(expected[0], _loss(cfg)(params))  # dropout did act
    for remat in REMATS:
        assert grad_has_remat(_loss(dataclasses.replace(cfg, remat=remat)), params)
    # (each policy's residuals: tests/test_transformer.py and tests/test_stack.py)
    assert_same_loss_and_grads(
        value_and_grad(dataclasses.replace(cfg, remat="full"), params, train=True), expected)
    scan_cfg = dataclasses.replace(cfg, scan_layers=True, remat="full")
    stacked = with_layer_layout(params, scan=True)
    assert set(stacked) == {"embedding", "relative_bias", "blocks", "norm"}
    loss, grads = value_and_grad(scan_cfg, stacked, train=False)
    assert_same_loss_and_grads((loss, with_layer_layout(grads, scan=False)),
                               value_and_grad(cfg, params, train=False), tol=2e-6)
    model, unstacked = loop_layout(DecoderLM(scan_cfg), stacked)
    assert not model.config.scan_layers and set(unstacked) == set(params)
    with pytest.raises(ValueError, match="cached decoding runs the loop layout"):
        DecoderLM(scan_cfg).apply({"params": stacked}, jnp.zeros((1, 4), jnp.int32), decode=True,
                                  mutable=["cache"])
