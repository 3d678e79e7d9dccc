"""A workdir URL stays a URL (train/storage.py). `pathlib.Path("gs://b/run")` is the local folder
`gs:/b/run`: a static check finds every local-path operation in train/, and the trainer's own
file operations, run with gs:// workdirs on an in-memory store, leave nothing on the disk.
(Checkpoints' arrays go through tensorstore, not epath: tests/test_gcs_workdir.py runs whole
trainings on a Cloud Storage emulator.)"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import subprocess
import sys

import pytest
from conftest import REPO
from etils.epath import backend as epath_backend
from etils.epath import gpath
from fsspec.implementations.memory import MemoryFileSystem

from train import run_config, run_record, storage, sweep_report, vocabulary
from train import sweep as sweep_lib
from train import sweep_runner
from train.config import ConfigError, apply_override, load_config_file, to_json
from train.metrics_writer import SUPERSEDED, MetricsWriter
from train.sweep_spec import Metric, Stage, Sweep
from train.workdir import check_workdir, has_checkpoints

# Modules that handle the repository's files or this machine's alone, never a run's: config
# files, the committed records the docs' tables and figures read, the docs, /sys.
REPOSITORY_FILES = {"config.py", "clusters.py", "tables.py", "result_tables.py",
                    "sweep_compare.py", "sweep_figures.py"}
GATE = "storage.py"  # where a workdir becomes a path: local ones made absolute, URLs kept
PRAGMA = "# local path:"  # a line that handles one local file on purpose says so, and why
LOCAL_CALLS = ("Path", "pathlib.Path", "PurePath", "pathlib.PurePath", "PosixPath", "open",
               "os.rename", "os.replace", "os.makedirs", "os.mkdir", "os.remove", "os.unlink",
               "os.listdir", "os.scandir", "os.walk", "os.rmdir")
LOCAL_MODULES = ("os.path.", "shutil.", "tempfile.")
LOCAL_TYPES = tuple(name for name in LOCAL_CALLS if name.endswith("Path"))  # argparse's type=


def local_path_operations(source: str) -> list[str]:
    """'line: call' for each call in `source` that makes or uses a local path: pathlib.Path of
    anything but a literal or __file__, builtin open, os.path, os's file calls, shutil and
    tempfile, and argparse's add_argument(..., type=Path); lines marked
    with PRAGMA are left out (for add_argument, its first line or the one with type=)."""
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = ast.unparse(node.func)
        if name.endswith("add_argument"):
            types = [kw.value for kw in node.keywords if kw.arg == "type"
                     and ast.unparse(kw.value) in LOCAL_TYPES]
            marked = [PRAGMA in lines[n.lineno - 1] for n in (node, *types)]
            if types and not any(marked):
                found.append((node.lineno, f"{node.lineno}: {ast.unparse(node)}"))
            continue
        if name not in LOCAL_CALLS and not name.startswith(LOCAL_MODULES):
            continue
        fixed = node.args and (isinstance(node.args[0], ast.Constant)
                               or ast.unparse(node.args[0]) == "__file__")
        if name.endswith("Path") and fixed or PRAGMA in lines[node.lineno - 1]:
            continue
        found.append((node.lineno, f"{node.lineno}: {ast.unparse(node)}"))
    return [text for _, text in sorted(found)]


def test_train_builds_run_paths_only_through_storage():
    """Every file of a run goes through train/storage.py: elsewhere in train/, a local-path
    operation is one on a fixed local file, or marked with why it is local."""
    found = {}
    for path in sorted((REPO / "train").rglob("*.py")):
        name = path.relative_to(REPO / "train").as_posix()
        if name not in REPOSITORY_FILES and name != GATE:
            found.update({f"train/{name}:{line}": None
                          for line in local_path_operations(path.read_text())})
    assert not found, (
        "local-path operations that would turn a gs:// workdir into a local folder `gs:`; use "
        f"train/storage.py (run_path, write_atomically, AppendFile, ...), or mark a line that "
        f"handles a local file on purpose with `{PRAGMA} <why>`:\n  " + "\n  ".join(found))


def test_the_static_check_finds_a_workdir_made_into_a_local_path():
    assert local_path_operations("w = Path(workdir).absolute()\nopen(w / 'x')\n"
                                 "os.path.join(w, 'y')\nREPO = Path(__file__)\n"
                                 "c = Path(config)  # local path: a config file\n") == [
        "1: Path(workdir)", "2: open(w / 'x')", "3: os.path.join(w, 'y')"]
    # argparse would make `gs://b/run` the local folder `gs:/b/run` before storage sees it
    assert local_path_operations(
        "p.add_argument('workdir', type=Path)\np.add_argument('--out', type=pathlib.Path,\n"
        "                 help='x')\np.add_argument('--n', type=int)\n"
        "p.add_argument('--c', type=Path)  # local path: a config file\n"
        "p.add_argument('--d',\n                 type=Path)  # local path: a data folder\n") == [
        "1: p.add_argument('workdir', type=Path)",
        "2: p.add_argument('--out', type=pathlib.Path, help='x')"]


# ---- the trainer's file operations on an in-memory gs:// ------------------------------------
class InMemoryGCS(MemoryFileSystem):
    """fsspec's memory filesystem answering gs:// paths; records the order of deletions."""

    protocol = ("gs", "gcs")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, global_store=False, **kwargs)
        self.deleted = []
        self.fail_writes_to = None  # a name whose upload fails (a copy broken off)

    @classmethod
    def _strip_protocol(cls, path):
        return super()._strip_protocol(os.fspath(path).removeprefix("gs://"))

    def rm(self, path, recursive=False, maxdepth=None):
        self.deleted.append(self._strip_protocol(path))
        return super().rm(path, recursive=recursive, maxdepth=maxdepth)

    def _open(self, path, mode="rb", **kwargs):
        if "w" in mode and self.fail_writes_to and path.endswith(self.fail_writes_to):
            raise OSError(f"upload of {path} failed")
        return super()._open(path, mode, **kwargs)


