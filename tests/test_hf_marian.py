"""Hugging Face Marian checkpoints (models/hf_marian.py) against transformers' own
FlaxMarianMTModel, built from a small MarianConfig with random weights (nothing downloaded): a
checkpoint HF writes loads into our Transformer with teacher-forced logits within 1e-5 (in our
token numbering), with OPUS-MT's choices and others (untied, GELU, unscaled, padding in the middle
of the vocabulary, a start token other than padding, older files' tied copies and sinusoid
tables); ours exported loads into FlaxMarianMTModel with the same logits; names, shapes and
configs that differ are named."""

from __future__ import annotations

import json

import flax.linen as nn
import jax
import numpy as np
import pytest
import transformers
from flax.traverse_util import flatten_dict
from hf_loading import load_pretrained
from marian_models import (hf_config, hf_model, pytorch_name, pytorch_tensors,
                           sentences, write_hf_folder)

from models import hf_marian
from models.hf_marian import MarianIds
from models.position import sinusoidal_table
from models.safetensors_file import CheckpointError, read_safetensors
from models.transformer import PAD_ID, Transformer, TransformerConfig, with_layer_layout

VARIANTS = {
    "opus": {},
    "untied_gelu_unscaled": dict(tie_word_embeddings=False, activation_function="gelu",
                                 scale_embedding=False),
    "padding_inside_bos_start": dict(pad_token_id=5, eos_token_id=7, decoder_start_token_id=3,
                                     activation_function="relu", decoder_layers=1),
}


def teacher_forced(model, ids: MarianIds, seed=0):
    """(HF's logits, our inputs, our decoder inputs): HF fed Marian's ids, its decoder inputs
    the start token then random words."""
    config = model.config
    inputs, mask = sentences(config, 3, 9, seed)
    labels, _ = sentences(config, 3, 7, seed + 1)
    decoder_inputs = np.concatenate([np.full((3, 1), config.decoder_start_token_id),
                                     labels[:, :-1]], axis=1)
    decoder_inputs[decoder_inputs == config.pad_token_id] = config.eos_token_id
    decoder_inputs[:, 0] = config.decoder_start_token_id
    logits = model(inputs, attention_mask=mask, decoder_input_ids=decoder_inputs).logits
    return np.asarray(logits), ids.ours(inputs), ids.ours(decoder_inputs)


def test_token_renumbering():
    ids = MarianIds(vocab_size=8, pad=5, eos=7, start=3)
    np.testing.assert_array_equal(ids.ours(np.arange(8)), [1, 2, 3, 4, 5, 0, 6, 7])
    np.testing.assert_array_equal(ids.theirs(ids.ours(np.arange(8))), np.arange(8))
    assert (ids.eos_id, ids.start_id, ids.decoder_start) == (7, 4, "bos")
    opus = MarianIds(vocab_size=8, pad=7, eos=0, start=7)
    assert (opus.eos_id, opus.start_id, opus.decoder_start) == (1, PAD_ID, "pad")
    assert MarianIds.for_ours(8, eos_id=1, start_id=PAD_ID) == opus
    assert MarianIds.for_ours(8, eos_id=1, start_id=3) == MarianIds(8, 7, 0, 2)
    with pytest.raises(CheckpointError, match="eos_token_id and pad_token_id are both 7"):
        MarianIds(8, 7, 7, 7)
    with pytest.raises(CheckpointError, match="start id 8 is outside the vocabulary of 8"):
        MarianIds(8, 7, 0, 8)


def test_pytorch_tensors_are_what_transformers_reads(tmp_path):
    """The test's own HF files are right: transformers loads them back to the same params."""
    for tie in (True, False):
        model = hf_model(tie_word_embeddings=tie)
        folder = write_hf_folder(tmp_path / f"tie{tie}", model)
        loaded = load_pretrained(transformers.FlaxMarianMTModel, folder)
        for path, value in flatten_dict(model.params).items():
            np.testing.assert_array_equal(flatten_dict(loaded.params)[path], value)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_hf_checkpoint_loads_with_hf_logits(tmp_path, variant):
    model = hf_model(**VARIANTS[variant])
    tensors = pytorch_tensors(model.params)
    if variant == "padding_inside_bos_start":  # an older file: tied copies, sinusoid tables
        table = sinusoidal_table(64, 32, layout="halves")
        tensors.update({"model.encoder.embed_tokens.weight": tensors["model.shared.weight"],
                        "model.decoder.embed_tokens.weight": tensors["model.shared.weight"],
                        "lm_head.weight": tensors["model.shared.weight"],
                        "model.encoder.embed_positions.weight": table,
                        "model.decoder.embed_positions.weight": table})
    folder = write_hf_folder(tmp_path / "marian", model, tensors)
    cfg, params, ids = hf_marian.load_hf_checkpoint(folder)
    assert (cfg.sinusoid_layout, cfg.norm_epsilon, cfg.logits_bias) == ("halves", 1e-5, True)
    assert cfg.decoder_start == ("bos" if variant == "padding_inside_bos_start" else "pad")
    theirs, inputs, decoder_inputs = teacher_forced(model, ids)
    ours = Transformer(cfg).apply({"params": params}, inputs, decoder_inputs)
    # Our logits in our numbering: column ids.ours(m) holds HF's column m.
    np.testing.assert_allclose(np.asarray(ours)[..., ids.ours(np.arange(40))], theirs,
                               atol=1e-5, rtol=0)
    scan_cfg, stacked, _ = hf_marian.load_hf_checkpoint(folder, scan_layers=True)
    np.testing.assert_allclose(Transformer(scan_cfg).apply({"params": stacked}, inputs,
                                                           decoder_inputs), ours,
                               atol=1e-5, rtol=0)


