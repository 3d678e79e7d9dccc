"""The run record (train/run_record.py) that `python -m train`, `python -m train.baselines` and
`python -m benchmarks.train_step` leave, from which the docs' tables are rendered."""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import jax
import pytest

from train import records, result_tables, run_record
from train.__main__ import main
from train.config import load_config_file
from train.run_record import RecordError

CONFIG = "configs/vit/fashion_mnist.py:smoke"
SPAM_FIXTURE = Path(__file__).resolve().parent / "fixtures" / "spam"


def _log(workdir: Path, split: str) -> list[dict]:
    entries = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    return [e for e in entries if e["split"] == split]


def _values(entry: dict) -> dict:
    return {k: v for k, v in entry.items() if k not in ("step", "split", "time")}


def test_a_finished_run_records_what_ran_on_what_and_what_it_measured(fashion_mnist_env, tmp_path,
                                                                      capsys):
    workdir = tmp_path / "run"
    argv = ["--config", CONFIG, "--workdir", str(workdir), "--config.train.peak_flops=0"]
    assert main(argv) == 0
    printed = capsys.readouterr().err
    record = run_record.load(workdir)  # every field of the format is there
    assert record["kind"] == "train" and record["finished"] is True
    assert record["command"] == ["python", "-m", "train", *argv]
    assert record["config"] == json.loads((workdir / "config.json").read_text())

    metrics, evals, train = record["metrics"], _log(workdir, "eval"), _log(workdir, "train")
    assert (metrics["eval_step"], metrics["eval_split"]) == (20, "test")
    assert metrics["eval"] == _values(evals[-1]) and {"accuracy", "loss"} <= set(metrics["eval"])
    assert metrics["train_step"] == 20 and metrics["train"] == _values(train[-1])
    assert [(e["step"], e["time"]) for e in metrics["evals"]] == [(e["step"], e["time"])
                                                                  for e in evals]
    logged_params = int(re.search(r"([\d,]+) parameters;", printed).group(1).replace(",", ""))
    assert metrics["parameters"] == logged_params
    assert record["data"] == {}  # the committed fixture, no fetch (test_fetch.py has one)

    machine = record["machine"]
    # The peak the trainer measured and logged for its MFU, not a second measurement.
    logged_peak = float(re.search(r"peak ([\d.e+]+) GFLOP/s", printed).group(1)) * 1e9
    assert machine["peak_flops_per_device"] * machine["device_count"] == pytest.approx(
        logged_peak, rel=5e-3)
    logged_source = re.search(r"GFLOP/s \((.+)\)", printed).group(1)  # what the trainer said
    assert machine["peak_flops_source"] == logged_source.strip() and "measured" in logged_source
    assert (machine["backend"], machine["device_count"]) == ("cpu", jax.device_count())
    assert 1 <= machine["usable_cpus"] <= machine["cpu_count"] and machine["cpu"]
    assert machine["max_rss_bytes"] > 100e6 and machine["device_memory"] is None  # no CPU stats
    assert len(machine["load_average"]) == 3 and min(machine["load_average"]) >= 0
    assert machine["xla_flags"] == os.environ.get("XLA_FLAGS", "")  # as this process ran

    ended = datetime.datetime.fromisoformat(record["date"])
    assert ended.utcoffset() == datetime.timedelta(0)
    assert abs(datetime.datetime.now(datetime.timezone.utc) - ended).total_seconds() < 600
    (session,) = record["sessions"]
    assert (session["start_step"], session["end_step"], session["outcome"]) == (0, 20, "finished")
    assert record["wall_s"] == record["total_wall_s"] == session["wall_s"]
    assert record["wall_s"] > train[-1]["time"] - train[0]["time"] > 0  # the whole command
    assert record["versions"]["jax"] == jax.__version__
    assert {"flax", "optax", "jaxlib", "python"} <= set(record["versions"])
    assert re.fullmatch(r"[0-9a-f]{40}", record["code"]["commit"])
    assert isinstance(record["code"]["dirty"], bool)

    # The record goes on to the docs: saved under a name (another command: --force), rendered.
    saved = records.save(workdir, "demo", runs_dir=tmp_path / "results" / "runs", force=True)
    assert sorted(p.name for p in saved.parent.iterdir()) == ["record.json"]  # no checkpoints
    table = result_tables.demo(result_tables.Records(tmp_path / "results"))
    assert f"**{100 * metrics['eval']['accuracy']:.2f}% test accuracy in " in table
    assert "not recorded yet" not in table and f"`{CONFIG}`" in table


