"""BERT: the paper's parameter counts, tied MLM head, gathered vs full MLM logits, padding,
a NumPy forward pass written from the BERT equations, position-encoding variants."""

from __future__ import annotations

import functools
import math
import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import bert as bert_module
from models.bert import POSEMB_KINDS, BertConfig, BertModel
from models.bert_pretraining import BertForPreTraining, masked_lm_logits

from dropout_sites import dropout_sites
from tiny_bert import POSITIONS, VOCAB, inputs as _inputs, tiny


def _count(tree) -> int:
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nn.meta.unbox(tree)))


def _abstract_params(module, length=8, **kwargs):
    ids = jnp.zeros((1, length), jnp.int32)
    return jax.eval_shape(lambda: module.init(jax.random.PRNGKey(0), ids, **kwargs))["params"]


# ----------------------------------------------------------------------------------------------
# Parameter counts
# ----------------------------------------------------------------------------------------------

def bert_model_params(V, H, L, P=512, T=2) -> int:
    """BERT's parameter count from its architecture (Devlin et al. 2019, Sec. 3)."""
    embeddings = V * H + P * H + T * H + 2 * H           # word, position, segment, LayerNorm
    attention = 4 * H * H + 4 * H                         # Q, K, V, output: kernels and biases
    ffn = H * 4 * H + 4 * H + 4 * H * H + H               # H -> 4H -> H with biases
    norms = 2 * 2 * H                                     # two LayerNorms per layer
    pooler = H * H + H
    return embeddings + L * (attention + ffn + norms) + pooler


def pretraining_head_params(V, H) -> int:
    transform = H * H + H + 2 * H                         # dense + LayerNorm
    decoder = V                                           # output bias only: weights are tied
    nsp = 2 * H + 2
    return transform + decoder + nsp


@pytest.mark.parametrize("size, H, L, expected", [
    # The original checkpoints: bert-base-uncased 109,482,240 (the paper's "110M"),
    # bert-large-uncased 335,141,888 (the paper's "340M"); V = 30,522 WordPieces.
    ("base", 768, 12, 109_482_240), ("large", 1024, 24, 335_141_888)])
def test_parameter_counts_equal_the_original_bert(size, H, L, expected):
    assert bert_model_params(30522, H, L) == expected     # the formula reproduces the known count
    cfg = BertConfig.from_size(size)
    assert _count(_abstract_params(BertModel(cfg))) == expected
    heads = pretraining_head_params(30522, H)
    assert heads == {"base": 624_188, "large": 1_084_220}[size]
    full = _abstract_params(BertForPreTraining(cfg), masked_positions=jnp.zeros((1, 2), jnp.int32))
    assert _count(full) == expected + heads
    assert _count(full["bert"]) == expected


# ----------------------------------------------------------------------------------------------
# One tiny pre-training model, evaluated once (a single compilation) for the tests below
# ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pre():
    """A tiny BertForPreTraining with inputs using only ids 1..9 (so embedding rows 10.. are
    reached by the tied MLM decoder alone), and everything the tests compare, from one jit."""
    ids, types, mask = _inputs()
    ids = ids % 9 + 1
    model = BertForPreTraining(tiny())

    def loss(params):
        out, state = model.apply({"params": params}, ids, types, mask,
                                 masked_positions=POSITIONS, capture_intermediates=True)
        return jax.nn.logsumexp(out["mlm_logits"], axis=-1).sum(), (out, state)

    def run(rng):
        variables = model.init(rng, ids, types, mask, masked_positions=POSITIONS)
        grad, (gathered, state) = jax.grad(loss, has_aux=True)(variables["params"])
        bound = model.bind(variables)
        sequence_output, _ = bound.bert(ids, types, mask)
        train = [model.apply(variables, ids, types, mask, masked_positions=POSITIONS, train=True,
                             rngs={"dropout": jax.random.PRNGKey(seed)})["mlm_logits"]
                 for seed in (1, 2)]
        return dict(
            variables=variables, grad=grad, gathered=gathered,
            transformed=state["intermediates"]["predictions"]["transform_norm"]["__call__"][0],
            full=model.apply(variables, ids, types, mask, method="mlm_logits_all_positions"),
            helper=masked_lm_logits(bound, sequence_output, POSITIONS), train=train)

    return model, jax.jit(run)(jax.random.PRNGKey(0)), (ids, types, mask)


