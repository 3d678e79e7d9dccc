"""Hugging Face BERT checkpoints: names and layouts, strictness, and a tiny BERT against a NumPy
BERT written from the equations in HF's tensor layout (tests/hf_bert_checks.py). The real
all-MiniLM-L6-v2 weights: tests/test_minilm.py."""

from __future__ import annotations

import json
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hf_bert_checks import assert_trees_equal, flat, hf_numpy_bert, init_shapes
from scipy.special import erf

from models.bert import BertConfig
from models.bert_pretraining import BertForPreTraining
from models.hf_bert import (CheckpointError, config_from_hf, config_to_hf, hf_names,
                            load_hf_checkpoint, params_from_hf, params_to_hf, save_hf_checkpoint)
from models.safetensors_file import read_safetensors, safetensors_metadata

from tiny_bert import VOCAB, tiny


def random_hf(cfg: BertConfig, head: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Random float32 HF tensors (every one distinct, LayerNorm weights near 1)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in hf_names(cfg, head).items():
        x = rng.normal(scale=0.2, size=shape)
        out[name] = (x + 1.0 if "LayerNorm.weight" in name else x).astype(np.float32)
    return out


# ----------------------------------------------------------------------------------------------
# Names, layouts and the parameter tree
# ----------------------------------------------------------------------------------------------

# HF BertForPreTraining names of a 1-layer BERT, written out by hand from HF's module tree.
HF_PRETRAINING_NAMES = sorted([
    *(f"bert.embeddings.{n}" for n in ("word_embeddings.weight", "position_embeddings.weight",
                                       "token_type_embeddings.weight", "LayerNorm.weight",
                                       "LayerNorm.bias")),
    *(f"bert.encoder.layer.0.{m}.{w}" for m in (
        "attention.self.query", "attention.self.key", "attention.self.value",
        "attention.output.dense", "attention.output.LayerNorm", "intermediate.dense",
        "output.dense", "output.LayerNorm") for w in ("weight", "bias")),
    "bert.pooler.dense.weight", "bert.pooler.dense.bias",
    "cls.predictions.transform.dense.weight", "cls.predictions.transform.dense.bias",
    "cls.predictions.transform.LayerNorm.weight", "cls.predictions.transform.LayerNorm.bias",
    "cls.predictions.bias", "cls.seq_relationship.weight", "cls.seq_relationship.bias"])


def test_hf_names_and_shapes_are_hfs():
    cfg = tiny(num_layers=1)
    names = hf_names(cfg, "pretraining")
    assert sorted(names) == HF_PRETRAINING_NAMES
    # nn.Linear weights are [out, in].
    assert names["bert.encoder.layer.0.intermediate.dense.weight"] == (64, 32)
    assert names["bert.encoder.layer.0.output.dense.weight"] == (32, 64)
    assert names["bert.encoder.layer.0.attention.self.query.bias"] == (32,)
    assert names["cls.seq_relationship.weight"] == (2, 32)
    model = hf_names(cfg, "model")
    assert sorted(model) == sorted(n[len("bert."):] for n in HF_PRETRAINING_NAMES
                                   if n.startswith("bert."))
    assert "cls.seq_relationship.weight" not in hf_names(tiny(nsp=False), "pretraining")


@pytest.mark.parametrize("head, overrides", [("model", {}), ("pretraining", {}),
                                             ("pretraining", {"nsp": False})])
def test_params_tree_is_exactly_flax_init(head, overrides):
    cfg = tiny(**overrides)
    params = params_from_hf(random_hf(cfg, head), cfg)            # head='auto' finds it
    got = {path: (x.shape, x.dtype) for path, x in flat(params).items()}
    assert got == init_shapes(cfg, head)


def test_param_dtype_is_the_configs():
    cfg = tiny(param_dtype="bfloat16")
    params = params_from_hf(random_hf(cfg, "model"), cfg)
    assert {x.dtype for x in flat(params).values()} == {np.dtype(ml_dtypes.bfloat16)}
    assert {path: x.shape for path, x in flat(params).items()} == \
        {path: shape for path, (shape, _) in init_shapes(cfg, "model").items()}


def test_round_trip_of_a_random_tiny_bert_for_pretraining():
    cfg = tiny()
    ids = jnp.zeros((1, 8), jnp.int32)
    # Flax's tree (boxed leaves with logical axis names), with random values everywhere (init
    # has zero biases and unit scales, which would hide swapped tensors).
    variables = jax.eval_shape(lambda: BertForPreTraining(cfg).init(
        jax.random.PRNGKey(0), ids, masked_positions=jnp.zeros((1, 2), jnp.int32)))
    rng = np.random.default_rng(1)
    params = jax.tree.map(lambda x: rng.normal(size=x.shape).astype(np.float32),
                          nn.meta.unbox(variables)["params"])
    hf = params_to_hf(variables | {"params": params}, cfg)       # {'params': ...} accepted
    assert sorted(hf) == sorted(hf_names(cfg, "pretraining"))
    assert_trees_equal(params_from_hf(hf, cfg), jax.tree.map(np.asarray, dict(params)))
    # Boxed (logically partitioned) leaves convert the same.
    boxed = jax.tree.map(lambda box: box.replace_boxed(rng.normal(size=box.value.shape)
                                                       .astype(np.float32)),
                         variables["params"], is_leaf=lambda x: isinstance(x, nn.Partitioned))
    hf_boxed = params_to_hf(boxed, cfg)
    assert_trees_equal(params_from_hf(hf_boxed, cfg),
                       jax.tree.map(np.asarray, dict(nn.meta.unbox(boxed))))
    # And the other way: HF -> ours -> HF is the identity too.
    original = random_hf(cfg, "pretraining", seed=2)
    again = params_to_hf(params_from_hf(original, cfg), cfg)
    assert sorted(again) == sorted(original)
    for name in original:
        np.testing.assert_array_equal(again[name], original[name], err_msg=name)


def test_save_and_load_directory(tmp_path):
    cfg = tiny(dropout_rate=0.0, initializer_range=0.05)
    hf = random_hf(cfg, "pretraining")
    params = params_from_hf(hf, cfg)
    out = save_hf_checkpoint(tmp_path / "ckpt", cfg, params)
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["BertForPreTraining"]
    assert config["hidden_act"] == "gelu" and config["num_hidden_layers"] == 2
    assert config["hidden_dropout_prob"] == 0.0 and config["initializer_range"] == 0.05
    assert safetensors_metadata(out / "model.safetensors") == {"format": "pt"}
    written = read_safetensors(out / "model.safetensors")
    assert sorted(written) == sorted(hf)
    for name in hf:
        np.testing.assert_array_equal(written[name], hf[name], err_msg=name)
    cfg2, params2 = load_hf_checkpoint(out)
    assert cfg2 == cfg
    assert_trees_equal(params2, params)

    # Never over an existing non-empty directory unless asked; nothing half-written is left.
    other = tiny(num_layers=1)
    with pytest.raises(CheckpointError, match="exists and is not empty; pass overwrite=True"):
        save_hf_checkpoint(out, other, params_from_hf(random_hf(other, "model"), other))
    assert load_hf_checkpoint(out)[0] == cfg
    save_hf_checkpoint(out, other, params_from_hf(random_hf(other, "model"), other),
                       overwrite=True)
    cfg3, params3 = load_hf_checkpoint(out)
    assert cfg3 == other and "embeddings" in params3                 # a BertModel now
    assert json.loads((out / "config.json").read_text())["architectures"] == ["BertModel"]
    # Overwrite replaces a model folder only: never a training workdir or a parent of folders.
    run = tmp_path / "run"
    (run / "checkpoints" / "10").mkdir(parents=True)
    (run / "config.json").write_text("{}")
    for target in (run, run / "checkpoints"):
        with pytest.raises(CheckpointError, match="is not a model folder"):
            save_hf_checkpoint(target, cfg, params, overwrite=True)
    with pytest.raises(CheckpointError, match="config.json is a file, not a model folder"):
        save_hf_checkpoint(run / "config.json", cfg, params, overwrite=True)
    assert (run / "checkpoints" / "10").is_dir() and (run / "config.json").read_text() == "{}"
    (tmp_path / "empty").mkdir()
    save_hf_checkpoint(tmp_path / "empty", cfg, params)             # an empty folder is fine
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "empty", "run"]  # no temp
    # A pre-training checkpoint without NSP head loads with nsp=False.
    no_nsp = tiny(nsp=False)
    save_hf_checkpoint(tmp_path / "empty", no_nsp,
                       params_from_hf(random_hf(no_nsp, "pretraining"), no_nsp), overwrite=True)
    cfg4, params4 = load_hf_checkpoint(tmp_path / "empty")
    assert cfg4 == no_nsp and "seq_relationship" not in params4 and "predictions" in params4

    with pytest.raises(CheckpointError, match=r"model\.safetensors does not exist.*holds "
                                              r"\['config\.json', 'pytorch_model\.bin'\]"):
        (tmp_path / "bin").mkdir()
        (tmp_path / "bin" / "config.json").write_text(json.dumps(config))
        (tmp_path / "bin" / "pytorch_model.bin").write_bytes(b"")
        load_hf_checkpoint(tmp_path / "bin")


