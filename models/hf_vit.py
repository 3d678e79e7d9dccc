"""Hugging Face ViT checkpoints in and out: config.json, safetensors, parameter names.

    cfg, params = load_hf_checkpoint("path/to/hf_vit_dir")   # config.json + model.safetensors
    logits = ViT(cfg).apply({"params": params}, images)      # images [b, H, W, C], NHWC
    save_hf_checkpoint("out_dir", cfg, params)               # HF ViTForImageClassification

Two HF classes, told apart by their tensors:
  ViTForImageClassification  ``vit.*`` (the encoder, no pooler) + ``classifier.*``: our ViT with
                             pool='cls', head_hidden_size=0; the classifier is our ``head``.
  ViTModel                   the encoder with or without the ``vit.`` prefix, and (as HF saves it
                             by default) ``pooler.dense.*``, a tanh layer on the class token's
                             output: our ``pre_logits`` (head_hidden_size = its width). It has no
                             classifier: the params come without ``head`` and cfg.num_classes is
                             config.json's num_labels; fine-tuning adds a new head
                             (models/vit_transfer.py).

What the published models do differently from ours, and where it goes:
  patch embedding   HF: a conv weight [D, C, P, P] on NCHW pixels; ours: a Dense over each patch
                    flattened in (row, column, channel) order ([P * P * C, D], models/vit.py eq.
                    1): the 'oihw' entry of models/param_tables.py.
  position table    HF [1, 1 + N, D], the class token's row first, as ours [1 + N, D].
  LayerNorm eps     HF's default 1e-12 (the paper's code: 1e-6): ViTConfig.layer_norm_eps.
  attention         HF's query/key/value/output Linear weights [D, D], ours per head [D, n, d]
                    and [n, d, D]: the 'T' entries with their [n * d, D] / [D, n * d] shapes.
  activation        hidden_act 'gelu' (exact, erf) <-> our 'gelu', 'gelu_pytorch_tanh' /
                    'gelu_new' <-> 'gelu_tanh', 'relu' <-> 'relu'.
Only what both compute converts: learned 1-D positions with a class token (HF has no mean
pooling), pre-LN LayerNorm blocks, no hybrid stem, q/k/v biases (qkv_bias=true), a tanh pooler.
HF's Flax ViT takes square images only (an int image_size); a non-square model is written with
image_size [H, W], which HF's PyTorch ViT reads.

Strict as models/hf_bert.py: one CheckpointError lists every missing, unexpected and mis-shaped
tensor. Pure NumPy (plus our ViTConfig): it never imports train or data.
"""

from __future__ import annotations

import os
import pathlib
from typing import Any, Mapping

import numpy as np

from models.hf_folder import WEIGHTS_FILE, read_config_json, require_files, write_folder
from models.param_tables import (Entry, Table, numpy_dtype, tensors_from_tree,
                                 tree_from_tensors, unboxed)
from models.safetensors_file import CheckpointError, read_safetensors, safetensors_shapes
from models.vit import ViTConfig
from models.vit_transfer import HEAD, PRE_LOGITS, input_channels, with_layer_layout

HEADS = ("auto", "model", "classifier")
VIT_PREFIX = "vit."
CLASSIFIER = "classifier.weight"
POOLER = "pooler.dense.weight"
# HF hidden_act -> our activation; export writes the first of each.
_ACTIVATIONS = {"gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh", "gelu_new": "gelu_tanh",
                "relu": "relu"}
_EXPORT_ACTIVATIONS = {"gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh", "relu": "relu"}
# HF ViTConfig key -> our ViTConfig field: required in config.json.
_CONFIG_KEYS = {"hidden_size": "hidden_size", "num_hidden_layers": "num_layers",
                "num_attention_heads": "num_heads", "intermediate_size": "mlp_dim",
                "patch_size": "patch_size"}
# Optional (HF's defaults when absent; ours for the training settings).
_OPTIONAL_KEYS = {"hidden_dropout_prob": "dropout_rate",
                  "attention_probs_dropout_prob": "attention_dropout_rate"}
HF_LAYER_NORM_EPS = 1e-12  # HF ViTConfig's default


# ----------------------------------------------------------------------------- config.json