def test_every_parameter_has_logical_axis_names(pre):
    _, out, _ = pre
    leaves = jax.tree.leaves(out["variables"], is_leaf=lambda x: isinstance(x, nn.Partitioned))
    assert leaves and all(isinstance(x, nn.Partitioned) for x in leaves)
    for leaf in leaves:
        assert len(leaf.names) == leaf.value.ndim and all(leaf.names), leaf.names
    specs = nn.get_partition_spec(out["variables"])["params"]
    emb = specs["bert"]["embeddings"]
    assert emb["word_embeddings"]["embedding"] == jax.sharding.PartitionSpec("vocab", "embed")
    assert specs["bert"]["encoder"]["layer_0"]["attention"]["query"]["kernel"] == \
        jax.sharding.PartitionSpec("embed", "heads", "kv")
    assert specs["predictions"]["bias"] == jax.sharding.PartitionSpec("vocab")


def test_initialisation_is_berts_truncated_normal(pre):
    params = nn.meta.unbox(pre[1]["variables"])["params"]
    layer = params["bert"]["encoder"]["layer_0"]
    for w in (params["bert"]["embeddings"]["word_embeddings"]["embedding"],
              layer["attention"]["query"]["kernel"], layer["mlp"]["wi"]["kernel"],
              params["bert"]["pooler"]["dense"]["kernel"], params["seq_relationship"]["kernel"]):
        w = np.asarray(w)
        # N(0, 0.02^2) cut at +-2 std: |w| <= 0.04 and std = 0.02 * 0.8796 (the sample std of
        # >= 1,024 draws is within 5 standard errors, ~10%, of that).
        assert np.abs(w).max() <= 0.04 + 1e-7
        if w.size >= 1024:
            assert abs(w.std() - 0.02 * 0.8796) < 0.1 * 0.02
    assert not np.any(np.asarray(layer["attention"]["query"]["bias"]))
    np.testing.assert_array_equal(layer["norm_mlp"]["scale"], 1.0)


def _documented_paths(num_layers: int) -> set[str]:
    """Parameter paths listed in the Hugging Face mapping table of models/bert.py's docstring."""
    paths, prefix = set(), None
    for line in bert_module.__doc__.splitlines():
        section = re.match(r"  (\S+/)  ->  \S+$", line)
        row = re.match(r"    ([^\s,(]+(?:, [^\s,]+)?)\s", line)
        if section:
            prefix = section.group(1)
        elif row and prefix:
            head, _, leaf = (prefix + row.group(1)).rpartition("/")
            for layer in range(num_layers) if "layer_i" in head else [None]:
                paths.update(f"{head.replace('layer_i', f'layer_{layer}')}/{name}"
                             for name in leaf.split(", "))
    return paths


def test_hf_mapping_table_covers_every_parameter_exactly(pre):
    params = nn.meta.unbox(pre[1]["variables"])["params"]
    actual = {"/".join(k.key for k in path)
              for path, _ in jax.tree_util.tree_leaves_with_path(params)}
    assert _documented_paths(tiny().num_layers) == actual


def test_gathered_mlm_head_equals_full_head_at_those_positions(pre):
    _, out, _ = pre
    gathered, full = out["gathered"], out["full"]
    assert gathered["mlm_logits"].shape == (2, 4, VOCAB)
    assert full["mlm_logits"].shape == (2, 10, VOCAB)
    expected = np.take_along_axis(np.asarray(full["mlm_logits"]),
                                  np.asarray(POSITIONS)[..., None], axis=1)
    np.testing.assert_allclose(gathered["mlm_logits"], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gathered["nsp_logits"], full["nsp_logits"], rtol=1e-6)
    # The module-level helper on a bound model gives the same logits from the encoder output.
    np.testing.assert_allclose(out["helper"], gathered["mlm_logits"], rtol=1e-6, atol=1e-7)


