"""Hugging Face Marian checkpoints (``MarianMTModel``: the OPUS-MT translation models) in and
out: config.json, safetensors, parameter names and token ids.

    cfg, params, ids = load_hf_checkpoint("path/to/opus-mt-xx-yy")  # config.json + safetensors
    inputs = ids.ours(marian_token_ids)        # Marian's ids -> ours (hf_marian_config.py)
    tokens, _ = decode.predict(Transformer(cfg), params, inputs, bos_id=ids.start_id,
                               eos_id=ids.eos_id, ...)
    marian_output = ids.theirs(tokens)
    save_hf_checkpoint("out_dir", cfg, params, ids)    # loadable by HF MarianMTModel

The config.json keys, what Marian computes otherwise than the paper's Transformer, and
the renumbering of token ids (``MarianIds``) are in models/hf_marian_config.py; this module
converts the weights and reads and writes folders, and re-exports that module's names.

Names (PyTorch ``MarianMTModel``; ``i`` a layer, ``n`` heads of width ``d``, ``D = n d``, ``F``
the feed-forward width, ``V`` the vocabulary):

  ours                                        HF                                  how
  shared_embedding/embedding       [V, D]     model.shared.weight                 rows permuted
  encoder/embedding/embedding (unshared)      model.encoder.embed_tokens.weight   rows permuted
  decoder/embedding/embedding (unshared)      model.decoder.embed_tokens.weight   rows permuted
  {encoder,decoder}/block_i/                  model.{encoder,decoder}.layers.i.
    attention | self_attention               self_attn.{q,k,v}_proj.weight [D, D] transposed,
      /{query,key,value}/kernel [D, n, d]                                         [D, n, d]
      /{query,key,value}/bias [n, d]         self_attn.{q,k,v}_proj.bias [D]     reshaped
      /out/kernel [n, d, D], out/bias        self_attn.out_proj.weight, .bias    transposed
    cross_attention (decoder)                encoder_attn.*                      as above
    norm_attention | norm_self               self_attn_layer_norm.{weight,bias}  =
    norm_cross (decoder)                     encoder_attn_layer_norm.*           =
    mlp/wi/kernel [D, F], bias               fc1.weight [F, D], .bias            transposed
    mlp/wo/kernel [F, D], bias               fc2.weight [D, F], .bias            transposed
    norm_mlp                                 final_layer_norm.{weight,bias}      =
  decoder/logits/kernel (untied)   [D, V]     lm_head.weight [V, D]               transposed,
                                                                                  permuted
  decoder/logits_bias              [V]        final_logits_bias [1, V]            permuted

Strict as the other converters (models/param_tables.py): one CheckpointError lists every
missing, unexpected and mis-shaped tensor. Older files also hold copies HF ignores or ties
(``model.{encoder,decoder}.embed_tokens.weight`` beside ``model.shared.weight``, a tied
``lm_head.weight``, the sinusoid tables ``model.{encoder,decoder}.embed_positions.weight``):
each is read only to check that it equals what it copies. Only what both compute converts:
separate source and target vocabularies (``decoder_vocab_size``), LayerDrop, and encoder and
decoder of different widths are refused by name; the export needs Marian's architecture
(``configs/transformer/translate.py:arch=marian`` trains one).

Pure NumPy (plus our TransformerConfig): it never imports train or data.
"""

from __future__ import annotations

import os
import pathlib
from typing import Any, Mapping

import numpy as np

from models.hf_folder import WEIGHTS_FILE, read_config_json, require_files, write_folder
from models.hf_marian_config import (NORM_EPSILON, MarianIds, check_convertible, config_from_hf,
                                     config_to_hf)
from models.param_tables import Table, numpy_dtype, tensors_from_tree, tree_from_tensors, unboxed
from models.position import sinusoidal_table
from models.safetensors_file import CheckpointError, read_safetensors
from models.transformer import TransformerConfig, with_layer_layout

__all__ = ["NORM_EPSILON", "MarianIds", "config_from_hf", "config_to_hf", "hf_names",
           "params_from_hf", "params_to_hf", "load_hf_config", "load_hf_checkpoint",
           "save_hf_checkpoint"]

SHARED = "model.shared.weight"
LM_HEAD = "lm_head.weight"
BIAS = "final_logits_bias"
_STACKS = ("encoder", "decoder")


# ----------------------------------------------------------------------------- parameter names


