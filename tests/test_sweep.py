"""python -m train.sweep: rows x seeds (x stages) as subprocesses, resumable, tabulated."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO
from sweep_helpers import SMOKE, STAGE2_CONFIG, TWO_STAGE_SWEEP, run_config, run_sweep, sweep_cli

from train import sweep as sweep_lib, sweep_runner, sweep_spec

ROWS = ["none", "learned_1d.every_layer"]  # a row of two `:arg` items (posemb, posemb_mode)


def run_dirs(workdir: Path) -> list[Path]:
    return sorted(p.parent for p in workdir.glob("*/seed_*/*/config.json"))


def final_eval_in_log(run_dir: Path) -> dict:
    num_steps = json.loads((run_dir / "config.json").read_text())["train"]["num_steps"]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in records if r["split"] == "eval" and r["step"] == num_steps][-1]


def files_state(workdir: Path) -> dict:
    """Size and mtime of every file the runs write, to show that nothing ran."""
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in workdir.glob("*/seed_*/*/*")
            if p.is_file()}


# ---- without training -------------------------------------------------------------------------
def test_plan_builds_one_command_per_row_seed_stage(tmp_path):
    sweep = sweep_spec.Sweep(
        title="t",
        stages=(sweep_spec.Stage("pre", "configs/vit/fashion_mnist.py:smoke",
                                {"train.num_steps": 7, "data.augment": "none",
                                 "train.progress_bar": False, "model.image_size": (28, 28)}),
                sweep_spec.Stage("fine", "configs/vit/fashion_mnist.py", apply_rows=False,
                                previous_workdir_key="data.name")),
        rows={"a": "posemb=none", "b": {"optimizer.learning_rate": 1e-3}},
        metrics=(sweep_spec.Metric("accuracy"),))
    runs = sweep_lib.plan(sweep, tmp_path, ["a", "b"], [0, 1], ["--config.train.log_every=2"])
    assert [r.name for r in runs] == [f"{row}/seed_{seed}/{stage}" for seed in (0, 1)
                                      for row in "ab" for stage in ("pre", "fine")]
    first = runs[0]
    assert first.argv[1].endswith("configs/vit/fashion_mnist.py:smoke,posemb=none")
    assert first.workdir == tmp_path / "a" / "seed_0" / "pre" and first.previous is None
    assert first.argv[-2:] == ("--config.train.log_every=2", "--config.seed=0")
    fine_b1 = runs[7]
    assert fine_b1.argv[1].endswith("configs/vit/fashion_mnist.py")  # rows do not apply
    assert "--config.optimizer.learning_rate=0.001" not in fine_b1.argv
    pretrain_b1 = (tmp_path / "b" / "seed_1" / "pre").absolute()
    assert fine_b1.argv[-1] == f"--config.data.name={pretrain_b1}"
    assert fine_b1.previous == tmp_path / "b" / "seed_1" / "pre"
    # Every value travels as text that train/config.py reads back as the same value.
    config = run_config(runs[2])
    assert config.model.posemb == "learned_1d" and config.optimizer.learning_rate == 1e-3
    assert config.train.num_steps == 7 and config.data.augment == "none"
    assert config.train.progress_bar is False
    assert config.model.image_size == (28, 28) and config.seed == 0


def test_a_stage_may_change_one_rows_run_of_it(tmp_path):
    """row_overrides: keys for one row's run of a stage the rows do not otherwise change, last;
    the other rows' runs and the spec of a stage without them stay as they were."""
    stages = (sweep_spec.Stage("pre", "configs/vit/fashion_mnist.py:smoke"),
              sweep_spec.Stage("fine", "configs/vit/fashion_mnist.py:smoke",
                               {"train.num_steps": 5}, apply_rows=False,
                               row_overrides={"b": {"train.num_steps": 9}}))
    sweep = sweep_spec.Sweep(title="t", stages=stages, rows={"a": {}, "b": {}},
                             metrics=(sweep_spec.Metric("accuracy"),))
    runs = {r.name: r for r in sweep_lib.plan(sweep, tmp_path, ["a", "b"], [0], [])}
    assert run_config(runs["a/seed_0/fine"]).train.num_steps == 5
    assert run_config(runs["b/seed_0/fine"]).train.num_steps == 9
    assert run_config(runs["b/seed_0/pre"]).train.num_steps != 9
    spec = sweep_lib.run_spec(sweep, [])
    assert "row_overrides" not in spec["stages"][0]
    assert spec["stages"][1]["row_overrides"] == {"b": {"train.num_steps": "9"}}


