"""Transformer: parameter counts of Table 3, causal/padding/packing masks, position encodings,
tied embeddings, pre/post-LN, config validation."""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import decode as D
from models.transformer import (POSEMB_KINDS, Transformer, TransformerConfig, shift_right)

from dropout_sites import dropout_sites
from remat_checks import (REMATS, assert_same_loss_and_grads, assert_same_variables,
                          grad_has_remat, num_saved_residuals)
from tiny_transformer import BOS, VOCAB, init, tiny, words


def count(cfg: TransformerConfig) -> int:
    tokens = jnp.ones((1, 8), jnp.int32)
    shapes = jax.eval_shape(lambda: Transformer(cfg).init(jax.random.PRNGKey(0), tokens, tokens))
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nn.meta.unbox(shapes["params"])))


def expected_count(V, d, d_ff, h, N, d_k=None, d_v=None):
    """Hand count for the post-LN, shared-embedding, sinusoidal model (no final norms)."""
    d_k = d // h if d_k is None else d_k
    d_v = d // h if d_v is None else d_v
    # W_Q, W_K [d, h d_k] with biases; W_V [d, h d_v] with bias; W_O [h d_v, d] with bias.
    # With d_k = d_v = d / h this is 4 d^2 + 4 d.
    attention = 2 * (d * h * d_k + h * d_k) + (d * h * d_v + h * d_v) + (h * d_v * d + d)
    ffn = 2 * d * d_ff + d_ff + d            # W_1, b_1, W_2, b_2
    norm = 2 * d                             # LayerNorm gain and bias
    encoder_layer = attention + ffn + 2 * norm
    decoder_layer = 2 * attention + ffn + 3 * norm
    # V enters once: one [V, d] matrix embeds source and target tokens and is the output
    # projection (Sec. 3.4); sinusoidal positions have no parameters.
    return V * d + N * encoder_layer + N * decoder_layer


# ---------------------------------------------------------------------------------------------
# Sizes
# ---------------------------------------------------------------------------------------------

def test_base_parameter_count():
    # The paper's shared BPE vocabulary has "about 37000" tokens; Table 3 lists 65M parameters.
    n = count(TransformerConfig.from_size("base", vocab_size=37000))
    assert n == expected_count(37000, 512, 2048, 8, 6) == 63_082_496
    assert abs(n - 65e6) / 65e6 < 0.05


def test_big_and_table3_row_b_parameter_counts():
    big = count(TransformerConfig.from_size("big", vocab_size=37000))
    assert big == expected_count(37000, 1024, 4096, 16, 6)
    assert abs(big - 213e6) / 213e6 < 0.02
    # Row (B) shrinks only d_k (d_v stays 64): 65M -> 58M (d_k=16) and 60M (d_k=32).
    base = count(TransformerConfig.from_size("base", vocab_size=37000))
    for d_k, paper in ((16, 58), (32, 60)):
        n = count(TransformerConfig.from_size("base", vocab_size=37000, head_dim=d_k))
        assert n == expected_count(37000, 512, 2048, 8, 6, d_k=d_k)
        assert round((base - n) / 1e6) == 65 - paper


def test_from_size_and_validation():
    cfg = TransformerConfig.from_size("base", vocab_size=100)
    assert (cfg.num_layers, cfg.d_model, cfg.d_ff, cfg.num_heads, cfg.dropout_rate) == (
        6, 512, 2048, 8, 0.1)
    assert (cfg.qk_dim, cfg.v_dim, cfg.norm_position, cfg.posemb) == (64, 64, "post", "sinusoidal")
    with pytest.raises(ValueError, match="unknown Transformer size"):
        TransformerConfig.from_size("huge", vocab_size=100)
    for overrides, message in ((dict(posemb="rotary"), "posemb="),
                               (dict(num_heads=5), "num_heads=5 does not divide d_model=32"),
                               (dict(num_kv_heads=3), "num_kv_heads=3 must divide num_heads=4"),
                               (dict(norm_position="middle"), "norm_position="),
                               (dict(activation="tanh"), "activation="),
                               (dict(dtype="float64"), "dtype="),
                               (dict(dropout_rate=1.0), "dropout_rate="),
                               (dict(posemb="rope", head_dim=5), "even head_dim"),
                               (dict(attention_implementation="cudnn", head_dim=4),
                                "head_dim == value_head_dim")):
        with pytest.raises(ValueError, match=message):
            tiny(**overrides)
    # head_dim != d_model / num_heads is allowed (Table 3 rows A-C).
    assert tiny(num_heads=5, head_dim=8, value_head_dim=8).qk_dim == 8


