"""`python -m train.export` for a translation run: its weights (those --weights names,
train/export.py) as a Hugging Face Marian folder, the run's vocabulary as MarianTokenizer's files
beside them."""

from __future__ import annotations

import pathlib
from typing import Any, Callable

from models.hf_marian import MarianIds, config_to_hf, save_hf_checkpoint
from models.safetensors_file import CheckpointError
from models.transformer import TransformerConfig
from train import vocabulary
from train.config import ConfigError
from train.run_config import saved_model


def export_translation(directory, saved: dict, out: pathlib.Path, *, format: str,
                       overwrite: bool, load: Callable[[], tuple[Any, str]]) -> str:
    """Writes the run in `directory` (its saved config.json `saved`) to the folder `out`, with
    the weights `load()` reads (train/export.py `weights_loader`: the parameters and the words
    that name them); returns what was written, as a line to print."""
    from train.marian_tokenizer import tokenizer_files

    if format == "npz" or (format == "auto" and out.suffix == ".npz"):
        raise ConfigError(f"{directory} holds a translation run, which exports as a Hugging "
                          "Face Marian folder (--format hf), not an .npz")
    cfg = saved_model(TransformerConfig, saved, directory)
    tokenizer = vocabulary.load(directory)
    if tokenizer is None:
        raise ConfigError(f"{directory} keeps no vocabulary (vocabulary/): it was written before "
                          "runs kept theirs, and the weights mean nothing without it")
    ids = MarianIds.for_ours(cfg.vocab_size, eos_id=tokenizer.eos_id,
                             start_id=cfg.start_id(tokenizer.bos_id))
    try:  # a model Marian cannot describe is refused before any weight is read
        config_to_hf(cfg, ids)
    except CheckpointError as error:
        if cfg.sinusoid_layout == "halves":  # Marian's own choices already: no hint to give
            raise
        raise CheckpointError(f"{error}. A run trains a model Marian describes with "
                              "configs/transformer/translate.py:arch=marian") from None
    files = tokenizer_files(tokenizer, ids, cfg.max_length)
    params, which = load()
    save_hf_checkpoint(out, cfg, params, ids, overwrite=overwrite, extra_files=files)
    return (f"{out}: a Hugging Face MarianMTModel folder with its MarianTokenizer files, of "
            f"{which} in {directory} ({cfg.encoder_layers} + {cfg.decoder_layers} layers, "
            f"d_model {cfg.d_model}, {cfg.vocab_size:,} tokens)")
