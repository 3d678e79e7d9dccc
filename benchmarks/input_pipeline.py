"""python -m benchmarks.input_pipeline --json workdirs/bench/input_pipeline.json

How many training examples one CPU core makes per second through each paper-scale recipe's input
pipeline, set against the rate each host must deliver to keep its accelerators busy (the launch
page's estimate, train/recipe_costs.py): so, how many cores per host the pipeline needs.

What is timed is what the trainer reads: the recipe's task (train/tasks, built from the recipe's
config as `python -m train` builds it, its vocabulary trained on the data as the recipe says)
and its `train_iterator`, this process's batches of `--batch` examples, on stand-ins for the
recipes' datasets written as real TFDS datasets (benchmarks/standin_data.py: encoded JPEGs of
ImageNet's sizes and mean file size, articles and sentence pairs of real prose), read through
`tfds.data_source` as on a pod. The process is pinned to one core (`--core`), the pipeline's
reader threads with it. Per row: WARMUP_BATCHES batches first (the reader threads start and
fill their prefetch buffer), then batches until `--seconds` have passed; the rate is the
examples of the timed batches over their time.

Rows: ViT's from-scratch pipeline (Inception crop to 224 px and flip of the decoded JPEGs),
BERT's Wikipedia stream at its two lengths (128 tokens, then 512: the 512 row is the recipe's
config with its phase-2 length, predictions and batch as its only phase), and the Transformer's
WMT pipeline (tokenizing and packing sentence pairs into rows of max_length + max_length tokens;
a row is an example). A recipe whose `config.data` equals a timed one's (BERT-large reads as
BERT-base does, the Transformer big as base) shares its row. ViT's fine-tuning pipeline needs
the pretraining run's workdir to build, so it is not timed here.

    python -m benchmarks.input_pipeline --smoke --seconds 1 --images 16   # for tests
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

from benchmarks import standin_data
from benchmarks.outputs import benchmark_record, run_command
from train import recipe_costs
from train.config import apply_override, load_config_file

WARMUP_BATCHES = 10
PHASE2 = {"max_seq_length": "phase2_max_seq_length", "max_predictions": "phase2_max_predictions"}


def phase2_overrides(spec: str) -> dict[str, str]:
    """BERT's second phase as the only one: the recipe's phase-2 length and predictions."""
    data = load_config_file(spec).data
    return {**{f"data.{key}": str(data[phase2]) for key, phase2 in PHASE2.items()},
            "data.phase2_fraction": "0.0"}


def rows(smoke: bool) -> list[dict]:
    """The timed pipelines: recipe name, config spec, phase of its run, overrides, stand-in."""
    tail = ",smoke" if smoke else ""
    bert = f"configs/bert/pretrain.py:size=base,data=wikipedia{tail}"
    return [
        {"recipe": "ViT-B/16, ImageNet, from scratch",
         "config": "configs/vit/imagenet.py" + (":smoke" if smoke else ""), "phase": 0,
         "overrides": {}, "dataset": standin_data.IMAGENET},
        {"recipe": "BERT-base, Wikipedia", "config": bert, "phase": 0, "overrides": {},
         "dataset": standin_data.WIKIPEDIA},
        {"recipe": "BERT-base, Wikipedia", "config": bert, "phase": 1,
         "overrides": phase2_overrides(bert), "dataset": standin_data.WIKIPEDIA},
        {"recipe": "Transformer base, WMT 2014 en-de",
         "config": f"configs/transformer/translate.py:size=base,data=wmt14{tail}", "phase": 0,
         "overrides": {}, "dataset": standin_data.WMT14},
    ]


def _config(row: dict):
    config = load_config_file(row["config"])
    for key, value in row["overrides"].items():
        apply_override(config, key, value)
    return config


@contextlib.contextmanager
def standin_environment(data_dir: Path):
    """TFDS's default data_dir is `data_dir` (so the recipes' `tfds.data_source(name)` reads the
    stand-ins), and this project's data root a folder in it (vocabularies trained on the
    stand-ins are cached there, never beside real data's)."""
    from tensorflow_datasets.core import constants

    with mock.patch.object(constants, "DATA_DIR", str(data_dir)), \
            mock.patch.dict(os.environ, {"PAPERS_JAX_DATA": str(data_dir / "papers_jax")}):
        yield


