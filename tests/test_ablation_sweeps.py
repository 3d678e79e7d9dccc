"""The sweeps of configs/ablations (ViT Table 8, BERT Table 8): their rows, stages, metrics and
paper numbers, and that every planned command's config loads (Transformer Table 3's sweep:
test_table3.py)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from sweep_helpers import SMOKE, run_config, run_sweep

from configs.ablations import bert_table8
from train import sweep as sweep_lib
from train import sweep_spec
from train.optimizers import make_optimizer


def test_the_posemb_sweep_covers_every_position_embedding_and_column():
    """Every posemb kind in the Default/Stem column (a row named after it) and every kind with a
    table in the columns it has (rows `<posemb>.<posemb_mode>`), each row's config as its name
    says, in the order of the paper's table."""
    from models.vit import POSEMB_KINDS, POSEMB_MODES, ViTConfig

    def possible(kind, mode):
        try:
            ViTConfig(num_classes=10, posemb=kind, posemb_mode=mode)
        except ValueError:
            return False
        return True

    cells = [(kind, mode) for kind in POSEMB_KINDS for mode in POSEMB_MODES if possible(kind, mode)]
    for arg in ("", "smoke", "steps=100"):
        sweep = sweep_lib.load_sweep_file(f"configs/ablations/vit_posemb.py:{arg}")
        assert sorted(sweep.rows) == sorted(kind if mode == "stem" else f"{kind}.{mode}"
                                            for kind, mode in cells)
        assert list(sweep.rows)[:8] == [
            "none", "learned_1d", "learned_1d.every_layer", "learned_1d.every_layer_shared",
            "learned_2d", "learned_2d.every_layer", "learned_2d.every_layer_shared", "relative"]
        assert set(sweep.paper) == set(list(sweep.rows)[:8])
        for row in sweep.rows:  # every row's config loads, with the sweep's overrides
            run = sweep_lib.plan(sweep, Path("w"), [row], [0], [])[0]
            config = run_config(run)
            kind, _, mode = row.partition(".")
            assert (config.model.posemb, config.model.posemb_mode) == (kind, mode or "stem")
            if arg != "smoke":  # the model the table was measured with, whatever the demo's
                assert (config.model.num_layers, config.model.activation) == (6, "gelu")
                assert config.data.batch_size == 256 and config.optimizer.learning_rate == 2e-3
    assert sweep_lib.load_sweep_file(SMOKE).seeds == 2


def test_the_committed_posemb_records_keep_their_rows_definitions():
    """notebooks/results/vit_table8 (copied to a workdir, the sweep resumes from it): the rows
    it holds are defined there as the sweep defines them now, so no finished run is taken for a
    row it did not run; the scalar-bias runs recorded under the old name sit in their row, and
    the `relative` row holds only runs of the paper's relative attention, with their records."""
    directory = Path(__file__).resolve().parents[1] / "notebooks" / "results" / "vit_table8"
    saved = json.loads((directory / "sweep.json").read_text())
    sweep = sweep_lib.load_sweep_file("configs/ablations/vit_posemb.py")
    sweep_lib.check_spec(directory, sweep_lib.run_spec(sweep, []), allow_change=False, save=False)
    recorded = {p.name for p in directory.iterdir() if p.is_dir()}
    assert recorded <= set(saved["rows"])
    relative = sorted(directory.glob("relative/seed_*/train/result.json"))
    assert len(relative) == 3
    for path in relative:
        result = json.loads(path.read_text())
        assert "renamed_from" not in result and result["row"] == "relative"
        assert result["record"]["config"]["model"]["posemb"] == "relative"
    for path in directory.glob("relative_bias_2d/seed_*/train/result.json"):
        result = json.loads(path.read_text())
        assert result["row"] == "relative_bias_2d" and result["renamed_from"].startswith("relative")


