"""python -m train.sweep keeps each table to one definition of its runs: runs recorded under
another (finished before --allow_config_change), or not recorded at all, are left out of it and
named; --report_only refuses a folder of another variant; a damaged folder is an `error:` line
(exit 2) and is left as it is."""

from __future__ import annotations

import csv
import dataclasses
import json
import shutil

import pytest
from conftest import REPO
from sweep_helpers import SMOKE, run_sweep

from train import sweep as sweep_lib, sweep_compare, sweep_report, sweep_runner, sweep_spec

STEPS_1200 = "configs/ablations/vit_posemb.py:steps=1200"


def smoke_runs(workdir, rows, seeds=1, overrides=()):
    sweep = sweep_lib.load_sweep_file(SMOKE)
    return sweep_lib.plan(sweep, workdir, rows, list(range(seeds)), list(overrides))


def start_sweep(workdir, overrides=()):
    """DIR/sweep.json as the smoke sweep's first command (with `overrides`) leaves it."""
    sweep = sweep_lib.load_sweep_file(SMOKE)
    sweep_lib.check_spec(workdir, sweep_lib.run_spec(sweep, list(overrides)), allow_change=False)


def record(run, accuracy, workdir=None, extra=()):
    """A finished run's result.json in `workdir` (default: the run's) as the sweep writes it,
    its command `run`'s (then `extra`)."""
    workdir = workdir or run.workdir
    workdir.mkdir(parents=True, exist_ok=True)
    result = {"row": run.row, "seed": run.seed, "stage": run.stage,
              "metrics": {"accuracy": accuracy, "loss": 1.0 - accuracy}, "wall_s": 5.0,
              "attempts": 1, "command": ["python", "-m", "train", *run.argv, *extra]}
    (workdir / "result.json").write_text(json.dumps(result))


