"""The record a run leaves: what ran, on what machine, with which code, and what it measured.

Every number the docs quote comes from one of these (`python -m train.tables` renders the tables
from the committed ones). One format for every command that measures something:

  python -m train ...                        WORKDIR/record.json, at the end of each session
  python -m train.baselines --workdir DIR    DIR/record.json
  python -m benchmarks.train_step --json F   F

    format        RECORD_FORMAT
    kind          'train' | 'baselines' | 'benchmark'
    finished      False when the run stopped with steps left (SIGTERM / SIGINT: the same
                  command resumes it); `python -m train.records save` refuses such a record
    command       argv as run: ['python', '-m', 'train', '--config', 'F:ARG', '--workdir', ...]
    date          UTC ISO time the last session ended
    config        train: the workdir's config.json (the resolved config); the others: their
                  parsed arguments
    metrics       train: eval (the last eval record of metrics.jsonl), eval_split, eval_step,
                  train (the last train record), train_step, evals (every eval record with its
                  step and unix time), parameters; baselines: eval, eval_split; benchmark: the
                  report of benchmarks/report.py (rows, ratios, ...) and its Markdown `table`
    wall_s        seconds of this invocation, from the start of main() to the record
    total_wall_s  seconds over every session of a resumed run
    sessions      one per invocation of a resumed run: command, started, ended, wall_s,
                  start_step, end_step, outcome, machine, code, versions (top-level machine,
                  code and versions are the last session's)
    machine       cpu model, cpu_count, usable_cpus, backend, device_kind, device_count,
                  process_count, peak_flops_per_device (the peak MFU was computed against:
                  the measured matmul's, or a GPU's or TPU's data sheet for a bfloat16 model;
                  None where nothing was measured) and peak_flops_source,
                  max_rss_bytes of this process, device_memory (per local device, where jax
                  reports it: GPUs and TPUs; None on CPU), load_average (the system's 1, 5 and
                  15-minute load averages when the record was written: other work sharing the
                  cores slows a run, and its wall clock says so only with this beside it) and
                  xla_flags (the XLA_FLAGS the process ran with, '' for none: e.g. forced host
                  devices, or single-threaded runs pinned one to a core; not in older records)
    code          commit (git HEAD of this repository) and dirty (tracked files changed), or
                  'unknown' for both, with the reason, where git cannot tell
    versions      python, jax, jaxlib, flax, optax, numpy
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from etils import epath

from train import storage
from train.run_config import RESOLVED_FILE

REPO = Path(__file__).resolve().parents[1]
RECORD_FORMAT = 1
FILENAME = "record.json"
KINDS = ("train", "baselines", "benchmark")
FIELDS = ("format", "kind", "finished", "command", "date", "config", "metrics", "wall_s",
          "total_wall_s", "sessions", "machine", "code", "versions")
MACHINE_FIELDS = ("cpu", "cpu_count", "usable_cpus", "backend", "device_kind", "device_count",
                  "process_count", "peak_flops_per_device", "peak_flops_source",
                  "max_rss_bytes", "device_memory", "load_average")
CODE_FIELDS = ("commit", "dirty")
VERSION_PACKAGES = ("jax", "jaxlib", "flax", "optax", "numpy")
SESSION_FIELDS = ("command", "started", "ended", "wall_s", "start_step", "end_step", "outcome",
                  "machine", "code", "versions")
METRIC_FIELDS = {
    "train": ("eval", "eval_split", "eval_step", "train", "train_step", "evals", "parameters"),
    "baselines": ("eval", "eval_split"),
    "benchmark": ("rows", "ratios", "table"),
}


class RecordError(ValueError):
    """A record is missing, unreadable, incomplete or not what was asked for."""


# ---- what the record says about the machine and the code -----------------------------------
def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _max_rss_bytes() -> int | None:
    try:
        import resource
    except ImportError:  # not on Windows
        return None
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024  # macOS counts bytes, Linux KiB


def _device_memory(devices) -> list[dict] | None:
    """Peak and limit of each local device's memory, where the backend tracks them."""
    out = []
    for device in devices:
        stats = device.memory_stats()
        if not stats:
            return None
        out.append({key: stats[key] for key in ("peak_bytes_in_use", "bytes_in_use", "bytes_limit")
                    if key in stats})
    return out


def machine(peak_flops_per_device: float | None, peak_flops_source: str) -> dict:
    """The machine this process ran on (not its name). The peak is the one the caller's MFU was
    computed against (train: `Trainer.peak_flops`), never measured again here."""
    import jax

    device = jax.devices()[0]
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu": _cpu_model(), "cpu_count": os.cpu_count(), "usable_cpus": usable,
            "backend": jax.default_backend(), "device_kind": device.device_kind,
            "device_count": jax.device_count(), "process_count": jax.process_count(),
            "peak_flops_per_device": peak_flops_per_device, "peak_flops_source": peak_flops_source,
            "max_rss_bytes": _max_rss_bytes(), "device_memory": _device_memory(jax.local_devices()),
            "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
            "xla_flags": os.environ.get("XLA_FLAGS", "")}