def test_the_bert_table8_sweep_evaluates_each_rows_pretraining_three_ways():
    """Rows change only pretraining; every downstream stage gets the row's pretraining workdir
    (workdir_from) and depends on it, not on the others; every command's config loads."""
    with pytest.raises(sweep_lib.SweepError, match="more than the pretraining config's 300"):
        sweep_lib.load_sweep_file("configs/ablations/bert_table8.py:steps=300")
    for arg, steps in (("smoke", 12), ("smoke,steps=20", 20), ("steps=400", 400)):
        stage = sweep_lib.load_sweep_file(f"configs/ablations/bert_table8.py:{arg}").stages[0]
        assert stage.overrides["train.num_steps"] == steps, arg
    for arg in ("", "smoke"):
        sweep = sweep_lib.load_sweep_file(f"configs/ablations/bert_table8.py:{arg}")
        assert list(sweep.rows) == ["80-10-10", "100-0-0", "80-0-20", "80-20-0", "0-20-80",
                                    "0-0-100", "untrained"]
        # The reference row: one pretraining step that changes nothing, whatever the variant.
        untrained = run_config(sweep_lib.plan(sweep, Path("w"), ["untrained"], [0], [])[0])
        assert untrained.train.num_steps == 1 and untrained.optimizer.learning_rate == 0.0
        assert untrained.optimizer.warmup_steps == 0
        optimizer_cfg = untrained.optimizer.copy_and_resolve_references()
        optimizer_cfg.total_steps = untrained.train.num_steps  # as the trainer resolves -1
        tx, _ = make_optimizer(optimizer_cfg)
        params = {"w": np.ones((3, 2), np.float32)}
        updates, _ = tx.update({"w": np.full((3, 2), 5.0, np.float32)}, tx.init(params), params)
        np.testing.assert_array_equal(updates["w"], 0.0)  # weight decay included
        runs = sweep_lib.plan(sweep, Path("w"), ["0-20-80"], [1], [])
        assert [run.stage for run in runs] == ["pretrain", "classify", "features", "finetune"]
        pretrain = runs[0]
        assert pretrain.argv[1].endswith("pretrain.py:mask=0-20-80" if not arg
                                         else "pretrain.py:smoke,mask=0-20-80")
        for run in runs[1:]:
            assert run.previous == pretrain.workdir
            assert run.argv[-1] == f"--config.init={pretrain.workdir.absolute()}"
            assert "mask=" not in run.argv[1]
        configs = {run.stage: run_config(run) for run in runs}
        assert configs["finetune"].task.features == "none"
        assert configs["finetune"].init.endswith("pretrain")
        assert configs["features"].task.features == "concat_last_four"
        assert configs["classify"].task.features == "none"
        assert configs["classify"].data.name == ("brown_genre" if arg else "tweets")
        assert {configs[s].data.name for s in ("features", "finetune")} == {"brown_pos"}
        if not arg:  # fine-tuning at the learning rates chosen for this scale; features: 1e-3
            assert configs["pretrain"].optimizer.warmup_steps == 300  # the config's own warmup
            assert configs["pretrain"].train.num_steps == 1000
            assert configs["finetune"].optimizer.learning_rate == 2e-3
            assert configs["classify"].optimizer.learning_rate == 1e-3
            assert bert_table8.FINETUNE_LR == {"brown_pos": 2e-3, "tweets": 1e-3}
            assert configs["features"].optimizer.learning_rate == 1e-3
        assert [sweep.label(m) for m in sweep.metrics] == [
            "token_accuracy", "features.token_accuracy", "classify.accuracy",
            "pretrain.mlm_accuracy"]
        assert sweep.paper["80-10-10"] == pytest.approx({"token_accuracy": 0.954,
                                                         "features.token_accuracy": 0.949,
                                                         "classify.accuracy": 0.842})
    with pytest.raises(sweep_lib.SweepError, match="not an earlier stage"):
        sweep_spec.Sweep(title="t", stages=(sweep_spec.Stage("a", "f.py"),
                                           sweep_spec.Stage("b", "f.py", previous_workdir_key="k",
                                                           workdir_from="c"),
                                           sweep_spec.Stage("c", "f.py")),
                        rows={"r": {}}, metrics=(sweep_spec.Metric("accuracy"),))


