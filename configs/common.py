"""Pieces every experiment config shares: the `:arg` parser and the optimizer/train/mesh sections.

Each section declares every key the trainer reads, with a one-line comment. Config files build on
these and override values; they never add keys the trainer does not know (the loader rejects them).
This module imports only ml_collections and train.config (neither imports jax), so loading a
config stays cheap.
"""

from __future__ import annotations

import ml_collections

from train.config import BOOL_WORDS, a_type


def parse_arg(arg: str | None, **defaults) -> ml_collections.ConfigDict:
    """Parses a config's `:arg` string, e.g. 'posemb=none,smoke', against declared defaults.

    Each default's type decides how its value is read; a bare name sets a bool to True. Unknown
    names fail with the list of allowed ones.
    """
    result = ml_collections.ConfigDict(defaults)
    for item in filter(None, (part.strip() for part in (arg or "").split(","))):
        name, has_value, raw = item.partition("=")
        if name not in defaults:
            raise ValueError(f"unknown config argument {name!r} in {arg!r}; allowed: "
                             f"{sorted(defaults)}")
        kind = type(defaults[name])
        if kind is bool:
            value = BOOL_WORDS.get(raw.lower()) if has_value else True
            if value is None:  # a misspelt 'ture' must not quietly mean False
                raise ValueError(f"config argument {item!r}: expected {name}, {name}=true or "
                                 f"{name}=false")
        elif not has_value:
            raise ValueError(f"config argument {name!r} needs a value: {name}=...")
        else:
            try:
                value = kind(raw)
            except ValueError as error:
                raise ValueError(f"config argument {item!r}: expected {a_type(kind)} like "
                                 f"{defaults[name]!r}") from error
        result[name] = value
    return result


def optimizer_config(**overrides) -> ml_collections.ConfigDict:
    """train/optimizers.py reads exactly these keys."""
    config = ml_collections.ConfigDict()
    config.name = "adam"                # 'adam' | 'adamw' (decoupled decay, no decay on biases/norms)
                                        # | 'sgd' (heavy-ball momentum)
    config.schedule = "inverse_sqrt"    # 'inverse_sqrt' (Vaswani eq. 3) | 'linear' | 'cosine' | 'constant'
    config.learning_rate = 1.0          # peak lr; for 'inverse_sqrt' the scale on d_model^-0.5 * min(..)
    config.warmup_steps = 4000          # linear warmup length in optimizer updates
    config.total_steps = -1             # end of the linear/cosine decay; -1: train.num_steps
    config.end_learning_rate = 0.0      # lr reached at total_steps by 'linear' and 'cosine'
    config.b1 = 0.9                     # Adam beta1
    config.b2 = 0.98                    # Adam beta2 (Vaswani et al.: 0.98)
    config.eps = 1e-9                   # Adam epsilon (Vaswani et al.: 1e-9)
    config.momentum = 0.0               # SGD's velocity decay ('sgd' only; ViT fine-tuning: 0.9)
    config.weight_decay = 0.0           # decoupled weight decay, 'adamw' only
    config.clip_norm = 0.0              # global gradient-norm clipping; 0 disables
    config.update(overrides)
    return config


def mixing_keys() -> dict:
    """The image-classification task keys train/mixing.py reads, all off."""
    return dict(
        mixup_alpha=0.0,          # Mixup's Beta(a, a) (Zhang et al. 2018); 0: off
        cutmix_alpha=0.0,         # CutMix's Beta(a, a) (Yun et al. 2019); 0: off
        mixup_prob=1.0,           # probability a batch is mixed
        mixup_switch_prob=0.5,    # with both on: probability of CutMix over Mixup
    )


def train_config(**overrides) -> ml_collections.ConfigDict:
    """train/trainer.py reads exactly these keys."""
    config = ml_collections.ConfigDict()
    config.num_steps = 10_000           # optimizer updates in the whole run
    config.grad_accum_steps = 1         # microbatches per update (the batch is split this many ways)
    config.log_every = 100              # steps between train-metric logs
    config.eval_every = 1000            # steps between evals (0: only at the end)
    config.checkpoint_every = 1000      # steps between checkpoints (always one at the end)
    config.keep_checkpoints = 3         # how many recent checkpoints to keep
    config.average_checkpoints = 0      # >0: the final eval is of the mean of the last N
                                        # checkpoints' parameters (Vaswani et al. Sec. 6.1)
    config.async_checkpoint = True      # write checkpoints in the background
    config.peak_flops = 0.0             # per-device peak FLOP/s for MFU; 0: a known GPU's or
                                        # TPU's bf16 data sheet for a bf16 model, else matmuls
                                        # of the model's dtype measured here
    config.progress_bar = True          # tqdm bar on the terminal (process 0 only)
    config.nonfinite = "stop"           # NaN/Inf loss or gradient: 'stop' (keep the last good
                                        # checkpoint) | 'skip' (drop that update and count it)
    config.ema_decay = 0.0              # >0: keep an exponential moving average of the weights
                                        # (decay d per step) and evaluate it too (`ema.*` metrics)
    config.update(overrides)
    return config


def mesh_config(**overrides) -> ml_collections.ConfigDict:
    """The device mesh (train/partitioning.py). One size may be -1: all remaining devices."""
    config = ml_collections.ConfigDict()
    config.data = -1                    # data parallel: batch split, parameters replicated
    config.fsdp = 1                     # fully sharded data parallel: batch and parameters split
    config.tensor = 1                   # tensor parallel: heads and MLP hidden units split
    config.update(overrides)
    return config
