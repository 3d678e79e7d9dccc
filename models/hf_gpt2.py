"""Hugging Face GPT-2 checkpoints in and out: safetensors files, config.json, parameter names.

    cfg, params = load_hf_checkpoint("path/to/gpt2")     # config.json + model.safetensors
    logits = DecoderLM(cfg).apply({"params": params}, tokens)
    save_hf_checkpoint("out_dir", cfg, params, eos_id=tokenizer.eos_id)  # HF GPT2LMHeadModel

A folder holds ``config.json`` (HF ``GPT2Config``) and ``model.safetensors``. The tensors of HF
``GPT2LMHeadModel`` (``transformer.*`` and, untied, ``lm_head.weight``) or of ``GPT2Model``
(the same names without ``transformer.``, as the hub's own ``gpt2`` files have them) become the
parameters of our ``models.decoder_lm.DecoderLM``. Below, ``n`` heads, ``d`` head width,
``E = n d``, ``F`` the feed-forward width, ``i`` the layer; HF's ``Conv1D`` stores its weight
``[in, out]``, as our kernels are:

  ours                                  HF                              how
  embedding/embedding         [V, E]    wte.weight          [V, E]      =
  posemb/embedding            [P, E]    wpe.weight          [P, E]      =
  block_i/norm_attention/scale, bias    h.i.ln_1.weight, .bias          =
  block_i/attention/{query,key,value}/kernel [E, n, d]
                                        h.i.attn.c_attn.weight [E, 3E]  columns split in three
                                                                        (q, k, v), each [E, n, d]
  block_i/attention/{query,key,value}/bias   [n, d]
                                        h.i.attn.c_attn.bias   [3E]     split in three, [n, d]
  block_i/attention/out/kernel [n, d, E] h.i.attn.c_proj.weight [E, E]  reshaped
  block_i/attention/out/bias  [E]       h.i.attn.c_proj.bias            =
  block_i/norm_mlp/scale, bias          h.i.ln_2.weight, .bias          =
  block_i/mlp/wi/kernel, bias [E, F]    h.i.mlp.c_fc.weight, .bias      =
  block_i/mlp/wo/kernel, bias [F, E]    h.i.mlp.c_proj.weight, .bias    =
  norm/scale, bias                      ln_f.weight, .bias              =
  logits/kernel               [E, V]    lm_head.weight      [V, E]      transposed (untied only)

Head ``h``'s feature ``j`` is column ``h d + j`` of its third of ``c_attn`` (HF splits the heads
with ``view(..., n, d)``), which is our ``[E, n, d]`` kernel reshaped to ``[E, E]``.

Strict: every tensor the model needs must be there with its shape, and nothing else may be,
except HF's buffers ``h.i.attn.bias`` / ``h.i.attn.masked_bias`` (the causal mask of older
files) and, tied, ``lm_head.weight``, which must then equal ``wte.weight``. One
``CheckpointError`` lists every missing, unexpected and mis-shaped tensor. Only what our model
computes converts: the config must ask for scaled attention (``scale_attn_weights``), no
per-layer scaling (``scale_attn_by_inverse_layer_idx``), no cross-attention and an activation
we have ('gelu_new' and 'gelu_pytorch_tanh' are our 'gelu_tanh', 'gelu' the exact one,
'relu'); the export needs GPT-2's architecture (learned positions, pre-LN LayerNorm, biases,
unscaled embeddings, d_model / num_heads wide heads, as many key/value heads as heads).

The export writes ``bos_token_id`` = ``eos_token_id`` = ``eos_id``, the EOS of the vocabulary
the model learned (a run's tokenizer's ``eos_id``: every document starts and ends with it,
data/pipelines/lm.py), on which HF's ``generate`` stops. Left out, HF would take GPT-2's own
id 50256, which a vocabulary of a few thousand tokens lacks (generation would never stop): so
without ``eos_id`` a vocabulary holding id 50256 gets it, and a smaller one is refused rather
than given an id it does not have.

This module is pure NumPy (plus our ``DecoderLMConfig``): it never imports train or data.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from typing import Any, Mapping

import numpy as np

from models.decoder_lm import DecoderLMConfig, with_layer_layout
from models.hf_folder import CONFIG_FILE, WEIGHTS_FILE, read_config_json, require_files
from models.hf_folder import write_folder as write_checkpoint
from models.param_tables import flatten, mismatch_error, nest, numpy_dtype, unboxed
from models.safetensors_file import CheckpointError, contiguous, read_safetensors

PREFIX = "transformer."          # GPT2LMHeadModel's names of the GPT2Model inside it
LM_HEAD = "lm_head.weight"
_BUFFERS = ("attn.bias", "attn.masked_bias")   # per layer: h.i.attn.bias, h.i.attn.masked_bias

# HF activation_function -> ours (the Flax and PyTorch GPT-2 compute these the same way).
_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu",
                "relu": "relu"}
_EXPORTED_ACTIVATIONS = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu"}
GPT2_EOS = 50256  # GPT-2's '<|endoftext|>', HF GPT2Config's default bos and eos id


# ----------------------------------------------------------------------------- config.json

# HF GPT2Config key -> our field: required, and converted both ways.
_CONFIG_KEYS = {"vocab_size": "vocab_size", "n_positions": "max_length", "n_embd": "d_model",
                "n_layer": "num_layers", "n_head": "num_heads"}
# Optional in config.json (HF's defaults, which are also ours, when absent).
_OPTIONAL_KEYS = {"layer_norm_epsilon": "norm_epsilon", "initializer_range": "initializer_range",
                  "attn_pdrop": "attention_dropout_rate", "resid_pdrop": "dropout_rate",
                  "tie_word_embeddings": "tie_embeddings"}


def config_from_hf(config_json: Mapping[str, Any], **overrides) -> DecoderLMConfig:
    """Our DecoderLMConfig from an HF GPT-2 ``config.json`` dict; ``overrides`` set other
    fields (``dtype``, ``scan_layers``, ...). CheckpointError naming every missing key and every
    setting our model does not compute."""
    problems = []
    model_type = config_json.get("model_type", "gpt2")
    if model_type != "gpt2":
        problems.append(f"model_type={model_type!r}: only 'gpt2' checkpoints convert")
    missing = [k for k in _CONFIG_KEYS if k not in config_json]
    if missing:
        problems.append(f"missing keys {missing}")
    act = config_json.get("activation_function", "gelu_new")
    if act not in _ACTIVATIONS:
        problems.append(f"activation_function={act!r}: ours are {sorted(_ACTIVATIONS)}")
    for key, wanted in (("scale_attn_weights", True), ("scale_attn_by_inverse_layer_idx", False),
                        ("add_cross_attention", False)):
        if bool(config_json.get(key, wanted)) != wanted:
            problems.append(f"{key}={config_json[key]!r}: our attention needs {wanted}")
    embd, resid = config_json.get("embd_pdrop", 0.1), config_json.get("resid_pdrop", 0.1)
    if embd != resid and "dropout_rate" not in overrides:
        problems.append(f"embd_pdrop={embd} and resid_pdrop={resid} differ: our model has one "
                        "rate for both (dropout_rate); pass dropout_rate=... to choose")
    if problems:
        raise CheckpointError("HF config does not describe a GPT-2 we can build: "
                              + "; ".join(problems))
    fields = {ours: config_json[hf] for hf, ours in _CONFIG_KEYS.items()}
    fields.update({ours: config_json[hf] for hf, ours in _OPTIONAL_KEYS.items()
                   if config_json.get(hf) is not None})
    n_inner = config_json.get("n_inner")
    fields.update(d_ff=4 * fields["d_model"] if n_inner is None else n_inner,
                  activation=_ACTIVATIONS[act], posemb="learned", norm="layernorm",
                  norm_position="pre", use_bias=True, scale_embeddings=False)
    fields.update(overrides)
    try:
        return DecoderLMConfig(**fields)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"HF config gives an invalid DecoderLMConfig: {e}") from e


def _check_convertible(cfg: DecoderLMConfig) -> None:
    problems = [f"{field}={getattr(cfg, field)!r} (HF GPT-2: {want!r})" for field, want in (
        ("posemb", "learned"), ("norm", "layernorm"), ("norm_position", "pre"),
        ("use_bias", True), ("scale_embeddings", False)) if getattr(cfg, field) != want]
    if cfg.qk_dim * cfg.num_heads != cfg.d_model:
        problems.append(f"head_dim={cfg.head_dim} (HF GPT-2: d_model / num_heads)")
    if cfg.kv_heads != cfg.num_heads:
        problems.append(f"num_kv_heads={cfg.num_kv_heads} (HF GPT-2: one per head)")
    if cfg.activation not in _EXPORTED_ACTIVATIONS:
        problems.append(f"activation={cfg.activation!r} (HF GPT-2: "
                        f"{sorted(_EXPORTED_ACTIVATIONS)})")
    if problems:
        raise CheckpointError("this DecoderLM has no HF GPT-2 equivalent: " + ", ".join(problems))


def _eos(cfg: DecoderLMConfig, eos_id: int | None) -> int:
    """The bos/eos id config.json gets (module docstring); CheckpointError for an id outside
    the vocabulary, or none given for a vocabulary without GPT-2's."""
    if eos_id is None:
        if cfg.vocab_size > GPT2_EOS:
            return GPT2_EOS
        raise CheckpointError(f"no eos_id for a vocabulary of {cfg.vocab_size} tokens: HF's "
                              f"default EOS id {GPT2_EOS} (GPT-2's '<|endoftext|>') is not one "
                              "of them, and HF generate would never stop; pass eos_id=the EOS "
                              "id of the tokenizer the model was trained with (a run's "
                              "tokenizer.eos_id)")
    if isinstance(eos_id, bool) or not isinstance(eos_id, (int, np.integer)) or not (
            0 <= eos_id < cfg.vocab_size):
        raise CheckpointError(f"eos_id={eos_id!r} is not an id of this model's vocabulary "
                              f"(0..{cfg.vocab_size - 1}): pass the EOS id of the tokenizer it "
                              "was trained with (a run's tokenizer.eos_id)")
    return int(eos_id)