@pytest.mark.parametrize("kwargs, message", [
    (dict(stages=()), "at least one stage"),
    (dict(rows={"a/b": {}}), "cannot name a directory"),
    (dict(rows={"a": ["posemb=none"]}), "neither a config `:arg` string nor"),
    (dict(paper={"c": {"accuracy": 1.0}}), "not a row"),
    (dict(paper={"a": {"acc": 1.0}}), "unknown metrics"),
    (dict(paper_reference={"c": {"accuracy": 1.0}}), "paper reference numbers for 'c', which "
                                                     "is not a row"),
    (dict(paper_reference={"a": {"acc": 1.0}}), "reference numbers for 'a' name unknown"),
    (dict(metrics=(sweep_spec.Metric("accuracy", stage="x"),)), "stage 'x'"),
    (dict(stages=(sweep_spec.Stage("s", "f.py", previous_workdir_key="k"),)), "no previous stage"),
    (dict(stages=(sweep_spec.Stage("s", "f.py", row_overrides={"z": {"seed": 1}}),)),
     "row_overrides for \\['z'\\], not rows"),
    (dict(metrics=(sweep_spec.Metric("loss", "min"), sweep_spec.Metric("loss", stage="s"))),
     "metrics repeat"),
    (dict(repeats={"a": {"accuracy": "z"}}), "repeats for 'a': rows \\['z'\\]"),
    (dict(repeats={"a": {"acc": "a"}}), "metrics \\['acc'\\] are not the sweep's"),
    (dict(rows={"a": {}, "b": {}}, repeats={"a": {"accuracy": "b"}},
          findings=(sweep_spec.Finding("a beats b", metric="accuracy", row="a", against="b",
                                       expect="higher", paper="p"),)),
     "compares accuracy of row a, which measures row b's model again"),
])
def test_sweep_declarations_are_checked(kwargs, message):
    declared = dict(title="t", stages=(sweep_spec.Stage("s", "f.py"),), rows={"a": {}},
                    metrics=(sweep_spec.Metric("accuracy"),))
    with pytest.raises(sweep_lib.SweepError, match=message):
        sweep_spec.Sweep(**{**declared, **kwargs})
    with pytest.raises(sweep_lib.SweepError, match="'max' or 'min'"):
        sweep_spec.Metric("loss", "lower")


def test_a_sweep_may_gain_rows_and_later_stages_but_not_redefine_runs(tmp_path):
    """sweep.json keeps how the runs were defined: rows and stages after the saved ones may be
    added (the runs already made stay what they were); anything else needs
    --allow_config_change."""
    def spec(*stages, rows=("a",), overrides=()):
        sweep = sweep_spec.Sweep(title="t", stages=stages, rows={r: f"posemb={r}" for r in rows},
                                 metrics=(sweep_spec.Metric("accuracy"),))
        return sweep_lib.run_spec(sweep, list(overrides))

    pre, fine = sweep_spec.Stage("pre", "p.py"), sweep_spec.Stage("fine", "f.py", apply_rows=False)
    sweep_lib.check_spec(tmp_path, spec(pre), allow_change=False)
    sweep_lib.check_spec(tmp_path, spec(pre, fine, rows=("a", "b")), allow_change=False)
    saved = json.loads((tmp_path / "sweep.json").read_text())
    assert [s["name"] for s in saved["stages"]] == ["pre", "fine"]
    assert list(saved["rows"]) == ["a", "b"]
    changed = [spec(fine, pre),                                       # stages reordered
               spec(pre),                                             # a stage dropped
               spec(sweep_spec.Stage("pre", "p.py", {"k": 1}), fine),  # a stage redefined
               spec(pre, fine, overrides=["--config.k=1"])]           # every run redefined
    for new in changed:
        with pytest.raises(sweep_lib.SweepError, match="defines the runs differently"):
            sweep_lib.check_spec(tmp_path, new, allow_change=False)
    assert json.loads((tmp_path / "sweep.json").read_text()) == saved
    sweep_lib.check_spec(tmp_path, spec(pre), allow_change=True)  # the user asked for it


