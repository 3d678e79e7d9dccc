"""Hugging Face ViT checkpoints (models/hf_vit.py) against transformers' own Flax ViT classes,
built here from a small ViTConfig with random weights, nothing downloaded.

Import: transformers' FlaxViTForImageClassification / FlaxViTModel with random parameters are
written as a PyTorch-layout safetensors folder by transformers' naming rule (kernel -> weight,
transposed; scale -> weight), which its own `from_pretrained` must read back to the very same
parameters (so the folder is what an HF checkpoint is); ours then loads the folder and computes
their logits, last hidden state and pooled output within 1e-5. Export: our ViT, saved, loaded by
their `from_pretrained` with nothing left out or made up, computes ours."""

from __future__ import annotations

import json

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import transformers
from flax import traverse_util
from hf_loading import load_pretrained
from random_params import perturbed

from models.hf_vit import (CheckpointError, config_from_hf, hf_names, load_hf_checkpoint,
                           params_from_hf, params_to_hf, read_hf_architecture, save_hf_checkpoint)
from models.safetensors_file import read_safetensors, write_safetensors
from models.vit import ViT, ViTConfig

SIZES = dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
             image_size=12, patch_size=4, num_channels=3, num_labels=5)
IMAGES = np.random.default_rng(7).normal(size=(2, 12, 12, 3)).astype(np.float32)  # NHWC


def hf_config(**overrides) -> transformers.ViTConfig:
    return transformers.ViTConfig(**{**SIZES, **overrides})


def random_hf_model(cls, config, seed=0, **kwargs):
    """(model, its random Flax params moved off their init)."""
    model = cls(config, seed=seed, **kwargs)
    params = perturbed(jax.tree.map(np.asarray, model.params), scale=0.3, seed=seed)
    return model, params


def as_pytorch_tensors(flax_params) -> dict[str, np.ndarray]:
    """transformers' Flax <-> PyTorch naming rule: path joined by '.', a Dense 'kernel' [in, out]
    is the Linear 'weight' [out, in], a Conv 'kernel' [P, P, C, D] the Conv2d 'weight'
    [D, C, P, P], a LayerNorm 'scale' its 'weight'."""
    out = {}
    for path, value in traverse_util.flatten_dict(flax_params).items():
        value, name = np.asarray(value), ".".join(path[:-1])
        if path[-1] == "kernel":
            out[f"{name}.weight"] = value.transpose(3, 2, 0, 1) if value.ndim == 4 else value.T
        elif path[-1] == "scale":
            out[f"{name}.weight"] = value
        else:
            out[".".join(path)] = value
    return {k: np.ascontiguousarray(v) for k, v in out.items()}


def write_hf_folder(folder, config, tensors):
    config.save_pretrained(folder)
    write_safetensors(folder / "model.safetensors", tensors, metadata={"format": "pt"})
    return folder


def ours_with_features(cfg, params, images):
    """(logits, last hidden state = final_norm's output, pre-logits layer's output before tanh
    or None)."""
    logits, state = ViT(cfg).apply(
        {"params": params}, images, mutable=["intermediates"],
        capture_intermediates=lambda module, _: module.name in ("final_norm", "pre_logits"))
    found = state["intermediates"]
    pre = found["pre_logits"]["__call__"][0] if "pre_logits" in found else None
    return logits, found["final_norm"]["__call__"][0], pre


def assert_close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5, rtol=0)


# ----------------------------------------------------------------------------- names


# HF names of a 1-layer model, written out by hand from HF's module tree (modeling_vit.py).
LAYER_NAMES = [f"encoder.layer.0.{m}.{w}" for m in (
    "layernorm_before", "attention.attention.query", "attention.attention.key",
    "attention.attention.value", "attention.output.dense", "layernorm_after",
    "intermediate.dense", "output.dense") for w in ("weight", "bias")]
ENCODER_NAMES = ["embeddings.cls_token", "embeddings.position_embeddings",
                 "embeddings.patch_embeddings.projection.weight",
                 "embeddings.patch_embeddings.projection.bias", *LAYER_NAMES,
                 "layernorm.weight", "layernorm.bias"]


def test_hf_names_and_shapes_are_hfs():
    cfg = config_from_hf(hf_config(num_hidden_layers=1).to_dict())
    names = hf_names(cfg, 3, "classifier")
    assert sorted(names) == sorted(["vit." + n for n in ENCODER_NAMES]
                                   + ["classifier.weight", "classifier.bias"])
    assert names["vit.embeddings.patch_embeddings.projection.weight"] == (16, 3, 4, 4)
    assert names["vit.embeddings.position_embeddings"] == (1, 10, 16)
    assert names["vit.encoder.layer.0.attention.attention.query.weight"] == (16, 16)
    assert names["vit.encoder.layer.0.intermediate.dense.weight"] == (32, 16)
    pooled = config_from_hf(hf_config(num_hidden_layers=1).to_dict(), head_hidden_size=16)
    assert sorted(hf_names(pooled, 3, "model")) == sorted(
        ENCODER_NAMES + ["pooler.dense.weight", "pooler.dense.bias"])
    # The same names as transformers' own Flax models, by its naming rule.
    for cls, kwargs, table in ((transformers.FlaxViTForImageClassification, {},
                                hf_names(cfg, 3, "classifier")),
                               (transformers.FlaxViTModel, {}, hf_names(pooled, 3, "model"))):
        model = cls(hf_config(num_hidden_layers=1), **kwargs)
        theirs = as_pytorch_tensors(model.params)
        assert {k: v.shape for k, v in theirs.items()} == table


