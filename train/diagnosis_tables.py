"""The tables of BERT Table 8's collapse diagnosis (docs/reproductions.md), rendered by
`python -m train.tables` from the committed records in notebooks/results/bert_table8_diagnosis/:

    <name>.json                 the output of `python -m train.diagnose_encoder WORKDIR ...` for
                                one pretraining run (its command inside), e.g. 0-0-100_seed0.json
    finetune/<name>/record.json the record of a Brown POS fine-tuning run from one of those
                                pretraining runs (train/run_record.py; its command inside)

`collapse_table`: checkpoint by checkpoint, how alike the final layer makes the tokens and how
far Adam moves the lower layers. `finetune_table`: what a fine-tuning run meets in each encoder
(its first training batch) and how the fine-tuning ended. Which checkpoints and runs the tables
show is declared below (COLLAPSE_ROWS, FINETUNE_ROWS); one not recorded renders as such.
"""

from __future__ import annotations

import json
from pathlib import Path

from train import result_tables as rt

FOLDER = "bert_table8_diagnosis"
# (diagnosis file, its run's label, checkpoint step): the rows of collapse_table.
COLLAPSE_ROWS = (
    ("80-10-10_seed0", "80-10-10", 50), ("80-10-10_seed0", "80-10-10", 100),
    ("80-10-10_seed0", "80-10-10", 200), ("80-10-10_seed0", "80-10-10", 250),
    ("0-0-100_seed0", "0-0-100", 0), ("0-0-100_seed0", "0-0-100", 100),
    ("0-0-100_seed0", "0-0-100", 216), ("0-0-100_seed0", "0-0-100", 500),
    ("0-0-100_seed0", "0-0-100", 1000),
    ("80-0-20_seed1", "80-0-20, seed 1", 50), ("80-0-20_seed1", "80-0-20, seed 1", 100),
    ("80-0-20_seed1", "80-0-20, seed 1", 170),
    ("0-0-100_seed0_lr5e-4", "0-0-100, peak lr 5e-4", 100),
    ("0-0-100_seed0_lr5e-4", "0-0-100, peak lr 5e-4", 200),
    ("0-0-100_seed0_lr5e-4", "0-0-100, peak lr 5e-4", 357),
    ("0-0-100_seed0_steps4200", "0-0-100, 4,200 steps", 2100),
    ("0-0-100_seed0_steps4200", "0-0-100, 4,200 steps", 4200),
)
# (label, diagnosis file, step, fine-tuning records with dropout 0.1 / without dropout, as paths
# under notebooks/results/): the rows of finetune_table. Our fine-tuning runs started from the
# pretraining run's latest checkpoint at the time, which is the step given here; the untrained
# encoder's is the BERT Table 8 sweep's own `untrained` seed 0 (the same recipe and seed).
_OURS = f"{FOLDER}/finetune"
FINETUNE_ROWS = (
    ("untrained (initial weights)", "0-0-100_seed0", 0,
     "bert_table8/untrained/seed_0/finetune/result.json", ""),
    ("80-10-10 after 250 steps", "80-10-10_seed0", 250, "", ""),
    ("0-0-100 after 216 steps", "0-0-100_seed0", 216,
     f"{_OURS}/0-0-100_seed0_step216/record.json", ""),
    ("0-0-100 after 1,000 steps", "0-0-100_seed0", 1000,
     f"{_OURS}/0-0-100_seed0_step1000/record.json",
     f"{_OURS}/0-0-100_seed0_step1000_nodropout/record.json"),
    ("0-0-100 after 4,200 steps", "0-0-100_seed0_steps4200", 4200,
     "bert_table8_steps4200/0-0-100/seed_0/finetune/result.json", ""),
)


def _diagnoses(results: Path) -> dict[str, dict]:
    folder = results / FOLDER
    return {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}


def _checkpoint(document: dict | None, step: int) -> tuple[dict, dict] | None:
    if document is None:
        return None
    (run,) = document["runs"]
    found = [c for c in run["checkpoints"] if c["step"] == step]
    return (run, found[0]) if found else None


def _logged(run: dict, step: int, key: str) -> str:
    """The train log's `key` at the logged step nearest `step`: its mean over the steps since
    the previous log (train/step_log.py), learning rate included."""
    entries = [e for e in run["train_log"]["entries"] if key in e]
    if not entries or step == 0:
        return "-"
    entry = min(entries, key=lambda e: abs(e["step"] - step))
    return f"{entry[key]:.2g}" if key == "learning_rate" else rt.percent(entry[key], 1)


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def collapse_table(records: rt.Records) -> str:
    diagnoses = _diagnoses(records.results)
    head = ["run", "step", "lr (logged)", "train MLM acc.", "top-1 share",
            "input token's rank: kept / random", "identity readout, last layer",
            "common share, last layer", "effective rank, last layer",
            "FFN output common share, last layer",
            "dead GELU units, layers 3-4", "Adam step per unit lr, layers 1-2",
            "MLM grad RMS, layer 1"]
    rows, missing = [], []
    for name, label, step in COLLAPSE_ROWS:
        found = _checkpoint(diagnoses.get(name), step)
        if found is None:
            missing.append(f"`{name}` step {step}")
            continue
        run, entry = found
        pretrain = entry["pretrain"]
        layers = pretrain["layers"]
        last = layers[-1]
        adam = pretrain["adam"]
        rows.append([
            label, str(step), _logged(run, step, "learning_rate"),
            _logged(run, step, "mlm_accuracy"), f"{pretrain['mlm']['top1_share']:.2f}",
            " / ".join("-" if pretrain["mlm"][key] is None else f"{pretrain['mlm'][key]:.2f}"
                       for key in ("kept_input_percentile", "random_input_percentile")),
            f"{last['states']['identity_readout']:.3f}", f"{last['states']['common_share']:.3f}",
            f"{last['states']['effective_rank']:.1f}",
            f"{last['sublayers']['mlp']['common_share']:.3f}",
            rt.percent(_mean(layer["gelu"]["dead_units"] for layer in layers[-2:]), 0),
            "-" if adam is None else
            f"{_mean(adam[f'encoder/layer_{i}']['update_rms'] for i in (0, 1)):.3f}",
            f"{pretrain['gradients']['encoder/layer_0']['rms']:.1e}"])
    return _compose(rt._table(head, rows), diagnoses, missing)


