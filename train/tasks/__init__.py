"""Training objectives, one file each. `get_task(config)` picks one by `config.task.name`."""

from __future__ import annotations

import importlib

from train.config import check_choice


def get_task(config, saved_vocabulary=None):
    """The task of `config.task.name`. `saved_vocabulary`: the vocabulary kept in the run's
    workdir (train/vocabulary.py), which a resumed run uses instead of building one."""
    # Imported lazily, so that a task's data and model dependencies load only when it is used.
    tasks = {"classify": "train.tasks.classify:ClassificationTask",
             "translate": "train.tasks.translate:TranslationTask",
             "bert_pretrain": "train.tasks.bert_pretrain:BertPretrainingTask",
             "finetune": "train.tasks.finetune:FinetuneTask"}
    check_choice(config, "task.name", tasks)
    module, cls = tasks[config.task.name].split(":")
    return getattr(importlib.import_module(module), cls)(config, saved_vocabulary)
