"""The tiny teachers the distillation tests share, trained on the Brown fixture: a pretraining run
and a Brown POS fine-tuning run from scratch, 4 layers each (so a student has layers 1 and 3),
4 steps, checkpointed at step 4."""

from __future__ import annotations

import os

import pytest

from train.config import apply_override, load_config_file


def config(spec: str, **overrides):
    """The config of `spec` with `--config.KEY=VALUE` overrides (values as the command line's)."""
    loaded = load_config_file(spec)
    for key, value in overrides.items():
        apply_override(loaded, key, str(value))
    return loaded


QUICK = {"model.num_layers": 4, "train.num_steps": 4, "optimizer.warmup_steps": 1,
         "train.eval_every": 0, "train.checkpoint_every": 4, "train.progress_bar": False}


def pretrain_config(**overrides):
    return config("configs/bert/pretrain.py:smoke",
                  **{"data.names": "('brown',)", **QUICK, **overrides})


@pytest.fixture(scope="module")
def teachers(brown_data_root, tmp_path_factory):
    """{'pretrain': workdir, 'finetune': workdir} of the two teachers."""
    from train.trainer import Trainer

    root = tmp_path_factory.mktemp("teachers")
    previous = os.environ.get("PAPERS_JAX_DATA")
    os.environ["PAPERS_JAX_DATA"] = str(brown_data_root)
    try:
        Trainer(pretrain_config(), root / "pretrain").run()
        Trainer(config("configs/bert/finetune.py:task=brown_pos,smoke,init=scratch",
                       **{"data.eval_split": "test", **QUICK}), root / "finetune").run()
    finally:
        if previous is None:
            del os.environ["PAPERS_JAX_DATA"]
        else:
            os.environ["PAPERS_JAX_DATA"] = previous
    return {"pretrain": root / "pretrain", "finetune": root / "finetune"}
