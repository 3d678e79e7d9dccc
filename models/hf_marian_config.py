"""Hugging Face Marian's ``config.json`` (``MarianConfig``) and token ids against our
TransformerConfig: ``config_from_hf``, ``config_to_hf`` and ``MarianIds``. models/hf_marian.py
converts the weights and reads and writes whole folders; ``from models.hf_marian import ...``
is the usual way in.

What Marian computes otherwise than the paper's Transformer, and where it goes
(``models.transformer`` names these options):
  position table    the sines in the first half, the cosines in the second:
                    ``sinusoid_layout='halves'``; ``max_position_embeddings`` rows (max_length)
  activation        ``activation_function`` 'swish' (OPUS-MT; 'silu' the same) -> 'swish',
                    'gelu' -> 'gelu', 'gelu_new' / 'gelu_pytorch_tanh' -> 'gelu_tanh', 'relu'
  embedding scale   ``scale_embedding`` (sqrt(d_model)) -> ``scale_embeddings``
  logits bias       ``final_logits_bias`` [1, V] -> ``logits_bias=True``, ``decoder/logits_bias``
  LayerNorm         post-LN, epsilon 1e-5 (fixed in HF's code), no final encoder/decoder norm:
                    ``norm_position='post'``, ``norm_epsilon=1e-5``
  embeddings        ``share_encoder_decoder_embeddings`` -> ``share_embeddings``,
                    ``tie_word_embeddings`` -> ``tie_output``
  dropout           ``dropout``, ``attention_dropout``, ``activation_dropout`` -> ``dropout_rate``,
                    ``attention_dropout_rate``, ``mlp_dropout_rate``
  start token       ``decoder_start_token_id`` = ``pad_token_id`` (OPUS-MT) ->
                    ``decoder_start='pad'``; another id -> 'bos' with that token
  token ids         below

Token ids. Our model pads with ``PAD_ID = 0`` (its masks read it), OPUS-MT's vocabularies with
their last id (eos 0, unk 1, ..., pad V - 1). ``MarianIds`` renumbers: the padding id becomes 0
and every id below it moves up one (ids above it, none in OPUS-MT, stay), so eos and unk become
1 and 2, the ids of the project's own SentencePiece models (data/vocab/sentencepiece.py). The
rows of the embedding tables, of an untied ``lm_head`` and the entries of ``final_logits_bias``
are permuted the same way, so the model computes exactly what Marian computes, in our ids.
Marian starts decoding from its padding token, whose embedding row is then the start vector: in
our numbering that row is the padding row 0, so the start token is PAD_ID, which the decoder
then cannot take for padding (``decoder_start='pad'``): a BOS of its own would need an extra row
and a logit Marian does not have. HF's Marian never generates padding (its beam search removes
the padding logit before the softmax); ours never does either (``models.search``).

Pure NumPy (plus our TransformerConfig): it never imports train or data.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np

from models.safetensors_file import CheckpointError
from models.transformer_config import PAD_ID, TransformerConfig

NORM_EPSILON = 1e-5   # HF Marian's LayerNorms (fixed in its code, not in config.json)
# HF activation_function -> ours; the export writes the first of each.
_ACTIVATIONS = {"swish": "swish", "silu": "swish", "gelu": "gelu", "gelu_new": "gelu_tanh",
                "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}
_EXPORT_ACTIVATIONS = {"swish": "swish", "gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu"}
# Keys of config.json, with MarianConfig's defaults where HF has one (None: required).
_DEFAULTS = {"vocab_size": None, "d_model": None, "encoder_layers": None,
             "decoder_layers": None, "encoder_attention_heads": None,
             "decoder_attention_heads": None, "encoder_ffn_dim": None, "decoder_ffn_dim": None,
             "max_position_embeddings": None, "pad_token_id": None, "eos_token_id": None,
             "decoder_start_token_id": None, "activation_function": "gelu",
             "scale_embedding": False, "share_encoder_decoder_embeddings": True,
             "tie_word_embeddings": True, "dropout": 0.1, "attention_dropout": 0.0,
             "activation_dropout": 0.0, "encoder_layerdrop": 0.0, "decoder_layerdrop": 0.0}
# Keys of old OPUS-MT config.json files that HF's MarianMTModel ignores, and the value that
# agrees with what it computes; another value describes another model.
_LEGACY = {"normalize_before": False, "normalize_embedding": False, "add_final_layer_norm": False,
           "static_position_embeddings": True, "add_bias_logits": False}


# ----------------------------------------------------------------------------- token ids


@dataclasses.dataclass(frozen=True)
class MarianIds:
    """A Marian vocabulary's special ids in Marian's numbering, and the renumbering to ours
    (module docstring): Marian's ``pad`` becomes PAD_ID = 0, every id below it moves up one."""

    vocab_size: int
    pad: int      # pad_token_id
    eos: int      # eos_token_id
    start: int    # decoder_start_token_id

    def __post_init__(self):
        for name in ("pad", "eos", "start"):
            value = getattr(self, name)
            if not 0 <= value < self.vocab_size:
                raise CheckpointError(f"{name} id {value} is outside the vocabulary of "
                                      f"{self.vocab_size} tokens")
        if self.eos == self.pad:
            raise CheckpointError(f"eos_token_id and pad_token_id are both {self.pad}")

    @classmethod
    def for_ours(cls, vocab_size: int, *, eos_id: int, start_id: int) -> "MarianIds":
        """The Marian numbering of a vocabulary of ours (PAD_ID 0, our ``eos_id`` and decoder
        ``start_id``): padding last, as OPUS-MT's, every other id down one."""
        pad = vocab_size - 1

        def theirs(i: int) -> int:
            return pad if i == PAD_ID else i - 1

        return cls(vocab_size, pad, theirs(eos_id), theirs(start_id))

    def ours(self, ids) -> np.ndarray:
        """Marian ids (any int array) in our numbering."""
        ids = np.asarray(ids)
        return np.where(ids == self.pad, PAD_ID, np.where(ids < self.pad, ids + 1, ids))

    def theirs(self, ids) -> np.ndarray:
        """Our ids (any int array) in Marian's numbering."""
        ids = np.asarray(ids)
        return np.where(ids == PAD_ID, self.pad, np.where(ids <= self.pad, ids - 1, ids))

    @property
    def eos_id(self) -> int:
        """The stop token, our numbering."""
        return int(self.ours(self.eos))

    @property
    def start_id(self) -> int:
        """The decoder's first input, our numbering (PAD_ID for decoder_start='pad')."""
        return int(self.ours(self.start))

    @property
    def decoder_start(self) -> str:
        return "pad" if self.start == self.pad else "bos"