class _InMemoryBackend(epath_backend._FileSystemSpecBackend):
    def __init__(self, filesystem):
        self._filesystem = filesystem

    def fs(self, path):
        return self._filesystem


@pytest.fixture
def gs(monkeypatch, tmp_path):
    """gs:// served from memory to etils.epath; the tests run in an empty working directory,
    which must stay empty (a URL collapsed into a path would land there as `gs:/...`)."""
    filesystem = InMemoryGCS(skip_instance_cache=True)
    filesystem.mkdir("bucket")
    monkeypatch.setitem(gpath._PREFIX_TO_BACKEND, "gs", _InMemoryBackend(filesystem))
    # A Google client that bypassed epath would fail here rather than reach the network.
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9")
    monkeypatch.chdir(tmp_path)
    yield filesystem
    assert sorted(tmp_path.iterdir()) == [], "files written on the local disk"


def stored(filesystem, prefix: str) -> list[str]:
    return sorted(name.removeprefix(f"/bucket/{prefix}") for name in filesystem.store
                  if name.startswith(f"/bucket/{prefix}"))


def smoke():
    return load_config_file(str(REPO / "configs" / "vit" / "fashion_mnist.py") + ":smoke")


def test_run_path_keeps_urls_and_makes_local_paths_absolute(gs, tmp_path):
    assert os.fspath(storage.run_path("gs://bucket/run")) == "gs://bucket/run"
    assert os.fspath(storage.run_path("runs/a")) == str(tmp_path / "runs" / "a")
    # `--workdir=~/run`: the shell leaves the ~; a folder named ~ in the current one is a trap
    assert os.fspath(storage.run_path("~/run")) == os.path.expanduser("~/run")
    for empty in ("", "  "):  # "$UNSET": the current folder would be the workdir
        with pytest.raises(ConfigError, match="the path is empty"):
            storage.run_path(empty)
    with pytest.raises(ConfigError, match=r"s3://b/run: s3:// is not supported.*Mount the bucket"):
        storage.run_path("s3://b/run")
    with pytest.raises(ConfigError, match=r"the bucket gs://nobucket does not exist"):
        storage.make_folder(storage.run_path("gs://nobucket/run"))


def test_a_gs_file_kept_open_keeps_the_lines_another_writer_added(gs):
    """The trainer holds metrics.jsonl open for the whole run, uploading it whole at each flush;
    `python -m train.evaluate --write` meanwhile adds its line as a writer of its own. The
    trainer's next flush keeps that line and puts its own after it (its copy would drop it)."""
    from train import storage

    path = storage.run_path("gs://bucket/run/metrics.jsonl")
    trainer = storage.AppendFile(path)
    trainer.write('{"step": 1}\n')
    trainer.flush()
    storage.append(path, '{"split": "evaluate"}\n')
    trainer.write('{"step": 2}\n')
    trainer.close()
    assert path.read_text().splitlines() == ['{"step": 1}', '{"split": "evaluate"}',
                                             '{"step": 2}']
    resumed = storage.AppendFile(path)  # a resumed run continues the object as it is
    resumed.write('{"step": 3}\n')
    resumed.close()
    assert path.read_text().splitlines()[-2:] == ['{"step": 2}', '{"step": 3}']


