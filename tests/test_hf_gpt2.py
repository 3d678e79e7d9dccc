"""Hugging Face GPT-2 checkpoints (models/hf_gpt2.py) against transformers' own Flax GPT-2, built
from a small GPT2Config with random weights (nothing downloaded): a checkpoint HF writes loads
into our DecoderLM with its logits within 1e-5, under both naming schemes (GPT2LMHeadModel's
'transformer.' prefix and GPT2Model's bare names), with HF's old mask buffers and its tied
lm_head copy; ours exported loads into FlaxGPT2LMHeadModel with the same logits, its config.json
naming the vocabulary's EOS; the name, shape and config checks name what differs."""

from __future__ import annotations

import json
import re

import jax
import numpy as np
import pytest
import transformers
from flax.traverse_util import flatten_dict
from hf_loading import load_pretrained
from random_params import perturbed

from data.vocab.bpe import EOS_ID
from models import hf_gpt2
from models.decoder_lm import DecoderLM, with_layer_layout
from models.hf_folder import write_folder as write_checkpoint
from models.safetensors_file import CheckpointError, read_safetensors

from tiny_lm import random_params, tiny

HF_CONFIG = dict(vocab_size=50, n_positions=16, n_embd=32, n_layer=2, n_head=4,
                 activation_function="gelu_new", layer_norm_epsilon=1e-5)


def hf_model(tie: bool = True, seed: int = 0):
    """FlaxGPT2LMHeadModel with random weights, every parameter moved off its init (zero biases
    and unit norm scales would hide a swapped tensor)."""
    model = transformers.FlaxGPT2LMHeadModel(
        transformers.GPT2Config(**HF_CONFIG, tie_word_embeddings=tie), seed=seed)
    model.params = perturbed(model.params, scale=0.1, seed=seed + 1)
    return model


def pytorch_name(flax_path) -> tuple[str, bool]:
    """(HF's PyTorch name, whether the tensor is transposed) of a Flax GPT-2 parameter path:
    transformers' own PyTorch -> Flax renaming read backwards ('weight' is a kernel transposed,
    a LayerNorm scale or an embedding), the path joined with dots. Independent of
    models/hf_gpt2.py's table."""
    *module, leaf = flax_path
    return ".".join((*module, "bias" if leaf == "bias" else "weight")), leaf == "kernel"


def pytorch_tensors(flax_params) -> dict[str, np.ndarray]:
    """A Flax GPT-2's params in HF's PyTorch names and layout (``pytorch_name``)."""
    out = {}
    for path, value in flatten_dict(flax_params).items():
        name, transposed = pytorch_name(path)
        out[name] = np.asarray(value).T if transposed else np.asarray(value)
    return out


def write_hf_folder(folder, model, tensors):
    return write_checkpoint(folder, model.config.to_dict(), tensors)


def ids():
    return np.random.default_rng(2).integers(0, HF_CONFIG["vocab_size"], (2, 11)).astype(np.int32)


def test_pytorch_tensors_are_what_transformers_reads(tmp_path):
    """The test's own HF files are right: transformers loads them back to the same params."""
    for tie in (True, False):
        model = hf_model(tie)
        folder = write_hf_folder(tmp_path / f"tie{tie}", model, pytorch_tensors(model.params))
        loaded = load_pretrained(transformers.FlaxGPT2LMHeadModel, folder)
        for path, value in flatten_dict(model.params).items():
            np.testing.assert_array_equal(flatten_dict(loaded.params)[path], value)


@pytest.mark.parametrize("variant", ["lm_head_model", "model_names_with_buffers", "untied"])
def test_hf_checkpoint_loads_with_hf_logits(tmp_path, variant):
    model = hf_model(tie=variant != "untied")
    tensors = pytorch_tensors(model.params)
    if variant == "model_names_with_buffers":   # GPT2Model / the hub's gpt2 file
        tensors = {k.removeprefix("transformer."): v for k, v in tensors.items()}
        mask = np.tril(np.ones((16, 16), bool))[None, None]
        for i in range(2):
            tensors[f"h.{i}.attn.bias"] = mask
            tensors[f"h.{i}.attn.masked_bias"] = np.array(-1e4, np.float32)
        tensors["lm_head.weight"] = tensors["wte.weight"]     # a tied copy, as .bin files hold
    folder = write_hf_folder(tmp_path / "gpt2", model, tensors)
    cfg, params = hf_gpt2.load_hf_checkpoint(folder)
    assert cfg.tie_embeddings == (variant != "untied") and cfg.activation == "gelu_tanh"
    ours = DecoderLM(cfg).apply({"params": params}, ids())
    theirs = model(ids()).logits
    np.testing.assert_allclose(ours, theirs, atol=1e-5, rtol=0)
    # The scanned layout loads the same weights stacked.
    scan_cfg, stacked = hf_gpt2.load_hf_checkpoint(folder, scan_layers=True)
    np.testing.assert_allclose(DecoderLM(scan_cfg).apply({"params": stacked}, ids()), theirs,
                               atol=1e-5, rtol=0)