def test_mlm_output_projection_is_tied_to_the_word_embeddings(pre):
    _, out, _ = pre
    p = nn.meta.unbox(out["variables"])["params"]
    # No separate [H, V] decoder matrix: the only vocab-sized tables are the embeddings and bias.
    vocab_sized = [jax.tree_util.keystr(path) for path, x in
                   jax.tree_util.tree_leaves_with_path(p) if VOCAB in x.shape]
    assert sorted(vocab_sized) == ["['bert']['embeddings']['word_embeddings']['embedding']",
                                   "['predictions']['bias']"]
    # Logits = transformed states @ word_embeddings^T + bias, with the very same table.
    table = np.asarray(p["bert"]["embeddings"]["word_embeddings"]["embedding"])
    np.testing.assert_allclose(out["gathered"]["mlm_logits"],
                               np.asarray(out["transformed"]) @ table.T
                               + np.asarray(p["predictions"]["bias"]), rtol=1e-5, atol=1e-6)
    # The MLM loss sends gradient to embedding rows of words absent from the input (ids >= 10):
    # only the tied output projection can reach them.
    grad = nn.meta.unbox(out["grad"])
    row_norms = np.linalg.norm(grad["bert"]["embeddings"]["word_embeddings"]["embedding"], axis=1)
    assert np.all(row_norms[10:] > 0)


def test_nsp_head_shape_and_switches(pre):
    model, out, (ids, types, mask) = pre
    variables = out["variables"]
    nsp = out["gathered"]["nsp_logits"]
    assert nsp.shape == (2, 2) and nsp.dtype == jnp.float32
    assert variables["params"]["seq_relationship"]["kernel"].value.shape == (32, 2)

    def outputs(module, v, **kwargs):
        return set(jax.eval_shape(lambda v: module.apply(
            v, ids, types, mask, masked_positions=POSITIONS, **kwargs), v))

    assert outputs(model, variables, with_nsp=False) == {"mlm_logits"}
    no_nsp = BertForPreTraining(tiny(nsp=False))
    shapes = jax.eval_shape(lambda: no_nsp.init(jax.random.PRNGKey(0), ids, types, mask,
                                                masked_positions=POSITIONS))
    assert set(shapes["params"]) == {"bert", "predictions"}        # no seq_relationship
    assert outputs(no_nsp, shapes) == {"mlm_logits"}
    with pytest.raises(ValueError, match="nsp=False"):
        outputs(no_nsp, shapes, with_nsp=True)


def test_dropout_only_in_training(pre):
    _, out, _ = pre
    eval_logits = out["gathered"]["mlm_logits"]
    train_a, train_b = out["train"]
    assert not np.allclose(train_a, eval_logits) and not np.allclose(train_a, train_b)


def test_dropout_sites_and_rates():
    """BERT (Devlin et al. 2019, following Vaswani et al. Sec. 5.4 and the released code): dropout
    on the embeddings' output and on each sublayer's output at dropout_rate, on the attention
    probabilities at attention_dropout_rate; none on the feed-forward's hidden activations or in
    the pretraining heads, and none at all in evaluation."""
    cfg = tiny(dropout_rate=0.1, attention_dropout_rate=0.2)
    ids, types, mask = _inputs()
    model = BertForPreTraining(cfg)
    variables = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), ids, types, mask,
                                                  masked_positions=POSITIONS))

    def sites(train):
        return dropout_sites(lambda: jax.eval_shape(
            lambda v: model.apply(v, ids, types, mask, masked_positions=POSITIONS, train=train,
                                  rngs={"dropout": jax.random.PRNGKey(1)}), variables))

    expected = {("bert/embeddings/dropout", 0.1)}
    for i in range(cfg.num_layers):  # Dropout_0 after the attention, Dropout_1 after the FFN
        layer = f"bert/encoder/layer_{i}"
        expected |= {(f"{layer}/attention:probabilities", 0.2), (f"{layer}/Dropout_0", 0.1),
                     (f"{layer}/Dropout_1", 0.1)}
    assert sites(train=True) == expected
    assert sites(train=False) == set()


