"""The diagnosis of one BERT pretraining run, checkpoint by checkpoint, that
`python -m train.diagnose_encoder` prints (see its docstring for what is measured and why).

    run = diagnose_run(workdir, steps="0,latest", batch_size=64,
                       finetune="configs/bert/finetune.py:task=brown_pos", plateau=0.07)
    print(format_run(run))

The run's model and data come from its workdir: requested_config.json (train/run_config.py),
its vocabulary (train/vocabulary.py) and checkpoints (train/checkpointing.py load_state); the
initial weights (step 0) from the trainer's own init_state under the run's config.seed.
"""

from __future__ import annotations

import json
import tempfile
from typing import Any

import jax
import ml_collections
import numpy as np

from models.bert import SCAN_NAME, with_layer_layout
from train import encoder_probe, run_config, storage
from train.checkpointing import CheckpointError, checkpoint_steps, load_state
from train.config import ConfigError, apply_override, load_config_file
from train.trainer import Trainer
from train.workdir import completed_request

LOG_KEYS = ("learning_rate", "grad_norm", "loss", "mlm_accuracy", "nsp_accuracy")


def _config(workdir) -> ml_collections.ConfigDict:
    saved = run_config.saved_request(workdir)
    if saved is None:
        raise ConfigError(f"{workdir} holds no run (no {run_config.REQUESTED_FILE}): give the "
                          "workdir of a `python -m train --config configs/bert/pretrain.py` run")
    config = ml_collections.ConfigDict(completed_request(saved))  # keys added since it ran
    if config.task.name != "bert_pretrain":
        raise ConfigError(f"{workdir} is a {config.task.name!r} run; the diagnosis reads BERT "
                          "pretraining runs (task bert_pretrain)")
    return config


def _steps(spec: str, saved: list[int]) -> list[int]:
    """'0,latest' / 'all' / '100,200' -> checkpoint steps (0: the initial weights)."""
    chosen: list[int] = []
    for item in filter(None, (part.strip() for part in spec.split(","))):
        if item == "all":
            chosen += [0, *saved]
        elif item == "latest":
            if not saved:
                raise CheckpointError("--steps latest: the workdir holds no checkpoint")
            chosen.append(saved[-1])
        else:
            try:
                step = int(item)
            except ValueError:
                raise ConfigError(f"--steps {spec!r}: {item!r} is not a step, 'latest' or "
                                  "'all'") from None
            if step and step not in saved:
                raise CheckpointError(f"--steps: no checkpoint of step {step} (saved: {saved})")
            chosen.append(step)
    return sorted(set(chosen))


def train_log(workdir, plateau: float) -> dict[str, Any]:
    """The train records of metrics.jsonl (LOG_KEYS per logged step; a step logged twice, by a
    session stopped after it and the one that resumed before it, once: the later) and the first
    logged step whose MLM accuracy reached `plateau` (None: never)."""
    path = storage.run_path(workdir) / "metrics.jsonl"
    by_step: dict[int, dict] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:  # a line cut short by a kill
                continue
            if entry.get("split") == "train":
                by_step[entry["step"]] = {"step": entry["step"],
                                          **{k: entry[k] for k in LOG_KEYS if k in entry}}
    entries = [by_step[step] for step in sorted(by_step)]
    left = next((e["step"] for e in entries if e.get("mlm_accuracy", 0.0) >= plateau), None)
    return {"entries": entries, "plateau": plateau, "left_plateau_step": left}


def sessions(workdir) -> list[dict[str, Any]]:
    """The command, steps and outcome of each session that trained the run (its record.json,
    train/run_record.py); [] when it has none."""
    path = storage.run_path(workdir) / "record.json"
    if not path.exists():
        return []
    record = json.loads(path.read_text())
    return [{k: s.get(k) for k in ("command", "start_step", "end_step", "outcome")}
            for s in record.get("sessions", [])]