def ours_marian(**changes) -> TransformerConfig:
    fields = dict(vocab_size=40, num_layers=2, d_model=32, d_ff=64, num_heads=4,
                  max_length=64, activation="swish", norm_epsilon=1e-5,
                  sinusoid_layout="halves", logits_bias=True, decoder_start="pad",
                  dropout_rate=0.1, mlp_dropout_rate=0.05)
    return TransformerConfig(**{**fields, **changes})


def random_params(cfg, seed):
    shapes = jax.eval_shape(lambda: Transformer(cfg).init(
        jax.random.PRNGKey(0), np.ones((1, 4), np.int32), np.ones((1, 4), np.int32)))
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda s: (0.2 * rng.standard_normal(s.shape)).astype(s.dtype),
                        nn.meta.unbox(shapes["params"]))


@pytest.mark.parametrize("changes", [
    dict(), dict(share_embeddings=False, tie_output=True, decoder_start="bos"),
    dict(tie_output=False, logits_bias=False, num_decoder_layers=1, scan_layers=True)],
    ids=["opus", "unshared_bos", "untied_no_bias_scanned"])
def test_exported_model_runs_in_transformers(tmp_path, changes):
    cfg = ours_marian(**changes)
    params = random_params(cfg, seed=3)
    ids = MarianIds.for_ours(40, eos_id=1, start_id=cfg.start_id(3))
    folder = hf_marian.save_hf_checkpoint(tmp_path / "ours", cfg, params, ids)
    config = json.loads((folder / "config.json").read_text())
    assert (config["architectures"], config["pad_token_id"], config["eos_token_id"]) == (
        ["MarianMTModel"], 39, 0)
    assert config["decoder_start_token_id"] == (39 if cfg.decoder_start == "pad" else 2)
    names = set(read_safetensors(folder / "model.safetensors"))
    assert names == set(hf_marian.hf_names(cfg))
    inputs, mask = sentences(hf_config(**{k: config[k] for k in (
        "pad_token_id", "eos_token_id", "decoder_start_token_id")}), 2, 8)
    start = config["decoder_start_token_id"]
    decoder_inputs = np.concatenate([np.full((2, 1), start), inputs[:, :5]], axis=1)
    decoder_inputs[decoder_inputs == 39] = 5
    decoder_inputs[:, 0] = start
    ours = np.asarray(Transformer(cfg).apply({"params": params}, ids.ours(inputs),
                                             ids.ours(decoder_inputs)))[..., ids.ours(
                                                 np.arange(40))]
    if cfg.share_embeddings:  # Flax's Marian always shares (PyTorch's reads unshared ones)
        hf = load_pretrained(transformers.FlaxMarianMTModel, folder)
        np.testing.assert_allclose(hf(inputs, attention_mask=mask,
                                      decoder_input_ids=decoder_inputs).logits, ours,
                                   atol=1e-5, rtol=0)
    # And back: export then import is the identity (a missing bias comes back as zeros).
    again_cfg, again, again_ids = hf_marian.load_hf_checkpoint(folder,
                                                               scan_layers=cfg.scan_layers)
    assert again_ids == ids and again_cfg.output_tied == cfg.output_tied
    if not cfg.logits_bias:
        assert not again["decoder"].pop("logits_bias").any()
    for got, want in zip(jax.tree.leaves(again), jax.tree.leaves(params)):
        np.testing.assert_array_equal(got, want)


def test_mismatched_tensors_are_all_named(tmp_path):
    model = hf_model()
    tensors = pytorch_tensors(model.params)
    cfg, ids = hf_marian.config_from_hf(model.config.to_dict())
    broken = dict(tensors)
    del broken["model.decoder.layers.1.fc2.bias"]
    broken["model.encoder.layers.0.self_attn.q_proj.weight"] = np.zeros((32, 16), np.float32)
    broken["model.encoder.layers.2.fc1.weight"] = np.zeros((64, 32), np.float32)
    with pytest.raises(CheckpointError) as error:
        hf_marian.params_from_hf(broken, cfg, ids)
    message = str(error.value)
    assert "1 missing, 1 unexpected, 1 mis-shaped" in message
    for line in ("missing: model.decoder.layers.1.fc2.bias",
                 "unexpected: model.encoder.layers.2.fc1.weight",
                 "wrong shape: model.encoder.layers.0.self_attn.q_proj.weight: expected "
                 "[32, 32], found [32, 16]"):
        assert line in message
    copy = {**tensors, "lm_head.weight": tensors["model.shared.weight"] + 1}
    with pytest.raises(CheckpointError, match="lm_head.weight differs from model.shared.weight"):
        hf_marian.params_from_hf(copy, cfg, ids)
    shifted = {**tensors, "model.decoder.embed_positions.weight":
               sinusoidal_table(64, 32, layout="interleaved")}
    with pytest.raises(CheckpointError, match="embed_positions.weight is not Marian's sinusoid"):
        hf_marian.params_from_hf(shifted, cfg, ids)
    params = hf_marian.params_from_hf(tensors, cfg, ids)
    del params["encoder"]["block_0"]["mlp"]["wo"]["bias"]
    with pytest.raises(CheckpointError, match="1 missing, 0 unexpected, 0 mis-shaped:\n  "
                                              "missing: encoder/block_0/mlp/wo/bias"):
        hf_marian.params_to_hf(params, cfg, ids)
    folder = write_hf_folder(tmp_path / "marian", model, broken)
    with pytest.raises(CheckpointError, match=r"model.safetensors: checkpoint tensors do not"):
        hf_marian.load_hf_checkpoint(folder)


