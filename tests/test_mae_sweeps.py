"""The masked-autoencoder sweeps (configs/ablations/mae_*.py): their rows, stages and the paper's
numbers, every planned run's config, a metric read from a run's last train record (the measured
pretraining speed of Table 1c), and the limited-labels smoke sweep end to end."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from sweep_helpers import run_config, run_sweep

from train import sweep as sweep_lib
from train import sweep_report
from train.sweep_spec import Metric, Stage, Sweep

SWEEPS = ("mae_mask_ratio", "mae_table1", "mae_limited_labels")


def _configs(sweep, row):
    runs = sweep_lib.plan(sweep, Path("w"), [row], [2], [])
    return runs, {run.stage: run_config(run) for run in runs}


@pytest.mark.parametrize("name", SWEEPS)
def test_every_run_of_the_mae_sweeps_is_defined_as_its_row_says(name):
    """Rows change the pretraining only; every downstream stage starts from its row's
    pretraining workdir (config.init) with the same budget; every planned config loads."""
    for arg in ("", "smoke", "steps=300"):
        sweep = sweep_lib.load_sweep_file(f"configs/ablations/{name}.py:{arg}")
        assert sweep.stages[0].name == "pretrain" and sweep.seeds == (2 if arg == "smoke" else 3)
        assert bool(sweep.findings) == (arg != "smoke")
        for row in sweep.rows:
            runs, configs = _configs(sweep, row)
            pretrain = configs["pretrain"]
            assert pretrain.task.name == "mae_pretrain" and pretrain.seed == 2
            for run in runs[1:]:
                assert run.previous == runs[0].workdir
                assert configs[run.stage].init == str(runs[0].workdir)
                assert configs[run.stage].task.name == "classify"
                steps = configs[run.stage].train.num_steps
                if row == "scratch_equal_compute" and run.stage == "finetune":
                    # its own budget: 200 + the pretraining's steps x PRETRAIN_FLOPS_RATIO
                    assert steps == {"": 370, "steps=300": 302, "smoke": 24}[arg]
                elif arg != "smoke":
                    assert steps == 200
                if arg != "smoke":
                    assert configs[run.stage].data.batch_size == 128
                    assert configs[run.stage].optimizer.warmup_steps == steps // 10
            if row in ("untrained", "scratch_equal_compute"):  # a step that changes nothing
                assert pretrain.train.num_steps == 1 and pretrain.optimizer.learning_rate == 0
            elif arg == "":
                assert pretrain.train.num_steps == 500 and pretrain.data.batch_size == 128
            elif arg == "steps=300":
                assert pretrain.train.num_steps == 300
            if "probe" in configs:
                assert configs["probe"].task.probe and configs["probe"].model.probe_norm
                assert not configs["finetune"].task.probe
    masks = sweep_lib.load_sweep_file("configs/ablations/mae_mask_ratio.py")
    assert [_configs(masks, row)[1]["pretrain"].model.mask_ratio for row in masks.rows] == [
        0.1, 0.5, 0.75, 0.9, 0.75, 0.75]


def test_equal_compute_steps_come_from_the_two_steps_flops():
    """PRETRAIN_FLOPS_RATIO is train/flops.py's count for configs/vit/mae.py (a pretraining step
    against a fine-tuning step of its encoder, per image), and the smoke constants are the smoke
    configs' steps and batches."""
    from configs.ablations import mae_stages
    from train import flops
    from train.config import load_config_file
    from train.tasks.mae_pretrain import model_config

    model = model_config(load_config_file("configs/vit/mae.py"))
    ratio = (flops.mae_train_flops_per_example(model, 1)
             / flops.vit_train_flops_per_example(model.encoder, 1))
    assert mae_stages.PRETRAIN_FLOPS_RATIO == pytest.approx(ratio, abs=5e-4)
    pre, fine = (load_config_file(f"configs/vit/{name}.py:smoke")
                 for name in ("mae", "fashion_mnist"))
    assert (pre.train.num_steps, fine.train.num_steps) == (
        mae_stages.SMOKE_PRETRAIN_STEPS, mae_stages.SMOKE_DOWNSTREAM_STEPS)
    assert pre.data.batch_size == fine.data.batch_size