def test_a_stopped_run_is_recorded_unfinished_and_its_sessions_add_up(fashion_mnist_env,
                                                                      tmp_path):
    from train.trainer import Trainer

    workdir = tmp_path / "run"
    argv = ["--config", CONFIG, "--workdir", str(workdir)]
    started = time.time()
    first = Trainer(load_config_file(CONFIG), workdir)
    first.run(until_step=10)
    run_record.write_train_record(first, command=["python", "-m", "train", *argv],
                                  started=started)
    stopped = run_record.load(workdir)
    assert stopped["finished"] is False
    assert (stopped["sessions"][0]["end_step"], stopped["sessions"][0]["outcome"]) == (
        10, "stopped early")
    with pytest.raises(RecordError, match=r"has not finished \(stopped early at step 10 of 20\)"):
        records.save(workdir, "demo", runs_dir=tmp_path / "runs", force=True)
    assert not (tmp_path / "runs").exists()

    assert main(argv) == 0  # resumes at step 10
    record = run_record.load(workdir)
    assert record["finished"] is True
    earlier, resumed = record["sessions"]
    assert earlier == stopped["sessions"][0]
    assert (resumed["start_step"], resumed["end_step"], resumed["outcome"]) == (10, 20, "finished")
    assert record["wall_s"] == resumed["wall_s"]
    assert record["total_wall_s"] == pytest.approx(earlier["wall_s"] + resumed["wall_s"])
    assert [e["step"] for e in record["metrics"]["evals"]] == [10, 20]


def _record() -> dict:
    session = run_record.session(["python", "-m", "train"], time.time() - 5, 0, 1, "finished",
                                 1e11, "config.train.peak_flops")
    metrics = {"eval": {"accuracy": 0.5}, "eval_split": "test", "eval_step": 1,
               "train": {"loss": 1.0}, "train_step": 1, "evals": [], "parameters": 10}
    return run_record.make("train", config={}, metrics=metrics, sessions=[session],
                           finished=True)


@pytest.mark.parametrize("field", ["machine", "date", "code.commit", "machine.cpu",
                                   "machine.peak_flops_per_device", "metrics.eval_split",
                                   "sessions[0].wall_s", "versions.optax"])
def test_a_record_missing_a_field_is_refused_naming_it(field):
    record = _record()
    parent, _, key = field.rpartition(".")
    holder = (record["sessions"][0] if parent == "sessions[0]" else
              record[parent] if parent else record)
    del holder[key]
    with pytest.raises(RecordError, match=re.escape(f"the record has no {field}")):
        run_record.validate(record, "r.json")


def test_code_version_names_the_commit_and_changes_or_says_unknown(tmp_path, monkeypatch):
    def git(*args):
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
                              cwd=tmp_path, check=True, capture_output=True, text=True).stdout

    assert run_record.code_version(tmp_path)["commit"] == "unknown"  # not a checkout
    git("init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    git("add", "a.py")
    git("commit", "-qm", "a")
    head = git("rev-parse", "HEAD").strip()
    (tmp_path / "untracked.txt").write_text("not code\n")
    assert run_record.code_version(tmp_path) == {"commit": head, "dirty": False}
    (tmp_path / "configs").mkdir()
    for name in ("mine.py", "my config é.py"):  # code the commit lacks (git quotes the second)
        (tmp_path / "configs" / name).write_text("x = 3\n")
        assert run_record.code_version(tmp_path) == {"commit": head, "dirty": True}
        (tmp_path / "configs" / name).unlink()
    (tmp_path / "a.py").write_text("x = 2\n")
    assert run_record.code_version(tmp_path) == {"commit": head, "dirty": True}
    monkeypatch.setenv("PATH", str(tmp_path / "no_git_here"))
    version = run_record.code_version(tmp_path)
    assert (version["commit"], version["dirty"]) == ("unknown", "unknown")
    assert version["reason"].startswith("git: ")


def test_the_baselines_write_a_record(tmp_path, monkeypatch):
    from data import builders
    from train import baselines

    shutil.copytree(SPAM_FIXTURE / "package", tmp_path / "raw" / "spam" / "package")
    monkeypatch.setenv("PAPERS_JAX_DATA", str(tmp_path))
    builders.prepare("spam")
    argv = ["--task", "spam", "--workdir", str(tmp_path / "baselines")]
    assert baselines.main(argv) == 0
    record = run_record.load(tmp_path / "baselines")
    assert (record["kind"], record["finished"]) == ("baselines", True)
    assert record["command"] == ["python", "-m", "train.baselines", *argv]
    assert record["metrics"]["eval_split"] == "test" and record["config"]["task"] == "spam"
    spam = record["metrics"]["eval"]["spam"]
    assert set(spam) == {"majority", "bow_logreg"}
    assert all(0 <= spam[b]["accuracy"] <= 1 for b in spam)
    assert record["machine"]["peak_flops_per_device"] is None  # no MFU, nothing measured


def test_the_benchmark_json_is_a_record(tmp_path):
    from benchmarks import train_step as bench
    from benchmarks.report import markdown

    argv = ["--model", "vit", "--size", "Ti/16", "--image_size", "32", "--batch", "2",
            "--steps", "1", "--repeats", "1", "--peer", "none", "--json", str(tmp_path / "b.json")]
    report = bench.main(argv)
    record = run_record.load(tmp_path / "b.json")
    assert (record["kind"], record["finished"]) == ("benchmark", True)
    assert record["command"] == ["python", "-m", "benchmarks.train_step", *argv]
    assert record["metrics"]["rows"] == report["rows"] and record["config"]["size"] == "Ti/16"
    assert record["metrics"]["table"] == markdown(report)
    assert record["machine"]["peak_flops_per_device"] == pytest.approx(
        report["peak_tflops"] * 1e12)
