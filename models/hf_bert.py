"""Hugging Face BERT checkpoints in and out: safetensors files, config.json, parameter names.

    cfg, params = load_hf_checkpoint("path/to/hf_model_dir")   # config.json + model.safetensors
    cfg = load_hf_config("path/to/hf_model_dir")              # its sizes only, no weights read
    sequence_output, pooled = BertModel(cfg).apply({"params": params}, ids, types, mask)
    save_hf_checkpoint("out_dir", cfg, params)                # loadable by HF BertModel

A directory holds ``config.json`` (HF ``BertConfig``) and ``model.safetensors``. A checkpoint of
HF ``BertModel`` (names with or without the ``bert.`` prefix) becomes the parameters of our
``models.bert.BertModel``; one of ``BertForPreTraining`` (``bert.*`` + ``cls.predictions.*`` and,
with NSP, ``cls.seq_relationship.*``) those of our ``BertForPreTraining``. The name mapping and
the transposes/reshapes are the table in the docstring of ``models/bert.py``; ``_mapping`` below
is that table as code, and both directions are generated from it.

Strict: every tensor the model needs must be there with its shape, and nothing else may be
(except HF's buffers ``embeddings.position_ids`` / ``token_type_ids`` and the tied copies
``cls.predictions.decoder.weight`` / ``.bias``, which must then equal the word embeddings / the
output bias: our MLM head ties them). One ``CheckpointError`` lists every missing, unexpected and
mis-shaped tensor. To load only the encoder of a pre-training checkpoint, drop its ``cls.*``
tensors yourself.

Only what our BERT computes converts: absolute learned positions (``posemb='learned'``) and the
exact erf GELU (HF ``hidden_act='gelu'``; 'gelu_new' etc. are tanh approximations). Not covered:
sharded checkpoints (``model.safetensors.index.json``), ``pytorch_model.bin`` (a pickle), models
without a pooler, decoders with cross-attention.

The safetensors files are read and written by ``models.safetensors_file``, the folder by
``models.hf_folder``, the table matched by ``models.param_tables``.

This module is pure NumPy (plus our ``BertConfig``): it never imports train or data.
"""

from __future__ import annotations

import os
import pathlib
from typing import Any, Iterable, Mapping

import numpy as np

from models.bert import BertConfig, with_layer_layout
from models.hf_folder import WEIGHTS_FILE, read_config_json, require_files, write_folder
from models.param_tables import (Entry, Table, numpy_dtype, tensors_from_tree,
                                 tree_from_tensors, unboxed)
from models.safetensors_file import CheckpointError, read_safetensors

HEADS = ("auto", "model", "pretraining")
BERT_PREFIX = "bert."
_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")  # HF buffers, not weights
# HF's tied copies (in .bin-converted files) -> the tensor each must equal.
_TIED = {"cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
         "cls.predictions.decoder.bias": "cls.predictions.bias"}


# ----------------------------------------------------------------------------- config.json

# HF BertConfig key -> our BertConfig field: required, and converted both ways.
_CONFIG_KEYS = {"vocab_size": "vocab_size", "hidden_size": "hidden_size",
                "num_hidden_layers": "num_layers", "num_attention_heads": "num_heads",
                "intermediate_size": "mlp_dim", "max_position_embeddings":
                "max_position_embeddings", "type_vocab_size": "type_vocab_size",
                "layer_norm_eps": "layer_norm_eps"}
# Optional in config.json (training settings; our defaults are BERT's too).
_OPTIONAL_KEYS = {"hidden_dropout_prob": "dropout_rate",
                  "attention_probs_dropout_prob": "attention_dropout_rate",
                  "initializer_range": "initializer_range"}