def code_version(root: Path = REPO) -> dict:
    """git HEAD of the repository and whether its code differs from it: a tracked file changed,
    or an untracked Python file (a new config or module the run may have used; other untracked
    files, outputs and notes, are not code); 'unknown' (with the reason) where git is missing or
    `root` is not a git checkout."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                              timeout=60)
    try:
        head = git("rev-parse", "HEAD")
        status = head if head.returncode else git("status", "--porcelain", "-z",
                                                  "--untracked-files=all")
    except (OSError, subprocess.SubprocessError) as error:
        return {"commit": "unknown", "dirty": "unknown", "reason": f"git: {error}"}
    if head.returncode or status.returncode:
        reason = (head.stderr or status.stderr).strip().splitlines()
        return {"commit": "unknown", "dirty": "unknown",
                "reason": f"git: {reason[0] if reason else 'failed'}"}
    # -z: "XY path" entries split by NUL, names unquoted (a rename's old path follows its own)
    changed = [entry for entry in status.stdout.split("\0")
               if entry.strip() and (not entry.startswith("??") or entry.endswith(".py"))]
    return {"commit": head.stdout.strip(), "dirty": bool(changed)}


def versions() -> dict:
    out = {"python": platform.python_version()}
    for package in VERSION_PACKAGES:
        try:
            out[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            out[package] = "not installed"
    return out


def utc_iso(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).isoformat(
        timespec="seconds")


# ---- building, checking, reading and writing ------------------------------------------------
def session(command: list[str], started: float, start_step: int | None, end_step: int | None,
            outcome: str, peak_flops_per_device: float | None, peak_flops_source: str) -> dict:
    """One invocation, from `started` (unix time) to now."""
    ended = time.time()
    return {"command": list(command), "started": utc_iso(started), "ended": utc_iso(ended),
            "wall_s": ended - started, "start_step": start_step, "end_step": end_step,
            "outcome": outcome, "machine": machine(peak_flops_per_device, peak_flops_source),
            "code": code_version(), "versions": versions()}


def make(kind: str, *, config: dict, metrics: dict, sessions: list[dict],
         finished: bool) -> dict:
    """The record of a run whose last session is `sessions[-1]`."""
    last = sessions[-1]
    record = {"format": RECORD_FORMAT, "kind": kind, "finished": finished,
              "command": last["command"], "date": last["ended"], "config": config,
              "metrics": metrics, "wall_s": last["wall_s"],
              "total_wall_s": sum(s["wall_s"] for s in sessions), "sessions": sessions,
              "machine": last["machine"], "code": last["code"], "versions": last["versions"]}
    validate(record, "the new record")
    return record


def _missing(mapping: dict, fields, prefix: str) -> list[str]:
    return [f"{prefix}{field}" for field in fields if field not in mapping]


def validate(record, where: str) -> dict:
    """Raises RecordError naming every field a record lacks (or a wrong kind / format)."""
    if not isinstance(record, dict):
        raise RecordError(f"{where}: a record is a JSON object, not {type(record).__name__}")
    missing = _missing(record, FIELDS, "")
    if record.get("format") not in (None, RECORD_FORMAT):
        raise RecordError(f"{where}: format {record['format']!r}; this code reads format "
                          f"{RECORD_FORMAT}")
    if "kind" in record and record["kind"] not in KINDS:
        raise RecordError(f"{where}: kind {record['kind']!r} is not one of {list(KINDS)}")
    for name, fields in (("machine", MACHINE_FIELDS), ("code", CODE_FIELDS),
                         ("versions", ("python", *VERSION_PACKAGES)),
                         ("metrics", METRIC_FIELDS.get(record.get("kind"), ()))):
        if isinstance(record.get(name), dict):
            missing += _missing(record[name], fields, f"{name}.")
    if isinstance(record.get("sessions"), list):
        if not record["sessions"]:
            missing.append("sessions[0]")
        for i, one in enumerate(record["sessions"]):
            missing += _missing(one, SESSION_FIELDS, f"sessions[{i}].")
    if missing:
        raise RecordError(f"{where}: the record has no {', '.join(missing)} (written by older "
                          "code, or edited by hand: run the command again to get a full one)")
    return record


def own_folder(workdir: str | os.PathLike, kind: str, module: str) -> epath.Path:
    """`workdir` as a path, where `python -m module` may write a record of `kind`: ValueError
    when it holds a training run (its config.json or checkpoints/) or a record.json of another
    kind or command, which the write would replace. Called before the work, so that nothing is
    computed in vain."""
    directory = storage.run_path(workdir)
    path = directory / FILENAME
    held = [name for name in (RESOLVED_FILE, "checkpoints") if (directory / name).exists()]
    other = None
    if path.exists():
        try:
            saved = json.loads(path.read_text())
            command = saved["sessions"][0]["command"]
            if saved["kind"] != kind:
                other = saved["kind"]
            elif module not in command:
                other = " ".join(command[:3])
        except (OSError, ValueError, LookupError, TypeError):
            other = "unreadable"
    if held or other is not None:
        what = f"a training run ({', '.join(held)})" if held else f"a {other!r} record"
        raise ValueError(f"--workdir {directory} holds {what}: its {FILENAME} would be "
                         f"replaced by this {kind!r} record; give it a folder of its own")
    return directory


def write(path: str | os.PathLike, record: dict) -> epath.Path:
    """Writes atomically (a reader never sees half a record)."""
    path = storage.run_path(path)
    storage.make_folder(path.parent)
    storage.write_atomically(path, json.dumps(record, indent=2, default=_plain) + "\n")
    return path


def _plain(value):
    """numpy scalars and arrays as plain JSON numbers and lists."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def load(path: str | os.PathLike) -> dict:
    """A checked record from `path` (a record file, or a directory holding record.json)."""
    path = storage.run_path(path)
    if path.is_dir() or path.suffix != ".json":
        path = path / FILENAME
    if not path.is_file():
        raise RecordError(f"{path} does not exist: a run writes it when it ends (or is "
                          "stopped by SIGTERM / SIGINT)")
    try:
        record = json.loads(path.read_text())
    except ValueError as error:
        raise RecordError(f"{path} is not JSON: {error}") from error
    return validate(record, str(path))