def _pretrain_report(trainer: Trainer, params, batch, mask_id: int) -> dict[str, Any]:
    task = trainer.task
    arrays = encoder_probe.as_arrays(batch)
    layers = encoder_probe.encoder_report(task.model_config, params["bert"], arrays["input_ids"],
                                          arrays["segment_ids"], arrays["input_mask"])
    outputs = task.model.apply({"params": params}, arrays["input_ids"], arrays["segment_ids"],
                               arrays["input_mask"], masked_positions=arrays["masked_positions"])
    rng = jax.random.PRNGKey(0)  # dropout, where the config has any
    return {"layers": layers,
            "mlm": encoder_probe.mlm_predictions(outputs["mlm_logits"], batch, mask_id),
            "gradients": encoder_probe.gradient_groups(task.loss_fn, task.loss_normalizers,
                                                       params, arrays, rng)}


class _Finetuning:
    """A fine-tuning run's task, initial state and first training batch, made once; `report`
    puts a pretraining checkpoint's encoder into its model."""

    def __init__(self, spec: str, workdir, seed: int):
        config = load_config_file(spec)
        apply_override(config, "init", str(workdir))
        apply_override(config, "seed", str(seed))
        with tempfile.TemporaryDirectory() as scratch:  # local path: a scratch workdir for the
            self.trainer = Trainer(config, f"{scratch}/finetune")  # trainer, never written to
            state = self.trainer.init_state()
        self.params = jax.device_get(state.params)
        self.rng = jax.random.fold_in(state.rng, 0)  # the first train step's dropout key
        iterator = self.trainer.task.train_iterator(
            batch_size=config.data.batch_size, seed=config.seed, process_index=0,
            process_count=1)
        self.batch = encoder_probe.as_arrays(next(iterator))
        self.spec = spec

    def report(self, encoder) -> dict[str, Any]:
        task = self.trainer.task
        scanned = SCAN_NAME in self.params["bert"]["encoder"]  # the fine-tuning model's layout
        params = {**self.params, "bert": with_layer_layout(encoder, scan=scanned)}
        b = self.batch
        inputs = (b["input_ids"], b["segment_ids"], b["input_mask"])
        layers = encoder_probe.encoder_report(task.model_config, params["bert"], *inputs)
        noise = encoder_probe.dropout_noise(task.model_config, params["bert"], *inputs, self.rng)
        for layer, ratio in zip(layers, noise):
            layer["dropout_noise_to_signal"] = ratio
        return {"config": self.spec, "layers": layers,
                "gradients": encoder_probe.gradient_groups(task.loss_fn, task.loss_normalizers,
                                                           params, b, self.rng)}


def diagnose_run(workdir, *, steps: str = "latest", batch_size: int = 64,
                 finetune: str | None = None, plateau: float = 0.07) -> dict[str, Any]:
    """The JSON-ready diagnosis of the pretraining run in `workdir` (module docstring)."""
    workdir = storage.run_path(workdir)
    config = _config(workdir)
    chosen = _steps(steps, checkpoint_steps(workdir))  # saved whole: not one being written
    trainer = Trainer(config, workdir)  # builds the task with the run's own vocabulary
    task = trainer.task
    iterator, _ = task.eval_batches(batch_size=batch_size, process_index=0, process_count=1)
    batch = next(iterator)
    mask_id = task.inputs.masking_config(config.data.max_predictions).mask_id
    finetuning = _Finetuning(finetune, workdir, config.seed) if finetune else None
    data = config.data
    run = {"workdir": str(workdir), "seed": config.seed,
           "corruption": {"mask": data.mask_prob, "random": data.random_prob,
                          "keep": data.keep_prob},
           "optimizer": {"learning_rate": config.optimizer.learning_rate,
                         "warmup_steps": config.optimizer.warmup_steps,
                         "schedule": config.optimizer.schedule,
                         "num_steps": config.train.num_steps},
           "sessions": sessions(workdir), "train_log": train_log(workdir, plateau),
           "checkpoints": []}
    adam = {k: config.optimizer[k] for k in ("b1", "b2", "eps")}
    for step in chosen:
        state = ({"params": jax.device_get(trainer.init_state().params), "opt_state": None}
                 if step == 0 else load_state(workdir, step))
        params = state["params"]
        entry = {"step": step,
                 "embeddings": encoder_probe.embedding_report(
                     params["bert"]["embeddings"]["word_embeddings"]["embedding"], mask_id),
                 "pretrain": _pretrain_report(trainer, params, batch, mask_id)}
        # Adam's memory of the run's gradients up to this step (none before the first update).
        entry["pretrain"]["adam"] = (None if step == 0 else
                                     encoder_probe.adam_groups(state["opt_state"], **adam))
        if finetuning is not None:
            entry["finetune"] = finetuning.report(params["bert"])
        run["checkpoints"].append(_plain(entry))
    return run