def test_summary_and_table_are_mean_and_sample_std_over_seeds(tmp_path):
    """Without training: a row's cell is the mean and the sample std (ddof=1) of its seeds'
    values (the mean alone with one seed, '-' with none), the wall column is the mean wall time
    per seed, and the best row follows the first metric's direction (here lower loss)."""
    from train import sweep_report

    sweep = sweep_spec.Sweep(title="t", stages=(sweep_spec.Stage("s", "f.py"),),
                             rows={"a": {}, "b": {}, "c": {}, "d": {}},
                             metrics=(sweep_spec.Metric("loss", "min"),
                                      sweep_spec.Metric("accuracy")))
    values = {"a": [(1.0, 0.9, 10.0), (1.3, 0.8, 20.0), (1.9, 0.95, 60.0)],
              "b": [(0.8, 0.5, 4.0), (1.0, 0.6, 8.0)], "c": [(2.0, 0.1, 7.0)]}
    records = [{"row": row, "seed": seed, "metrics": {"loss": loss, "accuracy": accuracy},
                "wall_s": wall}
               for row, seeds in values.items()
               for seed, (loss, accuracy, wall) in enumerate(seeds)]
    summary = sweep_report.summarize(sweep, records)
    for row, seeds in values.items():
        columns = np.array(seeds).T
        assert summary[row]["n"] == len(seeds)
        for key, column in zip(("loss", "accuracy", "wall_s"), columns):
            mean, std = summary[row][key]
            assert mean == pytest.approx(sum(column) / len(column), rel=1e-12)
            if len(column) > 1:
                spread = math.sqrt(sum((x - mean) ** 2 for x in column) / (len(column) - 1))
                assert std == pytest.approx(spread, rel=1e-12)
            else:
                assert math.isnan(std)
    assert summary["d"]["n"] == 0 and math.isnan(summary["d"]["loss"][0])
    def table():
        sweep_report.write_markdown(sweep, summary, "f.py", tmp_path / "results.md")
        return [line for line in (tmp_path / "results.md").read_text().splitlines()
                if line.startswith("| ")]

    assert table()[1:] == [
        "| a | 3 | 1.4000 ± 0.4583 | 0.8833 ± 0.0764 | 30 |",
        "| **b** | 2 | 0.9000 ± 0.1414 | 0.5500 ± 0.0707 | 6 |",    # lowest mean loss
        "| c | 1 | 2.0000 | 0.1000 | 7 |",
        "| d | 0 | - | - | - |"]
    # b's loss measured a's model again (Sweep.repeats): named, not shown, not the best
    sweep = dataclasses.replace(sweep, repeats={"b": {"loss": "a"}})
    assert table()[1:3] == ["| **a** | 3 | 1.4000 ± 0.4583 | 0.8833 ± 0.0764 | 30 |",
                          "| b | 2 | = a | 0.5500 ± 0.0707 | 6 |"]