def test_shift_right():
    targets = np.array([[5, 6, 1, 0, 0], [7, 1, 0, 0, 0]])
    np.testing.assert_array_equal(shift_right(targets, BOS), [[BOS, 5, 6, 0, 0], [BOS, 7, 0, 0, 0]])
    packed = np.array([[5, 6, 1, 7, 1, 0]])
    segments = np.array([[1, 1, 1, 2, 2, 0]])
    np.testing.assert_array_equal(shift_right(packed, BOS, segments), [[BOS, 5, 6, BOS, 7, 0]])
    with pytest.raises(ValueError, match="bos_id"):
        shift_right(targets, 0)


# ---------------------------------------------------------------------------------------------
# Behaviour
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("posemb", POSEMB_KINDS)
def test_every_posemb_runs_and_decoder_is_causal(posemb):
    rng = np.random.default_rng(1)
    cfg = tiny(posemb=posemb)
    inputs, targets = words(rng, 2, 7), words(rng, 2, 9)
    inputs[1, 5:] = 0                                     # some source padding
    variables = init(cfg, inputs, targets)
    params = variables["params"]
    assert ("posemb" in params["decoder"]) == (posemb == "learned")
    assert ("relative_bias" in params["encoder"]) == (posemb == "t5")
    logits = Transformer(cfg).apply(variables, inputs, targets)
    assert logits.shape == (2, 9, VOCAB) and logits.dtype == jnp.float32
    assert np.all(np.isfinite(logits))
    # Decoder output at position t must not depend on the target tokens after t.
    t = 4
    changed = targets.copy()
    changed[:, t + 1:] = words(rng, 2, 9 - t - 1)
    changed_logits = Transformer(cfg).apply(variables, inputs, changed)
    np.testing.assert_allclose(changed_logits[:, :t + 1], logits[:, :t + 1], atol=1e-5)
    assert not np.allclose(changed_logits[:, t + 1:], logits[:, t + 1:], atol=1e-3)


@pytest.mark.parametrize("posemb", ["sinusoidal", "rope", "alibi", "t5"])
def test_packed_row_equals_separate_examples(posemb):
    rng = np.random.default_rng(2)
    cfg = tiny(posemb=posemb)
    src = [words(rng, 4), words(rng, 2)]
    tgt = [words(rng, 3), words(rng, 5)]
    # Two examples alone, each padded to the packed lengths 7 / 9.
    inputs = np.zeros((2, 7), np.int32)
    targets = np.zeros((2, 9), np.int32)
    for i in range(2):
        inputs[i, :len(src[i])], targets[i, :len(tgt[i])] = src[i], tgt[i]
    # The same two packed into one row: segment ids 1, 2 (0 = padding), positions restart.
    packed_inputs = np.zeros((1, 7), np.int32)
    packed_inputs[0, :6] = np.concatenate(src)
    inputs_segmentation = np.array([[1] * 4 + [2] * 2 + [0]])
    inputs_positions = np.array([[0, 1, 2, 3, 0, 1, 0]])
    packed_targets = np.zeros((1, 9), np.int32)
    packed_targets[0, :8] = np.concatenate(tgt)
    targets_segmentation = np.array([[1] * 3 + [2] * 5 + [0]])
    targets_positions = np.array([[0, 1, 2, 0, 1, 2, 3, 4, 0]])

    variables = init(cfg, inputs, targets)
    model = Transformer(cfg)
    alone = model.apply(variables, inputs, targets)
    packed = model.apply(variables, packed_inputs, packed_targets,
                         inputs_segmentation=inputs_segmentation,
                         targets_segmentation=targets_segmentation,
                         inputs_positions=inputs_positions, targets_positions=targets_positions)
    np.testing.assert_allclose(packed[0, :3], alone[0, :3], atol=2e-5)
    np.testing.assert_allclose(packed[0, 3:8], alone[1, :5], atol=2e-5)
    # Without positions, they restart in every example of the segmentation all the same.
    derived = model.apply(variables, packed_inputs, packed_targets,
                          inputs_segmentation=inputs_segmentation,
                          targets_segmentation=targets_segmentation)
    np.testing.assert_allclose(derived, packed, atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="both inputs_segmentation and targets_segmentation"):
        model.apply(variables, packed_inputs, packed_targets,
                    targets_segmentation=targets_segmentation)


