"""Training objectives, one file each. `get_task(config)` picks one by `config.task.name`;
`plan_task(config, workdir)` tells what it would resolve, building nothing expensive."""

from __future__ import annotations

import importlib

from data import fetched
from train.config import check_choice


def task_class(config):
    """The class of `config.task.name`."""
    # Imported lazily, so that a task's data and model dependencies load only when it is used.
    tasks = {"classify": "train.tasks.classify:ClassificationTask",
             "translate": "train.tasks.translate:TranslationTask",
             "bert_pretrain": "train.tasks.bert_pretrain:BertPretrainingTask",
             "finetune": "train.tasks.finetune:FinetuneTask",
             "mae_pretrain": "train.tasks.mae_pretrain:MAEPretrainingTask",
             "distill_pretrain": "train.tasks.distill_pretrain:GeneralDistillationTask",
             "distill_finetune": "train.tasks.distill_finetune:TaskDistillationTask",
             "causal_lm": "train.tasks.causal_lm:CausalLMTask",
             "deit": "train.tasks.deit:DeiTTask"}
    check_choice(config, "task.name", tasks)
    module, name = tasks[config.task.name].split(":")
    return getattr(importlib.import_module(module), name)


def get_task(config, saved_vocabulary=None):
    """The task of `config.task.name`. `saved_vocabulary`: the vocabulary kept in the run's
    workdir (train/vocabulary.py), which a resumed run uses instead of building one. Every
    dataset the run reads must be fetched: a missing one stops it here, before any work, with
    all of them named (data/fetched.py)."""
    task = task_class(config)
    fetched.require(task.datasets(config))
    return task(config, saved_vocabulary)


def plan_task(config, workdir=None):
    """The Resolution (train/run_config.py) a start of `config` in `workdir` (None: a new one)
    would make, from what is cheap to read (the task's `plan`); the datasets need not be
    fetched to print a config."""
    from train import vocabulary

    saved = None if workdir is None else vocabulary.for_start(workdir)
    return task_class(config).plan(config, saved)