# ----------------------------------------------------------------------------------------------
# Padding, position encodings
# ----------------------------------------------------------------------------------------------

@functools.partial(jax.jit, static_argnums=0)
def forward(cfg, variables, ids, types, mask):
    return BertModel(cfg).apply(variables, ids, types, mask)


def bert_variables(pre, posemb):
    """The encoder variables of the shared tiny model (no position table unless 'learned')."""
    variables = nn.meta.unbox(pre[1]["variables"])["params"]["bert"]
    if posemb != "learned":
        variables = {**variables, "embeddings": {
            k: v for k, v in variables["embeddings"].items() if k != "position_embeddings"}}
    return {"params": variables}


def _variant_batch():
    """5 x 2 rows: inputs, padding changed, both again without the mask, reversed."""
    ids, types, mask = _inputs()
    changed_ids = ids.at[1, -3:].set(jnp.asarray([7, 8, 9]))
    changed_types = types.at[1, -3:].set(0)
    ones = jnp.ones_like(mask)
    return (jnp.concatenate([ids, changed_ids, ids, changed_ids, ids[:, ::-1]]),
            jnp.concatenate([types, changed_types, types, changed_types, types[:, ::-1]]),
            jnp.concatenate([mask, mask, ones, ones, ones]))


@pytest.mark.parametrize("posemb", POSEMB_KINDS)
def test_padding_and_position_encoding_variants(pre, posemb):
    cfg = tiny(posemb=posemb)
    variables = bert_variables(pre, posemb)
    shapes = jax.eval_shape(lambda: BertModel(cfg).init(jax.random.PRNGKey(0), *_inputs()))
    assert jax.tree.map(np.shape, nn.meta.unbox(shapes)) == jax.tree.map(np.shape, variables)
    seq, pooled = forward(cfg, variables, *_variant_batch())
    seq, pooled = np.asarray(seq).reshape(5, 2, 10, 32), np.asarray(pooled).reshape(5, 2, 32)
    assert np.all(np.isfinite(seq))

    # Padding: changing padded tokens leaves every real token's output (and the pooled [CLS]).
    np.testing.assert_allclose(seq[1][:, :7], seq[0][:, :7], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(seq[1][0], seq[0][0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(pooled[1], pooled[0], rtol=1e-6, atol=1e-6)
    # ... while without the mask the change is visible.
    assert not np.allclose(seq[3][1, :7], seq[2][1, :7], atol=1e-6)

    # Reversing the tokens reverses the outputs only when the model cannot tell left from
    # right: no positions at all, or ALiBi's symmetric bias -slope * |i - j| (bidirectional).
    assert np.allclose(seq[4][:, ::-1], seq[2], atol=1e-5) == (posemb in ("none", "alibi"))


# ----------------------------------------------------------------------------------------------
# NumPy forward pass from the BERT equations
# ----------------------------------------------------------------------------------------------

_erf = np.vectorize(math.erf)


def _gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _layer_norm(x, scale, bias, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * scale + bias


def numpy_bert(p, ids, types, mask, *, heads, eps):
    """BERT forward in float64, written from the paper (embeddings sum + LN, post-LN layers)."""
    b, length = ids.shape
    e = p["embeddings"]
    x = (e["word_embeddings"]["embedding"][ids] + e["token_type_embeddings"]["embedding"][types]
         + e["position_embeddings"]["embedding"][np.arange(length)][None])
    x = _layer_norm(x, e["norm"]["scale"], e["norm"]["bias"], eps)
    H = x.shape[-1]
    d = H // heads
    layer = 0
    while f"layer_{layer}" in p["encoder"]:
        q_ = p["encoder"][f"layer_{layer}"]
        att = q_["attention"]

        def project(name, x=x, att=att):          # [b, l, H] -> [b, heads, l, d]
            w = att[name]["kernel"].reshape(H, H)
            y = x @ w + att[name]["bias"].reshape(H)
            return y.reshape(b, length, heads, d).transpose(0, 2, 1, 3)

        q, k, v = project("query"), project("key"), project("value")
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d)
        scores = np.where(mask[:, None, None, :] > 0, scores, -1e30)
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        context = (weights @ v).transpose(0, 2, 1, 3).reshape(b, length, H)
        attended = context @ att["out"]["kernel"].reshape(H, H) + att["out"]["bias"]
        x = _layer_norm(x + attended, q_["norm_attention"]["scale"],
                        q_["norm_attention"]["bias"], eps)
        hidden = _gelu(x @ q_["mlp"]["wi"]["kernel"] + q_["mlp"]["wi"]["bias"])
        x = _layer_norm(x + hidden @ q_["mlp"]["wo"]["kernel"] + q_["mlp"]["wo"]["bias"],
                        q_["norm_mlp"]["scale"], q_["norm_mlp"]["bias"], eps)
        layer += 1
    pooled = np.tanh(x[:, 0] @ p["pooler"]["dense"]["kernel"] + p["pooler"]["dense"]["bias"])
    return x, pooled


def test_flax_forward_matches_numpy_bert(pre):
    cfg = tiny()
    # The shared model's parameters, each perturbed so zero biases and unit LayerNorm scales are
    # exercised too; the batch mixes padded and unpadded rows (same shapes as the padding test,
    # so the compiled forward is reused).
    rng = np.random.default_rng(1)
    variables = jax.tree.map(
        lambda x: np.asarray(x) + rng.normal(scale=0.1, size=x.shape).astype(np.float32),
        bert_variables(pre, "learned"))
    ids, types, mask = _variant_batch()
    seq, pooled = forward(cfg, variables, ids, types, mask)
    p64 = jax.tree.map(lambda a: np.asarray(a, np.float64), variables["params"])
    ref_seq, ref_pooled = numpy_bert(p64, np.asarray(ids), np.asarray(types), np.asarray(mask),
                                     heads=cfg.num_heads, eps=cfg.layer_norm_eps)
    np.testing.assert_allclose(seq, ref_seq, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(pooled, ref_pooled, atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------------------------
# Position encodings, lengths, config validation
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("posemb", ["learned", "sinusoidal"])
def test_sequence_longer_than_position_table_raises(posemb):
    cfg = BertConfig.from_size("tiny", posemb=posemb)
    ids = jnp.zeros((1, 600), jnp.int32)
    with pytest.raises(ValueError, match="sequence length 600 exceeds max_position_embeddings=512"):
        jax.eval_shape(lambda: BertModel(cfg).init(jax.random.PRNGKey(0), ids))


@pytest.mark.parametrize("posemb", ["rope", "alibi", "none"])
def test_relative_encodings_have_no_length_limit(posemb):
    """24 tokens under max_position_embeddings=16 give the outputs they give under 32, where
    every position is in range: positions 16..23 neither clamped nor wrapped."""
    ids = jnp.asarray(np.random.default_rng(4).integers(1, 50, (2, 24)), jnp.int32)
    variables = BertModel(tiny(posemb=posemb, max_position_embeddings=32)).init(
        jax.random.PRNGKey(0), ids)
    short, wide = (BertModel(tiny(posemb=posemb, max_position_embeddings=n)).apply(variables, ids)
                   for n in (16, 32))
    assert short[0].shape == (2, 24, 32)
    for a, b in zip(short, wide):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_from_size_and_validation():
    cfg = BertConfig.from_size("base")
    assert (cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.mlp_dim) == (12, 768, 12, 3072)
    assert BertConfig.from_size("large", posemb="rope").posemb == "rope"
    with pytest.raises(ValueError, match="unknown BERT size 'huge'"):
        BertConfig.from_size("huge")
    with pytest.raises(ValueError, match="num_heads=5 does not divide hidden_size=32"):
        tiny(num_heads=5)
    with pytest.raises(ValueError, match="posemb='t5' is not one of"):
        tiny(posemb="t5")
    with pytest.raises(ValueError, match="max_position_embeddings=0"):
        tiny(max_position_embeddings=0)
    with pytest.raises(ValueError, match="dropout_rate=1.0"):
        tiny(dropout_rate=1.0)
    with pytest.raises(ValueError, match="dtype='float64'"):
        tiny(dtype="float64")