def config_from_hf(config_json: Mapping[str, Any], **overrides) -> BertConfig:
    """Our BertConfig from an HF BERT ``config.json`` dict; ``overrides`` set other fields
    (``dtype``, ``attention_implementation``, ``nsp``, ...). CheckpointError naming every missing
    key, or a setting our BERT does not compute (non-exact GELU, relative positions)."""
    problems = []
    model_type = config_json.get("model_type", "bert")
    if model_type != "bert":
        problems.append(f"model_type={model_type!r}: only 'bert' checkpoints convert")
    missing = [k for k in _CONFIG_KEYS if k not in config_json]
    if missing:
        problems.append(f"missing keys {missing}")
    act = config_json.get("hidden_act", "gelu")
    if act != "gelu":
        problems.append(f"hidden_act={act!r}: our BERT uses the exact erf GELU, HF 'gelu'; "
                        "'gelu_new' / 'gelu_pytorch_tanh' / others would give different outputs")
    pos = config_json.get("position_embedding_type", "absolute")
    if pos != "absolute":
        problems.append(f"position_embedding_type={pos!r}: only 'absolute' (learned positions, "
                        "our posemb='learned') converts")
    for key in ("is_decoder", "add_cross_attention"):
        if config_json.get(key):
            problems.append(f"{key}=true: decoders / cross-attention are not our BertModel")
    if problems:
        raise CheckpointError("HF config does not describe a BERT we can build: "
                              + "; ".join(problems))
    fields = {ours: config_json[hf] for hf, ours in _CONFIG_KEYS.items()}
    fields.update({ours: config_json[hf] for hf, ours in _OPTIONAL_KEYS.items()
                   if config_json.get(hf) is not None})
    fields["posemb"] = "learned"
    fields.update(overrides)
    try:
        return BertConfig(**fields)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"HF config gives an invalid BertConfig: {e}") from e


def config_to_hf(cfg: BertConfig) -> dict[str, Any]:
    """The HF BERT ``config.json`` dict of ``cfg`` (without ``architectures``)."""
    _check_convertible(cfg)
    out: dict[str, Any] = {"model_type": "bert", "hidden_act": "gelu",
                           "position_embedding_type": "absolute"}
    out.update({hf: getattr(cfg, ours) for hf, ours in {**_CONFIG_KEYS, **_OPTIONAL_KEYS}.items()})
    return dict(sorted(out.items()))


def _check_convertible(cfg: BertConfig) -> None:
    if cfg.posemb != "learned":
        raise CheckpointError(f"posemb={cfg.posemb!r} has no HF BERT equivalent (HF BERT learns "
                              "absolute positions: posemb='learned')")
    if not cfg.type_vocab_size or not cfg.pooler:
        raise CheckpointError(
            f"type_vocab_size={cfg.type_vocab_size}, pooler={cfg.pooler}: a BERT without segment "
            "embeddings or pooler (a DistilBERT-style student) has no HF BERT layout; HF BERT "
            "always has both")


# ----------------------------------------------------------------------------- parameter names