# ----------------------------------------------------------------------------- import


def test_import_computes_flax_vit_for_image_classification(tmp_path):
    config = hf_config(hidden_act="gelu")
    model, params = random_hf_model(transformers.FlaxViTForImageClassification, config)
    folder = write_hf_folder(tmp_path / "hf", config, as_pytorch_tensors(params))
    # The folder is an HF checkpoint: transformers reads back exactly these parameters.
    reread = load_pretrained(transformers.FlaxViTForImageClassification, folder)
    for path, value in traverse_util.flatten_dict(params).items():
        np.testing.assert_array_equal(traverse_util.flatten_dict(reread.params)[path], value)

    cfg, ours = load_hf_checkpoint(folder)
    assert (cfg.num_classes, cfg.layer_norm_eps, cfg.head_hidden_size) == (5, 1e-12, 0)
    logits = ViT(cfg).apply({"params": ours}, IMAGES)
    assert np.abs(np.asarray(logits)).max() > 0.1  # not a trivially zero comparison
    assert_close(logits, model(IMAGES.transpose(0, 3, 1, 2), params=params).logits)


@pytest.mark.parametrize("act", ["gelu_new", "relu"])
def test_import_computes_flax_vit_model_hidden_states_and_pooler(tmp_path, act):
    config = hf_config(hidden_act=act, layer_norm_eps=1e-6, pooler_output_size=8)
    model, params = random_hf_model(transformers.FlaxViTModel, config)
    folder = write_hf_folder(tmp_path / "hf", config, as_pytorch_tensors(params))
    cfg, ours = load_hf_checkpoint(folder, num_classes=3)
    assert cfg.head_hidden_size == 8 and "head" not in ours
    assert cfg.activation == {"gelu_new": "gelu_tanh", "relu": "relu"}[act]
    theirs = model(IMAGES.transpose(0, 3, 1, 2), params=params)
    # Our ViT needs a head to run: a zero one, as fine-tuning adds (models/vit_transfer.py).
    ours["head"] = {"kernel": np.zeros((8, 3), np.float32), "bias": np.zeros(3, np.float32)}
    _, hidden, pre_logits = ours_with_features(cfg, ours, IMAGES)
    assert_close(hidden, theirs.last_hidden_state)
    assert_close(jnp.tanh(pre_logits), theirs.pooler_output)


def test_import_of_the_encoder_under_its_vit_prefix_without_pooler(tmp_path):
    """A ViTModel stored with the 'vit.' prefix and no pooler (as ViTForImageClassification
    holds it): the encoder alone."""
    config = hf_config()
    model, params = random_hf_model(transformers.FlaxViTModel, config, add_pooling_layer=False)
    tensors = {"vit." + k: v for k, v in as_pytorch_tensors(params).items()}
    cfg, channels, has_head = read_hf_architecture(write_hf_folder(tmp_path / "hf", config,
                                                                   tensors))
    assert (cfg.head_hidden_size, channels, has_head) == (0, 3, False)
    ours = params_from_hf(tensors, cfg, channels=3)
    ours["head"] = {"kernel": np.zeros((16, 5), np.float32), "bias": np.zeros(5, np.float32)}
    _, hidden, _ = ours_with_features(cfg, ours, IMAGES)
    assert_close(hidden, model(IMAGES.transpose(0, 3, 1, 2), params=params).last_hidden_state)


# ----------------------------------------------------------------------------- export


def our_random_vit(**overrides):
    fields = dict(num_classes=5, image_size=(12, 12), patch_size=4, hidden_size=16, num_layers=2,
                  num_heads=2, mlp_dim=32, activation="gelu")
    cfg = ViTConfig(**{**fields, **overrides})
    shapes = jax.eval_shape(lambda: ViT(cfg).init(jax.random.PRNGKey(0), jnp.zeros((1, 12, 12, 3))))
    zeros = jax.tree.map(lambda x: np.zeros(x.shape, x.dtype), nn.meta.unbox(shapes)["params"])
    return cfg, perturbed(zeros, scale=0.3, seed=3)


# An epsilon large enough to change the logits (0.5) shows that it reaches every LayerNorm.
@pytest.mark.parametrize("activation, eps", [("gelu", 1e-12), ("gelu_tanh", 1e-6),
                                             ("relu", 0.5)])
