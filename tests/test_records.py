"""python -m train.records save: only a finished, complete record of the command a name stands
for is committed, and only the record."""

from __future__ import annotations

import json
import time

import pytest

from train import records, run_record
from train.headline_runs import RUNS
from train.run_record import RecordError


def _workdir(tmp_path, command: list[str], name: str = "run"):
    """A finished run's workdir as `python -m train` leaves it, checkpoints included."""
    workdir = tmp_path / name
    (workdir / "checkpoints" / "20").mkdir(parents=True)
    (workdir / "checkpoints" / "20" / "state").write_text("weights")
    (workdir / "metrics.jsonl").write_text("{}\n")
    session = run_record.session(command, time.time() - 60, 0, 20, "finished", 1e11,
                                 "config.train.peak_flops")
    metrics = {"eval": {"accuracy": 0.9}, "eval_split": "test", "eval_step": 20, "train": {},
               "train_step": 20, "evals": [], "parameters": 1}
    record = run_record.make("train", config={"train": {"num_steps": 20}}, metrics=metrics,
                             sessions=[session], finished=True)
    run_record.write(workdir / "record.json", record)
    return workdir, record


def test_save_copies_only_the_record_of_the_named_command(tmp_path):
    demo = RUNS["demo"].argv
    workdir, record = _workdir(tmp_path, demo)
    runs_dir = tmp_path / "runs"
    assert records.main(["--runs_dir", str(runs_dir), "save", str(workdir), "demo"]) == 0
    assert sorted(p.relative_to(runs_dir).as_posix() for p in runs_dir.rglob("*")) == [
        "demo", "demo/record.json"]
    assert json.loads((runs_dir / "demo" / "record.json").read_text()) == record
    # The same record again changes nothing; so does the same command written another way.
    records.save(workdir, "demo", runs_dir=runs_dir)
    assert records.essential(demo) == records.essential(
        ["python", "-m", "train", "--workdir=elsewhere",
         f"--config={run_record.REPO}/configs/vit/fashion_mnist.py"])


def test_save_refuses_another_command_an_unknown_name_and_overwriting(tmp_path, capsys):
    runs_dir = tmp_path / "runs"
    other = [*RUNS["demo"].argv, "--config.train.num_steps=100"]
    workdir, _ = _workdir(tmp_path, other)
    assert records.main(["--runs_dir", str(runs_dir), "save", str(workdir), "demo"]) == 2
    error = capsys.readouterr().err
    assert "--config.train.num_steps=100" in error and RUNS["demo"].command in error
    assert "--force" in error and not runs_dir.exists()
    with pytest.raises(RecordError, match=r"'demos' is not a headline run; the names .*: demo,"):
        records.save(workdir, "demos", runs_dir=runs_dir)
    records.save(workdir, "demo", runs_dir=runs_dir, force=True)

    again, _ = _workdir(tmp_path, RUNS["demo"].argv, name="again")
    with pytest.raises(RecordError, match="already holds the record of a run that ended"):
        records.save(again, "demo", runs_dir=runs_dir)
    assert json.loads((runs_dir / "demo" / "record.json").read_text())["command"] == other
    with pytest.raises(RecordError, match="does not exist: a run writes it when it ends"):
        records.save(tmp_path / "no_run", "demo", runs_dir=runs_dir)


def test_list_shows_every_name_and_its_commands(tmp_path):
    listing = records.list_runs(tmp_path)
    for run in RUNS.values():
        assert f"{run.name}: not recorded yet" in listing
        assert run.command in listing and run.save_command in listing


def test_display_and_output_settings_do_not_make_another_command():
    """A run logged to a file turns the progress bar off and writes elsewhere: the same run."""
    demo = RUNS["demo"].argv
    logged = [*demo, "--config.train.progress_bar=false"]
    logged[logged.index("--workdir") + 1] = "/elsewhere/vit"
    assert records.essential(logged) == records.essential(demo)
    assert records.essential([*demo, "--config.train.num_steps=10"]) != records.essential(demo)