def finished_unrecorded(workdir, accuracy):
    """A run that ended (its final eval in metrics.jsonl) with no result.json."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "config.json").write_text(json.dumps({"train": {"num_steps": 20}}))
    (workdir / "metrics.jsonl").write_text(json.dumps(
        {"split": "eval", "step": 20, "accuracy": accuracy, "loss": 1.0 - accuracy}) + "\n")


def table_rows(workdir):
    with open(workdir / "results.csv") as file:
        return [(r["row"], int(r["seed"])) for r in csv.DictReader(file)]


def main(workdir, *extra, config=SMOKE):
    return sweep_lib.main(["--config", config, "--workdir", str(workdir), *extra])


# ---- one definition per table --------------------------------------------------------------
def test_runs_finished_before_a_definition_change_are_left_out_and_named(fixture_data_root,
                                                                        tmp_path, capsys):
    """A 20-step run (the smoke sweep's first command) is not compared with a 30-step one made
    after --allow_config_change: the table holds the runs of sweep.json's definition only, its
    header says that definition, and the other run is named with what changed."""
    workdir = tmp_path / "sweep"
    start_sweep(workdir)
    old = smoke_runs(workdir, ["none"])[0]
    record(old, accuracy=0.99)  # would be the best row
    before = (old.workdir / "result.json").read_text()
    result = run_sweep(workdir, fixture_data_root, "--rows", "none,learned_2d", "--seeds", "1",
                       "--config.train.num_steps=30", "--allow_config_change")
    assert ("2 runs: 1 finished before (1 under another definition: not in the tables), 1 to "
            "run") in result.stdout
    assert "best: none" not in result.stdout
    config = json.loads((workdir / "learned_2d" / "seed_0" / "train" / "config.json").read_text())
    assert config["train"]["num_steps"] == 30
    assert table_rows(workdir) == [("learned_2d", 0)]
    assert json.loads((workdir / "sweep.json").read_text())["overrides"] == [
        "--config.train.num_steps=30"]
    markdown = (workdir / "results.md").read_text()
    assert f"`python -m train.sweep --config {SMOKE} --config.train.num_steps=30`" in markdown
    note = ("none seed 0: trained under another definition (train --config.train.num_steps: "
            f"not given before, 30 now): to rerun it, move {workdir / 'none' / 'seed_0'} aside")
    assert f"- {note}" in markdown and f"[sweep] left out of the tables: {note}" in result.stdout
    assert "| none | 0 |" in markdown and "| **learned_2d** | 1 |" in markdown
    assert (old.workdir / "result.json").read_text() == before
    assert main(workdir, "--rows", "none", "--seeds", "1", "--config.train.num_steps=30",
                "--dry_run") == 0
    assert capsys.readouterr().out.startswith(
        "none/seed_0/train [finished under another definition: left out of the tables]")


def test_the_same_definition_elsewhere_is_the_same_and_report_only_takes_its_overrides(
        tmp_path, capsys):
    """Runs copied from another machine (other workdirs, the config's absolute path, the flag
    --allow_config_change) are this definition's; --report_only reports with the overrides
    the runs were defined with, and refuses a command without them."""
    workdir, override = tmp_path / "sweep", "--config.train.num_steps=30"
    start_sweep(workdir, [override])
    here = {r.row: r for r in smoke_runs(workdir, ["none", "learned_1d", "learned_2d"],
                                         overrides=[override])}
    elsewhere = {r.row: r for r in smoke_runs("/machine_a/sweep", ["none", "learned_1d"],
                                              overrides=[override])}
    record(elsewhere["none"], 0.5, here["none"].workdir, extra=["--allow_config_change"])
    run = elsewhere["learned_1d"]
    absolute = dataclasses.replace(run, argv=("--config", f"{REPO}/{run.argv[1]}", *run.argv[2:]))
    record(absolute, 0.6, here["learned_1d"].workdir)
    record(smoke_runs(workdir, ["learned_2d"])[0], 0.9)  # 20 steps: the definition before
    assert main(workdir, "--report_only", override) == 0
    assert table_rows(workdir) == [("none", 0), ("learned_1d", 0)]
    markdown = (workdir / "results.md").read_text()
    assert "- learned_2d seed 0: trained under another definition (train " in markdown
    assert "| **learned_1d** | 1 |" in markdown
    capsys.readouterr()
    assert main(workdir, "--report_only") == 2
    error = capsys.readouterr().err
    assert "is another sweep's" in error
    assert "overrides: ['--config.train.num_steps=30'] before, [] now" in error
    assert (workdir / "results.md").read_text() == markdown


def test_report_only_refuses_another_variant_of_the_sweep_config(tmp_path, capsys):
    """`:steps=1200` on the runs of `:smoke` would relabel the smoke runs as the full sweep."""
    workdir = tmp_path / "sweep"
    start_sweep(workdir)
    record(smoke_runs(workdir, ["none"])[0], 0.5)
    assert main(workdir, "--report_only") == 0
    markdown = (workdir / "results.md").read_text()
    assert "Fashion-MNIST, smoke" in markdown
    capsys.readouterr()
    assert main(workdir, "--report_only", config=STEPS_1200) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"error: {workdir / 'sweep.json'} is another sweep's")
    assert "'config': 'configs/vit/fashion_mnist.py:smoke'" in error       # before
    assert "'train.num_steps': '1200'" in error                            # now
    assert (workdir / "results.md").read_text() == markdown


def test_paths_aside_a_saved_definition_must_match_to_be_reported(tmp_path):
    """A teacher's absolute path may differ (the runs made on another machine); a step count
    in the same `:arg`, or a row's definition, may not."""
    def spec(teacher, steps=500, spam="task=spam"):
        stage = sweep_spec.Stage("distill", f"configs/bert/distill.py:teacher={teacher},"
                                            f"steps={steps}", {"init": teacher + "/checkpoints"})
        sweep = sweep_spec.Sweep(title="t", stages=(stage,), rows={"spam": spam},
                                 metrics=(sweep_spec.Metric("accuracy"),))
        return sweep_lib.run_spec(sweep, [f"--config.data.vocab_file={teacher}/vocab"])

    sweep_lib.check_spec(tmp_path, spec("/machine_a/teacher"), allow_change=False)
    sweep_lib.check_same_sweep(tmp_path, spec("/work/b/teacher"))
    sweep_lib.check_same_sweep(tmp_path, spec("gs://bucket/teacher"))
    for other in (spec("/machine_a/teacher", steps=400), spec("relative/teacher"),
                  spec("/machine_a/teacher", spam="task=tweets")):
        with pytest.raises(sweep_lib.SweepError, match="is another sweep's"):
            sweep_lib.check_same_sweep(tmp_path, other)


@pytest.mark.parametrize("folder, config", [("vit_table8", "vit_posemb"),
                                            ("distilbert_table4", "distilbert_table4")])
def test_report_only_rewrites_a_committed_sweeps_tables_from_a_copy(folder, config, tmp_path):
    """Made on other machines (other workdirs, a teacher's path in the stage's `:arg`), with
    runs moved by hand to the row that now names their computation (`renamed_from`): all are
    this definition's runs, and the committed tables are what --report_only writes."""
    committed = REPO / "notebooks" / "results" / folder
    shutil.copytree(committed, tmp_path / folder)
    assert main(tmp_path / folder, "--report_only",
                config=f"configs/ablations/{config}.py") == 0
    for name in ("results.csv", "results.md"):
        assert (tmp_path / folder / name).read_text() == (committed / name).read_text()


def test_a_renamed_run_is_compared_but_for_the_name_its_note_explains(tmp_path):
    run = smoke_runs(tmp_path, ["relative_bias_2d"])[0]
    renamed = dataclasses.replace(run, argv=tuple(a.replace("=relative_bias_2d", "=relative")
                                                   for a in run.argv))
    result = {"metrics": {}, "command": ["python", "-m", "train", *renamed.argv]}
    assert sweep_runner.changes(result, run) == [
        ":posemb: relative before, relative_bias_2d now"]
    result["renamed_from"] = "relative (the scalar bias's old name)"
    assert sweep_runner.changes(result, run) == []
    result["command"].append("--config.train.num_steps=30")
    assert sweep_runner.changes(result, run) == [
        "--config.train.num_steps: 30 before, not given now"]


# ---- only recorded runs in the tables ------------------------------------------------------
def test_a_run_without_result_json_is_left_out_and_named(tmp_path):
    """A final eval in metrics.jsonl has no record (wall time, machine, command): the sweep's
    report and the committed sweeps' tables leave its row x seed out and name it."""
    workdir = tmp_path / "sweep"
    start_sweep(workdir)
    none, learned = smoke_runs(workdir, ["none", "learned_1d"])
    record(none, 0.5)
    finished_unrecorded(learned.workdir, 0.99)
    assert main(workdir, "--report_only") == 0
    assert table_rows(workdir) == [("none", 0)]
    assert ("- learned_1d seed 0: finished but not recorded (no result.json in train): the "
            "sweep's command without --report_only records it") in (
        workdir / "results.md").read_text()
    assert not (learned.workdir / "result.json").exists()  # --report_only records nothing
    assert [r["row"] for r in sweep_report.collect(sweep_lib.load_sweep_file(SMOKE), workdir)
            ] == ["none"]

    # A committed sweep of two stages: mae seed 1's fine-tuning finished, not recorded; its
    # pretraining's record alone does not put the row x seed in the table, nor in its count.
    results = tmp_path / "results"
    shutil.copytree(REPO / "notebooks" / "results" / "mae_pipeline", results / "mae_pipeline")
    unrecorded = results / "mae_pipeline" / "mae" / "seed_1" / "finetune"
    (unrecorded / "result.json").unlink()
    finished_unrecorded(unrecorded, 0.99)
    sweep, runs = sweep_compare.load("mae_pipeline", results, allow_missing=True)
    assert list(runs["mae"]["seed"]) == [0] and list(runs["scratch"]["seed"]) == [0, 1]
    table = sweep_compare.markdown_table("mae_pipeline", sweep, runs, results)
    assert "Not recorded yet, so not in the table: mae seed 1." in table
    assert "6 runs, each recorded in" in table


# ---- a damaged or wrong folder: exit 2, nothing touched ------------------------------------
@pytest.mark.parametrize("extra", [[], ["--dry_run"], ["--report_only"]])
def test_a_file_as_workdir_is_an_error(tmp_path, capsys, extra):
    path = tmp_path / "notes.txt"
    path.write_text("mine\n")
    assert main(path, "--rows", "none", *extra) == 2
    assert capsys.readouterr().err == (f"error: --workdir {path} is a file, not a folder: give a "
                                       "new folder or a sweep's\n")
    if not extra:  # a file where one of its parent folders would be
        assert main(path / "sweep", "--rows", "none") == 2
        assert capsys.readouterr().err.startswith(
            f"error: --workdir {path / 'sweep'} cannot be made a folder (")
    assert path.read_text() == "mine\n" and sorted(tmp_path.iterdir()) == [path]


@pytest.mark.parametrize("extra", [[], ["--dry_run"], ["--report_only"]])
@pytest.mark.parametrize("text, why", [("{\"stages\": [", "not JSON: "),
                                       ("[]", "no 'stages' and 'overrides' lists")])
def test_a_damaged_sweep_json_is_an_error(tmp_path, capsys, extra, text, why):
    path = tmp_path / "sweep.json"
    path.write_text(text)
    assert main(tmp_path, "--rows", "none", *extra) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"error: {path} is damaged ({why}")
    assert "Move it aside and run the command that made the runs" in error
    assert path.read_text() == text and sorted(tmp_path.iterdir()) == [path]