# ---- python -m train ------------------------------------------------------------------------
def _log(workdir: epath.Path) -> tuple[list[dict], dict | None]:
    """Every eval record of the workdir's metrics.jsonl and its last train record."""
    evals, train = [], None
    for line in (workdir / "metrics.jsonl").read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:  # a line cut short by a kill
            continue
        if entry.get("split") == "eval":
            evals.append(entry)
        elif entry.get("split") == "train":
            train = entry
    return evals, train


def _values(entry: dict | None) -> dict:
    return {k: v for k, v in (entry or {}).items() if k not in ("step", "split", "time")}


def final_eval(workdir: epath.Path) -> dict | None:
    """The eval metrics the trainer logged at train.num_steps (of the workdir's config.json),
    or None while the run has not ended there (the sweep runner's test of a finished run)."""
    try:
        num_steps = json.loads((workdir / RESOLVED_FILE).read_text())["train"]["num_steps"]
        evals, _ = _log(workdir)
    except (OSError, ValueError, KeyError):
        return None
    final = [entry for entry in evals if entry.get("step") == num_steps]
    return _values(final[-1]) if final else None


def final_train(workdir: epath.Path) -> dict | None:
    """The metrics of the last train record the trainer logged in the workdir (its speed over the
    last train.log_every steps among them), or None when it has none."""
    try:
        _, train = _log(workdir)
    except OSError:
        return None
    return None if train is None else _values(train)


def _earlier_sessions(path: epath.Path, start_step: int) -> list[dict]:
    """The sessions of the run this one continues. A run that starts from step 0 continues
    nothing: an older record there (of a run whose checkpoints are gone) is moved aside to
    record.superseded.json, as one that cannot be read is to record.unreadable.json."""
    if not path.exists():
        return []
    try:
        sessions = json.loads(path.read_text())["sessions"]
    except (ValueError, KeyError, TypeError):
        path.replace(path.with_name("record.unreadable.json"))
        return []
    if start_step == 0:
        path.replace(path.with_name("record.superseded.json"))
        return []
    return sessions


def write_train_record(trainer, *, command: list[str], started: float) -> epath.Path | None:
    """WORKDIR/record.json at the end of a `python -m train` session (process 0 only): a new
    one, or the workdir's extended by this session when the run resumed. A session killed
    without a chance to write (SIGKILL, a crash) is not in `sessions`: the next one's
    start_step shows the gap."""
    import jax

    if jax.process_index() != 0:
        return None
    workdir = trainer.workdir
    start, end = trainer.start_step, int(jax.device_get(trainer.final_state.step))
    finished = not trainer.interrupted and end >= trainer.config.train.num_steps
    outcome = "finished" if finished else (
        f"stopped by {trainer.interrupted}" if trainer.interrupted else "stopped early")
    this = session(command, started, start, end, outcome, trainer.peak_flops,
                   trainer.peak_flops_source)
    path = workdir / FILENAME
    sessions = [*_earlier_sessions(path, start), this]
    config = json.loads((workdir / RESOLVED_FILE).read_text())
    evals, train = _log(workdir)
    last = evals[-1] if evals else None
    metrics = {"eval": _values(last), "eval_split": config["data"]["eval_split"],
               "eval_step": last["step"] if last else None,
               "train": _values(train), "train_step": train["step"] if train else None,
               "evals": [{"step": e["step"], "time": e["time"], **_values(e)} for e in evals],
               "parameters": trainer.num_params}
    record = make("train", config=config, metrics=metrics, sessions=sessions,
                  finished=finished)
    record["data"] = data_identity(trainer.task.datasets(trainer.config))
    return write(path, record)


def data_identity(names) -> dict:
    """{name: what `python -m data.fetch` put there (data/fetching/raw.py `identity`)} for the
    fetched datasets and checkpoints a run read: the exact bytes behind its numbers."""
    from data.fetching import raw

    return {name: found for name in names if (found := raw.identity(name)) is not None}