def _mapping(cfg: BertConfig, head: str) -> list[Entry]:
    """The table of models/bert.py's docstring for ``cfg``: BertModel names (head 'model') or
    BertForPreTraining names (head 'pretraining', NSP when ``cfg.nsp``)."""
    _check_convertible(cfg)
    V, H, F = cfg.vocab_size, cfg.hidden_size, cfg.mlp_dim
    n, d = cfg.num_heads, cfg.head_dim
    entries = Table()
    add, dense = entries.add, entries.dense

    def norm(path, hf):
        add(f"{path}/scale", f"{hf}.weight", (H,))
        add(f"{path}/bias", f"{hf}.bias", (H,))

    add("embeddings/word_embeddings/embedding", "embeddings.word_embeddings.weight", (V, H))
    add("embeddings/position_embeddings/embedding", "embeddings.position_embeddings.weight",
        (cfg.max_position_embeddings, H))
    add("embeddings/token_type_embeddings/embedding", "embeddings.token_type_embeddings.weight",
        (cfg.type_vocab_size, H))
    norm("embeddings/norm", "embeddings.LayerNorm")
    for i in range(cfg.num_layers):
        ours, hf = f"encoder/layer_{i}", f"encoder.layer.{i}"
        for proj in ("query", "key", "value"):
            add(f"{ours}/attention/{proj}/kernel", f"{hf}.attention.self.{proj}.weight",
                (H, n, d), "T", (n * d, H))
            add(f"{ours}/attention/{proj}/bias", f"{hf}.attention.self.{proj}.bias", (n, d),
                "=", (n * d,))
        add(f"{ours}/attention/out/kernel", f"{hf}.attention.output.dense.weight", (n, d, H),
            "T", (H, n * d))
        add(f"{ours}/attention/out/bias", f"{hf}.attention.output.dense.bias", (H,))
        norm(f"{ours}/norm_attention", f"{hf}.attention.output.LayerNorm")
        dense(f"{ours}/mlp/wi", f"{hf}.intermediate.dense", H, F)
        dense(f"{ours}/mlp/wo", f"{hf}.output.dense", F, H)
        norm(f"{ours}/norm_mlp", f"{hf}.output.LayerNorm")
    dense("pooler/dense", "pooler.dense", H, H)
    if head == "model":
        return entries
    entries[:] = [Entry(("bert", *e.path), BERT_PREFIX + e.name, e.shape, e.kind, e.theirs)
                  for e in entries]
    dense("predictions/transform", "cls.predictions.transform.dense", H, H)
    norm("predictions/transform_norm", "cls.predictions.transform.LayerNorm")
    add("predictions/bias", "cls.predictions.bias", (V,))
    if cfg.nsp:
        dense("seq_relationship", "cls.seq_relationship", H, 2)
    return entries


def hf_names(cfg: BertConfig, head: str = "model") -> dict[str, tuple[int, ...]]:
    """{HF tensor name: shape} that ``params_to_hf`` writes for ``cfg`` ('model' or
    'pretraining')."""
    if head not in ("model", "pretraining"):
        raise ValueError(f"head={head!r} is not one of ['model', 'pretraining']")
    return {e.name: e.their_shape for e in _mapping(cfg, head)}


def _describe(cfg: BertConfig) -> str:
    return (f"vocab_size={cfg.vocab_size}, hidden_size={cfg.hidden_size}, num_layers="
            f"{cfg.num_layers}, num_heads={cfg.num_heads}, mlp_dim={cfg.mlp_dim}, "
            f"max_position_embeddings={cfg.max_position_embeddings}, type_vocab_size="
            f"{cfg.type_vocab_size}, nsp={cfg.nsp}")


def _detect_head(names: Iterable[str]) -> str:
    return "pretraining" if any(n.startswith("cls.") for n in names) else "model"


def params_from_hf(tensors: Mapping[str, np.ndarray], cfg: BertConfig, *,
                   head: str = "auto") -> dict:
    """Our params pytree (nested dicts of NumPy arrays in ``cfg.param_dtype``) from HF tensors.

    ``head``: 'model' (HF ``BertModel``, names with or without ``bert.``) -> our ``BertModel``;
    'pretraining' (HF ``BertForPreTraining``) -> our ``BertForPreTraining``; 'auto' picks
    'pretraining' when any name starts with ``cls.``. Use as ``{"params": params}``.
    CheckpointError listing every missing, unexpected and mis-shaped tensor.
    """
    if head not in HEADS:
        raise ValueError(f"head={head!r} is not one of {list(HEADS)}")
    if head == "auto":
        head = _detect_head(tensors)
    prefix = ""
    if head == "model" and any(name.startswith(BERT_PREFIX) for name in tensors):
        prefix = BERT_PREFIX
    encoder_prefix = BERT_PREFIX if head == "pretraining" else prefix
    ignored = {encoder_prefix + b for b in _BUFFERS}
    if head == "pretraining":
        ignored |= set(_TIED)  # checked below
    params = tree_from_tensors(
        _mapping(cfg, head), tensors,
        f"checkpoint tensors do not match HF Bert"
        f"{'ForPreTraining' if head == 'pretraining' else 'Model'}({_describe(cfg)})",
        prefix=prefix, ignored=ignored, dtype=numpy_dtype(cfg.param_dtype))
    tied = set(_TIED) & set(tensors) if head == "pretraining" else set()
    for name in sorted(tied):  # HF's tied copies: what our MLM head uses?
        if not np.array_equal(tensors[name], tensors[_TIED[name]]):  # (shapes too)
            raise CheckpointError(f"{name} differs from {_TIED[name]}: an untied MLM decoder; "
                                  "our BertForPreTraining ties it to the word embeddings and "
                                  "the output bias")
    return with_layer_layout(params, cfg.scan_layers)