def test_configs_that_do_not_convert_are_named():
    base = hf_config().to_dict()
    for change, message in (
            (dict(activation_function="tanh"), "activation_function='tanh'"),
            (dict(decoder_vocab_size=50), "decoder_vocab_size=50 differs from vocab_size=40"),
            (dict(decoder_ffn_dim=32), "encoder_ffn_dim=64 and decoder_ffn_dim=32 differ"),
            (dict(decoder_attention_heads=2), "encoder_attention_heads=4 and decoder_"),
            (dict(encoder_layerdrop=0.1), "encoder_layerdrop=0.1: our model has no LayerDrop"),
            (dict(normalize_before=True), "normalize_before=True: HF's MarianMTModel ignores"),
            (dict(model_type="bart"), "model_type='bart'")):
        with pytest.raises(CheckpointError, match=message):
            hf_marian.config_from_hf({**base, **change})
    with pytest.raises(CheckpointError, match=r"missing keys \['d_model'\]"):
        hf_marian.config_from_hf({k: v for k, v in base.items() if k != "d_model"})
    legacy = {**base, "normalize_before": False, "static_position_embeddings": True}
    cfg, ids = hf_marian.config_from_hf(legacy, dropout_rate=0.0)
    assert (cfg.d_ff, cfg.max_length, cfg.dropout_rate, cfg.activation) == (64, 64, 0.0, "swish")
    # Round trip of the config through config.json.
    assert hf_marian.config_from_hf(hf_marian.config_to_hf(cfg, ids)) == (cfg, ids)
    for field, value in (("sinusoid_layout", "interleaved"), ("norm_position", "pre"),
                         ("norm_epsilon", 1e-6), ("posemb", "learned"), ("num_kv_heads", 2),
                         ("activation", "gelu_tanh"), ("decoder_start", "bos")):
        if field == "activation":
            assert hf_marian.config_to_hf(ours_marian(activation=value), ids)[
                "activation_function"] == "gelu_new"
            continue
        with pytest.raises(CheckpointError, match=f"{field}="):
            hf_marian.config_to_hf(ours_marian(**{field: value}), ids)


def test_opus_mt_names_and_shapes():
    """An OPUS-MT model's full table (opus-mt-en-de's config: 58,101 tokens, 6 + 6 layers of
    width 512, swish), checked against transformers' own Flax parameter shapes (no weights
    made): the same tensors once the Flax names are read as PyTorch's."""
    opus = transformers.MarianConfig(
        vocab_size=58101, decoder_vocab_size=58101, d_model=512, encoder_layers=6,
        decoder_layers=6, encoder_attention_heads=8, decoder_attention_heads=8,
        encoder_ffn_dim=2048, decoder_ffn_dim=2048, max_position_embeddings=512,
        activation_function="swish", scale_embedding=True, pad_token_id=58100,
        decoder_start_token_id=58100, eos_token_id=0)
    cfg, ids = hf_marian.config_from_hf(opus.to_dict())
    assert (ids.eos_id, ids.start_id) == (1, PAD_ID)
    names = hf_marian.hf_names(cfg)
    shapes = transformers.FlaxMarianMTModel(opus, _do_init=False).params_shape_tree
    want = {}
    for path, shape in flatten_dict(shapes).items():
        name, transposed = pytorch_name(path)
        want[name] = tuple(shape.shape[::-1] if transposed else shape.shape)
    assert names == want and len(names) == 6 * 16 + 6 * 26 + 2
    # final_logits_bias included, the fixed sinusoid tables not.
    assert sum(int(np.prod(s)) for s in names.values()) == 73_944_309


def test_layer_layouts_convert_both_ways():
    cfg = ours_marian(num_decoder_layers=3)
    params = random_params(cfg, seed=4)
    stacked = with_layer_layout(params, scan=True)
    assert stacked["decoder"]["blocks"]["mlp"]["wi"]["kernel"].shape == (3, 32, 64)
    back = with_layer_layout(stacked, scan=False)
    for got, want in zip(jax.tree.leaves(back), jax.tree.leaves(params)):
        np.testing.assert_array_equal(got, want)
