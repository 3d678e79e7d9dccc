"""Training objectives, one file each. `get_task(config)` picks one by `config.task.name`."""

from __future__ import annotations

from train.config import check_choice


def get_task(config):
    # Imported lazily so that a task's data and model dependencies load only when it is used.
    from train.tasks.classify import ClassificationTask

    tasks = {"classify": ClassificationTask}
    check_choice(config, "task.name", tasks)
    return tasks[config.task.name](config)
