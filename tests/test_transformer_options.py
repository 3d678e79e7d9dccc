"""The encoder-decoder's options for what Marian (the OPUS-MT models) does otherwise: the
output layer tied apart from the shared embeddings, a bias on the logits, the decoder started
from the padding token, the feed-forward's own hidden dropout, the 'halves' sinusoid layout.
Each is checked against its formula on the model's own parameters (the HF parity of all of them
together is tests/test_hf_marian.py)."""

from __future__ import annotations

import flax.linen as nn
import jax
import numpy as np
import pytest
from dropout_sites import dropout_sites

from models import decode as D
from models.position import sinusoidal_table
from models.transformer import PAD_ID, Transformer, TransformerConfig, shift_right

from tiny_transformer import BOS, VOCAB, init, tiny, words


def _hidden_and_logits(cfg, variables, inputs, targets):
    """The decoder's last hidden state (post-LN: its last block's output) and the logits."""
    logits, state = Transformer(cfg).apply(variables, inputs, targets,
                                           capture_intermediates=True)
    hidden = state["intermediates"]["decoder"][f"block_{cfg.num_layers - 1}"]["__call__"][0]
    return np.asarray(hidden, np.float64), np.asarray(logits, np.float64)


@pytest.mark.parametrize("share, tie", [(True, False), (False, True), (True, None),
                                        (False, None)])
def test_output_tied_apart_from_shared_embeddings(share, tie):
    """share_embeddings: one table for both stacks' inputs; tie_output: the decoder's input
    table is the output layer (None: as share_embeddings), else a 'logits' kernel of its own."""
    rng = np.random.default_rng(0)
    cfg = tiny(share_embeddings=share, tie_output=tie)
    inputs, targets = words(rng, 2, 5), words(rng, 2, 6)
    variables = init(cfg, inputs, targets)
    params = nn.meta.unbox(variables["params"])
    tied = share if tie is None else tie
    assert cfg.output_tied == tied
    assert ("shared_embedding" in params) == share
    assert ("embedding" in params["decoder"]) == ("embedding" in params["encoder"]) == (not share)
    assert ("logits" in params["decoder"]) == (not tied)
    hidden, logits = _hidden_and_logits(cfg, variables, inputs, targets)
    if tied:
        table = (params["shared_embedding"] if share else params["decoder"]["embedding"])[
            "embedding"]
        want = hidden @ np.asarray(table, np.float64).T
    else:
        want = hidden @ np.asarray(params["decoder"]["logits"]["kernel"], np.float64)
    np.testing.assert_allclose(logits, want, rtol=1e-4, atol=1e-4)


def test_logits_bias_is_added_to_every_position():
    rng = np.random.default_rng(1)
    cfg = tiny(logits_bias=True)
    inputs, targets = words(rng, 2, 5), words(rng, 2, 6)
    variables = init(cfg, inputs, targets)
    params = nn.meta.unbox(variables["params"])
    bias = np.asarray(params["decoder"]["logits_bias"], np.float64)
    assert bias.shape == (VOCAB,) and np.abs(bias).max() > 0.1
    hidden, logits = _hidden_and_logits(cfg, variables, inputs, targets)
    table = np.asarray(params["shared_embedding"]["embedding"], np.float64)
    np.testing.assert_allclose(logits, hidden @ table.T + bias, rtol=1e-4, atol=1e-4)
    axes = nn.get_partition_spec(variables)["params"]["decoder"]["logits_bias"]
    assert tuple(axes) == ("vocab",)