@pytest.mark.parametrize("extra", [[], ["--dry_run"], ["--report_only"]])
@pytest.mark.parametrize("text, why", [('{"metrics": {"accu', "not JSON: "),
                                       ('{"row": "none"}', "no 'metrics' object")])
def test_a_damaged_result_json_is_an_error(tmp_path, capsys, extra, text, why):
    start_sweep(tmp_path)
    run = smoke_runs(tmp_path, ["none"])[0]
    run.workdir.mkdir(parents=True)
    path = run.workdir / "result.json"
    path.write_text(text)
    spec = (tmp_path / "sweep.json").read_text()
    assert main(tmp_path, "--rows", "none", "--seeds", "1", *extra) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"error: {path} is damaged ({why}")
    assert "move it aside (e.g. to result.json.damaged) and run the sweep again" in error
    assert path.read_text() == text and list(run.workdir.iterdir()) == [path]
    assert (tmp_path / "sweep.json").read_text() == spec
    assert not (tmp_path / "results.md").exists()


def test_the_provenance_line_counts_records_of_uncommitted_code_or_without_xla_flags(tmp_path):
    """A committed sweep's records, one made from a tree with uncommitted changes and one from
    before records kept the XLA flags: the line under the table says so, with their counts."""
    results = tmp_path / "results"
    shutil.copytree(REPO / "notebooks" / "results" / "mae_pipeline", results / "mae_pipeline")
    sweep, runs = sweep_compare.load("mae_pipeline", results)
    clean = sweep_compare.markdown_table("mae_pipeline", sweep, runs, results)
    assert "uncommitted" not in clean and "XLA flags" not in clean
    paths = sorted((results / "mae_pipeline").glob("*/seed_*/*/result.json"))
    for path, edit in zip(paths, ("dirty", "flags")):
        result = json.loads(path.read_text())
        if edit == "dirty":
            result["record"]["code"]["dirty"] = True
        else:
            del result["record"]["machine"]["xla_flags"]
        path.write_text(json.dumps(result))
    table = sweep_compare.markdown_table("mae_pipeline", sweep, runs, results)
    assert "; 1 of them made with uncommitted changes to that code; 1 of them from before " \
           "records kept the XLA flags (how many threads ran is not recorded)." in table
