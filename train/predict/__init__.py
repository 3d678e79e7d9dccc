"""python -m train.predict WORKDIR [options]: use a trained run, from its workdir alone.

A run's workdir holds all a prediction needs: config.json (the model that ran and its task,
train/run_config.py), vocabulary/ (train/vocabulary.py) and checkpoints/ (the latest is used,
train/checkpointing.py `load_params`). `load_run` reads them with the weights the run's final
eval scored: the average of its last checkpoints for a finished run with
train.average_checkpoints > 0, else the latest's (`--weights` chooses: `raw`, the latest's;
`ema`, its moving average of the weights, for a run with train.ema_decay > 0; `average`;
train/run_weights.py). Each task that predicts has a module here, named in PREDICTORS, with
    add_arguments(parser)           its own options
    predict(run, args) -> outputs   what it makes of the inputs (and prints)
so `python -m train.predict WORKDIR --help` lists the options of that run's task.

    causal_lm         generate continuations of prompts (train/predict/causal_lm.py)
    classify, deit    the top classes of image files (train/predict/classify.py); a DeiT
                      student's two heads averaged as its evaluation averages them
    translate         translate sentences (train/predict/translate.py)
    bert_pretrain,    fill the [MASK]s of texts (train/predict/bert_pretrain.py), with a
    distill_pretrain  pretrained BERT or a DistilBERT student of one
    finetune,         classify or tag texts, answer questions from a context, choose an
    distill_finetune  ending, with a fine-tuned BERT or a student distilled from one
                      (train/predict/finetune.py)

Each reads its inputs as the run's eval pipeline does (its own functions, not copies) and runs
the model batched over all local devices (train/predict/batching.py).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from typing import Any

from train import run_config, storage
from train.config import ConfigError

PREDICTORS = {"causal_lm": "train.predict.causal_lm", "classify": "train.predict.classify",
              "deit": "train.predict.classify", "translate": "train.predict.translate",
              "bert_pretrain": "train.predict.bert_pretrain",
              "distill_pretrain": "train.predict.bert_pretrain",
              "finetune": "train.predict.finetune", "distill_finetune": "train.predict.finetune"}

# Tasks without a predictor, and what to do with such a run instead.
INSTEAD = {"mae_pretrain": "an MAE encoder classifies nothing by itself: fine-tune or probe it "
                           "(configs/vit/fashion_mnist.py:init=WORKDIR[,probe]) and predict with "
                           "that run; notebooks/mae_reconstructions.ipynb shows what it "
                           "reconstructs"}


@dataclasses.dataclass
class Run:
    """What a workdir holds for prediction: its resolved config (a dict), vocabulary (or None)
    and the latest checkpoint's parameters (host arrays)."""

    workdir: Any
    config: dict
    tokenizer: Any
    params: Any

    @property
    def task(self) -> str:
        return self.config["task"]["name"]


def task_of(workdir: str | os.PathLike) -> tuple[str, dict]:
    """(the run's task name, its config.json) with a ConfigError naming what is wrong: not a
    run's workdir, or a task that has no predictor yet."""
    directory = storage.run_path(workdir)
    path = directory / "config.json"
    if not path.is_file():
        raise ConfigError(f"{path} does not exist: {directory} is not the workdir of a run "
                          "(python -m train --workdir DIR writes one)")
    config = run_config.read_resolved(path)
    task = config.get("task", {}).get("name")
    if task not in PREDICTORS:
        instead = f": {INSTEAD[task]}" if task in INSTEAD else ""
        raise ConfigError(f"{directory} holds a {task!r} run; python -m train.predict supports "
                          f"{sorted(PREDICTORS)} so far{instead}")
    return task, config


def predictor(task: str):
    """The module that predicts for `task` (PREDICTORS)."""
    return importlib.import_module(PREDICTORS[task])


def load_run(workdir: str | os.PathLike, weights: str | None = None, note=None) -> Run:
    """The run in `workdir` (module docstring), with the `weights` of train/run_weights.py
    (None: those its final eval scored; `note` is told which were averaged); ConfigError for a
    workdir that is not a run's or of a task without a predictor, CheckpointError when it holds
    no checkpoint yet (or no average)."""
    from train import vocabulary
    from train.run_weights import final_eval_weights, load_weights

    task, config = task_of(workdir)
    directory = storage.run_path(workdir)
    tokenizer = vocabulary.load(directory, fix="it is the vocabulary the run was trained with: "
                                               "restore it from a copy")
    params = load_weights(directory, weights=weights or final_eval_weights(directory, config),
                          note=note)
    return Run(directory, config, tokenizer, params)