def _final_decoder_state(cfg, variables, inputs, targets):
    """Logits and the decoder's last hidden state (post-LN: the output of its last block)."""
    logits, state = Transformer(cfg).apply(variables, inputs, targets,
                                           capture_intermediates=True)
    hidden = state["intermediates"]["decoder"][f"block_{cfg.num_layers - 1}"]["__call__"][0]
    return np.asarray(logits, np.float64), np.asarray(hidden, np.float64)


def test_shared_embedding_is_the_output_projection():
    rng = np.random.default_rng(3)
    cfg = tiny()
    inputs, targets = words(rng, 2, 7), words(rng, 2, 9)
    variables = init(cfg, inputs, targets)
    params = nn.meta.unbox(variables["params"])
    assert set(params) == {"shared_embedding", "encoder", "decoder"}
    assert "embedding" not in params["encoder"] and "logits" not in params["decoder"]
    logits, hidden = _final_decoder_state(cfg, variables, inputs, targets)
    table = np.asarray(params["shared_embedding"]["embedding"], np.float64)     # [V, d]
    assert table.shape == (VOCAB, 32)
    np.testing.assert_allclose(logits, hidden @ table.T, rtol=1e-4, atol=1e-4)


def test_separate_embeddings_and_output_projection():
    rng = np.random.default_rng(4)
    cfg = tiny(share_embeddings=False)
    inputs, targets = words(rng, 2, 7), words(rng, 2, 9)
    variables = init(cfg, inputs, targets)
    params = nn.meta.unbox(variables["params"])
    assert set(params) == {"encoder", "decoder"}
    assert {"embedding", "logits"} <= set(params["decoder"]) and "embedding" in params["encoder"]
    logits, hidden = _final_decoder_state(cfg, variables, inputs, targets)
    kernel = np.asarray(params["decoder"]["logits"]["kernel"], np.float64)       # [d, V]
    np.testing.assert_allclose(logits, hidden @ kernel, rtol=1e-4, atol=1e-4)


def test_embedding_scale_and_sinusoids_enter_the_encoder():
    """Encoder input = E[x] * sqrt(d_model) + PE, checked through a 0-layer encoder."""
    rng = np.random.default_rng(5)
    cfg = tiny(num_encoder_layers=0)
    inputs, targets = words(rng, 1, 6), words(rng, 1, 3)
    variables = init(cfg, inputs, targets)
    encoded = Transformer(cfg).apply(variables, inputs, method=Transformer.encode)
    table = np.asarray(nn.meta.unbox(variables["params"])["shared_embedding"]["embedding"])
    pos = np.arange(6)[:, None]
    i = np.arange(0, 32, 2)[None, :]
    pe = np.zeros((6, 32))
    pe[:, 0::2], pe[:, 1::2] = np.sin(pos / 10000 ** (i / 32)), np.cos(pos / 10000 ** (i / 32))
    np.testing.assert_allclose(encoded[0], table[inputs[0]] * np.sqrt(32) + pe, atol=1e-5)


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_pre_ln_stacks_end_with_their_final_norm(norm):
    """Pre-LN (Xiong et al. 2020): each stack ends with one more norm, so encoded = Norm_enc(z)
    with z the last encoder block's output, and logits = Norm_dec(h) E^T (Sec. 3.4, tied) with h
    the last decoder block's output; LayerNorm g (h - mean) / sqrt(var + eps) + b, RMSNorm
    g h / sqrt(mean(h^2) + eps). Computed in NumPy from the captured blocks and the params."""
    rng = np.random.default_rng(9)
    cfg = tiny(norm_position="pre", norm=norm)
    inputs, targets = words(rng, 2, 7), words(rng, 2, 9)
    variables = init(cfg, inputs, targets)
    params = jax.tree.map(lambda x: np.asarray(x, np.float64), nn.meta.unbox(variables["params"]))
    logits, state = Transformer(cfg).apply(variables, inputs, targets,
                                           capture_intermediates=True)
    inter = state["intermediates"]
    last = f"block_{cfg.num_layers - 1}"

    def final_norm(x, stack):
        x = np.asarray(x, np.float64)
        p = params[stack]["norm"]
        if norm == "rmsnorm":
            assert set(p) == {"scale"}
            return p["scale"] * x / np.sqrt((x ** 2).mean(-1, keepdims=True) + cfg.norm_epsilon)
        centred = x - x.mean(-1, keepdims=True)
        std = np.sqrt((centred ** 2).mean(-1, keepdims=True) + cfg.norm_epsilon)
        return p["scale"] * centred / std + p["bias"]

    encoded = final_norm(inter["encoder"][last]["__call__"][0], "encoder")
    np.testing.assert_allclose(inter["encoder"]["__call__"][0], encoded, rtol=1e-4, atol=1e-4)
    table = params["shared_embedding"]["embedding"]                             # [V, d]
    expected = final_norm(inter["decoder"][last]["__call__"][0], "decoder") @ table.T
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("norm_position", ["post", "pre"])
def test_post_and_pre_layer_norm(norm_position):
    rng = np.random.default_rng(6)
    cfg = tiny(norm_position=norm_position, num_kv_heads=2, posemb="learned",
               share_embeddings=False)
    inputs, targets = words(rng, 2, 7), words(rng, 2, 9)
    variables = init(cfg, inputs, targets)
    params = variables["params"]
    has_final_norms = "norm" in params["encoder"] and "norm" in params["decoder"]
    assert has_final_norms == (norm_position == "pre")
    # Every parameter carries one logical axis name per dimension.
    leaves = jax.tree_util.tree_leaves(params, is_leaf=lambda x: isinstance(x, nn.Partitioned))
    assert leaves and all(isinstance(p, nn.Partitioned) and len(p.names) == p.value.ndim
                          for p in leaves)
    logits = Transformer(cfg).apply(variables, inputs, targets)
    assert logits.shape == (2, 9, VOCAB) and np.all(np.isfinite(logits))