def test_decoder_started_from_the_padding_row():
    """decoder_start='pad' (Marian): the first decoder input is PAD_ID, embedded with its row and
    attended to like any token. The same model with a BOS whose row equals the padding row and
    decoder_start='bos' computes the same logits; right padding and packing change nothing at
    the real positions, since masking is by position there."""
    rng = np.random.default_rng(2)
    cfg = tiny(decoder_start="pad", sinusoid_layout="halves")
    inputs, labels = words(rng, 2, 5), words(rng, 2, 6)
    labels[1, 4:] = PAD_ID
    variables = init(cfg, inputs, labels)
    model = Transformer(cfg)
    pad_start = shift_right(labels, cfg.start_id(BOS), decoder_start="pad")
    assert cfg.start_id(BOS) == PAD_ID and (np.asarray(pad_start)[:, 0] == PAD_ID).all()
    logits = np.asarray(model.apply(variables, inputs, pad_start))

    params = nn.meta.unbox(variables["params"])
    table = np.asarray(params["shared_embedding"]["embedding"]).copy()
    table[BOS] = table[PAD_ID]
    bos_cfg = tiny(decoder_start="bos", sinusoid_layout="halves")
    bos_params = {**params, "shared_embedding": {"embedding": table}}
    bos_logits = Transformer(bos_cfg).apply({"params": bos_params}, inputs,
                                            shift_right(labels, BOS))
    others = np.arange(VOCAB) != BOS  # the tied output's BOS column holds the changed row
    np.testing.assert_allclose(logits[0][:, others], bos_logits[0][:, others], atol=2e-5)
    np.testing.assert_allclose(logits[1, :4][:, others], bos_logits[1, :4][:, others], atol=2e-5)
    # Unmasked by id, the start is seen: the 'bos' model fed PAD_ID first computes otherwise.
    masked = Transformer(bos_cfg).apply({"params": bos_params}, inputs, pad_start)
    assert not np.allclose(masked[0], logits[0], atol=1e-3)

    # Row 1 alone (no padding) and packed after row 0: the same logits at its real positions.
    alone = model.apply(variables, inputs[1:], pad_start[1:, :4])
    np.testing.assert_allclose(alone[0], logits[1, :4], atol=2e-5)
    packed_targets = np.concatenate([pad_start[0], pad_start[1, :4]])[None]
    packed = model.apply(
        variables, inputs.reshape(1, -1), packed_targets,
        inputs_segmentation=np.array([[1] * 5 + [2] * 5]),
        inputs_positions=np.array([list(range(5)) * 2]),
        targets_segmentation=np.array([[1] * 6 + [2] * 4]),
        targets_positions=np.array([list(range(6)) + list(range(4))]))
    np.testing.assert_allclose(packed[0, :6], logits[0], atol=2e-5)
    np.testing.assert_allclose(packed[0, 6:], logits[1, :4], atol=2e-5)


def test_start_token_must_suit_the_decoder():
    labels = np.array([[5, 6, 1]])
    with pytest.raises(ValueError, match="needs bos_id=0"):
        shift_right(labels, BOS, decoder_start="pad")
    with pytest.raises(ValueError, match="bos_id other than the padding id 0"):
        shift_right(labels, PAD_ID)
    np.testing.assert_array_equal(shift_right(labels, PAD_ID, decoder_start="pad"), [[0, 5, 6]])
    cfg = tiny(decoder_start="pad")
    inputs = words(np.random.default_rng(3), 1, 4)
    variables = init(cfg, inputs, labels)
    with pytest.raises(ValueError, match="pass model.config.start_id"):
        D.predict(Transformer(cfg), variables["params"], inputs, beam_size=1, max_decode_len=3,
                  eos_id=1, bos_id=BOS)
    with pytest.raises(ValueError, match="decoder_start='first' is not one of"):
        tiny(decoder_start="first")
    with pytest.raises(ValueError, match="sinusoid_layout='split' is not one of"):
        tiny(sinusoid_layout="split")
    with pytest.raises(ValueError, match="mlp_dropout_rate=1.0 must be in"):
        tiny(mlp_dropout_rate=1.0)


def test_halves_sinusoids_enter_the_encoder():
    """Encoder input = E[x] * sqrt(d_model) + PE with the 'halves' table (a 0-layer encoder)."""
    rng = np.random.default_rng(4)
    cfg = tiny(num_encoder_layers=0, sinusoid_layout="halves")
    inputs, targets = words(rng, 1, 6), words(rng, 1, 3)
    variables = init(cfg, inputs, targets)
    encoded = Transformer(cfg).apply(variables, inputs, method=Transformer.encode)
    table = np.asarray(nn.meta.unbox(variables["params"])["shared_embedding"]["embedding"])
    pos = np.arange(6)[:, None]
    w = 10000.0 ** (-np.arange(0, 32, 2) / 32)
    pe = np.concatenate([np.sin(pos * w), np.cos(pos * w)], axis=1)
    np.testing.assert_allclose(encoded[0], table[inputs[0]] * np.sqrt(32) + pe, atol=1e-5)
    assert not np.allclose(pe, sinusoidal_table(6, 32), atol=1e-3)


def test_feed_forward_hidden_units_have_their_own_rate():
    """mlp_dropout_rate (Marian's activation_dropout) drops the feed-forward's hidden units; the
    other sites keep dropout_rate."""
    rng = np.random.default_rng(5)
    cfg = TransformerConfig(vocab_size=VOCAB, num_layers=1, d_model=16, d_ff=32, num_heads=2,
                            dropout_rate=0.1, mlp_dropout_rate=0.3, max_length=16)
    inputs, targets = words(rng, 1, 4), words(rng, 1, 5)
    model = Transformer(cfg)
    variables = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), inputs, targets))
    sites = dict(dropout_sites(lambda: jax.eval_shape(
        lambda v: model.apply(v, inputs, targets, train=True,
                              rngs={"dropout": jax.random.PRNGKey(1)}), variables)))
    assert sites["encoder/block_0/mlp/Dropout_0"] == sites["decoder/block_0/mlp/Dropout_0"] == 0.3
    assert sites["encoder/block_0/Dropout_1"] == sites["decoder/Dropout_0"] == 0.1
