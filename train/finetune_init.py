"""Where a fine-tuning run's encoder, vocabulary and model dimensions come from (`config.init`).

    init = resolve_init(config, scratch_vocab=...)   # Pretrained(model_config, tokenizer, params)
    variables = replace_encoder(variables, init.params)   # inside the task's init_variables
    plan = resolve_init(config, scratch_vocab=..., build=False)  # --print_config: the sizes only

  'scratch'   a random encoder of config.model's dimensions; the WordPiece vocabulary is
              config.data.vocab_file, or one trained on the task's training texts (cached);
  'minilm'    all-MiniLM-L6-v2 (data/fetching/pretrained.py; `python -m data.fetch minilm`): its
              config.json gives the model dimensions (overriding config.model's), its
              tokenizer.json the vocabulary, its weights the encoder (models/hf_bert.py);
  <path>      the workdir of a pretraining run (`python -m train --config configs/bert/
              pretrain.py ...`) or of a general distillation (configs/bert/distill.py, a
              smaller student): its config.json gives the model dimensions, its vocabulary/
              the vocabulary the run trained with (train/vocabulary.py), the latest checkpoint
              the encoder (train.checkpointing.load_params(path)['bert']). A workdir written
              before runs kept their vocabulary has none: then its config names it (its
              data.vocab_file, or the cached WordPiece vocabulary of its data.names /
              train_split / vocab_size / lowercase), as the run's own resume did.
Settings that are not dimensions (dropout rates, dtype, attention implementation, remat,
scan_layers, nsp) always come from config.model, so fine-tuning chooses them; the encoder's
parameters are converted to the model's layer layout (models.bert.with_layer_layout).
`replace_encoder` checks that every encoder parameter is there with its shape and names each
difference. The resulting BertConfig, every field, is the model section of the fine-tuning run's
config.json (train/run_config.py), and `description` the line the trainer prints: which weights,
from where.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import flax.linen as nn
import ml_collections
from etils import epath

from models.bert import SCAN_NAME, BertConfig, with_layer_layout
from train import run_config, storage, vocabulary
from train.config import ConfigError, to_dataclass
from train.pretrained_params import put_pretrained

INIT_NAMES = ("scratch", "minilm")  # or a path
# The tasks whose workdirs hold a pretrained encoder: BERT pretraining, general distillation.
PRETRAINING_TASKS = ("bert_pretrain", "distill_pretrain")
# BertConfig fields fine-tuning sets itself, whatever the pretrained model used.
RUNTIME_FIELDS = ("dropout_rate", "attention_dropout_rate", "attention_implementation", "dtype",
                  "param_dtype", "remat", "scan_layers", "nsp")
# The fields a pretrained init decides (config.model's values of them are replaced).
_DIMENSIONS = {f.name for f in dataclasses.fields(BertConfig)} - {*RUNTIME_FIELDS, "vocab_size"}


@dataclasses.dataclass
class Pretrained:
    """What `config.init` resolves to."""

    model_config: BertConfig
    tokenizer: Any  # data.wordpiece.WordPieceTokenizer; None in a plan, for one not trained yet
    params: Any  # the encoder's parameter tree (a BertModel's), NumPy; None for 'scratch' / a plan
    description: str  # the console line: 'encoder: <what> from <where> (<its sizes>)'
    pending: str = ""  # a plan without its vocabulary: what decides the size (model_config's
                       # vocab_size then stands in: the data.vocab_size asked for)


def _model_section(config: ml_collections.ConfigDict) -> dict[str, Any]:
    section = config.model.to_dict()
    section.pop("name", None)
    return section


def _runtime(config: ml_collections.ConfigDict) -> dict[str, Any]:
    section = _model_section(config)
    return {k: section[k] for k in RUNTIME_FIELDS if k in section}


def _describe(what: str, cfg: BertConfig, tokenizer: Any, config=None) -> str:
    """The line the trainer prints; with the run's `config` (a pretrained init), also the
    config values the pretrained model and vocabulary replace, so that none goes unnoticed."""
    tokens = f"{cfg.vocab_size:,} tokens" if tokenizer is not None else "vocabulary not trained yet"
    layers = f"{cfg.num_layers} layer{'s' * (cfg.num_layers != 1)}"
    line = f"encoder: {what} ({layers}, hidden {cfg.hidden_size}, {tokens})"
    if config is None:
        return line
    model, data = config.model, config.data
    replaced = [f"model.{k} {model[k]!r} -> {getattr(cfg, k)!r}" for k in sorted(model.keys())
                if k in _DIMENSIONS and model[k] != getattr(cfg, k)]
    if data.vocab_file:
        replaced.append(f"data.vocab_file {data.vocab_file!r} (the init's vocabulary instead)")
    if tokenizer is not None and data.vocab_size != cfg.vocab_size:
        replaced.append(f"data.vocab_size {data.vocab_size} -> {cfg.vocab_size} (the init's)")
    if tokenizer is not None and data.lowercase != tokenizer.lowercase:
        replaced.append(f"data.lowercase {data.lowercase} -> {tokenizer.lowercase}")
    return line + ("; config values it replaces: " + ", ".join(replaced) if replaced else "")


def resolve_init(config: ml_collections.ConfigDict, scratch_vocab: Callable[[], Any], *,
                 build: bool = True) -> Pretrained:
    """The Pretrained of `config.init` (module docstring); `scratch_vocab()` gives the
    vocabulary of init='scratch' when config.data.vocab_file is empty.

    build=False plans (what `python -m train --print_config` shows): the same model config and
    vocabulary from what is cheap to read, no encoder weights read (params None) and nothing
    trained: `scratch_vocab()` may then return None for a vocabulary not trained yet, and the
    cached vocabulary of a pretraining workdir that kept none may be missing (see `pending`)."""
    init = config.init
    if init == "scratch":
        return _scratch(config, scratch_vocab)
    if init == "minilm":
        return _minilm(config, build)
    if not init:
        raise ConfigError(f"config.init is empty; use one of {list(INIT_NAMES)} or the workdir "
                          "of a pretraining run")
    return _workdir(config, storage.run_path(init), build)  # a local folder or gs:// URL


def _scratch(config, scratch_vocab) -> Pretrained:
    from data.vocab import wordpiece

    data = config.data
    tok = (wordpiece.load_tokenizer(data.vocab_file, lowercase=data.lowercase)
           if data.vocab_file else scratch_vocab())
    model_section = config.model.copy_and_resolve_references()
    with model_section.unlocked():
        del model_section["name"]
    cfg = to_dataclass(BertConfig, model_section, "model",
                       vocab_size=data.vocab_size if tok is None else tok.vocab_size)
    pending = "" if tok is not None else (
        f"the size of the WordPiece vocabulary trained on the {data.train_split} texts of "
        f"{data.name} when the run starts, config.data.vocab_size={data.vocab_size} asked for "
        "(the texts may give fewer or more: data/vocab/wordpiece.py); not trained yet")
    description = _describe("random, config.model's sizes", cfg, tok)
    if unused := vocabulary.unused_size(data, tok):  # (a vocab_file: tok is loaded)
        description += "; " + unused
    return Pretrained(cfg, tok, None, description, pending)


def _minilm(config, build: bool) -> Pretrained:
    from data.vocab import wordpiece
    from data.fetching import pretrained
    from data.errors import DataError
    from models.hf_bert import CheckpointError, load_hf_checkpoint, load_hf_config

    folder = pretrained.minilm_dir()
    try:
        cfg = dataclasses.replace(load_hf_config(folder), **_runtime(config))
        params = load_hf_checkpoint(folder)[1] if build else None
    except CheckpointError as error:  # a file changed since the fetch checked it
        raise DataError(f"config.init='minilm': {error}; run: python -m data.fetch minilm "
                        "--force") from error
    tok = wordpiece.load_tokenizer(folder / "tokenizer.json")
    if tok.vocab_size != cfg.vocab_size:
        raise ConfigError(f"MiniLM's tokenizer has {tok.vocab_size} tokens, its config.json "
                          f"vocab_size={cfg.vocab_size}")
    return Pretrained(cfg, tok, params, _describe(f"all-MiniLM-L6-v2 from {folder}", cfg, tok,
                                                  config))


def _workdir(config, workdir: epath.Path, build: bool) -> Pretrained:
    from data.vocab import wordpiece
    from data.builders.documents import read_documents
    from train import vocabulary
    from train.checkpointing import load_params

    saved_path = workdir / "config.json"
    if not saved_path.is_file():
        raise ConfigError(f"config.init={config.init!r} is neither {list(INIT_NAMES)} nor a "
                          f"pretraining workdir: {saved_path} does not exist (python -m train "
                          "writes it)")
    saved = run_config.read_resolved(saved_path)
    task = saved.get("task", {}).get("name")
    if task not in PRETRAINING_TASKS:
        raise ConfigError(f"config.init={config.init!r}: that run's task is {task!r}, not one of "
                          f"{list(PRETRAINING_TASKS)}")
    data = saved["data"]
    pending = ""
    tok = vocabulary.load(  # kept there since the run began (train/vocabulary.py)
        workdir, fix=f"it is the vocabulary of config.init={config.init!r}: restore it from a copy")
    if tok is not None:
        if vocabulary.kind_of(tok) != "wordpiece":
            raise ConfigError(f"config.init={config.init!r}: its vocabulary {tok.path} is not "
                              "WordPiece")
    elif data.get("vocab_file"):  # a workdir from before runs kept their vocabulary
        tok = wordpiece.load_tokenizer(data["vocab_file"], lowercase=data["lowercase"])
    elif data.get("source", "local") != "local":  # its vocabulary came from a stream's sample
        raise ConfigError(f"config.init={config.init!r} holds no vocabulary/: its run trained "
                          "one on a sample of its TFDS stream, which is not rebuilt here; "
                          "restore the workdir's vocabulary/ from a copy")
    else:  # the cached vocabulary the run trained (retrained identically when missing)
        names = tuple(data["names"])
        key = dict(datasets=names, split=data["train_split"], vocab_size=data["vocab_size"],
                   lowercase=data["lowercase"],
                   max_characters=data.get("vocab_max_characters", 0))  # absent before it was
        if build:
            tok = wordpiece.vocab_for_documents(
                lambda: [d for name in names for d in read_documents(name, data["train_split"])],
                **key)
        else:
            tok = wordpiece.cached(**key)
            pending = "" if tok is not None else (
                f"the size of the WordPiece vocabulary of the pretraining run in {workdir}, "
                f"trained again on {'+'.join(names)} {data['train_split']} when the run starts "
                f"(its data.vocab_size={data['vocab_size']} asked for); not trained yet")
    # The model section of its config.json: the model that ran (train/run_config.py), or in a
    # workdir written before, the requested one (whose vocab_size the vocabulary gives).
    fields = {f.name for f in dataclasses.fields(BertConfig)}
    dims = {k: v for k, v in saved["model"].items() if k in fields and k not in RUNTIME_FIELDS}
    vocab_size = data["vocab_size"] if tok is None else tok.vocab_size
    try:
        cfg = BertConfig(**{**dims, **_runtime(config), "vocab_size": vocab_size})
    except (TypeError, ValueError) as error:
        raise ConfigError(f"the model of {saved_path} gives no valid BertConfig: {error}") from error
    params = None
    if build:
        params = load_params(workdir)
        if "bert" not in params:
            raise ConfigError(f"the checkpoint in {workdir} has no 'bert' encoder (top-level "
                              f"parameters {sorted(params)})")
        params = params["bert"]
    return Pretrained(cfg, tok, params, _describe(
        f"the pretraining run in {workdir}, its latest checkpoint", cfg, tok, config), pending)


def replace_encoder(variables: dict, encoder_params: Any, *, where: str = "bert") -> dict:
    """`variables` with `variables['params'][where]` replaced by `encoder_params` (NumPy), keeping
    the logical-partitioning boxes and dtypes of the random ones (train/pretrained_params.py).
    ConfigError naming every missing, unexpected or mis-shaped parameter."""
    if encoder_params is None:
        return variables
    scanned = SCAN_NAME in variables["params"][where].get("encoder", {})
    encoder_params = with_layer_layout(nn.meta.unbox(encoder_params), scan=scanned)
    params = dict(variables["params"])
    params[where] = put_pretrained(variables["params"][where], encoder_params,
                                   what=f"the pretrained encoder (the model's {where!r})")
    return {**variables, "params": params}