def params_to_hf(params: Mapping, cfg: BertConfig) -> dict[str, np.ndarray]:
    """HF tensors {name: NumPy array} of our params (``BertModel`` -> HF ``BertModel`` names,
    ``BertForPreTraining`` -> HF ``BertForPreTraining`` names, tied decoder left out as HF's own
    safetensors files do). Accepts ``{"params": ...}``, boxed (logically partitioned) leaves and
    JAX arrays. CheckpointError listing every missing, unexpected and mis-shaped parameter."""
    if set(params) == {"params"}:
        params = params["params"]
    params = with_layer_layout(unboxed(params), scan=False)
    head = "pretraining" if "bert" in params else "model"
    return tensors_from_tree(
        _mapping(cfg, head), params,
        f"params do not match our {'BertForPreTraining' if head == 'pretraining' else 'BertModel'}"
        f"({_describe(cfg)})")


# ----------------------------------------------------------------------------- directories


def load_hf_config(directory: str | os.PathLike, **overrides) -> BertConfig:
    """The BertConfig of an HF BERT directory from its ``config.json`` alone: the model's sizes
    without reading its weights (``load_hf_checkpoint`` gives the same, but ``nsp``, which a
    pre-training checkpoint's tensors decide there)."""
    directory = pathlib.Path(directory)
    require_files(directory)
    return config_from_hf(read_config_json(directory), **overrides)


def load_hf_checkpoint(directory: str | os.PathLike, *, head: str = "auto",
                       **overrides) -> tuple[BertConfig, dict]:
    """(cfg, params) of an HF BERT directory (``config.json`` + ``model.safetensors``).

    ``head`` as in ``params_from_hf``; ``overrides`` go to ``config_from_hf``. A pre-training
    checkpoint without ``cls.seq_relationship.*`` gives ``cfg.nsp=False`` unless overridden.
    """
    directory = pathlib.Path(directory)
    require_files(directory)
    config_json = read_config_json(directory)
    weights_path = directory / WEIGHTS_FILE
    tensors = read_safetensors(weights_path)
    if head == "auto":
        head = _detect_head(tensors)
    if head == "pretraining" and "nsp" not in overrides:
        overrides["nsp"] = any(n.startswith("cls.seq_relationship.") for n in tensors)
    cfg = config_from_hf(config_json, **overrides)
    try:
        return cfg, params_from_hf(tensors, cfg, head=head)
    except CheckpointError as e:
        raise CheckpointError(f"{weights_path}: {e}") from e


def _architecture(tensors: Mapping) -> str:
    """The HF class whose weights `tensors` are: with the NSP head BertForPreTraining, with the
    MLM head alone BertForMaskedLM (AutoModel then builds no random NSP head), else BertModel."""
    if any(n.startswith("cls.seq_relationship.") for n in tensors):
        return "BertForPreTraining"
    if any(n.startswith("cls.") for n in tensors):
        return "BertForMaskedLM"
    return "BertModel"


def save_hf_checkpoint(directory: str | os.PathLike, cfg: BertConfig, params: Mapping, *,
                       overwrite: bool = False) -> pathlib.Path:
    """Writes ``config.json`` + ``model.safetensors`` (loadable by HF ``BertModel`` /
    ``BertForPreTraining``.from_pretrained) into ``directory``.

    Written atomically (models/hf_folder.py). An existing non-empty ``directory`` is replaced
    only with ``overwrite=True``; otherwise CheckpointError.
    """
    tensors = params_to_hf(params, cfg)
    config = config_to_hf(cfg)
    config["architectures"] = [_architecture(tensors)]
    return write_folder(directory, config, tensors, overwrite=overwrite)