def config_to_hf(cfg: DecoderLMConfig, eos_id: int | None = None) -> dict[str, Any]:
    """The HF GPT-2 ``config.json`` dict of ``cfg`` (without ``architectures``), with ``eos_id``
    (the vocabulary's EOS) as its bos and eos ids (module docstring)."""
    _check_convertible(cfg)
    eos = _eos(cfg, eos_id)
    out: dict[str, Any] = {"model_type": "gpt2", "n_inner": cfg.d_ff,
                           "activation_function": _EXPORTED_ACTIVATIONS[cfg.activation],
                           "embd_pdrop": cfg.dropout_rate, "scale_attn_weights": True,
                           "bos_token_id": eos, "eos_token_id": eos}
    out.update({hf: getattr(cfg, ours) for hf, ours in {**_CONFIG_KEYS, **_OPTIONAL_KEYS}.items()})
    return dict(sorted(out.items()))


# ----------------------------------------------------------------------------- parameter names


@dataclasses.dataclass(frozen=True)
class _Entry:
    """One HF tensor ``hf`` (name without ``transformer.``) of shape ``hf_shape`` and the
    parameters of ours it holds: ``parts``, (path, shape) pairs laid side by side along HF's
    last axis (three for ``c_attn``, one otherwise), each a reshape of its slice. ``transposed``:
    HF stores the transpose (``nn.Linear`` ``[out, in]``: the untied ``lm_head``)."""

    hf: str
    hf_shape: tuple[int, ...]
    parts: tuple[tuple[tuple[str, ...], tuple[int, ...]], ...]
    transposed: bool = False

    def from_hf(self, x: np.ndarray) -> list[np.ndarray]:
        x = x.T if self.transposed else x
        chunks = np.split(x, len(self.parts), axis=-1)
        return [chunk.reshape(shape) for chunk, (_, shape) in zip(chunks, self.parts)]

    def to_hf(self, arrays: list[np.ndarray]) -> np.ndarray:
        rows = (self.hf_shape[::-1] if self.transposed else self.hf_shape)[:-1]
        x = np.concatenate([np.asarray(a).reshape(*rows, -1) for a in arrays], axis=-1)
        return x.T if self.transposed else x


