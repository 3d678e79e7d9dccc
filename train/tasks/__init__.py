"""Training objectives, one file each. `get_task(config)` picks one by `config.task.name`."""

from __future__ import annotations

import importlib

from data import fetched
from train.config import check_choice


def get_task(config, saved_vocabulary=None):
    """The task of `config.task.name`. `saved_vocabulary`: the vocabulary kept in the run's
    workdir (train/vocabulary.py), which a resumed run uses instead of building one. Every
    dataset the run reads must be fetched: a missing one stops it here, before any work, with
    all of them named (data/fetched.py)."""
    # Imported lazily, so that a task's data and model dependencies load only when it is used.
    tasks = {"classify": "train.tasks.classify:ClassificationTask",
             "translate": "train.tasks.translate:TranslationTask",
             "bert_pretrain": "train.tasks.bert_pretrain:BertPretrainingTask",
             "finetune": "train.tasks.finetune:FinetuneTask"}
    check_choice(config, "task.name", tasks)
    module, name = tasks[config.task.name].split(":")
    task = getattr(importlib.import_module(module), name)
    fetched.require(task.datasets(config))
    return task(config, saved_vocabulary)