# ----------------------------------------------------------------------------------------------
# Strictness
# ----------------------------------------------------------------------------------------------

def test_every_missing_unexpected_and_misshaped_tensor_is_named_in_one_error():
    cfg = tiny()
    hf = random_hf(cfg, "model")
    del hf["encoder.layer.1.output.dense.bias"]
    del hf["pooler.dense.weight"]
    hf["encoder.layer.2.output.dense.bias"] = np.zeros(32, np.float32)    # a third layer?
    hf["encoder.layer.0.attention.self.key.weight"] = np.zeros((32, 31), np.float32)
    hf["embeddings.word_embeddings.weight"] = np.zeros((51, 32), np.float32)
    hf["embeddings.position_ids"] = np.arange(16)[None]                   # a buffer: ignored
    with pytest.raises(CheckpointError) as err:
        params_from_hf(hf, cfg, head="model")
    message = str(err.value)
    assert "2 missing, 1 unexpected, 2 mis-shaped" in message
    for line in ("missing: encoder.layer.1.output.dense.bias", "missing: pooler.dense.weight",
                 "unexpected: encoder.layer.2.output.dense.bias",
                 "wrong shape: encoder.layer.0.attention.self.key.weight: expected [32, 32], "
                 "found [32, 31]",
                 "wrong shape: embeddings.word_embeddings.weight: expected [50, 32], found "
                 "[51, 32]"):
        assert line in message
    assert "position_ids" not in message
    assert "vocab_size=50, hidden_size=32, num_layers=2" in message

    # Our side is as strict.
    params = params_from_hf(random_hf(cfg, "model"), cfg)
    params["pooler"]["extra"] = np.zeros(3, np.float32)
    del params["encoder"]["layer_1"]["mlp"]["wo"]["bias"]
    params["encoder"]["layer_0"]["attention"]["query"]["bias"] = np.zeros((4, 7), np.float32)
    with pytest.raises(CheckpointError) as err:
        params_to_hf(params, cfg)
    message = str(err.value)
    assert "1 missing, 1 unexpected, 1 mis-shaped" in message
    assert "missing: encoder/layer_1/mlp/wo/bias" in message
    assert "unexpected: pooler/extra" in message
    assert ("wrong shape: encoder/layer_0/attention/query/bias: expected [4, 8], found [4, 7]"
            in message)