def _mapping(cfg: TransformerConfig) -> Table:
    """The table of the module docstring for ``cfg`` (the shapes ours and HF's)."""
    V, D, F, n = cfg.vocab_size, cfg.d_model, cfg.d_ff, cfg.num_heads
    d = D // n
    entries = Table()
    add, dense = entries.add, entries.dense

    def attention(path, hf):
        for ours, theirs in (("query", "q_proj"), ("key", "k_proj"), ("value", "v_proj")):
            add(f"{path}/{ours}/kernel", f"{hf}.{theirs}.weight", (D, n, d), "T", (D, D))
            add(f"{path}/{ours}/bias", f"{hf}.{theirs}.bias", (n, d), "=", (D,))
        add(f"{path}/out/kernel", f"{hf}.out_proj.weight", (n, d, D), "T", (D, D))
        add(f"{path}/out/bias", f"{hf}.out_proj.bias", (D,))

    def norm(path, hf):
        add(f"{path}/scale", f"{hf}.weight", (D,))
        add(f"{path}/bias", f"{hf}.bias", (D,))

    if cfg.share_embeddings:
        add("shared_embedding/embedding", SHARED, (V, D))
    else:
        for stack in _STACKS:
            add(f"{stack}/embedding/embedding", f"model.{stack}.embed_tokens.weight", (V, D))
    for stack, layers in (("encoder", cfg.encoder_layers), ("decoder", cfg.decoder_layers)):
        for i in range(layers):
            ours, hf = f"{stack}/block_{i}", f"model.{stack}.layers.{i}"
            if stack == "encoder":
                attention(f"{ours}/attention", f"{hf}.self_attn")
                norm(f"{ours}/norm_attention", f"{hf}.self_attn_layer_norm")
            else:
                attention(f"{ours}/self_attention", f"{hf}.self_attn")
                norm(f"{ours}/norm_self", f"{hf}.self_attn_layer_norm")
                attention(f"{ours}/cross_attention", f"{hf}.encoder_attn")
                norm(f"{ours}/norm_cross", f"{hf}.encoder_attn_layer_norm")
            dense(f"{ours}/mlp/wi", f"{hf}.fc1", D, F)
            dense(f"{ours}/mlp/wo", f"{hf}.fc2", F, D)
            norm(f"{ours}/norm_mlp", f"{hf}.final_layer_norm")
    if not cfg.output_tied:
        add("decoder/logits/kernel", LM_HEAD, (D, V), "T")
    add("decoder/logits_bias", BIAS, (V,), "=", (1, V))
    return entries


# Their tensors indexed by token id, and along which of their axes.
def _vocab_axis(name: str) -> int | None:
    if name in (SHARED, LM_HEAD) or name.endswith(".embed_tokens.weight"):
        return 0
    return 1 if name == BIAS else None


def _permute_vocab(tensors: Mapping[str, np.ndarray], order: np.ndarray) -> dict[str, Any]:
    """The tensors indexed by token id reordered: entry ``j`` of the result is entry
    ``order[j]`` of the input (their layout: rows of an embedding or lm_head, columns of
    final_logits_bias)."""
    out = dict(tensors)
    for name, x in tensors.items():
        axis = _vocab_axis(name)
        if axis is not None and np.ndim(x) > axis:
            out[name] = np.take(np.asarray(x), order, axis=axis)
    return out


def hf_names(cfg: TransformerConfig) -> dict[str, tuple[int, ...]]:
    """{HF tensor name: shape} that ``params_to_hf`` writes for ``cfg``."""
    return {e.name: e.their_shape for e in _mapping(cfg)}


def _describe(cfg: TransformerConfig) -> str:
    return (f"vocab_size={cfg.vocab_size}, d_model={cfg.d_model}, encoder_layers="
            f"{cfg.encoder_layers}, decoder_layers={cfg.decoder_layers}, heads={cfg.num_heads}, "
            f"ffn_dim={cfg.d_ff}, share_encoder_decoder_embeddings={cfg.share_embeddings}, "
            f"tie_word_embeddings={cfg.output_tied}")


def _copies(cfg: TransformerConfig) -> dict[str, str]:
    """{name of a tensor older files hold beside the one it copies: that one's name}."""
    copies = {}
    if cfg.share_embeddings:
        copies.update({f"model.{stack}.embed_tokens.weight": SHARED for stack in _STACKS})
    if cfg.output_tied:
        copies[LM_HEAD] = SHARED if cfg.share_embeddings else "model.decoder.embed_tokens.weight"
    return copies


def _check_copies(tensors: Mapping[str, np.ndarray], cfg: TransformerConfig) -> None:
    """Every copy HF ties or ignores must equal what it copies (CheckpointError naming it)."""
    for copy, original in _copies(cfg).items():
        if copy in tensors and original in tensors and not np.array_equal(tensors[copy],
                                                                          tensors[original]):
            raise CheckpointError(f"{copy} differs from {original}: the config ties them "
                                  "(share_encoder_decoder_embeddings / tie_word_embeddings)")
    table = sinusoidal_table(cfg.max_length, cfg.d_model, layout="halves")
    for stack in _STACKS:
        name = f"model.{stack}.embed_positions.weight"
        if name in tensors and (np.shape(tensors[name]) != table.shape or
                                not np.allclose(tensors[name], table, atol=1e-5)):
            raise CheckpointError(f"{name} is not Marian's sinusoid table "
                                  f"[{cfg.max_length}, {cfg.d_model}] (sines, then cosines)")