# ---- a real 2-row x 2-seed smoke sweep -------------------------------------------------------
@pytest.fixture(scope="module")
def smoke_sweep(fixture_data_root, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("sweep")
    start = time.perf_counter()
    result = run_sweep(workdir, fixture_data_root, "--rows", ",".join(ROWS), "--seeds", "2")
    return workdir, result, time.perf_counter() - start


def test_results_tables_and_plot(smoke_sweep):
    workdir, result, _ = smoke_sweep
    assert "4 runs: 0 finished before, 4 to run" in result.stdout
    progress = [line for line in result.stdout.splitlines() if "runs done" in line]
    assert len(progress) == 4 and progress[-1].startswith("[sweep] 4/4 runs done")
    assert all("ETA" in line and "elapsed" in line and "best: " in line for line in progress)

    with open(workdir / "results.csv") as file:
        table = list(csv.DictReader(file))
    assert [(r["row"], int(r["seed"])) for r in table] == [(row, s) for row in ROWS for s in (0, 1)]
    for record in table:
        run_dir = workdir / record["row"] / f"seed_{record['seed']}" / "train"
        logged = final_eval_in_log(run_dir)
        assert float(record["accuracy"]) == logged["accuracy"]
        assert float(record["loss"]) == logged["loss"]
        assert json.loads((run_dir / "config.json").read_text())["seed"] == int(record["seed"])
        assert float(record["wall_s"]) > 0
    # Different seeds are different runs (initialisation, data order).
    assert table[0]["loss"] != table[1]["loss"]

    markdown = (workdir / "results.md").read_text()
    paper = sweep_lib.load_sweep_file(SMOKE).paper
    cells = {line.split("|")[1].strip().strip("*"): [c.strip() for c in line.split("|")[2:-1]]
             for line in markdown.splitlines() if line.startswith("| ") and "---" not in line}
    assert list(cells) == ["row", *sweep_lib.load_sweep_file(SMOKE).rows]
    for row in ROWS:
        n, accuracy, paper_accuracy, loss, _ = cells[row]
        assert n == "2"
        for cell, metric in ((accuracy, "accuracy"), (loss, "loss")):
            values = np.array([float(r[metric]) for r in table if r["row"] == row])
            mean, std = (float(x) for x in re.fullmatch(r"(\S+) ± (\S+)", cell).groups())
            assert mean == pytest.approx(np.mean(values), abs=5e-5)
            assert std == pytest.approx(np.std(values, ddof=1), abs=5e-5)
        assert float(paper_accuracy) == pytest.approx(paper[row]["accuracy"], abs=5e-5)
    for row in ("sincos_2d", "rope_2d", "alibi_2d"):
        assert cells[row][:3] == ["0", "-", "-"]  # not run, and no paper number
    means = {row: np.mean([float(r["accuracy"]) for r in table if r["row"] == row]) for row in ROWS}
    assert f"| **{max(means, key=means.get)}** |" in markdown

    import matplotlib.image

    image = matplotlib.image.imread(workdir / "results.png")
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 300


def test_each_result_carries_its_runs_record(smoke_sweep):
    """result.json keeps what the reports read and embeds the run's own record.json (the
    resolved config, machine, date and code version)."""
    from train import run_record

    workdir, _, _ = smoke_sweep
    results = sorted(workdir.glob("*/seed_*/train/result.json"))
    assert len(results) == 4
    for path in results:
        result = json.loads(path.read_text())
        record = run_record.validate(result["record"], str(path))
        assert record == json.loads((path.parent / "record.json").read_text())
        assert record["finished"] and record["command"] == result["command"]
        assert record["config"]["seed"] == result["seed"]
        assert record["metrics"]["eval"] == result["metrics"]


def test_second_invocation_skips_everything(smoke_sweep, fixture_data_root):
    workdir, _, first_seconds = smoke_sweep
    before = files_state(workdir)
    start = time.perf_counter()
    result = run_sweep(workdir, fixture_data_root, "--rows", ",".join(ROWS), "--seeds", "2")
    seconds = time.perf_counter() - start
    assert "4 runs: 4 finished before, 0 to run" in result.stdout
    assert "[sweep] start" not in result.stdout and "[sweep] resume" not in result.stdout
    assert files_state(workdir) == before  # no log, checkpoint or attempt record touched
    assert seconds < first_seconds / 3, (seconds, first_seconds)
    assert (workdir / "results.md").exists()


def test_changed_definition_is_refused(smoke_sweep, fixture_data_root):
    workdir, _, _ = smoke_sweep
    before = files_state(workdir)
    result = run_sweep(workdir, fixture_data_root, "--rows", "none", "--config.train.num_steps=30",
                       check=False)
    assert result.returncode == 2
    assert "defines the runs differently" in result.stderr
    assert "--config.train.num_steps=30" in result.stderr
    assert "--allow_config_change" in result.stderr
    assert files_state(workdir) == before


def test_interrupted_run_resumes_and_finished_ones_are_recognised(smoke_sweep, fixture_data_root,
                                                                  tmp_path):
    original, _, _ = smoke_sweep
    workdir = tmp_path / "sweep"
    shutil.copytree(original, workdir)
    # ROWS[1] seed 1 as if killed right after its step-10 checkpoint: no final checkpoint,
    # no final eval, no result.json.
    killed = workdir / ROWS[1] / "seed_1" / "train"
    expected = final_eval_in_log(killed)
    (killed / "result.json").unlink()
    shutil.rmtree(killed / "checkpoints" / "20")
    lines = (killed / "metrics.jsonl").read_text().splitlines(keepends=True)
    (killed / "metrics.jsonl").write_text("".join(l for l in lines if json.loads(l)["step"] <= 10))
    # none seed 0 finished, but the sweep was stopped before it wrote result.json.
    unrecorded = workdir / "none" / "seed_0" / "train"
    (unrecorded / "result.json").unlink()

    result = run_sweep(workdir, fixture_data_root, "--rows", ",".join(ROWS), "--seeds", "2")
    assert "4 runs: 3 finished before, 1 to run" in result.stdout
    assert f"[sweep] resume {ROWS[1]}/seed_1/train" in result.stdout
    assert "[sweep] start" not in result.stdout
    log = (killed / "train.log").read_text()
    assert "resumed from" in log and "at step 10" in log
    resumed = json.loads((killed / "result.json").read_text())
    assert resumed["attempts"] == 2
    # The trainer resumes exactly (parameters, optimizer, data position, dropout keys).
    assert resumed["metrics"]["accuracy"] == expected["accuracy"]
    assert resumed["metrics"]["loss"] == pytest.approx(expected["loss"], rel=1e-6)
    logged = final_eval_in_log(unrecorded)
    recorded = json.loads((unrecorded / "result.json").read_text())["metrics"]
    assert recorded == {k: logged[k] for k in ("accuracy", "loss")}
    with open(workdir / "results.csv") as file:
        assert len(list(csv.DictReader(file))) == 4


def test_dry_run_and_report_only_run_nothing(smoke_sweep, fixture_data_root):
    workdir, _, _ = smoke_sweep
    before, spec = files_state(workdir), (workdir / "sweep.json").read_text()
    dry = run_sweep(workdir, fixture_data_root, "--rows", "none,sincos_2d", "--seeds", "2",
                    "--dry_run")
    lines = dry.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "none/seed_0/train [finished]", "sincos_2d/seed_0/train [new]",
        "none/seed_1/train [finished]", "sincos_2d/seed_1/train [new]"]
    assert "--config.seed=1" in lines[3] and "posemb=sincos_2d" in lines[3]
    (workdir / "results.csv").unlink()
    report = run_sweep(workdir, fixture_data_root, "--report_only")
    assert "[sweep] start" not in report.stdout
    with open(workdir / "results.csv") as file:
        assert len(list(csv.DictReader(file))) == 4
    assert files_state(workdir) == before and (workdir / "sweep.json").read_text() == spec
    assert not (workdir / "sincos_2d").exists()
    # A row named twice would run its finished runs again: refused, the sweep is wrong (exit 2).
    twice = run_sweep(workdir, fixture_data_root, "--rows", "none,none", "--dry_run", check=False)
    assert twice.returncode == 2 and "names a row twice" in twice.stderr

    # Refused before anything is written: a report of nothing (a misspelt --workdir), of another
    # sweep's runs, --dry_run with --report_only, an empty row, a misspelt override.
    empty, lm = workdir.parent / "no_sweep_here", "configs/ablations/lm_extrapolation.py:smoke"
    for where, extra, config, message in (
            (empty, ["--report_only"], SMOKE, "holds no sweep (no sweep.json)"),
            (workdir, ["--report_only"], lm, "is another sweep's"),
            (workdir, ["--report_only", "--dry_run"], SMOKE, "give one of them"),
            (empty, ["--rows", ""], SMOKE, "--rows '' names an empty row"),
            (empty, ["--rows", "none", "--config.train.num_stepz=3"], SMOKE,
             "run none/seed_0/train: unknown config key config.train.num_stepz")):
        refused = run_sweep(where, fixture_data_root, *extra, config=config, check=False)
        assert refused.returncode == 2 and message in refused.stderr, refused.stderr
    assert not empty.exists() and files_state(workdir) == before