# ----------------------------------------------------------------------------- config.json


def config_from_hf(config_json: Mapping[str, Any], **overrides) -> tuple[TransformerConfig,
                                                                         MarianIds]:
    """Our TransformerConfig and the token ids of an HF Marian ``config.json`` dict;
    ``overrides`` set other fields (``dtype``, ``scan_layers``, dropout rates, ...).
    CheckpointError naming every missing key and every setting our model does not compute."""
    problems = []
    model_type = config_json.get("model_type", "marian")
    if model_type != "marian":
        problems.append(f"model_type={model_type!r}: only 'marian' checkpoints convert")
    missing = [k for k, default in _DEFAULTS.items() if default is None and
               config_json.get(k) is None]
    if missing:
        problems.append(f"missing keys {missing}")
    value = {k: config_json.get(k, default) for k, default in _DEFAULTS.items()}
    if value["activation_function"] not in _ACTIVATIONS:
        problems.append(f"activation_function={value['activation_function']!r}: ours are "
                        f"{sorted(_ACTIVATIONS)}")
    decoder_vocab = config_json.get("decoder_vocab_size") or value["vocab_size"]
    if decoder_vocab != value["vocab_size"]:
        problems.append(f"decoder_vocab_size={decoder_vocab} differs from vocab_size="
                        f"{value['vocab_size']}: our model has one vocabulary for both sides")
    for enc, dec in (("encoder_attention_heads", "decoder_attention_heads"),
                     ("encoder_ffn_dim", "decoder_ffn_dim")):
        if value[enc] != value[dec]:
            problems.append(f"{enc}={value[enc]} and {dec}={value[dec]} differ: our encoder "
                            "and decoder blocks have one width")
    for key in ("encoder_layerdrop", "decoder_layerdrop"):
        if value[key]:
            problems.append(f"{key}={value[key]}: our model has no LayerDrop (set it to 0)")
    for key, wanted in _LEGACY.items():
        if key in config_json and bool(config_json[key]) != wanted:
            problems.append(f"{key}={config_json[key]!r}: HF's MarianMTModel ignores this key "
                            f"and computes {key}={wanted}, so these weights were made for "
                            "another model")
    if problems:
        raise CheckpointError("HF config does not describe a Marian model we can build: "
                              + "; ".join(problems))
    ids = MarianIds(value["vocab_size"], value["pad_token_id"], value["eos_token_id"],
                    value["decoder_start_token_id"])
    layers, share, tie = (value["encoder_layers"], bool(value["share_encoder_decoder_embeddings"]),
                          bool(value["tie_word_embeddings"]))
    # Fields left at None where they equal their default, so an exported model comes back equal.
    fields = dict(
        vocab_size=value["vocab_size"], d_model=value["d_model"], num_layers=layers,
        num_decoder_layers=None if value["decoder_layers"] == layers else value["decoder_layers"],
        d_ff=value["encoder_ffn_dim"],
        num_heads=value["encoder_attention_heads"], dropout_rate=value["dropout"],
        attention_dropout_rate=value["attention_dropout"],
        mlp_dropout_rate=value["activation_dropout"],
        activation=_ACTIVATIONS[value["activation_function"]], norm="layernorm",
        norm_epsilon=NORM_EPSILON, norm_position="post", posemb="sinusoidal",
        sinusoid_layout="halves", max_length=value["max_position_embeddings"],
        share_embeddings=share, tie_output=None if tie == share else tie, logits_bias=True,
        decoder_start=ids.decoder_start, scale_embeddings=bool(value["scale_embedding"]),
        use_bias=True)
    fields.update(overrides)
    try:
        return TransformerConfig(**fields), ids
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"HF config gives an invalid TransformerConfig: {e}") from e


