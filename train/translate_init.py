"""Where a translation run's weights and vocabulary come from (`config.init`).

    init = resolve_init(config)               # TranslationInit(model_config, tokenizer, ...)
    params = put_pretrained(variables["params"], init.params, what=...)  # in init_variables
    plan = resolve_init(config, build=False)  # --print_config: the model, no weights read

  'scratch'   a random Transformer of config.model; the SentencePiece vocabulary trained on the
              run's texts (config.data.vocab_size, vocab_model_type), as always.
  <folder>    a Hugging Face Marian folder (config.json + model.safetensors: MarianMTModel,
              models/hf_marian.py) holding its tokenizer in the form `python -m train.export`
              writes (train/marian_tokenizer.py).
  <workdir>   the workdir of an earlier translation run: its config.json (the model that ran),
              vocabulary/ and latest checkpoint.

The checkpoint decides the architecture (config.model's sizes and options are replaced, as
ViT's and BERT's `init=` replace theirs) and the vocabulary: a model's embeddings are bound to
the ids it was trained with, so the run tokenizes with the checkpoint's own vocabulary, which
train/vocabulary.py then keeps in the workdir (config.data.vocab_size and vocab_model_type do
not apply). A folder without a tokenizer, or with OPUS-MT's own (pieces numbered otherwise,
often one vocabulary per language), is refused with what to do: this project's pipeline reads
one SentencePiece model whose ids are the model's. The run decides `RUN_FIELDS` (dropout rates,
dtypes, attention kernel, remat, layer layout) from config.model. The decoder's start token is
the checkpoint's too (`decoder_start`: Marian's models start from padding). `notes` say which
weights came from where; the workdir's config.json records the model that runs.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

import ml_collections

from models.safetensors_file import CheckpointError
from models.transformer import TransformerConfig
from train import storage
from train.config import ConfigError, to_dataclass
from train.run_config import read_resolved, saved_model

TASK = "translate"
# TransformerConfig fields a run sets itself, whatever the checkpoint used.
RUN_FIELDS = ("dropout_rate", "attention_dropout_rate", "mlp_dropout_rate",
              "attention_implementation", "dtype", "param_dtype", "remat", "scan_layers")


@dataclasses.dataclass(frozen=True)
class TranslationInit:
    """What `config.init` resolves to."""

    model_config: TransformerConfig | None  # None: scratch (config.model and the vocabulary's
                                            # size decide it)
    tokenizer: Any                          # the checkpoint's vocabulary; None for scratch
    params: Any                             # the checkpoint's parameters (NumPy, loop layout);
                                            # None for scratch and in a plan
    notes: tuple[str, ...]                  # the console lines: which weights, from where


def _run_fields(config: ml_collections.ConfigDict) -> dict[str, Any]:
    section = config.model.to_dict()
    return {k: section[k] for k in RUN_FIELDS if k in section}


def _architecture(cfg: TransformerConfig) -> dict[str, Any]:
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)
            if f.name not in RUN_FIELDS}


def _describe(cfg: TransformerConfig) -> str:
    return (f"{cfg.encoder_layers} + {cfg.decoder_layers} layers, d_model {cfg.d_model}, "
            f"{cfg.vocab_size:,} tokens")


def resolve_init(config: ml_collections.ConfigDict, *, build: bool = True) -> TranslationInit:
    """The TranslationInit of `config.init` (module docstring). build=False plans: the model
    and vocabulary from the checkpoint's config and files, no weights read (params None)."""
    if not config.init:
        raise ConfigError("config.init is empty; use 'scratch', a Hugging Face Marian folder or "
                          "the workdir of a translation run")
    if config.init == "scratch":
        return TranslationInit(None, None, None, ())
    local = pathlib.Path(config.init).expanduser()  # local path: an HF folder, models/ reads
    from models.hf_folder import WEIGHTS_FILE

    if (local / WEIGHTS_FILE).is_file():
        return _hf_folder(config, local, build)
    return _workdir(config, storage.run_path(config.init), build)


def _model(config, found: TransformerConfig, where: str) -> TransformerConfig:
    model_section = config.model.copy_and_resolve_references()
    with model_section.unlocked():
        del model_section["name"]
    try:
        return to_dataclass(TransformerConfig, model_section, "model", **_architecture(found))
    except ConfigError as error:
        raise ConfigError(f"config.init={config.init!r} ({where}): {error}") from error


def _hf_folder(config, folder: pathlib.Path, build: bool) -> TranslationInit:
    from models import hf_marian
    from train.marian_tokenizer import read_tokenizer

    init = config.init
    try:
        found, ids = hf_marian.load_hf_config(folder)
    except CheckpointError as error:
        raise ConfigError(f"config.init={init!r}: {error}") from error
    tokenizer = read_tokenizer(folder, ids)
    if tokenizer is None:
        raise ConfigError(
            f"config.init={init!r} holds no tokenizer (source.spm, target.spm, vocab.json): a "
            "run must tokenize with the vocabulary the weights were trained with; "
            "`python -m train.export` writes it beside the weights")
    if (ids.eos_id, ids.start_id) != (tokenizer.eos_id, found.start_id(tokenizer.bos_id)):
        raise ConfigError(
            f"config.init={init!r}: its config.json's eos_token_id / decoder_start_token_id "
            f"({ids.eos}, {ids.start}) are not its tokenizer's EOS and start ({tokenizer.eos_id}, "
            f"{found.start_id(tokenizer.bos_id)} in the tokenizer's ids)")
    cfg = _model(config, found, "a Hugging Face Marian folder")
    params = None
    if build:
        try:
            params = hf_marian.load_hf_checkpoint(folder)[1]
        except CheckpointError as error:
            raise ConfigError(f"config.init={init!r}: {error}") from error
    return TranslationInit(cfg, tokenizer, params, (
        f"weights: the Hugging Face Marian checkpoint {folder} ({_describe(found)}) and its "
        "vocabulary; its architecture replaces config.model's",))


def _workdir(config, workdir, build: bool) -> TranslationInit:
    from train import vocabulary
    from train.checkpointing import load_params

    init = config.init
    saved_path = workdir / "config.json"
    if not saved_path.is_file():
        raise ConfigError(
            f"config.init={init!r} is neither 'scratch', a Hugging Face Marian folder "
            f"(config.json + model.safetensors) nor a translation workdir: {saved_path} does "
            "not exist")
    saved = read_resolved(saved_path)
    task = saved.get("task", {}).get("name")
    if task != TASK:
        raise ConfigError(f"config.init={init!r}: that run's task is {task!r}, not {TASK!r}")
    found = saved_model(TransformerConfig, saved, workdir)
    tokenizer = vocabulary.load(
        workdir, fix=f"it is the vocabulary of config.init={init!r}: restore it from a copy")
    if tokenizer is None:
        raise ConfigError(f"config.init={init!r} keeps no vocabulary ({workdir}/vocabulary/): "
                          "it was written before runs kept theirs; start from a run that has one")
    if vocabulary.kind_of(tokenizer) != "sentencepiece":
        raise ConfigError(f"config.init={init!r}: its vocabulary {tokenizer.path} is not "
                          "SentencePiece")
    cfg = _model(config, found, "a translation workdir")
    params = load_params(workdir) if build else None
    return TranslationInit(cfg, tokenizer, params, (
        f"weights: the run in {workdir}, its latest checkpoint ({_describe(found)}), and its "
        "vocabulary; its architecture replaces config.model's",))