def test_the_table1_rows_change_one_thing_each_and_carry_the_papers_numbers():
    sweep = sweep_lib.load_sweep_file("configs/ablations/mae_table1.py")
    changes = {}
    default = _configs(sweep, "default")[1]["pretrain"].model.to_dict()
    for row in sweep.rows:
        model = _configs(sweep, row)[1]["pretrain"].model.to_dict()
        changes[row] = {k: v for k, v in model.items() if v != default[k]}
    assert changes == {
        "default": {}, "mask_token_in_encoder": {"mask_token_in_encoder": True},
        "decoder_1": {"decoder": {**default["decoder"], "num_layers": 1}},
        "decoder_4": {"decoder": {**default["decoder"], "num_layers": 4}},
        "pixels": {"norm_pix_loss": False}}
    assert [sweep.label(m) for m in sweep.metrics] == [
        "accuracy", "probe.accuracy", "pretrain.pixel_mse", "pretrain.train.steps_per_second"]
    assert sweep.paper["mask_token_in_encoder"] == pytest.approx(
        {"accuracy": 0.842, "probe.accuracy": 0.596})                        # Table 1c
    assert sweep.paper["decoder_1"]["probe.accuracy"] == pytest.approx(0.655)  # Table 1a
    assert sweep.paper["pixels"]["accuracy"] == pytest.approx(0.849)           # Table 1d
    figure = sweep_lib.load_sweep_file("configs/ablations/mae_mask_ratio.py")
    assert figure.paper == {"mask_75": {"accuracy": 0.849, "probe.accuracy": 0.735},
                            "mask_10": {"probe.accuracy": 0.546}}
    labels = sweep_lib.load_sweep_file("configs/ablations/mae_limited_labels.py")
    fractions = [_configs(labels, "mae")[1][s].data.train_fraction
                 for s in ("labels_10pct", "labels_1pct")]
    assert fractions == [0.1, 0.01] and labels.paper == {}


def test_a_train_split_metric_is_the_runs_last_train_record(tmp_path):
    """Metric(split='train') reads the last train record: from the run record kept in
    result.json, or from the workdir's metrics.jsonl where there is none."""
    sweep = Sweep(title="t", stages=(Stage("pretrain", "p.py"), Stage("finetune", "f.py")),
                  rows={"a": {}, "b": {}},
                  metrics=(Metric("accuracy"), Metric("steps_per_second", stage="pretrain",
                                                      split="train")))
    for row, speed in (("a", 3.5), ("b", 1.25)):
        for stage in ("pretrain", "finetune"):
            folder = tmp_path / row / "seed_0" / stage
            folder.mkdir(parents=True)
            result = {"metrics": {"accuracy": 0.5}, "wall_s": 1.0}
            if stage == "pretrain" and row == "a":
                result["record"] = {"metrics": {"train": {"steps_per_second": speed,
                                                          "step": 10}}}
            (folder / "result.json").write_text(json.dumps(result))
            if stage == "pretrain" and row == "b":
                (folder / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in (
                    {"split": "train", "step": 5, "steps_per_second": 9.0},
                    {"split": "train", "step": 10, "steps_per_second": speed},
                    {"split": "eval", "step": 10, "loss": 1.0})) + "\n")
    records = sweep_report.collect(sweep, tmp_path)
    assert [r["metrics"]["pretrain.train.steps_per_second"] for r in records] == [3.5, 1.25]
    with pytest.raises(ValueError, match="split='test' is not one of"):
        Metric("x", split="test")