def test_dropout_only_in_training():
    rng = np.random.default_rng(7)
    cfg = tiny(dropout_rate=0.3, attention_dropout_rate=0.1)
    inputs, targets = words(rng, 2, 7), words(rng, 2, 9)
    variables = init(cfg, inputs, targets)
    model = Transformer(cfg)
    eval_logits = model.apply(variables, inputs, targets)
    np.testing.assert_array_equal(eval_logits, model.apply(variables, inputs, targets))
    # An 'rbg' key: its bit generator compiles much faster on CPU than the default threefry.
    train = [model.apply(variables, inputs, targets, train=True,
                         rngs={"dropout": jax.random.key(s, impl="rbg")}) for s in (0, 0, 1)]
    np.testing.assert_array_equal(train[0], train[1])
    assert not np.allclose(train[0], train[2]) and not np.allclose(train[0], eval_logits)


def test_dropout_sites_and_rates():
    """Vaswani et al. 2017, Sec. 5.4: dropout on every sublayer's output and on the sums of the
    embeddings and positional encodings in both stacks, at dropout_rate; beyond the paper's
    two, when their rates are set, on the feed-forward's hidden activations (mlp_dropout_rate
    None: at dropout_rate; the paper's recipe sets 0) and on the attention probabilities of all
    three attentions (at attention_dropout_rate); nothing in evaluation."""
    rng = np.random.default_rng(7)
    cfg = tiny(dropout_rate=0.1, attention_dropout_rate=0.2)
    inputs, targets = words(rng, 2, 7), words(rng, 2, 9)
    model = Transformer(cfg)
    variables = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), inputs, targets))

    def sites(train):
        return dropout_sites(lambda: jax.eval_shape(
            lambda v: model.apply(v, inputs, targets, train=train,
                                  rngs={"dropout": jax.random.PRNGKey(1)}), variables))

    expected = {("encoder/Dropout_0", 0.1), ("decoder/Dropout_0", 0.1)}  # embeddings + positions
    for i in range(cfg.num_layers):
        block = f"encoder/block_{i}"  # Dropout_0 after the attention, Dropout_1 after the FFN
        expected |= {(f"{block}/attention:probabilities", 0.2), (f"{block}/Dropout_0", 0.1),
                     (f"{block}/mlp/Dropout_0", 0.1), (f"{block}/Dropout_1", 0.1)}
        block = f"decoder/block_{i}"  # after self-attention, cross-attention, FFN
        expected |= {(f"{block}/self_attention:probabilities", 0.2),
                     (f"{block}/cross_attention:probabilities", 0.2),
                     (f"{block}/Dropout_0", 0.1), (f"{block}/Dropout_1", 0.1),
                     (f"{block}/mlp/Dropout_0", 0.1), (f"{block}/Dropout_2", 0.1)}
    assert sites(train=True) == expected
    assert sites(train=False) == set()