def time_pipeline(iterator, *, seconds: float, warmup: int = WARMUP_BATCHES) -> dict:
    """Examples per second of `iterator` (module docstring): {'examples', 'seconds', 'rate',
    'warmup_s'}; an example is a row of the batch's first field."""
    started = time.perf_counter()
    for _ in range(warmup):
        next(iterator)
    timed_from = time.perf_counter()
    examples = batches = 0
    while batches < 2 or time.perf_counter() - timed_from < seconds:
        batch = next(iterator)
        examples += len(next(iter(batch.values())))
        batches += 1
    elapsed = time.perf_counter() - timed_from
    return {"examples": examples, "batches": batches, "seconds": elapsed,
            "rate": examples / elapsed, "warmup_s": timed_from - started}


def required_rates(config, phase: int) -> dict[str, float]:
    """{target: examples per second each host must deliver} for phase `phase` of `config`'s run
    at the costs table's MFU (train/recipe_costs.py)."""
    run = recipe_costs.phases(config)
    p = run[phase]
    return {t.name: p.batch / recipe_costs.step_seconds(p, t, recipe_costs.DEFAULT_MFU) / t.hosts
            for t in recipe_costs.TARGETS}


def run(args) -> dict:
    from train.tasks import get_task

    if args.core >= 0:
        os.sched_setaffinity(0, {args.core})
    with contextlib.ExitStack() as stack:
        data_dir = Path(args.data_dir) if args.data_dir else Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="standin_")))
        names = sorted({row["dataset"] for row in rows(args.smoke)})
        written = standin_data.write_all(data_dir, images=args.images, seed=args.seed,
                                         names=names)
        stack.enter_context(standin_environment(data_dir))
        out = []
        for row in rows(args.smoke):
            config = _config(row)
            recipe = load_config_file(row["config"])
            built = time.perf_counter()
            task = get_task(config)
            iterator = task.train_iterator(batch_size=args.batch, seed=args.seed,
                                           process_index=0, process_count=1)
            setup_s = time.perf_counter() - built
            timing = time_pipeline(iterator, seconds=args.seconds)
            phase = recipe_costs.phases(recipe)[row["phase"]]
            out.append({"recipe": row["recipe"], "config": row["config"],
                        "phase": row["phase"], "overrides": row["overrides"],
                        "example": phase.length,
                        "dataset": row["dataset"], "setup_s": setup_s,
                        "worker_count": config.data.worker_count, **timing,
                        "required": required_rates(recipe, row["phase"])})
            del iterator, task
    shared = shared_rows(out)
    out += sharing_rows(out, shared)
    return {"batch": args.batch, "seconds": args.seconds, "core": args.core,
            "cpu_count": os.cpu_count(),
            "usable_cpus": len(os.sched_getaffinity(0)), "cpu": _cpu_name(), "standins": written,
            "rows": out, "shared": shared, "ratios": cores_needed(out)}


def sharing_rows(out: list[dict], shared: dict[str, str]) -> list[dict]:
    """For each recipe that shares a timed recipe's pipeline, that recipe's timed rows with its
    own phases' lengths and required rates (its model, so its step time, differs) and
    `timed_as` naming the recipe whose pipeline was timed."""
    configs = {r.name: r.config for r in recipe_costs.RECIPES}
    rows = []
    for recipe, timed in shared.items():
        config = load_config_file(configs[recipe])
        for row in (r for r in out if r["recipe"] == timed):
            rows.append({**row, "recipe": recipe, "config": configs[recipe], "timed_as": timed,
                         "example": recipe_costs.phases(config)[row["phase"]].length,
                         "required": required_rates(config, row["phase"])})
    return rows


def cores_needed(out: list[dict]) -> dict[str, float]:
    """{'RECIPE, EXAMPLE on TARGET': cores}: the rate a host of TARGET must deliver over the
    rate of one core."""
    return {ratio_key(r, target): rate / r["rate"]
            for r in out for target, rate in r["required"].items()}


def ratio_key(row: dict, target: str) -> str:
    return f"{row['recipe']}, {row['example']} on {target}"


def shared_rows(out: list[dict]) -> dict[str, str]:
    """{recipe: timed recipe} for each launch-page recipe not timed whose config.data equals a
    timed one's (module docstring)."""
    timed = {row["recipe"]: row["config"] for row in out}
    shared = {}
    for recipe in recipe_costs.RECIPES:
        if recipe.name in timed:
            continue
        data = load_config_file(recipe.config).data.to_dict()
        for name, config in timed.items():
            if load_config_file(config).data.to_dict() == data:
                shared[recipe.name] = name
    return shared