def test_the_limited_labels_smoke_sweep_fine_tunes_on_its_fractions(fixture_data_root,
                                                                   tmp_path):
    """The reference row end to end: an untouched encoder, fine-tuned on 10% and 1% of the
    fixture's labels (200 and 20 images, as many of every class), one results.csv line whose
    columns are its stages' own final evals."""
    result = run_sweep(tmp_path, fixture_data_root, "--rows", "untrained", "--seeds", "1",
                       config="configs/ablations/mae_limited_labels.py:smoke")
    assert "3 runs: 0 finished before, 3 to run" in result.stdout
    with open(tmp_path / "results.csv") as file:
        (record,) = list(csv.DictReader(file))
    assert record["row"] == "untrained"
    runs = tmp_path / "untrained" / "seed_0"

    def final(stage: str) -> dict:  # the stage's final eval, as its own run record keeps it
        return json.loads((runs / stage / "record.json").read_text())["metrics"]["eval"]

    # Each column is its own stage's number (the 1% stage last: `accuracy`), not another's.
    assert float(record["accuracy"]) == final("labels_1pct")["accuracy"]
    assert float(record["labels_10pct.accuracy"]) == final("labels_10pct")["accuracy"]
    assert float(record["pretrain.pixel_mse"]) == final("pretrain")["pixel_mse"]
    for stage, fraction in (("labels_10pct", 0.1), ("labels_1pct", 0.01)):
        config = json.loads((tmp_path / f"untrained/seed_0/{stage}/config.json").read_text())
        assert config["data"]["train_fraction"] == fraction
        assert config["init"] == str((tmp_path / "untrained/seed_0/pretrain").absolute())
        assert config["task"]["trained_parameters"] == "all"


def test_the_pipeline_sweep_runs_the_configs_defaults_and_scratch_for_equal_wall_clock():
    """`mae` is configs/vit/mae.py then fashion_mnist.py:init=<it>, both at their defaults;
    `scratch` fine-tunes the same untouched encoder for SCRATCH_STEPS, with the same warmup."""
    from configs.ablations import mae_pipeline

    sweep = sweep_lib.load_sweep_file("configs/ablations/mae_pipeline.py")
    assert list(sweep.rows) == ["mae", "scratch"] and sweep.seeds == 2 and sweep.findings
    runs, mae = _configs(sweep, "mae")
    assert (mae["pretrain"].train.num_steps, mae["pretrain"].data.batch_size) == (2000, 256)
    assert mae["pretrain"].model.mask_ratio == 0.75 and mae["pretrain"].optimizer.learning_rate > 0
    _, scratch = _configs(sweep, "scratch")
    assert scratch["pretrain"].train.num_steps == 1
    assert scratch["pretrain"].optimizer.learning_rate == 0
    for configs, steps in ((mae, 5900), (scratch, mae_pipeline.SCRATCH_STEPS)):
        finetune = configs["finetune"]
        assert finetune.train.num_steps == steps and finetune.data.batch_size == 128
        assert finetune.optimizer.warmup_steps == 300 and finetune.train.eval_every == 0
        assert finetune.init.endswith("/pretrain") and not finetune.task.probe
    assert runs[1].previous == runs[0].workdir
    # 2000 x 256 images at 367 a second (1,394 s) buy 1,505 steps of 128 at 138 a second
    assert mae_pipeline.SCRATCH_STEPS == 7405
    smoke = sweep_lib.load_sweep_file("configs/ablations/mae_pipeline.py:smoke")
    assert not smoke.findings
    assert _configs(smoke, "scratch")[1]["finetune"].train.num_steps == 25


def test_the_pipeline_sweeps_rates_are_the_ones_the_committed_sweeps_measured():
    """PRETRAIN_IMAGES_PER_S and FINETUNE_IMAGES_PER_S: MAE Table 1's `default` pretraining and
    Figure 5's `scratch_equal_compute` fine-tuning, steps a second of 128 images, seed mean."""
    from configs.ablations import mae_pipeline

    def rate(folder, row, stage):
        results = Path("notebooks/results", folder, row).glob(f"seed_*/{stage}/result.json")
        rates = [json.loads(path.read_text())["record"]["metrics"]["train"]["steps_per_second"]
                 for path in sorted(results)]
        assert len(rates) == 3
        return round(sum(rates) / len(rates), 2) * 128

    assert mae_pipeline.PRETRAIN_IMAGES_PER_S == pytest.approx(
        rate("mae_table1", "default", "pretrain"))
    assert mae_pipeline.FINETUNE_IMAGES_PER_S == pytest.approx(
        rate("mae_mask_ratio", "scratch_equal_compute", "finetune"))
