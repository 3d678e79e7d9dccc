"""Whether a workdir may be reused for a config: the same experiment resumes, another is refused.

A workdir's config.json is the config its checkpoints were trained with. A config that differs
from it is sorted by what the difference does to resuming:
  placement (the mesh): where the run computes; the checkpoint restores onto the new mesh, so it
      resumes without asking;
  resumable (RESUMABLE below): how the run goes on, or what its step 0 started from (`init`),
      not the train state it restores; resumed only with --allow_config_change, which the
      refusal recommends;
  anything else (the task, the model's kind and dimensions, the optimizer's name, the
      vocabulary, ...): another experiment, whose train state these checkpoints do not hold;
      refused even with --allow_config_change (a workdir with no checkpoint yet starts again
      with it); the refusal recommends a new --workdir.
"""

from __future__ import annotations

import collections
import copy
import functools
import json
import os

from train import run_config, storage
from train.config import CONFIGS, ConfigError, experiment_configs, load_config_file

# Where a run computes, not what: the same experiment may resume on another mesh (the
# checkpoint restores into the new shardings; the global batch stays the same), so these keys
# may differ from the workdir's without --allow_config_change.
PLACEMENT_PREFIXES = ("mesh.",)

# Keys that leave the train state as the checkpoints hold it (the parameters' shapes and the
# optimizer state's structure): the loop's settings, where step 0 started from (a moved
# pretraining workdir), the optimizer's numbers, dropout and how the model is computed,
# evaluation and decoding, and how the data is read and batched. A key
# ending in "." stands for its whole section. ON_OFF_KEYS (gradient clipping, the weights'
# moving average) are resumable only while they stay on or off.
RESUMABLE = (
    "seed", "train.",
    "init", "init_head", "init_posemb_resample",  # what step 0 started from: a resume restores
    "optimizer.schedule", "optimizer.learning_rate", "optimizer.end_learning_rate",
    "optimizer.warmup_steps", "optimizer.total_steps", "optimizer.b1", "optimizer.b2",
    "optimizer.eps", "optimizer.momentum", "optimizer.weight_decay",
    "model.dropout_rate", "model.attention_dropout_rate", "model.mlp_dropout_rate",
    "model.attention_implementation",
    "model.remat", "model.dtype", "model.drop_path_rate",
    "task.label_smoothing", "task.mixup_alpha", "task.cutmix_alpha", "task.mixup_prob",
    "task.mixup_switch_prob", "task.beam_size", "task.length_penalty", "task.max_decode_length",
    "task.extra_decode_length", "task.decode_every", "task.num_samples", "task.max_answer_length",
    "task.eval_tokens", "task.eval_lengths",
    "distill.alpha", "distill.alpha_ce", "distill.alpha_mlm", "distill.alpha_cos",
    "distill.alpha_gold", "distill.temperature",
    "distill.teacher_step",  # which of the teacher's checkpoints: a frozen input, fingerprinted
    "data.source", "data.train_split", "data.eval_split", "data.batch_size",
    "data.eval_batch_size", "data.augment", "data.eval_resize", "data.normalize", "data.pack",
    "data.long_examples", "data.max_length",
    "data.max_seq_length", "data.max_query_length", "data.max_predictions", "data.mask_prob",
    "data.select_prob", "data.random_prob", "data.keep_prob", "data.whole_word",
    "data.short_seq_prob", "data.dupe_factor", "data.input_format", "data.phase2_fraction",
    "data.phase2_max_seq_length", "data.phase2_max_predictions", "data.phase2_batch_size",
    "data.shuffle_window", "data.repeated_augment",
)

# Keys whose value is resumable while it stays on (> 0) or off (0): turning clipping on adds a
# state to the optimizer chain, turning the weights' moving average on adds it to the state.
ON_OFF_KEYS = ("optimizer.clip_norm", "train.ema_decay")

# Keys configs gained after runs were written without them, each with the value that does what
# those runs did: a saved config without the key had this value (a ViT run trained from
# scratch, on images as stored, with the ViT's default norm epsilon, without DeiT's recipe
# pieces; any run without a moving average of its weights).
ADDED_KEYS = {"init": "scratch", "init_head": "auto", "init_posemb_resample": "centres",
              "data.resize": False,
              "model.layer_norm_eps": 1e-6,
              # the Transformer's defaults, before translation configs declared them
              "model.norm_epsilon": 1e-6, "model.sinusoid_layout": "interleaved",
              "model.tie_output": None, "model.scale_embeddings": True,
              "model.logits_bias": False, "model.decoder_start": "bos",
              "model.mlp_dropout_rate": None,
              # BERT pretraining's vocabulary kept every character before its limit existed
              "data.vocab_max_characters": 0,
              # DeiT's recipe and token, before the image configs declared them
              "train.ema_decay": 0.0, "model.drop_path_rate": 0.0, "model.distill_token": False,
              "data.repeated_augment": 1, "task.mixup_alpha": 0.0, "task.cutmix_alpha": 0.0,
              "task.mixup_prob": 1.0, "task.mixup_switch_prob": 0.5}

# How many differing keys a refusal lists, those that decide the train state first (in this
# order of sections, each one's `name` first); the rest are counted.
LISTED = 8
SECTIONS = ("task.", "model.", "optimizer.", "data.")


def _importance(key: str) -> tuple:
    section = next((i for i, prefix in enumerate(SECTIONS) if key.startswith(prefix)),
                   len(SECTIONS))
    return section, not key.endswith(".name"), key