def check_convertible(cfg: TransformerConfig, ids: MarianIds) -> None:
    """CheckpointError naming every setting of ``cfg`` (and of ``ids``) that HF Marian does not
    compute: what ``config_to_hf`` and ``hf_marian.params_to_hf`` need."""
    wanted = {"posemb": "sinusoidal", "sinusoid_layout": "halves", "norm": "layernorm",
              "norm_position": "post", "norm_epsilon": NORM_EPSILON, "use_bias": True}
    problems = [f"{k}={getattr(cfg, k)!r} (HF Marian: {v!r})" for k, v in wanted.items()
                if getattr(cfg, k) != v]
    if cfg.activation not in _EXPORT_ACTIVATIONS:
        problems.append(f"activation={cfg.activation!r} (HF Marian: "
                        f"{sorted(_EXPORT_ACTIVATIONS)})")
    if cfg.qk_dim * cfg.num_heads != cfg.d_model or cfg.v_dim * cfg.num_heads != cfg.d_model:
        problems.append(f"head_dim={cfg.head_dim}, value_head_dim={cfg.value_head_dim} (HF "
                        "Marian: d_model / num_heads)")
    if cfg.kv_heads != cfg.num_heads:
        problems.append(f"num_kv_heads={cfg.num_kv_heads} (HF Marian: one per head)")
    if ids.vocab_size != cfg.vocab_size:
        problems.append(f"token ids of a vocabulary of {ids.vocab_size}, the model's is "
                        f"{cfg.vocab_size}")
    if ids.decoder_start != cfg.decoder_start:
        problems.append(f"decoder_start={cfg.decoder_start!r}, but the token ids start the "
                        f"decoder with {ids.decoder_start!r}")
    if problems:
        raise CheckpointError("this Transformer has no HF Marian equivalent: "
                              + ", ".join(problems))


def config_to_hf(cfg: TransformerConfig, ids: MarianIds) -> dict[str, Any]:
    """The HF Marian ``config.json`` dict of ``cfg`` with the token ids ``ids``."""
    check_convertible(cfg, ids)
    rate = cfg.dropout_rate if cfg.mlp_dropout_rate is None else cfg.mlp_dropout_rate
    out = {"model_type": "marian", "architectures": ["MarianMTModel"], "is_encoder_decoder": True,
           "vocab_size": cfg.vocab_size, "decoder_vocab_size": cfg.vocab_size,
           "d_model": cfg.d_model, "encoder_layers": cfg.encoder_layers,
           "decoder_layers": cfg.decoder_layers, "encoder_attention_heads": cfg.num_heads,
           "decoder_attention_heads": cfg.num_heads, "encoder_ffn_dim": cfg.d_ff,
           "decoder_ffn_dim": cfg.d_ff, "max_position_embeddings": cfg.max_length,
           "activation_function": _EXPORT_ACTIVATIONS[cfg.activation],
           "scale_embedding": cfg.scale_embeddings,
           "share_encoder_decoder_embeddings": cfg.share_embeddings,
           "tie_word_embeddings": cfg.output_tied, "dropout": cfg.dropout_rate,
           "attention_dropout": cfg.attention_dropout_rate, "activation_dropout": rate,
           "encoder_layerdrop": 0.0, "decoder_layerdrop": 0.0,
           "pad_token_id": ids.pad, "eos_token_id": ids.eos, "forced_eos_token_id": ids.eos,
           "decoder_start_token_id": ids.start, "bad_words_ids": [[ids.pad]]}
    return dict(sorted(out.items()))