def test_the_config_metrics_and_record_of_a_gs_workdir_stay_in_the_store(gs):
    from train.tasks import plan_task

    workdir = storage.run_path("gs://bucket/run")
    config = smoke()
    assert check_workdir(workdir, to_json(config), False) == []
    run_config.write(workdir, config, plan_task(config, workdir))
    other = smoke()
    apply_override(other, "model.hidden_size", "48")
    with pytest.raises(ConfigError, match="holds the config of another experiment"):
        check_workdir(workdir, to_json(other), False)

    writer = MetricsWriter(workdir, total_steps=4, start_step=0, progress_bar=False)
    for step in range(1, 5):
        writer.write(step, "train", {"loss": 1.0 / step})
    writer.close()
    resumed = MetricsWriter(workdir, total_steps=4, start_step=2, progress_bar=False)
    resumed.write(3, "train", {"loss": 0.3})
    resumed.close()
    steps = [json.loads(line)["step"] for line in gs.cat("gs://bucket/run/metrics.jsonl")
             .decode().splitlines()]
    assert steps == [1, 2, 3]
    assert [json.loads(line)["step"] for line in gs.cat(f"gs://bucket/run/{SUPERSEDED}")
            .decode().splitlines()] == [3, 4]
    events = [name for name in stored(gs, "run/tensorboard/") if "tfevents" in name]
    assert events and all(b"train/loss" in gs.cat(f"gs://bucket/run/tensorboard/{e}")
                          for e in events)

    record = {"sessions": [{"wall_s": 1.0}], "finished": False}
    path = run_record.write(workdir / run_record.FILENAME, record)
    assert os.fspath(path) == "gs://bucket/run/record.json"
    assert json.loads(gs.cat(os.fspath(path))) == record
    assert run_record._earlier_sessions(path, start_step=0) == []  # a new run: moved aside
    assert [n for n in stored(gs, "run/") if n.startswith("record")] == ["record.superseded.json"]


def test_a_gs_workdir_keeps_its_vocabulary_and_fine_tuning_reads_it(gs):
    from data.vocab import wordpiece
    from models.bert import BertConfig
    from train.finetune_init import resolve_init

    tokens = list(wordpiece.SPECIAL_TOKENS) + ["the", "cat", "sat", "##s"]
    tokenizer = wordpiece.from_vocab({t: i for i, t in enumerate(tokens)}, lowercase=True)
    path = vocabulary.save("gs://bucket/pretrain", tokenizer, {"data.vocab_size": 9})
    assert os.fspath(path) == "gs://bucket/pretrain/vocabulary/tokenizer.json"
    assert vocabulary.load("gs://bucket/pretrain").tokens == tokenizer.tokens
    vocabulary.check_settings("gs://bucket/pretrain", {"data.vocab_size": 9})

    model = dataclasses.asdict(BertConfig(vocab_size=len(tokens), hidden_size=16, num_layers=1,
                                          num_heads=2, mlp_dim=32, max_position_embeddings=32))
    saved = {"task": {"name": "bert_pretrain"}, "model": model,
             "data": {"vocab_size": len(tokens)}}
    gs.pipe("gs://bucket/pretrain/config.json", json.dumps(saved).encode())
    finetune = load_config_file(str(REPO / "configs" / "bert" / "finetune.py") + ":smoke")
    apply_override(finetune, "init", "gs://bucket/pretrain")
    plan = resolve_init(finetune, scratch_vocab=None, build=False)
    assert plan.tokenizer.tokens == tokenizer.tokens and plan.model_config.hidden_size == 16
    assert os.fspath(plan.tokenizer.path) == os.fspath(path)