def params_from_hf(tensors: Mapping[str, np.ndarray], cfg: TransformerConfig,
                   ids: MarianIds) -> dict:
    """Our ``Transformer`` params (NumPy, ``cfg.param_dtype``, the layer layout of
    ``cfg.scan_layers``), in our token numbering, from HF ``MarianMTModel`` tensors in Marian's
    (``ids``). CheckpointError listing every missing, unexpected and mis-shaped tensor."""
    if ids.vocab_size != cfg.vocab_size:
        raise CheckpointError(f"token ids of a vocabulary of {ids.vocab_size}, the model's is "
                              f"{cfg.vocab_size}")
    ignored = set(_copies(cfg)) | {f"model.{s}.embed_positions.weight" for s in _STACKS}
    tensors = _permute_vocab(tensors, ids.theirs(np.arange(cfg.vocab_size)))
    params = tree_from_tensors(_mapping(cfg), tensors,
                               f"checkpoint tensors do not match HF MarianMTModel "
                               f"({_describe(cfg)})", ignored=ignored,
                               dtype=numpy_dtype(cfg.param_dtype))
    _check_copies(tensors, cfg)
    return with_layer_layout(params, cfg.scan_layers)


def params_to_hf(params: Mapping, cfg: TransformerConfig, ids: MarianIds
                 ) -> dict[str, np.ndarray]:
    """HF ``MarianMTModel`` tensors {name: NumPy array} of our params, in Marian's numbering
    ``ids`` (tied copies and the sinusoid tables left out, as HF's own files do). Accepts
    ``{"params": ...}``, boxed leaves, JAX arrays, either layer layout, and a model without
    ``logits_bias`` (Marian's bias is then zero). CheckpointError listing every difference."""
    check_convertible(cfg, ids)
    if set(params) == {"params"}:
        params = params["params"]
    params = with_layer_layout(unboxed(params), scan=False)
    if not cfg.logits_bias:  # the same logits as a zero final_logits_bias
        decoder = dict(params["decoder"])
        decoder.setdefault("logits_bias", np.zeros(cfg.vocab_size, numpy_dtype(cfg.param_dtype)))
        params = {**params, "decoder": decoder}
    tensors = tensors_from_tree(_mapping(cfg), params,
                                f"params do not match our Transformer as HF MarianMTModel "
                                f"({_describe(cfg)})")
    return _permute_vocab(tensors, ids.ours(np.arange(cfg.vocab_size)))


# ----------------------------------------------------------------------------- directories


def load_hf_config(directory: str | os.PathLike, **overrides
                   ) -> tuple[TransformerConfig, MarianIds]:
    """The TransformerConfig and token ids of an HF Marian folder, from its config.json alone."""
    directory = pathlib.Path(directory)
    require_files(directory)
    return config_from_hf(read_config_json(directory), **overrides)


def load_hf_checkpoint(directory: str | os.PathLike, **overrides
                       ) -> tuple[TransformerConfig, dict, MarianIds]:
    """(cfg, params, ids) of an HF Marian folder (``config.json`` + ``model.safetensors``);
    ``overrides`` go to ``config_from_hf``."""
    directory = pathlib.Path(directory)
    cfg, ids = load_hf_config(directory, **overrides)
    weights_path = directory / WEIGHTS_FILE
    try:
        return cfg, params_from_hf(read_safetensors(weights_path), cfg, ids), ids
    except CheckpointError as e:
        raise CheckpointError(f"{weights_path}: {e}") from e


def save_hf_checkpoint(directory: str | os.PathLike, cfg: TransformerConfig, params: Mapping,
                       ids: MarianIds, *, overwrite: bool = False,
                       extra_files: Mapping[str, bytes] | None = None) -> pathlib.Path:
    """Writes ``config.json`` + ``model.safetensors`` loadable by HF ``MarianMTModel`` (and its
    Flax twin) ``.from_pretrained`` into ``directory``, atomically (models/hf_folder.py; an
    occupied folder only with ``overwrite``), with ``extra_files`` (the tokenizer's) beside
    them. ``ids``: ``MarianIds.for_ours`` of the model's vocabulary, or those
    ``load_hf_checkpoint`` returned."""
    tensors = params_to_hf(params, cfg, ids)
    return write_folder(directory, config_to_hf(cfg, ids), tensors, overwrite=overwrite,
                        extra_files=extra_files)