@pytest.mark.parametrize("tie", [True, False])
def test_exported_model_runs_in_transformers(tmp_path, tie):
    cfg = tiny(vocab_size=50, max_length=16, posemb="learned", tie_embeddings=tie,
               dropout_rate=0.1, attention_dropout_rate=0.1, scan_layers=True)
    params = with_layer_layout(random_params(cfg, seed=3, scale=0.1), scan=True)
    folder = hf_gpt2.save_hf_checkpoint(tmp_path / "ours", cfg, params, eos_id=EOS_ID)
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["GPT2LMHeadModel"]
    assert ("lm_head.weight" in read_safetensors(folder / "model.safetensors")) == (not tie)
    hf = load_pretrained(transformers.FlaxGPT2LMHeadModel, folder)
    assert (hf.config.n_embd, hf.config.n_inner, hf.config.tie_word_embeddings) == (32, 64, tie)
    ours = DecoderLM(cfg).apply({"params": params}, ids())
    np.testing.assert_allclose(hf(ids()).logits, ours, atol=1e-5, rtol=0)
    # And back: export then import is the identity (in either layout).
    _, again = hf_gpt2.load_hf_checkpoint(folder, scan_layers=True)
    for got, want in zip(jax.tree.leaves(again), jax.tree.leaves(params)):
        np.testing.assert_array_equal(got, want)


def test_the_export_names_the_vocabularys_eos_for_hf_generate(tmp_path):
    """config.json's bos and eos ids are the vocabulary's EOS (ours: data/vocab/bpe.py EOS_ID,
    which begins every document), not HF's default 50256, an id a small vocabulary lacks."""
    cfg = tiny(vocab_size=50, max_length=16, posemb="learned")
    folder = hf_gpt2.save_hf_checkpoint(tmp_path / "ours", cfg, random_params(cfg),
                                        eos_id=EOS_ID)
    config = json.loads((folder / "config.json").read_text())
    assert (config["bos_token_id"], config["eos_token_id"]) == (EOS_ID, EOS_ID)
    hf = transformers.GPT2Config.from_pretrained(folder)
    assert (hf.bos_token_id, hf.eos_token_id) == (EOS_ID, EOS_ID)
    # Unknown: refused for a vocabulary without id 50256, GPT-2's own id for one that has it.
    with pytest.raises(CheckpointError, match=re.escape(
            "no eos_id for a vocabulary of 50 tokens: HF's default EOS id 50256 (GPT-2's "
            "'<|endoftext|>') is not one of them, and HF generate would never stop; pass "
            "eos_id=the EOS id of the tokenizer the model was trained with")):
        hf_gpt2.save_hf_checkpoint(tmp_path / "bad", cfg, random_params(cfg))
    gpt2 = hf_gpt2.config_from_hf(transformers.GPT2Config().to_dict())
    assert hf_gpt2.config_to_hf(gpt2)["eos_token_id"] == 50256
    for bad in (50, -1, 50256, 1.0, True):
        with pytest.raises(CheckpointError, match=re.escape(
                f"eos_id={bad!r} is not an id of this model's vocabulary (0..49): pass the EOS "
                "id of the tokenizer it was trained with")):
            hf_gpt2.save_hf_checkpoint(tmp_path / "bad", cfg, random_params(cfg), eos_id=bad)
    assert not (tmp_path / "bad").exists()