def config_from_hf(config_json: Mapping[str, Any], **overrides) -> ViTConfig:
    """Our ViTConfig from an HF ViT ``config.json`` dict; ``overrides`` set other fields
    (``head_hidden_size``, which the tensors decide, ``num_classes``, ``dtype``, ...).
    CheckpointError naming every missing key and every setting our ViT does not compute."""
    problems = []
    model_type = config_json.get("model_type", "vit")
    if model_type != "vit":
        problems.append(f"model_type={model_type!r}: only 'vit' checkpoints convert")
    missing = [k for k in (*_CONFIG_KEYS, "image_size") if k not in config_json]
    if missing:
        problems.append(f"missing keys {missing}")
    act = config_json.get("hidden_act", "gelu")
    if act not in _ACTIVATIONS:
        problems.append(f"hidden_act={act!r}: our ViT computes {sorted(_ACTIVATIONS)}")
    if not config_json.get("qkv_bias", True):
        problems.append("qkv_bias=false: our attention always has query/key/value biases")
    if config_json.get("pooler_act", "tanh") != "tanh":
        problems.append(f"pooler_act={config_json['pooler_act']!r}: our pre-logits layer is tanh")
    if problems:
        raise CheckpointError("HF config does not describe a ViT we can build: "
                              + "; ".join(problems))
    size = config_json["image_size"]
    fields = {ours: config_json[hf] for hf, ours in _CONFIG_KEYS.items()}
    fields.update({ours: config_json[hf] for hf, ours in _OPTIONAL_KEYS.items()
                   if config_json.get(hf) is not None})
    labels = config_json.get("id2label")
    fields.update(
        image_size=(size, size) if isinstance(size, int) else tuple(size),
        activation=_ACTIVATIONS[act],
        layer_norm_eps=config_json.get("layer_norm_eps", HF_LAYER_NORM_EPS),
        num_classes=len(labels) if labels else config_json.get("num_labels", 2),
        posemb="learned_1d", pool="cls", stem_channels=0, norm="layernorm", norm_position="pre")
    fields.update(overrides)
    try:
        return ViTConfig(**fields)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"HF config gives an invalid ViTConfig: {e}") from e


def _check_convertible(cfg: ViTConfig) -> None:
    wanted = {"posemb": "learned_1d", "posemb_mode": "stem", "pool": "cls", "stem_channels": 0,
              "norm": "layernorm",
              "norm_position": "pre", "distill_token": False}
    differ = [f"{k}={getattr(cfg, k)!r} (HF ViT: {v!r})" for k, v in wanted.items()
              if getattr(cfg, k) != v]
    if cfg.activation not in _EXPORT_ACTIVATIONS:
        differ.append(f"activation={cfg.activation!r} (HF ViT: {sorted(_EXPORT_ACTIVATIONS)})")
    if differ:
        raise CheckpointError("this ViT has no HF ViT equivalent: " + ", ".join(differ))


def config_to_hf(cfg: ViTConfig, channels: int, head: str) -> dict[str, Any]:
    """The HF ViT ``config.json`` dict of ``cfg`` reading ``channels``-channel images, for HF
    ``head`` 'classifier' (ViTForImageClassification) or 'model' (ViTModel)."""
    _check_convertible(cfg)
    height, width = cfg.image_size
    out: dict[str, Any] = {
        "model_type": "vit",
        "architectures": ["ViTForImageClassification" if head == "classifier" else "ViTModel"],
        "hidden_act": _EXPORT_ACTIVATIONS[cfg.activation], "qkv_bias": True,
        "image_size": height if height == width else [height, width],
        "num_channels": channels, "layer_norm_eps": cfg.layer_norm_eps,
        "encoder_stride": cfg.patch_size, "initializer_range": 0.02,
        "id2label": {str(i): f"LABEL_{i}" for i in range(cfg.num_classes)},
        "label2id": {f"LABEL_{i}": i for i in range(cfg.num_classes)}}
    out.update({hf: getattr(cfg, ours) for hf, ours in {**_CONFIG_KEYS, **_OPTIONAL_KEYS}.items()})
    if cfg.head_hidden_size:
        out.update(pooler_output_size=cfg.head_hidden_size, pooler_act="tanh")
    return dict(sorted(out.items()))


# ----------------------------------------------------------------------------- parameter names