def _mapping(cfg: DecoderLMConfig) -> list[_Entry]:
    """The table of the module docstring for ``cfg`` (``lm_head`` only when untied)."""
    _check_convertible(cfg)
    V, E, F, P = cfg.vocab_size, cfg.d_model, cfg.d_ff, cfg.max_length
    n, d = cfg.num_heads, cfg.qk_dim
    entries = []

    def add(hf, hf_shape, *parts, transposed=False):
        entries.append(_Entry(hf, tuple(hf_shape), tuple(
            (tuple(path.split("/")), tuple(shape)) for path, shape in parts), transposed))

    def norm(ours, hf):
        add(f"{hf}.weight", (E,), (f"{ours}/scale", (E,)))
        add(f"{hf}.bias", (E,), (f"{ours}/bias", (E,)))

    add("wte.weight", (V, E), ("embedding/embedding", (V, E)))
    add("wpe.weight", (P, E), ("posemb/embedding", (P, E)))
    for i in range(cfg.num_layers):
        ours, hf = f"block_{i}", f"h.{i}"
        norm(f"{ours}/norm_attention", f"{hf}.ln_1")
        qkv = ("query", "key", "value")
        add(f"{hf}.attn.c_attn.weight", (E, 3 * E),
            *((f"{ours}/attention/{p}/kernel", (E, n, d)) for p in qkv))
        add(f"{hf}.attn.c_attn.bias", (3 * E,),
            *((f"{ours}/attention/{p}/bias", (n, d)) for p in qkv))
        add(f"{hf}.attn.c_proj.weight", (E, E), (f"{ours}/attention/out/kernel", (n, d, E)))
        add(f"{hf}.attn.c_proj.bias", (E,), (f"{ours}/attention/out/bias", (E,)))
        norm(f"{ours}/norm_mlp", f"{hf}.ln_2")
        add(f"{hf}.mlp.c_fc.weight", (E, F), (f"{ours}/mlp/wi/kernel", (E, F)))
        add(f"{hf}.mlp.c_fc.bias", (F,), (f"{ours}/mlp/wi/bias", (F,)))
        add(f"{hf}.mlp.c_proj.weight", (F, E), (f"{ours}/mlp/wo/kernel", (F, E)))
        add(f"{hf}.mlp.c_proj.bias", (E,), (f"{ours}/mlp/wo/bias", (E,)))
    norm("norm", "ln_f")
    if not cfg.tie_embeddings:
        add(LM_HEAD, (V, E), ("logits/kernel", (E, V)), transposed=True)
    return entries