def test_mismatched_tensors_are_all_named(tmp_path):
    model = hf_model()
    tensors = pytorch_tensors(model.params)
    cfg = hf_gpt2.config_from_hf(model.config.to_dict())
    broken = dict(tensors)
    del broken["transformer.h.1.mlp.c_fc.bias"]
    broken["transformer.h.0.attn.c_attn.weight"] = np.zeros((32, 64), np.float32)
    broken["transformer.h.2.ln_1.weight"] = np.zeros(32, np.float32)
    broken["h.0.ln_1.weight"] = np.zeros(32, np.float32)     # a name without the prefix
    with pytest.raises(CheckpointError) as error:
        hf_gpt2.params_from_hf(broken, cfg)
    message = str(error.value)
    assert "1 missing, 2 unexpected, 1 mis-shaped" in message
    for line in ("missing: transformer.h.1.mlp.c_fc.bias", "unexpected: h.0.ln_1.weight",
                 "unexpected: transformer.h.2.ln_1.weight",
                 "wrong shape: transformer.h.0.attn.c_attn.weight: expected [32, 96], "
                 "found [32, 64]"):
        assert line in message
    untied_head = {**tensors, "lm_head.weight": tensors["transformer.wte.weight"] + 1}
    with pytest.raises(CheckpointError, match="lm_head.weight differs from transformer.wte"):
        hf_gpt2.params_from_hf(untied_head, cfg)
    params = hf_gpt2.params_from_hf(tensors, cfg)
    del params["block_0"]["mlp"]["wo"]["bias"]
    with pytest.raises(CheckpointError, match="1 missing, 0 unexpected, 0 mis-shaped:\n  "
                                              "missing: block_0/mlp/wo/bias"):
        hf_gpt2.params_to_hf(params, cfg)
    folder = write_hf_folder(tmp_path / "gpt2", model, broken)
    with pytest.raises(CheckpointError, match=r"model.safetensors: checkpoint tensors do not"):
        hf_gpt2.load_hf_checkpoint(folder)


def test_configs_that_do_not_convert_are_named():
    base = transformers.GPT2Config(**HF_CONFIG).to_dict()
    for change, message in ((dict(activation_function="swish"), "activation_function='swish'"),
                            (dict(scale_attn_by_inverse_layer_idx=True),
                             "scale_attn_by_inverse_layer_idx=True"),
                            (dict(scale_attn_weights=False), "scale_attn_weights=False"),
                            (dict(add_cross_attention=True), "add_cross_attention=True"),
                            (dict(model_type="bert"), "model_type='bert'"),
                            (dict(embd_pdrop=0.0), "embd_pdrop=0.0 and resid_pdrop=0.1 differ")):
        with pytest.raises(CheckpointError, match=message):
            hf_gpt2.config_from_hf({**base, **change})
    with pytest.raises(CheckpointError, match=r"missing keys \['n_layer'\]"):
        hf_gpt2.config_from_hf({k: v for k, v in base.items() if k != "n_layer"})
    cfg = hf_gpt2.config_from_hf({**base, "embd_pdrop": 0.0}, dropout_rate=0.0)
    assert (cfg.d_ff, cfg.max_length, cfg.dropout_rate) == (128, 16, 0.0)
    # Round trip of the config through config.json.
    assert hf_gpt2.config_from_hf(hf_gpt2.config_to_hf(cfg, EOS_ID)) == cfg
    for field, value in (("posemb", "rope"), ("norm_position", "post"), ("num_kv_heads", 2),
                         ("norm", "rmsnorm"), ("scale_embeddings", True)):
        with pytest.raises(CheckpointError, match=f"{field}="):
            hf_gpt2.config_to_hf(tiny(**{field: value}))


def test_gpt2_small_names_and_shapes():
    """GPT-2 small's full table, checked against transformers' own Flax parameter shapes
    (no weights made): the same tensors once the Flax names are read as PyTorch's."""
    cfg = hf_gpt2.config_from_hf(transformers.GPT2Config().to_dict())
    names = hf_gpt2.hf_names(cfg)
    shapes = transformers.FlaxGPT2LMHeadModel(transformers.GPT2Config(),
                                              _do_init=False).params_shape_tree
    want = {}
    for path, shape in flatten_dict(shapes).items():
        name, transposed = pytorch_name(path)
        want[name] = tuple(shape.shape[::-1] if transposed else shape.shape)
    assert names == want and len(names) == 148
    assert sum(int(np.prod(s)) for s in names.values()) == 124_439_808