def test_a_damaged_step_on_gs_is_copied_checked_then_deleted_commit_marker_first(gs):
    files = {"commit_success.txt": b"", "state/_METADATA": b"{}", "state/d/abc": b"x" * 100,
             "data/process_0-of-1.json": b"{}", "data/commit_success.txt": b""}
    for name, data in files.items():
        gs.pipe(f"gs://bucket/run/checkpoints/7/{name}", data)
    assert has_checkpoints("gs://bucket/run")
    step = storage.run_path("gs://bucket/run/checkpoints/7")
    target = storage.run_path("gs://bucket/run/checkpoints/7.corrupt-1")

    gs.fail_writes_to = "7.corrupt-1/state/d/abc"  # the copy breaks off half-way
    with pytest.raises(OSError, match="upload of .* failed"):
        storage.move_folder(step, target, delete_first=("commit_success.txt",))
    assert stored(gs, "run/checkpoints/7/") == sorted(files)  # the step is left whole
    assert stored(gs, "run/checkpoints/7.corrupt-1/") == []   # and no partial copy stays

    gs.fail_writes_to, gs.deleted = None, []
    storage.move_folder(step, target, delete_first=("commit_success.txt",))
    assert stored(gs, "run/checkpoints/7/") == []
    assert {name: gs.cat(f"gs://bucket/run/checkpoints/7.corrupt-1/{name}")
            for name in stored(gs, "run/checkpoints/7.corrupt-1/")} == files
    markers = [i for i, path in enumerate(gs.deleted) if path.endswith("commit_success.txt")]
    assert markers == [0, 1], gs.deleted  # no longer a saved step before anything else goes


def test_a_sweep_in_a_gs_folder_keeps_its_runs_results_and_reports_there(gs):
    sweep = Sweep(title="t", stages=(Stage("train", "configs/vit/fashion_mnist.py:smoke"),),
                  rows={"a": "posemb=none", "b": "posemb=learned_1d"},
                  metrics=(Metric("accuracy"),))
    sweep_dir = storage.run_path("gs://bucket/sweep")
    runs = sweep_lib.plan(sweep, sweep_dir, ["a", "b"], [0], [])
    assert [r.argv[3] for r in runs] == ["gs://bucket/sweep/a/seed_0/train",
                                         "gs://bucket/sweep/b/seed_0/train"]
    sweep_lib.check_spec(sweep_dir, sweep_lib.run_spec(sweep, []), allow_change=False)
    for run, accuracy in zip(runs, (0.5, 0.75)):
        sweep_runner._write_result(run, {"row": run.row, "seed": 0, "stage": "train",
                                      "metrics": {"accuracy": accuracy}, "wall_s": 1.0})
    paths = sweep_report.write_reports(sweep, sweep_dir, "sweep.py")
    assert [os.fspath(p) for p in paths] == [f"gs://bucket/sweep/results.{kind}"
                                              for kind in ("csv", "md", "png")]
    assert "| **b** | 1 | 0.7500 |" in gs.cat("gs://bucket/sweep/results.md").decode()
    assert gs.cat("gs://bucket/sweep/results.png").startswith(b"\x89PNG")

    log = storage.run_path("gs://bucket/sweep/a/seed_0/train/train.log")
    for attempt in (1, 2):
        with storage.output_file(log) as output:
            output.write(f"attempt {attempt}\n")
            output.flush()
            subprocess.run([sys.executable, "-c", "print('from the child')"],
                                     stdout=output, check=True)
    assert gs.cat(os.fspath(log)).decode() == ("attempt 1\nfrom the child\n"
                                               "attempt 2\nfrom the child\n")


def test_the_extrapolation_report_reads_a_gs_sweep_and_writes_there(gs, capsys):
    from train import extrapolation_report

    for row, perplexity in (("alibi", 50.0), ("learned", 60.0)):
        for seed in (0, 1):
            metrics = {f"perplexity_{n}": perplexity * (1 + n / 100 + seed / 10)
                       for n in (16, 32, 64, 128)}
            gs.pipe(f"gs://bucket/lx/{row}/seed_{seed}/train/result.json",
                    json.dumps({"metrics": metrics, "wall_s": 1.0}).encode())
    config = str(REPO / "configs" / "ablations" / "lm_extrapolation.py") + ":smoke"
    assert extrapolation_report.main(["gs://bucket/lx", "--config", config,
                                      "--out", "gs://bucket/lx/report"]) == 0
    assert capsys.readouterr().out == ("wrote gs://bucket/lx/report/extrapolation.png, "
                                       "gs://bucket/lx/report/findings.md\n")
    assert gs.cat("gs://bucket/lx/report/extrapolation.png").startswith(b"\x89PNG")
    assert "left out: sinusoidal seed 0" in gs.cat("gs://bucket/lx/report/findings.md").decode()