def _hf_name(entry: _Entry, prefix: str) -> str:
    return entry.hf if entry.hf == LM_HEAD else prefix + entry.hf


def hf_names(cfg: DecoderLMConfig) -> dict[str, tuple[int, ...]]:
    """{HF tensor name: shape} that ``params_to_hf`` writes for ``cfg`` (GPT2LMHeadModel's)."""
    return {_hf_name(e, PREFIX): e.hf_shape for e in _mapping(cfg)}


def _describe(cfg: DecoderLMConfig) -> str:
    return (f"vocab_size={cfg.vocab_size}, n_positions={cfg.max_length}, n_embd={cfg.d_model}, "
            f"n_layer={cfg.num_layers}, n_head={cfg.num_heads}, n_inner={cfg.d_ff}, "
            f"tie_word_embeddings={cfg.tie_embeddings}")


def params_from_hf(tensors: Mapping[str, np.ndarray], cfg: DecoderLMConfig) -> dict:
    """Our ``DecoderLM`` params (nested dicts of NumPy arrays in ``cfg.param_dtype``, in the
    layout of ``cfg.scan_layers``) from HF GPT-2 tensors, named as GPT2LMHeadModel's or as
    GPT2Model's (module docstring). Use as ``{"params": params}``. CheckpointError listing every
    missing, unexpected and mis-shaped tensor."""
    prefix = PREFIX if any(name.startswith(PREFIX) for name in tensors) else ""
    entries = _mapping(cfg)
    expected = {_hf_name(e, prefix): e for e in entries}
    ignored = {f"{prefix}h.{i}.{b}" for i in range(cfg.num_layers) for b in _BUFFERS}
    tied = {LM_HEAD} if cfg.tie_embeddings else set()
    missing = [name for name in expected if name not in tensors]
    unexpected = [name for name in tensors
                  if name not in expected and name not in ignored and name not in tied]
    misshaped = [(name, e.hf_shape, tuple(np.shape(tensors[name])))
                 for name, e in expected.items()
                 if name in tensors and tuple(np.shape(tensors[name])) != e.hf_shape]
    error = mismatch_error(f"checkpoint tensors do not match HF GPT-2 ({_describe(cfg)})",
                           missing, unexpected, misshaped)
    if error is not None:
        raise error
    wte = prefix + "wte.weight"
    if LM_HEAD in tied & set(tensors) and not np.array_equal(tensors[LM_HEAD], tensors[wte]):
        raise CheckpointError(f"{LM_HEAD} differs from {wte}: an untied output layer, but the "
                              "config ties them (tie_word_embeddings); set it false to load one")
    dtype = numpy_dtype(cfg.param_dtype)
    flat = {}
    for name, entry in expected.items():
        for (path, _), array in zip(entry.parts, entry.from_hf(np.asarray(tensors[name]))):
            flat[path] = contiguous(array.astype(dtype, copy=False))
    return with_layer_layout(nest(flat), cfg.scan_layers)


