"""What a run's workdir records of its config: the config that ran, and the one that was asked for.

    DIR/config.json            the resolved config: the requested one with every value decided
                               when the run starts filled in. Its model section is the model
                               that ran, every field of the frozen dataclass it was built from
                               (the dimensions of MiniLM or of a pretraining run given as
                               config.init, vocab_size from the vocabulary); the task adds its
                               own (translation: task.max_decode_length). Sweeps, reports and
                               fine-tuning from this workdir (config.init=DIR) read it.
    DIR/requested_config.json  the config as the command gave it (file, :arg, overrides)

Why both. A start in a workdir that holds a run compares the command's config with the saved
one before anything is built (train/__main__.py `check_workdir`): the comparison must stay cheap
(no vocabulary trained, no weights read) and its errors must name keys the command can change.
So the requested config is compared with requested_config.json, like with like. The resolved
values need no comparison of their own: they follow from the requested ones and from what the
workdir keeps (its vocabulary, checked by train/vocabulary.py; its checkpoint, whose shapes the
restore checks). A workdir written before runs kept both has only config.json, which then was
the requested config, and is compared as such.

`--print_config` shows the resolved config without building anything expensive: a task's
`plan` (train/tasks/base.py) gives what it knows cheaply, and a value that only building
something would tell (a vocabulary not trained yet) is printed as a "<...>" string naming what
decides it.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Mapping

import ml_collections
from etils import epath

from train import storage
from train.config import ConfigError

RESOLVED_FILE = "config.json"
REQUESTED_FILE = "requested_config.json"


@dataclasses.dataclass(frozen=True)
class Resolution:
    """What a task decides from more than its config (train/tasks/base.py)."""

    model_config: Any                                    # the model's frozen dataclass
    values: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # ^ other keys decided at the start: {'task.max_decode_length': 82}
    pending: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # ^ plans only: keys known once something expensive is built -> what decides them
    notes: tuple[str, ...] = ()                          # where the weights came from, printed
    resume_checks: tuple[str, ...] = ()
    # ^ keys of `values` that a resumed run must find unchanged in config.json (what it read
    #   from outside the workdir at every start, e.g. a distillation teacher's fingerprint)


def resolved(config: ml_collections.ConfigDict, resolution: Resolution) -> dict[str, Any]:
    """`config` as a dict, its model section replaced by every field of the model that runs
    (`name` kept) and the resolution's other values set; a pending one reads "<what decides
    it>", never a number that would be wrong."""
    tree = config.to_dict()
    tree["model"] = {"name": config.model.name, **dataclasses.asdict(resolution.model_config)}
    pending = {key: f"<{note}>" for key, note in resolution.pending.items()}
    for key, value in {**resolution.values, **pending}.items():
        *sections, name = key.split(".")
        node = tree
        for section in sections:
            node = node[section]
        node[name] = value
    return tree


def check_resumed(workdir: str | os.PathLike, resolution: Resolution) -> None:
    """A resumed run's `resume_checks` values must be the ones its config.json recorded at the
    start it continues: else it would go on training against another input than its checkpoints
    were trained with (a teacher retrained since). ConfigError naming each key, both values and
    what to do. A config.json without the key (written by older code) is not checked."""
    path = storage.run_path(workdir) / RESOLVED_FILE
    if not resolution.resume_checks or not path.exists():
        return
    saved = read_resolved(path)
    changed = []
    for key in resolution.resume_checks:
        node = saved
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None and node != resolution.values[key]:
            changed.append(f"  {key}: {node!r} in {path}, {resolution.values[key]!r} now")
    if changed:
        step = saved.get("distill", {}).get("teacher_step")
        pin = ("" if step is None else f", pin the teacher's step it read "
               f"(--config.distill.teacher_step={step} --allow_config_change)")
        raise ConfigError(
            "this run's checkpoints were trained against other inputs than it would resume "
            "with:\n" + "\n".join(changed) + "\nRestore what it read (e.g. the teacher's "
            f"checkpoint of that step){pin}, or start a new --workdir")


def to_text(tree: Mapping[str, Any]) -> str:
    """The JSON a workdir stores (as train.config.to_json writes a config)."""
    return json.dumps(tree, indent=2, sort_keys=True, default=list)


def write(workdir: str | os.PathLike, config: ml_collections.ConfigDict,
          resolution: Resolution) -> None:
    """Writes requested_config.json, then config.json (so a workdir with the new config.json
    always has the requested one beside it)."""
    workdir = storage.run_path(workdir)
    storage.write_atomically(workdir / REQUESTED_FILE, to_text(config.to_dict()))
    storage.write_atomically(workdir / RESOLVED_FILE, to_text(resolved(config, resolution)))


def request_path(workdir: str | os.PathLike) -> epath.Path | None:
    """The file holding the requested config of the run in `workdir`: requested_config.json, or
    config.json in a workdir written before runs kept both; None for a new workdir."""
    workdir = storage.run_path(workdir)
    for name in (REQUESTED_FILE, RESOLVED_FILE):
        if (workdir / name).exists():
            return workdir / name
    return None


def saved_request(workdir: str | os.PathLike) -> dict[str, Any] | None:
    """The requested config of the run in `workdir` (module docstring), None for a new one."""
    path = request_path(workdir)
    if path is None:
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ConfigError(f"{path} is unreadable ({type(error).__name__}: {error}); it records "
                          "the config of the run in this workdir: restore it from a copy, or "
                          "use another --workdir") from error


def read_resolved(path: epath.Path) -> dict[str, Any]:
    """A run's config.json (`path`, which exists) as a dict; ConfigError naming it when it does
    not read as a JSON object (cut short by a full disk, edited by hand)."""
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ConfigError(f"{path} does not read as JSON ({type(error).__name__}: {error}): the "
                          "run's config is damaged; restore it from a copy (requested_config.json "
                          "beside it holds the config the run was started with)") from None
    if not isinstance(saved, dict):
        raise ConfigError(f"{path} holds a {type(saved).__name__}, not a run's config")
    return saved


def saved_model(cls, saved: Mapping[str, Any], workdir) -> Any:
    """The frozen model config (`cls`: ViTConfig, TransformerConfig, ...) of the model section
    of a run's config.json, `saved`: the model that ran (exporting it, starting from it)."""
    fields = {f.name for f in dataclasses.fields(cls)}
    try:
        return cls(**{k: v for k, v in saved["model"].items() if k in fields})
    except (TypeError, ValueError) as error:
        raise ConfigError(f"the model of {workdir}/config.json gives no valid {cls.__name__}: "
                          f"{error}") from error