def test_prefixes_buffers_and_tied_decoder():
    cfg = tiny()
    model = random_hf(cfg, "model")
    plain = params_from_hf(model, cfg)
    prefixed = {"bert." + k: v for k, v in model.items()}
    prefixed["bert.embeddings.position_ids"] = np.arange(16)[None]
    assert_trees_equal(params_from_hf(prefixed, cfg, head="model"), plain)
    # A pre-training checkpoint has cls.*: head='model' refuses to drop it silently.
    full = random_hf(cfg, "pretraining")
    with pytest.raises(CheckpointError, match="unexpected: cls.predictions.bias"):
        params_from_hf(full, cfg, head="model")
    # HF's .bin checkpoints also hold the tied decoder: accepted when it is the tied tensor.
    tied = dict(full, **{
        "cls.predictions.decoder.weight": full["bert.embeddings.word_embeddings.weight"],
        "cls.predictions.decoder.bias": full["cls.predictions.bias"]})
    assert_trees_equal(params_from_hf(tied, cfg), params_from_hf(full, cfg))
    # Either tied copy that differs (weight or bias alone) is an untied decoder: refused.
    for name, source in (("cls.predictions.decoder.weight", "bert.embeddings.word_embeddings"
                          ".weight"), ("cls.predictions.decoder.bias", "cls.predictions.bias")):
        untied = dict(tied, **{name: tied[name] + 1})
        with pytest.raises(CheckpointError, match=f"{name} differs from {source}: an untied "
                                                  "MLM decoder"):
            params_from_hf(untied, cfg)
    with pytest.raises(ValueError, match="head='bart' is not one of"):
        params_from_hf(full, cfg, head="bart")