def test_the_bert_table8_smoke_sweep_runs_every_stage_from_an_untrained_encoder(brown_data_root,
                                                                               tmp_path):
    """The reference row end to end: a pretraining step that changes nothing, then the three
    downstream runs from its checkpoint, tabulated in one results.csv line."""
    result = run_sweep(tmp_path, brown_data_root, "--rows", "untrained", "--seeds", "1",
                       config="configs/ablations/bert_table8.py:smoke")
    assert "4 runs: 0 finished before, 4 to run" in result.stdout
    pretrain = [json.loads(line) for line in
                (tmp_path / "untrained/seed_0/pretrain/metrics.jsonl").read_text().splitlines()]
    assert [r["learning_rate"] for r in pretrain if r["split"] == "train"] == [0.0]
    with open(tmp_path / "results.csv") as file:
        (record,) = list(csv.DictReader(file))
    labels = ["token_accuracy", "features.token_accuracy", "classify.accuracy",
              "pretrain.mlm_accuracy"]
    assert record["row"] == "untrained" and all(0 <= float(record[k]) <= 1 for k in labels)
    for stage in ("classify", "features", "finetune"):
        config = json.loads((tmp_path / f"untrained/seed_0/{stage}/config.json").read_text())
        assert config["init"] == str((tmp_path / "untrained/seed_0/pretrain").absolute())


def test_the_sweeps_carry_the_papers_tables_and_their_budgets():
    """The paper numbers printed beside each row, against the tables typed in here (BERT
    Table 8: MNLI accuracy, NER fine-tuned and feature-based F1; ViT Table 8, its three
    columns), every metric higher-is-better except the loss, and the ViT sweep's budget: N
    steps with a warmup of min(200, N / 6)."""
    bert = sweep_lib.load_sweep_file("configs/ablations/bert_table8.py:")
    table = {"80-10-10": (84.2, 95.4, 94.9), "100-0-0": (84.3, 94.9, 94.0),
             "80-0-20": (84.1, 95.2, 94.6), "80-20-0": (84.4, 95.2, 94.7),
             "0-20-80": (83.7, 94.8, 94.6), "0-0-100": (83.6, 94.9, 94.6)}
    assert set(bert.paper) == set(table)
    for mask, (mnli, ner_ft, ner_fb) in table.items():
        assert bert.paper[mask] == pytest.approx({
            "classify.accuracy": mnli / 100, "token_accuracy": ner_ft / 100,
            "features.token_accuracy": ner_fb / 100}, abs=1e-12), mask
    assert [m.better for m in bert.metrics] == ["max"] * 4
    for arg, steps, warmup in (("", 600, 100), ("steps=100", 100, 16),
                               ("steps=1800", 1800, 200)):
        vit = sweep_lib.load_sweep_file(f"configs/ablations/vit_posemb.py:{arg}")
        assert vit.paper == {  # Table 8: Default/Stem, Every Layer, Every Layer-Shared
            "none": {"accuracy": 0.61382},
            "learned_1d": {"accuracy": 0.64206},
            "learned_1d.every_layer": {"accuracy": 0.63964},
            "learned_1d.every_layer_shared": {"accuracy": 0.64292},
            "learned_2d": {"accuracy": 0.64001},
            "learned_2d.every_layer": {"accuracy": 0.64046},
            "learned_2d.every_layer_shared": {"accuracy": 0.64022},
            "relative": {"accuracy": 0.64032}}
        assert [(m.name, m.better) for m in vit.metrics] == [("accuracy", "max"), ("loss", "min")]
        (stage,) = vit.stages
        assert stage.overrides["train.num_steps"] == steps, arg
        assert stage.overrides["optimizer.warmup_steps"] == warmup, arg
        assert vit.seeds == 3