def completed_request(saved: dict) -> dict:
    """`saved`, a run's requested config (train/run_config.py), with each ADDED_KEYS key that the
    configs of its task declare now and it lacks, at the value runs without the key had: what
    rebuilding an older run from its workdir alone needs (train.evaluate, train.diagnose_encoder;
    a resume compares with the command's config instead, `check_workdir`)."""
    declared = _declared_keys().get(saved.get("task", {}).get("name"), frozenset())
    have = _flatten(saved)
    completed = copy.deepcopy(saved)
    for key, value in ADDED_KEYS.items():
        if key in declared and key not in have:
            *sections, name = key.split(".")
            functools.reduce(lambda tree, part: tree.setdefault(part, {}), sections,
                             completed)[name] = value
    return completed


@functools.cache
def _declared_keys() -> dict[str, frozenset]:
    """task name -> the keys its experiment configs (their defaults) declare."""
    found = collections.defaultdict(set)
    for config in experiment_configs(CONFIGS):
        loaded = load_config_file(str(config.path)).to_dict()
        found[loaded["task"]["name"]].update(_flatten(loaded))
    return {task: frozenset(keys) for task, keys in found.items()}


def has_checkpoints(workdir: str | os.PathLike) -> bool:
    """Whether `workdir/checkpoints` holds an orbax step folder (named by its step number) or a
    damaged one set aside (`<step>.corrupt-<time>`, train/checkpointing.py): either way a run
    trained there, with the vocabulary and train state it saved."""
    directory = storage.run_path(workdir) / "checkpoints"
    return directory.is_dir() and any(p.name.isdigit() or ".corrupt-" in p.name
                                      for p in directory.iterdir())


def _flatten(tree, prefix=""):
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def keeps_train_state(key: str, saved, current) -> bool:
    """Whether changing config `key` from `saved` to `current` leaves the train state a
    checkpoint restores into as it was (see RESUMABLE)."""
    if key in ON_OFF_KEYS:  # resumable while on (> 0) or off (0): on/off adds or drops state
        return isinstance(saved, (int, float)) and isinstance(current, (int, float)) \
            and (saved > 0) == (current > 0)
    return any(key == name or (name.endswith(".") and key.startswith(name)) for name in RESUMABLE)


def check_workdir(workdir: str | os.PathLike, config_json: str, allow_change: bool) -> list[str]:
    """Refuses to mix two different experiments in one workdir; returns the placement keys
    (the mesh) that changed, as lines to report. `config_json` is the requested config, compared
    with the one the workdir's run requested (run_config.saved_request: cheap, and in the keys
    the command line sets; config.json holds the resolved one)."""
    saved = run_config.saved_request(workdir)
    if saved is None:
        return []
    saved_path = run_config.request_path(workdir)
    current = _flatten(json.loads(config_json))
    saved = {**{k: v for k, v in ADDED_KEYS.items() if k in current}, **_flatten(saved)}
    changed = [key for key in sorted(set(saved) | set(current))
               if saved.get(key) != current.get(key)]
    lines = {key: f"  {key}: {saved.get(key, '<absent>')!r} in the workdir, "
                  f"{current.get(key, '<absent>')!r} now" for key in changed}
    placement = [key for key in changed if key.startswith(PLACEMENT_PREFIXES)]
    differ = [key for key in changed if key not in placement]
    state = sorted((key for key in differ
                    if not keeps_train_state(key, saved.get(key), current.get(key))),
                   key=_importance)
    checkpoints = has_checkpoints(workdir)
    if differ and (not allow_change or (state and checkpoints)):
        shown = (state + [key for key in differ if key not in state])[:LISTED]
        listed = [lines[key] for key in shown]
        if len(differ) > len(shown):
            listed.append(f"  and {len(differ) - len(shown)} more (the workdir's config is "
                          f"{saved_path}; --print_config shows this one)")
        if state and checkpoints:  # --allow_config_change too: it resumes the same experiment
            flag = ("; --allow_config_change resumes only changes that keep the train state "
                    "(train.*, learning rates, evaluation and data settings)"
                    if allow_change else "")
            raise ConfigError(
                f"workdir {workdir} holds another experiment: its checkpoints hold a train state "
                "(model, optimizer) that this config does not build. It differs in:\n"
                + "\n".join(listed) + f"\nUse a new --workdir for this config (or remove "
                f"{workdir} to start over in it){flag}.")
        if state:
            raise ConfigError(
                f"workdir {workdir} holds the config of another experiment, which saved no "
                "checkpoint. It differs in:\n" + "\n".join(listed) + "\nUse a new --workdir "
                "for this config, or pass --allow_config_change to start it in this one (the "
                "old run's metrics.jsonl moves to metrics.superseded.jsonl).")
        if not checkpoints:
            raise ConfigError(
                f"workdir {workdir} holds a run with another config, which saved no "
                "checkpoint:\n" + "\n".join(listed) + "\nPass --allow_config_change to start "
                "it again with the new values (the old run's metrics.jsonl moves to "
                "metrics.superseded.jsonl), or use another --workdir.")
        raise ConfigError(
            f"workdir {workdir} holds a run with another config:\n" + "\n".join(listed)
            + "\nThese keys leave the train state as its checkpoints hold it: pass "
            "--allow_config_change to resume that run with the new values, or use another "
            "--workdir to start a new run.")
    return [lines[key] for key in placement]