def test_exported_vit_runs_in_transformers_flax_vit_for_image_classification(tmp_path, activation,
                                                                             eps):
    cfg, params = our_random_vit(activation=activation, layer_norm_eps=eps)
    folder = save_hf_checkpoint(tmp_path / "hf", cfg, params)
    written = json.loads((folder / "config.json").read_text())
    assert written["architectures"] == ["ViTForImageClassification"]
    hf = load_pretrained(transformers.FlaxViTForImageClassification, folder)
    assert hf.config.layer_norm_eps == eps and hf.config.num_labels == 5
    assert_close(hf(IMAGES.transpose(0, 3, 1, 2)).logits, ViT(cfg).apply({"params": params},
                                                                         IMAGES))


@pytest.mark.parametrize("head_hidden_size", [16, 8, 0])
def test_exported_encoder_runs_in_transformers_flax_vit_model(tmp_path, head_hidden_size):
    """head='model': the pre-logits layer is HF's pooler (of any width), the classifier left
    out; without a pre-logits layer HF builds ViTModel(add_pooling_layer=False)."""
    cfg, params = our_random_vit(head_hidden_size=head_hidden_size)
    if head_hidden_size:  # HF's classifier model has no pre-logits layer
        with pytest.raises(CheckpointError, match="head='model'"):
            save_hf_checkpoint(tmp_path / "hf", cfg, params)
    folder = save_hf_checkpoint(tmp_path / "hf_model", cfg, params, head="model")
    assert "classifier.weight" not in read_safetensors(folder / "model.safetensors")
    hf = load_pretrained(transformers.FlaxViTModel, folder,
                         add_pooling_layer=bool(head_hidden_size))
    theirs = hf(IMAGES.transpose(0, 3, 1, 2))
    _, hidden, pre_logits = ours_with_features(cfg, params, IMAGES)
    assert_close(theirs.last_hidden_state, hidden)
    if head_hidden_size:
        assert_close(theirs.pooler_output, jnp.tanh(pre_logits))


def test_round_trip_keeps_every_value_layout_and_dtype(tmp_path):
    cfg, params = our_random_vit(scan_layers=True)
    assert "blocks" in params
    folder = save_hf_checkpoint(tmp_path / "hf", cfg, params)
    loaded_cfg, loaded = load_hf_checkpoint(folder, scan_layers=True)
    assert loaded_cfg == cfg
    for path, value in traverse_util.flatten_dict(params).items():
        np.testing.assert_array_equal(traverse_util.flatten_dict(loaded)[path], value)
    half_cfg, half = load_hf_checkpoint(folder, param_dtype="bfloat16")
    assert half["cls"].dtype.name == "bfloat16" and "block_1" in half
    with pytest.raises(CheckpointError, match="exists and is not empty; pass overwrite=True"):
        save_hf_checkpoint(folder, cfg, params)
    save_hf_checkpoint(folder, cfg, params, overwrite=True)


# ----------------------------------------------------------------------------- strictness


def test_every_missing_unexpected_and_misshaped_tensor_is_named_in_one_error():
    cfg, params = our_random_vit()
    tensors = params_to_hf(params, cfg)
    del tensors["vit.encoder.layer.1.output.dense.bias"]
    tensors["vit.embeddings.mask_token"] = np.zeros((1, 1, 16), np.float32)
    tensors["classifier.weight"] = np.zeros((7, 16), np.float32)
    with pytest.raises(CheckpointError) as error:
        params_from_hf(tensors, cfg)
    message = str(error.value)
    assert "1 missing, 1 unexpected, 1 mis-shaped" in message
    assert "missing: vit.encoder.layer.1.output.dense.bias" in message
    assert "unexpected: vit.embeddings.mask_token" in message
    assert "wrong shape: classifier.weight: expected [5, 16], found [7, 16]" in message
    assert "num_classes=5" in message  # which model was expected


@pytest.mark.parametrize("overrides, message", [
    (dict(pool="mean"), "pool='mean' (HF ViT: 'cls')"),
    (dict(stem_channels=4), "stem_channels=4 (HF ViT: 0)"),
    (dict(posemb="sincos_2d"), "posemb='sincos_2d' (HF ViT: 'learned_1d')"),
    (dict(norm_position="post"), "norm_position='post'"),
    (dict(posemb_mode="every_layer_shared"), "posemb_mode='every_layer_shared' (HF ViT: 'stem')"),
])
def test_a_vit_hf_cannot_compute_is_refused_by_name(overrides, message):
    cfg, params = our_random_vit(**overrides)
    with pytest.raises(CheckpointError, match=rf"no HF ViT equivalent: .*{message}".replace(
            "(", r"\(").replace(")", r"\)")):
        params_to_hf(params, cfg)


@pytest.mark.parametrize("overrides, message", [
    (dict(hidden_act="silu"), "hidden_act='silu'"),
    (dict(qkv_bias=False), "qkv_bias=false"),
    (dict(model_type="deit"), "model_type='deit'"),
])
def test_an_hf_config_we_cannot_build_is_refused_by_name(overrides, message):
    config = {**hf_config().to_dict(), **overrides}
    with pytest.raises(CheckpointError, match=message):
        config_from_hf(config)