def _mapping(cfg: ViTConfig, channels: int, head: str) -> list[Entry]:
    """Our ViT's parameters and HF's names for them: ViTModel names (head 'model', the pooler
    when cfg.head_hidden_size) or ViTForImageClassification names (head 'classifier')."""
    _check_convertible(cfg)
    D, F, P, C = cfg.hidden_size, cfg.mlp_dim, cfg.patch_size, channels
    n, d = cfg.num_heads, cfg.hidden_size // cfg.num_heads
    tokens = cfg.num_prefix_tokens + cfg.grid[0] * cfg.grid[1]
    entries = Table()
    add, dense = entries.add, entries.dense

    def norm(path, hf):
        add(f"{path}/scale", f"{hf}.weight", (D,))
        add(f"{path}/bias", f"{hf}.bias", (D,))

    add("cls", "embeddings.cls_token", (1, 1, D))
    add("posemb/embedding", "embeddings.position_embeddings", (tokens, D), "=", (1, tokens, D))
    add("patch_embedding/kernel", "embeddings.patch_embeddings.projection.weight",
        (P * P * C, D), "oihw", (D, C, P, P))
    add("patch_embedding/bias", "embeddings.patch_embeddings.projection.bias", (D,))
    for i in range(cfg.num_layers):
        ours, hf = f"block_{i}", f"encoder.layer.{i}"
        norm(f"{ours}/norm_attention", f"{hf}.layernorm_before")
        for proj in ("query", "key", "value"):
            add(f"{ours}/attention/{proj}/kernel", f"{hf}.attention.attention.{proj}.weight",
                (D, n, d), "T", (n * d, D))
            add(f"{ours}/attention/{proj}/bias", f"{hf}.attention.attention.{proj}.bias",
                (n, d), "=", (n * d,))
        add(f"{ours}/attention/out/kernel", f"{hf}.attention.output.dense.weight", (n, d, D),
            "T", (D, n * d))
        add(f"{ours}/attention/out/bias", f"{hf}.attention.output.dense.bias", (D,))
        norm(f"{ours}/norm_mlp", f"{hf}.layernorm_after")
        dense(f"{ours}/mlp/wi", f"{hf}.intermediate.dense", D, F)
        dense(f"{ours}/mlp/wo", f"{hf}.output.dense", F, D)
    norm("final_norm", "layernorm")
    if head == "model":
        if cfg.head_hidden_size:
            dense(PRE_LOGITS, "pooler.dense", D, cfg.head_hidden_size)
        return entries
    if cfg.head_hidden_size:
        raise CheckpointError(
            f"head_hidden_size={cfg.head_hidden_size}: HF ViTForImageClassification has no "
            "pre-logits layer before its classifier; use head='model' (HF ViTModel: the "
            "pre-logits layer is its pooler, and there is no classifier)")
    entries[:] = [Entry(e.path, VIT_PREFIX + e.name, e.shape, e.kind, e.theirs) for e in entries]
    dense(HEAD, "classifier", D, cfg.num_classes)
    return entries


def hf_names(cfg: ViTConfig, channels: int = 3, head: str = "classifier"
             ) -> dict[str, tuple[int, ...]]:
    """{HF tensor name: shape} that ``params_to_hf`` writes for ``cfg`` ('model' or
    'classifier')."""
    if head not in ("model", "classifier"):
        raise ValueError(f"head={head!r} is not one of ['model', 'classifier']")
    return {e.name: e.their_shape for e in _mapping(cfg, channels, head)}


def _describe(cfg: ViTConfig, channels: int) -> str:
    return (f"image_size={cfg.image_size}, patch_size={cfg.patch_size}, channels={channels}, "
            f"hidden_size={cfg.hidden_size}, num_layers={cfg.num_layers}, num_heads="
            f"{cfg.num_heads}, mlp_dim={cfg.mlp_dim}, head_hidden_size={cfg.head_hidden_size}, "
            f"num_classes={cfg.num_classes}")


def _detect_head(names) -> str:
    return "classifier" if CLASSIFIER in names else "model"


