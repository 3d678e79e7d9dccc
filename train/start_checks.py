"""What a start checks of its config before it builds anything (train/__main__.py, the
trainer, and `python -m train --print_config`, which refuses what a start refuses): the keys of
the sections the trainer reads, the batching against the mesh and the processes, the step
counts of config.train, and the optimizer's settings."""

from __future__ import annotations

import math

import jax
import ml_collections

from train import partitioning
from train.config import ConfigError, check_choice, check_keys
from train.optimizers import make_optimizer
from train.tasks import task_class

# The keys of config.train, each read by train/trainer.py (configs/common.py train_config
# declares them): a typo in a config file's train section is refused, not trained without.
TRAIN_KEYS = ("num_steps", "grad_accum_steps", "log_every", "eval_every", "checkpoint_every",
              "keep_checkpoints", "average_checkpoints", "async_checkpoint", "peak_flops",
              "progress_bar", "nonfinite", "ema_decay")


def check_sections(config: ml_collections.ConfigDict) -> None:
    """ConfigError naming a key of config.train, config.mesh, config.task or config.data that
    nothing reads (the task's TASK_KEYS and DATA_KEYS), or a section missing; or parameters
    that would train in another dtype than float32 (`check_param_dtypes`)."""
    for section in ("train", "mesh", "task", "data"):
        if section not in config:
            raise ConfigError(f"the config has no config.{section} section: build it with "
                              f"configs/common.py {section}_config()")
    check_keys(config.train, "train", TRAIN_KEYS, "the trainer (train/trainer.py)")
    check_keys(config.mesh, "mesh", partitioning.MESH_AXES, "train/partitioning.py")
    task = task_class(config)
    reader = f"the {config.task.name} task ({task.__module__})"
    check_keys(config.task, "task", task.TASK_KEYS, reader)
    check_keys(config.data, "data", task.DATA_KEYS, reader)
    check_param_dtypes(config.model, "model")


def check_param_dtypes(section: ml_collections.ConfigDict, prefix: str) -> None:
    """ConfigError for a trained model whose parameters are not float32 (at any depth of
    config.model): optax keeps Adam's moments and applies each update in the parameters' dtype
    and there is no float32 master copy, so in bfloat16 every update smaller than the value's
    spacing (1/128 of it) rounds away and the weights stop moving."""
    for key, value in section.items():
        if isinstance(value, ml_collections.ConfigDict):
            check_param_dtypes(value, f"{prefix}.{key}")
        elif key == "param_dtype" and value != "float32":
            raise ConfigError(
                f"config.{prefix}.param_dtype={value!r}: training keeps its parameters and "
                "optimizer state in float32 (an update smaller than a bfloat16 weight's spacing "
                "would round away); set it to 'float32' and compute in bfloat16 with "
                f"config.{prefix}.dtype='bfloat16'")


def check_config(config: ml_collections.ConfigDict, model_config) -> list[str]:
    """What a start checks of the config before it builds anything, for `--print_config`:
    the sections' keys, the optimizer (`model_config`: the planned model, whose width an
    inverse-sqrt schedule reads) and, where this machine's devices make the mesh, the batching
    and step counts; returns a note when they do not (a pod's config printed on a laptop)."""
    check_sections(config)
    try:
        mesh = partitioning.make_mesh(config.mesh)
    except partitioning.MeshError as error:
        notes = [f"not checked here, where the mesh cannot be built: the batch sizes against "
                 f"it ({error})"]
    else:
        validate_batching(config, mesh)
        notes = []
    encoder = getattr(model_config, "encoder", model_config)
    width = getattr(model_config, "d_model", None) or getattr(encoder, "hidden_size", None)
    try:
        make_optimizer(config.optimizer, d_model=width, num_steps=config.train.num_steps)
    except ValueError as error:
        raise ConfigError(str(error)) from error
    return notes


def validate_batching(config: ml_collections.ConfigDict, mesh) -> None:
    """Batch sizes must split evenly over processes, data-parallel devices and microbatches;
    the step counts of config.train must be in range."""
    dp = partitioning.data_parallel_size(mesh)
    accum = config.train.grad_accum_steps
    if accum < 1:
        raise ConfigError(f"config.train.grad_accum_steps={accum} must be >= 1")
    train_keys = task_class(config).train_batch_keys(config)  # e.g. BERT's phase 2 batch too
    for key in (*train_keys, "eval_batch_size"):
        size = config.data[key]
        if size < 1:
            raise ConfigError(f"config.data.{key}={size} must be >= 1")
        if size % dp or size % jax.process_count():
            raise ConfigError(
                f"config.data.{key}={size} is not divisible by the data-parallel size {dp} "
                f"(mesh data*fsdp) and process count {jax.process_count()}; use a multiple of "
                f"{math.lcm(dp, jax.process_count())}")
    for key in train_keys:
        if config.data[key] % (accum * dp):
            raise ConfigError(
                f"config.data.{key}={config.data[key]} must split into grad_accum_steps={accum} "
                f"microbatches that are each divisible by the data-parallel size {dp}")
    check_choice(config, "train.nonfinite", ("stop", "skip"))
    for key, least in (("num_steps", 1), ("log_every", 1), ("checkpoint_every", 1),
                       ("keep_checkpoints", 1), ("eval_every", 0), ("average_checkpoints", 0)):
        value = config.train[key]
        if value < least:
            meaning = " (0: only at the end)" if key == "eval_every" else (
                " (0: the final parameters, no averaging)" if least == 0 else "")
            raise ConfigError(f"config.train.{key}={value} must be >= {least}{meaning}")
    if config.train.num_steps >= 2 ** 31:
        raise ConfigError(f"config.train.num_steps={config.train.num_steps} must be below 2**31 "
                          "(the step counter is int32)")
    if config.train.average_checkpoints > config.train.keep_checkpoints:
        raise ConfigError(
            f"config.train.average_checkpoints={config.train.average_checkpoints} averages more "
            f"checkpoints than config.train.keep_checkpoints={config.train.keep_checkpoints} "
            f"keeps: set keep_checkpoints to {config.train.average_checkpoints} or more")
    if not 0.0 <= config.train.ema_decay < 1.0:
        raise ConfigError(f"config.train.ema_decay={config.train.ema_decay} must be in [0, 1) "
                          "(0: no moving average of the weights; DeiT's code: 0.99996)")
    if config.train.peak_flops < 0:
        raise ConfigError(f"config.train.peak_flops={config.train.peak_flops} must be >= 0 "
                          "(0: measure a matmul here)")