def test_a_metric_the_runs_do_not_report_is_an_error(smoke_sweep):
    """A misspelt Metric gave a column of NaN and exit 0; the report names what the runs have."""
    from train import sweep_report

    workdir, _, _ = smoke_sweep
    sweep = dataclasses.replace(sweep_lib.load_sweep_file(SMOKE),
                                metrics=(sweep_spec.Metric("acuracy"),), paper={})
    with pytest.raises(sweep_lib.SweepError, match=r"no metric 'acuracy'; it has \[.*'accuracy'"):
        sweep_report.collect(sweep, workdir)


def test_sigterm_stops_the_sweep_after_the_trainer_checkpoints(fixture_data_root, tmp_path):
    """The sweep passes SIGTERM on to the running trainer, which checkpoints; nothing more runs."""
    env = dict(os.environ, PAPERS_JAX_DATA=str(fixture_data_root), JAX_PLATFORMS="cpu")
    command = [sys.executable, *sweep_cli(tmp_path, "--rows", "none", "--seeds", "2",
                                          "--config.train.num_steps=3000")]
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    log = tmp_path / "none" / "seed_0" / "train" / "metrics.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and process.poll() is None:
        if log.exists() and any('"train"' in line for line in log.read_text().splitlines()):
            break
        time.sleep(0.05)
    assert process.poll() is None, process.communicate()
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 128 + signal.SIGTERM, stdout + stderr
    assert "interrupted by SIGTERM; run the same command to resume" in stdout
    assert "received SIGTERM: saved checkpoint" in (log.parent / "train.log").read_text()
    assert not (log.parent / "result.json").exists()
    assert not (tmp_path / "none" / "seed_1").exists()  # the next run never started
    attempt = json.loads((log.parent / "sweep_attempts.jsonl").read_text())
    assert attempt["outcome"].startswith("interrupted by SIGTERM")