def _cpu_name() -> str:
    from train import run_record

    return str(run_record.machine(None, "")["cpu"])


def target_columns(report: dict) -> list[list[str]]:
    """The targets in groups whose hosts need the same rate in every row (a SLURM cluster's
    hosts as one node's), one column each."""
    groups: dict[tuple, list[str]] = {}
    for target in (t.name for t in recipe_costs.TARGETS):
        needs = tuple(round(r["required"][target], 6) for r in report["rows"])
        groups.setdefault(needs, []).append(target)
    return list(groups.values())


def markdown(report: dict) -> str:
    columns = target_columns(report)
    imagenet = report["standins"].get(standin_data.IMAGENET, {})
    where = (f"pinned to core {report['core']}" if report["core"] >= 0 else
             f"not pinned: {report['usable_cpus']} cores usable, so not one core's rate")
    lines = [f"**Input pipelines on one core** ({report['cpu']}, {where}): examples per "
             "second through each recipe's training pipeline, "
             f"batches of {report['batch']}, {report['seconds']:g} s timed after "
             f"{WARMUP_BATCHES} batches; stand-in data (benchmarks/standin_data.py)"
             + (f", ImageNet's JPEGs at quality {imagenet['quality']}, "
                f"{imagenet['mean_bytes'] / 1e3:.0f} KB and {imagenet['mean_pixels'] / 1e3:.0f}k "
                "pixels on average" if imagenet else "") + ". Cores a host needs: the rate "
             f"each host must deliver at MFU {recipe_costs.DEFAULT_MFU:.0%} (launch page) over "
             "the rate of one core (`--config.data.worker_count=N`: the batches made in N "
             "processes).", "",
             "| recipe | example | examples/s on one core | "
             + " | ".join(f"cores a host needs: {' or '.join(c)}" for c in columns) + " |",
             "|---|---|---|" + "---|" * len(columns)]
    for r in report["rows"]:
        cores = " | ".join(f"{report['ratios'][ratio_key(r, c[0])]:,.1f}" for c in columns)
        recipe = r["recipe"] + (f" (timed as {r['timed_as']}: the same `config.data`)"
                                if "timed_as" in r else "")
        lines.append(f"| {recipe} | {r['example']} | {r['rate']:,.0f} | {cores} |")
    return "\n".join(lines)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.input_pipeline",
                                     description=__doc__.split("\n\n")[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=64, help="examples per batch")
    parser.add_argument("--seconds", type=float, default=30.0, help="timed seconds per row")
    parser.add_argument("--images", type=int, default=512,
                        help="stand-in ImageNet training images (an epoch repeats them)")
    parser.add_argument("--core", type=int, default=0,
                        help="the CPU core the process is pinned to (-1: not pinned)")
    parser.add_argument("--data_dir", default="",
                        help="keep the stand-in datasets here (default: a temporary folder)")
    parser.add_argument("--smoke", action="store_true",
                        help="the recipes' smoke configs (tiny vocabularies), for tests")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--markdown", default="", help="also write the table as Markdown here")
    parser.add_argument("--json", default="",
                        help="also write the run record (train/run_record.py) here")
    args = parser.parse_args(argv)
    for name in ("batch", "images"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1")
    if args.seconds <= 0:
        parser.error("--seconds must be > 0")
    if args.core >= 0 and args.core not in os.sched_getaffinity(0):
        parser.error(f"--core {args.core} is not one of this process's cores "
                     f"{sorted(os.sched_getaffinity(0))}")
    return args


def record(args, report: dict, command: list[str], started: float) -> dict:
    """The run record (train/run_record.py): the report as its metrics, with the table."""
    return benchmark_record(args, report, markdown(report), command, started,
                            peak_source="not measured (an input pipeline: no model)")


def main(argv=None) -> dict:
    """`python -m benchmarks.input_pipeline`; `--json FILE` writes the record that
    `python -m train.records save FILE bench_input_pipeline` commits."""
    return run_command("benchmarks.input_pipeline", argv, parse_args=parse_args, run=run,
                       table=markdown, record=record)


if __name__ == "__main__":
    main(sys.argv[1:])