def _plain(value):
    """NumPy scalars -> Python numbers, recursively (for json)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _row(layer: dict, pretrain: dict, ft: dict | None) -> str:
    gradients, adam = pretrain["gradients"], pretrain["adam"]
    s = layer["states"]
    cells = [f"{layer['layer']:>5}", f"{s['cosine']:7.3f}", f"{s['common_share']:7.3f}",
             f"{s['effective_rank']:7.1f}", f"{s['identity_readout']:7.3f}"]
    if "attention" in layer:
        a, sub = layer["attention"], layer["sublayers"]
        cells += [f"{np.mean(a['normalized']):7.3f}", f"{sub['attention']['ratio']:7.2f}",
                  f"{sub['mlp']['ratio']:7.2f}", f"{sub['mlp']['common_share']:7.3f}",
                  f"{layer['gelu']['dead_units']:7.3f}"]
    else:
        cells += [f"{'-':>7}"] * 5
    name = "embeddings/word" if layer["layer"] == 0 else f"encoder/layer_{layer['layer'] - 1}"
    cells.append(f"{gradients[name]['rms']:9.2e}")
    cells.append(f"{adam[name]['update_rms']:8.3f}" if adam else f"{'-':>8}")
    if ft is not None:
        mine = ft["layers"][layer["layer"]]
        cells += [f"{mine['states']['identity_readout']:8.3f}",
                  f"{mine['dropout_noise_to_signal']:8.3g}",
                  f"{ft['gradients'][name]['rms']:9.2e}"]
    return " ".join(cells)


def format_run(run: dict) -> str:
    """A table per checkpoint: one line per layer (columns named in the header)."""
    c = run["corruption"]
    log = run["train_log"]
    lines = [f"{run['workdir']}: corruption mask {c['mask']:g} / random {c['random']:g} / keep "
             f"{c['keep']:g}, seed {run['seed']}; left the plateau (MLM accuracy >= "
             f"{log['plateau']:g}) at step {log['left_plateau_step']}"]
    header = ("layer  cosine  common   erank  ident.  attn-H  attn/x   ffn/y ffn-com    dead "
              " grad-rms adam-upd")
    for entry in run["checkpoints"]:
        ft = entry.get("finetune")
        m = entry["pretrain"]["mlm"]
        lines.append(f"step {entry['step']}: MLM accuracy {m['accuracy']:.3f}, entropy "
                     f"{m['entropy']:.2f}, top-1 share {m['top1_share']:.2f}; [MASK] norm "
                     f"{entry['embeddings']['mask_norm']:.3f} (mean "
                     f"{entry['embeddings']['mean_norm']:.3f})")
        lines.append(header + ("  ft-ident ft-noise   ft-grad" if ft else ""))
        for layer in entry["pretrain"]["layers"]:
            lines.append(_row(layer, entry["pretrain"], ft))
    return "\n".join(lines)