def params_from_hf(tensors: Mapping[str, np.ndarray], cfg: ViTConfig, *, channels: int = 3,
                   head: str = "auto") -> dict:
    """Our params pytree (NumPy, ``cfg.param_dtype``, ``cfg.scan_layers``' layer layout) from HF
    tensors of ``channels``-channel images. ``head``: 'classifier' (ViTForImageClassification)
    -> our ViT's whole tree; 'model' (ViTModel, with or without ``vit.``; its pooler when
    cfg.head_hidden_size) -> the tree without ``head``; 'auto' picks 'classifier' when
    ``classifier.weight`` is there. CheckpointError listing every missing, unexpected and
    mis-shaped tensor."""
    if head not in HEADS:
        raise ValueError(f"head={head!r} is not one of {list(HEADS)}")
    if head == "auto":
        head = _detect_head(tensors)
    prefixed = head == "model" and any(n.startswith(VIT_PREFIX) for n in tensors)
    prefix = VIT_PREFIX if prefixed else ""
    what = "ViTForImageClassification" if head == "classifier" else "ViTModel"
    params = tree_from_tensors(_mapping(cfg, channels, head), tensors,
                               f"checkpoint tensors do not match HF {what}"
                               f"({_describe(cfg, channels)})",
                               prefix=prefix, dtype=numpy_dtype(cfg.param_dtype))
    return with_layer_layout(params, cfg.scan_layers)


def params_to_hf(params: Mapping, cfg: ViTConfig, *, head: str = "auto") -> dict[str, np.ndarray]:
    """HF tensors {name: NumPy array} of our ViT's params (boxed leaves, JAX arrays, either layer
    layout, ``{"params": ...}`` accepted). ``head``: 'classifier' (ViTForImageClassification;
    needs head_hidden_size=0), 'model' (ViTModel: our pre-logits layer as its pooler, the
    classifier left out), 'auto' = 'classifier'. CheckpointError listing every difference."""
    if head not in HEADS:
        raise ValueError(f"head={head!r} is not one of {list(HEADS)}")
    head = "classifier" if head == "auto" else head
    if set(params) == {"params"}:
        params = params["params"]
    params = with_layer_layout(unboxed(params), scan=False)
    if head == "model":
        params.pop(HEAD, None)
    channels = input_channels(params, cfg)
    what = "ViTForImageClassification" if head == "classifier" else "ViTModel"
    return tensors_from_tree(_mapping(cfg, channels, head), params,
                             f"params do not match our ViT as HF {what}"
                             f"({_describe(cfg, channels)})")


# ----------------------------------------------------------------------------- directories


def read_hf_architecture(directory: str | os.PathLike, **overrides
                         ) -> tuple[ViTConfig, int, bool]:
    """(cfg, channels, has_classifier) of an HF ViT folder from its config.json and the names in
    its safetensors header: the model without reading its weights."""
    directory = pathlib.Path(directory)
    require_files(directory)
    config_json = read_config_json(directory)
    shapes = safetensors_shapes(directory / WEIGHTS_FILE)
    pooler = shapes.get(POOLER, shapes.get(VIT_PREFIX + POOLER))
    overrides.setdefault("head_hidden_size", pooler[0] if pooler else 0)
    return (config_from_hf(config_json, **overrides), int(config_json.get("num_channels", 3)),
            CLASSIFIER in shapes)


def load_hf_checkpoint(directory: str | os.PathLike, **overrides) -> tuple[ViTConfig, dict]:
    """(cfg, params) of an HF ViT folder (``config.json`` + ``model.safetensors``): a
    ViTForImageClassification's whole tree, or a ViTModel's without ``head`` (module
    docstring). ``overrides`` go to ``config_from_hf``."""
    directory = pathlib.Path(directory)
    cfg, channels, _ = read_hf_architecture(directory, **overrides)
    weights_path = directory / WEIGHTS_FILE
    tensors = read_safetensors(weights_path)
    try:
        return cfg, params_from_hf(tensors, cfg, channels=channels)
    except CheckpointError as e:
        raise CheckpointError(f"{weights_path}: {e}") from e


def save_hf_checkpoint(directory: str | os.PathLike, cfg: ViTConfig, params: Mapping, *,
                       head: str = "auto", overwrite: bool = False) -> pathlib.Path:
    """Writes ``config.json`` + ``model.safetensors`` into ``directory``, loadable by HF
    ``ViTForImageClassification`` (head 'classifier' / 'auto') or ``ViTModel`` (head 'model')
    ``.from_pretrained``; atomically (models/hf_folder.py). An existing non-empty ``directory``
    is replaced only with ``overwrite=True``."""
    tensors = params_to_hf(params, cfg, head=head)
    head = "classifier" if head == "auto" else head
    name = "embeddings.patch_embeddings.projection.weight"
    channels = tensors[(VIT_PREFIX if head == "classifier" else "") + name].shape[1]
    return write_folder(directory, config_to_hf(cfg, channels, head), tensors,
                        overwrite=overwrite)