def test_config_conversion():
    cfg = tiny(dropout_rate=0.2, attention_dropout_rate=0.0, layer_norm_eps=1e-6)
    hf = config_to_hf(cfg)
    assert hf["intermediate_size"] == 64 and hf["num_attention_heads"] == 4
    assert hf["hidden_act"] == "gelu" and hf["position_embedding_type"] == "absolute"
    assert config_from_hf(hf) == cfg
    assert config_from_hf(hf, dtype="bfloat16").dtype == "bfloat16"
    with pytest.raises(CheckpointError) as err:
        config_from_hf({**hf, "hidden_act": "gelu_new", "position_embedding_type": "relative_key"})
    assert "hidden_act='gelu_new'" in str(err.value) and "'relative_key'" in str(err.value)
    with pytest.raises(CheckpointError, match=r"missing keys \['hidden_size', 'layer_norm_eps'\]"):
        config_from_hf({k: v for k, v in hf.items() if k not in ("hidden_size", "layer_norm_eps")})
    with pytest.raises(CheckpointError, match="model_type='roberta'"):
        config_from_hf({**hf, "model_type": "roberta"})
    with pytest.raises(CheckpointError, match="num_heads=5 does not divide hidden_size=32"):
        config_from_hf({**hf, "num_attention_heads": 5})
    with pytest.raises(CheckpointError, match="posemb='rope' has no HF BERT equivalent"):
        config_to_hf(tiny(posemb="rope"))


def test_tiny_bert_for_pretraining_matches_the_numpy_bert_on_hf_tensors():
    """Every head of BertForPreTraining, loaded from HF tensors, computes what HF's layout says."""
    cfg = tiny()
    hf = random_hf(cfg, "pretraining", seed=3)
    rng = np.random.default_rng(4)
    ids = rng.integers(0, VOCAB, size=(2, 9)).astype(np.int32)
    types = (np.arange(9) >= 4).astype(np.int32)[None].repeat(2, 0)
    mask = np.ones((2, 9), np.int32)
    mask[1, 6:] = 0
    positions = np.array([[1, 3, 8], [0, 2, 5]], np.int32)
    out = jax.jit(BertForPreTraining(cfg).apply)(
        {"params": params_from_hf(hf, cfg)}, ids, types, mask, masked_positions=positions)
    seq, pooled = hf_numpy_bert(hf, ids, types, mask, heads=cfg.num_heads,
                                eps=cfg.layer_norm_eps, prefix="bert.")

    def w(name):
        return hf[name].astype(np.float64)

    # MLM head (BERT App. A.1): LayerNorm(GELU(dense(h))) at the masked positions, scored
    # against the word embeddings (tied) plus a bias; NSP: a dense layer on the pooled output.
    t = "cls.predictions.transform."
    h = np.take_along_axis(seq, positions[..., None], axis=1)
    h = h @ w(t + "dense.weight").T + w(t + "dense.bias")
    h = 0.5 * h * (1.0 + erf(h / math.sqrt(2.0)))
    h = ((h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + cfg.layer_norm_eps)
         * w(t + "LayerNorm.weight") + w(t + "LayerNorm.bias"))
    mlm = h @ w("bert.embeddings.word_embeddings.weight").T + w("cls.predictions.bias")  # tied
    nsp = pooled @ w("cls.seq_relationship.weight").T + w("cls.seq_relationship.bias")
    np.testing.assert_allclose(out["mlm_logits"], mlm, atol=2e-5, rtol=1e-5)
    np.testing.assert_allclose(out["nsp_logits"], nsp, atol=2e-5, rtol=1e-5)