# ---- two stages, and a row that fails ----------------------------------------------------------
@pytest.fixture(scope="module")
def two_stage_sweep(fixture_data_root, tmp_path_factory):
    folder = tmp_path_factory.mktemp("two_stage")
    (folder / "stage2.py").write_text(STAGE2_CONFIG)
    sweep_config = TWO_STAGE_SWEEP.format(stage2=str(folder / "stage2.py"))
    (folder / "sweep_config.py").write_text(sweep_config)
    workdir = folder / "sweep"
    result = run_sweep(workdir, fixture_data_root, config=str(folder / "sweep_config.py"),
                       check=False)
    return workdir, result


def test_failing_row_is_reported_and_the_others_complete(two_stage_sweep):
    workdir, result = two_stage_sweep
    assert result.returncode == 1, result.stdout + result.stderr
    assert "[sweep] FAILED bad/seed_0/pretrain: failed (exit status 2)" in result.stdout
    assert "num_heads=3 does not divide hidden_size=32" in result.stdout  # the log tail
    failures = result.stdout.split("run(s) failed:")[1]
    assert "bad/seed_0/pretrain" in failures
    assert "bad/seed_0/finetune: not run (its previous stage failed)" in failures
    assert "ok/" not in failures
    assert not (workdir / "bad" / "seed_0" / "finetune").exists()
    with open(workdir / "results.csv") as file:
        table = list(csv.DictReader(file))
    assert [r["row"] for r in table] == ["ok"]
    assert set(table[0]) == {"row", "seed", "accuracy", "pretrain.accuracy", "wall_s"}
    ok = workdir / "ok" / "seed_0"
    assert float(table[0]["accuracy"]) == final_eval_in_log(ok / "finetune")["accuracy"]
    assert float(table[0]["pretrain.accuracy"]) == final_eval_in_log(ok / "pretrain")["accuracy"]
    walls = [json.loads((ok / stage / "result.json").read_text())["wall_s"]
             for stage in ("pretrain", "finetune")]
    assert float(table[0]["wall_s"]) == pytest.approx(sum(walls), abs=0.1)


def test_second_stage_receives_the_first_stage_workdir(two_stage_sweep):
    workdir, _ = two_stage_sweep
    ok = workdir / "ok" / "seed_0"
    finetune = json.loads((ok / "finetune" / "config.json").read_text())
    assert finetune["init_from"] == str((ok / "pretrain").absolute())
    assert finetune["train"]["num_steps"] == 10 and finetune["seed"] == 0
    # Stage 2 started only after stage 1 had finished.
    pretrain_attempt = json.loads((ok / "pretrain" / "sweep_attempts.jsonl").read_text())
    finetune_attempt = json.loads((ok / "finetune" / "sweep_attempts.jsonl").read_text())
    assert pretrain_attempt["start"] + pretrain_attempt["wall_s"] <= finetune_attempt["start"]
    result = json.loads((ok / "finetune" / "result.json").read_text())
    assert math.isfinite(result["metrics"]["loss"]) and result["attempts"] == 1


def test_the_done_line_prints_counts_as_whole_numbers():
    line = sweep_runner.done_line("base/seed_0/train", 75.0, {"bleu": 5.12345, "decoded": 575})
    assert line.endswith(": bleu 5.1235, decoded 575"), line