def _finetune_accuracy(results: Path, path: str) -> str:
    """The POS token accuracy of a fine-tuning run's final eval: a sweep's result.json
    (train/sweep.py) or a run's record.json (train/run_record.py)."""
    if not path:
        return "-"
    file = results / path
    if not file.exists():
        return "(not recorded)"
    metrics = json.loads(file.read_text())["metrics"]
    if file.name == "record.json":
        metrics = metrics["eval"]
    return rt.percent(metrics["token_accuracy"], 1)


def _uncommitted(results: Path, paths) -> list[str]:
    """Those of the fine-tuning records at `paths` whose code had uncommitted changes."""
    found = []
    for path in paths:
        if path and (results / path).exists():
            document = json.loads((results / path).read_text())
            record = document if path.endswith("record.json") else document.get("record", {})
            if record.get("code", {}).get("dirty") is True:
                found.append(f"`{path}`")
    return found


def finetune_table(records: rt.Records) -> str:
    diagnoses = _diagnoses(records.results)
    head = ["encoder", "identity readout, last layer", "common share, last layer",
            "effective rank, last layer", "dropout noise / signal, last layer",
            "grad RMS: word embeddings", "layer 1", "layer 4", "POS head",
            "fine-tuned POS accuracy", "the same without dropout"]
    rows, missing = [], []
    for label, name, step, with_dropout, without in FINETUNE_ROWS:
        found = _checkpoint(diagnoses.get(name), step)
        if found is None:
            missing.append(f"`{name}` step {step}")
            continue
        finetune = found[1]["finetune"]
        last = finetune["layers"][-1]
        grads = finetune["gradients"]
        head_rms = [v["rms"] for k, v in grads.items() if k.startswith("head/")]
        rows.append([
            label, f"{last['states']['identity_readout']:.3f}",
            f"{last['states']['common_share']:.3f}", f"{last['states']['effective_rank']:.1f}",
            f"{last['dropout_noise_to_signal']:.3g}",
            f"{grads['embeddings/word']['rms']:.1e}", f"{grads['encoder/layer_0']['rms']:.1e}",
            f"{grads['encoder/layer_3']['rms']:.1e}", f"{max(head_rms):.1e}",
            _finetune_accuracy(records.results, with_dropout),
            _finetune_accuracy(records.results, without)])
    dirty = _uncommitted(records.results, [p for row in FINETUNE_ROWS for p in row[3:]])
    return _compose(rt._table(head, rows), diagnoses, missing, dirty)


def _portable(argument: str) -> str:
    """An absolute path of the machine that ran the command as `WORKDIR/<its last part>`: the
    folders are that machine's, the names say which run."""
    return f"WORKDIR/{argument.rstrip('/').rsplit('/', 1)[-1]}" if argument.startswith("/") \
        else argument


def _made(diagnoses: dict) -> list[str]:
    """When, where and from which code each diagnosis was made, as its document says."""
    undated = [f"`{name}.json`" for name, d in diagnoses.items() if "code" not in d]
    lines = [f"{', '.join(undated)}: no date, machine or code version (made before diagnoses "
             "recorded them)."] if undated else []
    for name, document in diagnoses.items():
        if "code" in document:
            code, machine = document["code"], document["machine"]
            dirty = " with uncommitted changes" if code["dirty"] is True else ""
            lines.append(f"`{name}.json`: {document['date'][:10]}, {machine['cpu']} "
                         f"({machine['usable_cpus']} of {machine['cpu_count']} cores), code "
                         f"{str(code['commit'])[:10]}{dirty}.")
    return lines


def _compose(table: str, diagnoses: dict, missing: list[str], dirty: list[str] = ()) -> str:
    commands = "; ".join(f"`{name}.json`: `{' '.join(map(_portable, d['command']))}`"
                         for name, d in diagnoses.items())
    parts = [table, f"From `notebooks/results/{FOLDER}/` ({commands})." if diagnoses else
             f"(not recorded yet: notebooks/results/{FOLDER}/ holds no diagnosis)"]
    parts += [" ".join(_made(diagnoses))] if diagnoses else []
    if dirty:
        parts.append("Fine-tuning records made with uncommitted changes to their code: "
                     + ", ".join(dirty) + ".")
    if missing:
        parts.append("Not recorded: " + ", ".join(missing) + ".")
    return "\n\n".join(parts)