def test_learned_positions_longer_than_max_length_fail():
    cfg = tiny(posemb="learned", max_length=8)
    tokens = np.full((1, 9), 5, np.int32)
    with pytest.raises(ValueError, match="max_length=8"):
        init(cfg, tokens, tokens)


# ---------------------------------------------------------------------------------------------
# Rematerialisation
# ---------------------------------------------------------------------------------------------

def _remat_setup(remat):
    """A tiny pre-LN model with dropout and a T5 bias (an array argument of every block), a
    padded batch, and its translation loss as a function of (params, train, seed)."""
    cfg = tiny(remat=remat, dropout_rate=0.2, attention_dropout_rate=0.1, posemb="t5",
               norm_position="pre")
    rng = np.random.default_rng(8)
    inputs, labels = words(rng, 2, 7), words(rng, 2, 9)
    inputs[1, 5:] = 0
    targets = jnp.asarray(shift_right(labels, BOS))

    def loss(params, train=False, seed=0):
        logits = Transformer(cfg).apply(
            {"params": params}, inputs, targets, train=train,
            rngs={"dropout": jax.random.key(seed, impl="rbg")})
        return -jnp.take_along_axis(jax.nn.log_softmax(logits), labels[..., None], -1).mean()

    return cfg, inputs, targets, loss


def test_remat_keeps_parameters_loss_and_gradients():
    cfg, inputs, targets, loss = _remat_setup("none")
    own_init = lambda cfg: jax.jit(  # noqa: E731
        lambda: Transformer(cfg).init(jax.random.PRNGKey(0), inputs, targets))()
    boxed = own_init(cfg)
    params = nn.meta.unbox(init(cfg, inputs, targets))["params"]   # random biases and scales too

    def losses_and_grads(loss):  # dropout off and on (the same dropout rng for every remat)
        return jax.jit(lambda p: [jax.value_and_grad(loss)(p, train) for train in (False, True)])(
            params)

    expected = losses_and_grads(loss)
    for remat in REMATS:
        remat_cfg, _, _, remat_loss = _remat_setup(remat)
        assert_same_variables(own_init(remat_cfg), boxed)
        for got, want in zip(losses_and_grads(remat_loss), expected):
            assert_same_loss_and_grads(got, want)
    assert not np.allclose(expected[0][0], expected[1][0])  # dropout did act


def test_remat_appears_in_the_gradient_and_keeps_fewer_residuals():
    cfg, inputs, targets, _ = _remat_setup("none")
    params = nn.meta.unbox(init(cfg, inputs, targets))["params"]
    residuals = {}
    for remat in ("none",) + REMATS:
        _, _, _, loss = _remat_setup(remat)
        assert grad_has_remat(loss, params) == (remat != "none")
        residuals[remat] = num_saved_residuals(loss, params)
    # 'full' keeps the blocks' inputs only, 'minimal' also the projections' outputs.
    assert residuals["full"] < residuals["minimal"] < residuals["none"], residuals


def test_cached_decoding_runs_unchanged_under_remat():
    """remat only changes the backward pass; the cached decoder runs its blocks without it."""
    cfg, inputs, _, _ = _remat_setup("none")
    params = nn.meta.unbox(init(cfg, inputs, inputs))["params"]
    steps = {}
    for remat in ("none", "full"):
        model = Transformer(dataclasses.replace(cfg, remat=remat))
        encoded = model.apply({"params": params}, inputs, method=Transformer.encode)
        cache = D.init_cache(model, params, encoded, inputs, max_decode_len=4)
        step = D.make_tokens_to_logits(model, params, encoded, inputs)
        logits, cache = step(jnp.full((2, 1), BOS, jnp.int32), cache)
        steps[remat] = step(jnp.argmax(logits, -1)[:, None].astype(jnp.int32), cache)[0]
    np.testing.assert_array_equal(steps["full"], steps["none"])


def test_unknown_remat_is_rejected():
    with pytest.raises(ValueError, match=r"remat='all' is not one of \['none', 'minimal', 'full'\]"):
        tiny(remat="all")