def params_to_hf(params: Mapping, cfg: DecoderLMConfig) -> dict[str, np.ndarray]:
    """HF tensors {GPT2LMHeadModel name: NumPy array} of our params (the tied output layer left
    out, as HF's own files do). Accepts ``{"params": ...}``, boxed leaves, JAX arrays and either
    layer layout. CheckpointError listing every missing, unexpected and mis-shaped parameter."""
    if set(params) == {"params"}:
        params = params["params"]
    flat = flatten(with_layer_layout(unboxed(params), scan=False))
    entries = _mapping(cfg)
    shapes = {path: shape for e in entries for path, shape in e.parts}
    misshaped = [("/".join(p), shape, tuple(np.shape(flat[p])))
                 for p, shape in shapes.items() if p in flat and tuple(np.shape(flat[p])) != shape]
    error = mismatch_error(f"params do not match our DecoderLM ({_describe(cfg)})",
                           ("/".join(p) for p in shapes if p not in flat),
                           ("/".join(p) for p in flat if p not in shapes), misshaped)
    if error is not None:
        raise error
    return {_hf_name(e, PREFIX): contiguous(e.to_hf([np.asarray(flat[p]) for p, _ in e.parts]))
            for e in entries}


# ----------------------------------------------------------------------------- directories


def load_hf_config(directory: str | os.PathLike, **overrides) -> DecoderLMConfig:
    """The DecoderLMConfig of an HF GPT-2 folder from its ``config.json`` alone (no weights
    read)."""
    directory = pathlib.Path(directory)
    require_files(directory, (CONFIG_FILE, WEIGHTS_FILE))
    return config_from_hf(read_config_json(directory), **overrides)


def load_hf_checkpoint(directory: str | os.PathLike, **overrides) -> tuple[DecoderLMConfig, dict]:
    """(cfg, params) of an HF GPT-2 folder (``config.json`` + ``model.safetensors``);
    ``overrides`` go to ``config_from_hf``."""
    directory = pathlib.Path(directory)
    cfg = load_hf_config(directory, **overrides)
    weights_path = directory / WEIGHTS_FILE
    try:
        return cfg, params_from_hf(read_safetensors(weights_path), cfg)
    except CheckpointError as e:
        raise CheckpointError(f"{weights_path}: {e}") from e


def save_hf_checkpoint(directory: str | os.PathLike, cfg: DecoderLMConfig, params: Mapping, *,
                       eos_id: int | None = None, overwrite: bool = False) -> pathlib.Path:
    """Writes ``config.json`` + ``model.safetensors`` loadable by HF ``GPT2LMHeadModel`` (and
    its Flax twin) ``.from_pretrained`` into ``directory``, atomically
    (``models.hf_folder.write_folder``; an occupied folder only with ``overwrite``). ``eos_id``:
    the EOS id of the model's vocabulary (a run's ``tokenizer.eos_id``; module docstring)."""
    config = config_to_hf(cfg, eos_id)
    tensors = params_to_hf(params, cfg)
    config["architectures"] = ["GPT2LMHeadModel"]
    return write_checkpoint(directory, config, tensors, overwrite=overwrite)

