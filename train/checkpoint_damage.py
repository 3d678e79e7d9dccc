"""Whether a checkpoint step is damaged, judged from its files alone; what a failed restore
means (`judge_failure`), agreed over the processes of a run (`agreed_damage`).

A restore fails for many reasons that say nothing about the checkpoint: the host is out of
memory, a file is not readable by this user, a network filesystem answers EIO or times out, the
read is interrupted. Setting a good checkpoint aside for those would lose it, and the run would
start over. So `find_damage` reads the step by itself and names damage only where the files
prove it:

    a step's item folder (state/ or data/) is missing;
    data/ holds no data-state file, lacks one process's file beside the others of its run, or
        holds one that is not UTF-8 JSON;
    state/ holds an orbax metadata file (_METADATA, _sharding, array_metadatas/*) that is not
        UTF-8 JSON, lacks the OCDBT manifest its _METADATA says it uses or an array that
        _METADATA names, or holds an index or array bytes that tensorstore finds missing, short
        (a truncated file) or undecodable (status NOT_FOUND, OUT_OF_RANGE, DATA_LOSS or
        FAILED_PRECONDITION, with no operating-system error behind it).

The checkpointer runs it twice: cheaply before every restore (without decoding the arrays: the
last byte of each array's bytes is read, so a truncated or missing array file is found before
orbax reads it), and in full, every array decoded chunk by chunk, after a restore that failed.

Whatever else stops the reading (PermissionError or any other OSError, MemoryError, a timeout,
a tensorstore status carrying an OS error or any other code, e.g. PERMISSION_DENIED,
UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, UNKNOWN) is raised as it is: the files could
not be judged, so they are not called damaged.

With several processes, a restore can fail on some of them only: bytes that do not decode are
read only by the processes whose shards lie in them (with an unchanged mesh, the process that
wrote them). So after each try the processes agree on its outcome (`agreed_damage`, one
gather): any other failure on any process stops every process (CheckpointError naming the
failing ones, nothing moved); else damage proven by any process sets the step aside on all.

The layout read (orbax 0.12.8, a StandardCheckpointHandler item with OCDBT, its default; the
data item is train/checkpointing.py's):

    <step>/state/_METADATA                    JSON: tree_metadata {"('params', 'w')": ...},
                                              use_ocdbt, use_zarr3
    <step>/state/_sharding                    JSON: each array's sharding
    <step>/state/array_metadatas/process_<i>  JSON, one per process
    <step>/state/manifest.ocdbt, d/           the OCDBT database: its root and b-tree nodes
    <step>/state/ocdbt.process_<i>/d/<hash>   the arrays' bytes (zarr chunks, compressed)
    <step>/data/process_<i>-of-<n>.json       each process's data state (older steps: `metadata`)

The step-level `_CHECKPOINT_METADATA` and the `commit_success.txt` markers are not read: a
restore does not need them.
"""

from __future__ import annotations

import ast
import contextlib
import itertools
import json
import re
from typing import Any

import tensorstore as ts
from etils import epath

from train import distributed

STATE, DATA = "state", "data"
LEGACY_DATA_FILE = "metadata"  # earlier checkpoints: one JSON (process 0's) for all processes
PROCESS_FILE = re.compile(r"process_(\d+)-of-(\d+)\.json")

_OCDBT_MANIFEST = "manifest.ocdbt"
_ARRAY_TYPES = ("jax.Array", "np.ndarray", "scalar")  # orbax value types stored as zarr arrays
# Tensorstore statuses that describe the bytes read, not the reading: a key or file that is not
# there, a value shorter than its index says, or bytes that do not decode. The same codes with
# an OS error behind them (`[os_error_code=...]`, e.g. ENOTCONN of a dropped mount) do not count.
_DAMAGE_CODES = ("NOT_FOUND", "OUT_OF_RANGE", "DATA_LOSS", "FAILED_PRECONDITION")


def process_file(index: int, count: int) -> str:
    return f"process_{index}-of-{count}.json"


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be restored, or a directory whose checkpoints cannot be used;
    the message names the path, the cause and what to do."""


class CheckpointDamagedError(CheckpointError):
    """A checkpoint whose files prove it damaged (`damage` says what is); found before orbax
    reads it."""

    def __init__(self, path: str | epath.PathLike, damage: str):
        super().__init__(f"checkpoint {path} is damaged: {damage}")
        self.damage = damage


RETRY = ("Fix the cause (memory, file permissions, the filesystem or its network) and run the "
         "same command again: it resumes from this checkpoint. Should the checkpoint itself be "
         "unusable, move it out of the checkpoints folder: the previous one is then resumed.")
# A process's outcome of a restore, in agreed_damage: restored, damage proven, failed otherwise;
# or interrupted, minus the signal's number (distributed.report_code: -2 or below).
_OK, _DAMAGED, _FAILED = 0, 1, -1


def judge_failure(path: epath.Path, error: Exception) -> str:
    """What `find_damage` finds in the step `path` whose restore raised `error`;
    CheckpointError when the files are whole or cannot be read to tell."""
    try:
        damage = find_damage(path)
    except Exception as unreadable:  # noqa: BLE001 - nothing is known about the files
        raise CheckpointError(
            f"checkpoint {path} could not be restored ({_describe(error)}), and its files "
            f"could not be read to tell whether they are damaged ({_describe(unreadable)}); "
            f"nothing was moved. {RETRY}") from error
    if damage is None:
        raise CheckpointError(
            f"checkpoint {path} could not be restored ({_describe(error)}), but its files "
            f"read back whole: it is not damaged, and nothing was moved. {RETRY}") from error
    return damage


def agreed_damage(path: epath.Path, damage: str | None,
                  error: BaseException | None) -> str | None:
    """The damage every process sets the step `path` aside for, None when every process
    restored it; this process found `damage`, or failed otherwise with `error`. A collective
    (one gather; with one process, nothing to agree). Raises `error` where it is not None, and
    on the other processes a CheckpointError naming the failing ones when any failed otherwise
    (StoppedBySignal, train/interrupts.py, where a signal stopped it), even where others proved
    damage: nothing is moved."""
    if error is not None:
        code = (distributed.report_code(error, ()) if isinstance(error, KeyboardInterrupt)
                else _FAILED)
        with contextlib.suppress(Exception):  # the others may be gone: its own error matters
            distributed.gather_reports(code, distributed.summary(error))
        raise error
    reports = distributed.gather_reports(*((_OK, "") if damage is None else (_DAMAGED, damage)))
    failed = [index for index, (code, _) in enumerate(reports) if code < 0]
    if failed:
        code, text = reports[failed[0]]
        distributed.raise_reported(
            1 if code == _FAILED else code,
            f"checkpoint {path} could not be restored by process{'es' if len(failed) > 1 else ''}"
            f" {', '.join(map(str, failed))} of {len(reports)} ({text}; the whole error is in "
            f"process {failed[0]}'s output); nothing was moved. {RETRY}", (CheckpointError,))
    found = [(index, text) for index, (code, text) in enumerate(reports) if code == _DAMAGED]
    if damage is not None or not found:
        return damage
    return f"{found[0][1]} (found by process {found[0][0]}, which reads that part)"


def _describe(error: BaseException) -> str:
    """'Type: first line' of an error and of its cause (orbax wraps tensorstore's errors)."""
    return "; caused by ".join(distributed.summary(e) for e in (error, error.__cause__)
                               if e is not None)


class _Damage(Exception):
    """What is damaged, found while reading; `find_damage` returns its text."""


def find_damage(step_dir: str | epath.PathLike, *, read_arrays: bool = True) -> str | None:
    """What is damaged in the checkpoint step folder `step_dir` (e.g. 'state/_METADATA is not
    JSON (...)'), or None when every file a restore reads is there and reads back whole.

    Without `read_arrays` the arrays are not decoded: only that their bytes lie within their
    files. Raises whatever stops the reading itself (see the module's docstring): then nothing
    is known about the files. FileNotFoundError when `step_dir` itself is not there.
    """
    step = epath.Path(step_dir)
    if not step.is_dir():
        raise FileNotFoundError(f"checkpoint {step} is not there (any more)")
    try:
        for item in (STATE, DATA):
            if not (step / item).is_dir():
                raise _Damage(f"its item {item}/ is missing")
        _check_data(step / DATA)
        _check_state(step / STATE, read_arrays)
    except _Damage as damage:
        return str(damage)
    return None


def _read_json(path: epath.Path, where: str) -> Any:
    """The JSON in `path`; _Damage when it is missing, not UTF-8 or not JSON. Other errors
    (permissions, I/O) go through."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise _Damage(f"{where} is missing") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise _Damage(f"{where} is not JSON ({type(error).__name__}: {error})") from None


def _check_data(folder: epath.Path) -> None:
    """Every process's data-state file of the run that saved it is there and is JSON."""
    names = sorted(p.name for p in folder.iterdir())
    found = [(int(m.group(1)), int(m.group(2)))
             for name in names if (m := PROCESS_FILE.fullmatch(name))]
    if not found and LEGACY_DATA_FILE not in names:
        raise _Damage(f"{DATA}/ holds no data-state file (found: {names or 'nothing'})")
    for count in sorted({count for _, count in found}):
        missing = sorted(set(range(count)) - {index for index, n in found if n == count})
        if missing:
            raise _Damage(f"{DATA}/ lacks {', '.join(process_file(i, count) for i in missing)} "
                          f"beside the other files of its {count} processes")
    for name in names:
        if PROCESS_FILE.fullmatch(name) or name == LEGACY_DATA_FILE:
            _read_json(folder / name, f"{DATA}/{name}")


def _check_state(folder: epath.Path, read_arrays: bool) -> None:
    """Orbax's metadata files parse, the index holds every array _METADATA names and places
    each one's bytes within its file, and (`read_arrays`) every array decodes."""
    metadata = {}
    if (folder / "_METADATA").exists():  # a restore does without it (then nothing to compare)
        metadata = _read_json(folder / "_METADATA", f"{STATE}/_METADATA")
        if not isinstance(metadata, dict) or not isinstance(metadata.get("tree_metadata"), dict):
            raise _Damage(f"{STATE}/_METADATA holds no tree_metadata")
    if (folder / "_sharding").exists():
        _read_json(folder / "_sharding", f"{STATE}/_sharding")
    if (folder / "array_metadatas").is_dir():
        for path in sorted((folder / "array_metadatas").iterdir()):
            _read_json(path, f"{STATE}/array_metadatas/{path.name}")
    use_ocdbt = metadata.get("use_ocdbt", (folder / _OCDBT_MANIFEST).exists())
    if use_ocdbt and not (folder / _OCDBT_MANIFEST).exists():
        raise _Damage(f"{STATE}/{_OCDBT_MANIFEST} (the index of its arrays) is missing")
    url = str(folder).rstrip("/") + "/"
    url = url if "://" in url else f"file://{url}"
    store = {"driver": "ocdbt", "base": url} if use_ocdbt else url
    zarr3 = bool(metadata.get("use_zarr3", False))
    names = _stored_arrays(store, zarr3)
    missing = sorted(set(_named_arrays(metadata)) - set(names))
    if missing:
        raise _Damage(f"{STATE}/ lacks the arrays {', '.join(missing[:5])}"
                      f"{' ...' if len(missing) > 5 else ''} that its _METADATA names")
    if use_ocdbt:
        _check_value_extents(url)
    if read_arrays:
        # As orbax reads: a chunk that is not stored is an error unless the saver skipped
        # chunks equal to the fill value.
        fill_missing = not metadata.get("store_array_data_equal_to_fill_value", True)
        for name in names:
            _read_array(store, name, zarr3, fill_missing)


def _named_arrays(metadata: dict) -> list[str]:
    """The arrays `_METADATA` lists, by orbax's name for them ('params.encoder.kernel')."""
    names = []
    for key, entry in metadata.get("tree_metadata", {}).items():
        value = entry.get("value_metadata", {}) if isinstance(entry, dict) else {}
        if value.get("value_type") in _ARRAY_TYPES and not value.get("skip_deserialize"):
            keys = [k["key"] for k in entry.get("key_metadata", [])] or list(
                ast.literal_eval(key))
            names.append(".".join(str(k) for k in keys))
    return names


def _stored_arrays(store: dict | str, zarr3: bool) -> list[str]:
    """The arrays the store holds: each has its zarr metadata key, `<name>/.zarray`."""
    suffix = "/zarr.json" if zarr3 else "/.zarray"
    keys = _tensorstore(lambda: ts.KvStore.open(store).result().list().result(),
                        f"{STATE}/ (its index of arrays)")
    return sorted(key.decode()[: -len(suffix)] for key in keys if key.decode().endswith(suffix))


def _check_value_extents(url: str) -> None:
    """Each value the OCDBT index keeps out of line (the arrays' chunks over 1 KiB) ends within
    its data file: its last byte is read. A file cut short or gone fails here, unread by orbax
    (whose abandoned reads of a failed restore raise again when garbage-collected)."""
    base = _tensorstore(lambda: ts.KvStore.open(url).result(), f"{STATE}/")
    manifest = _tensorstore(lambda: ts.ocdbt.dump(base).result(), f"{STATE}/{_OCDBT_MANIFEST}")
    versions = manifest.get("versions") or []  # in version-tree nodes when many: not walked
    nodes = [versions[-1]["root"]["location"]] if "location" in (
        versions[-1]["root"] if versions else {}) else []
    tails = []  # (key, file, future of its last byte), all read at once
    while nodes:
        location = nodes.pop()
        node = _tensorstore(lambda: ts.ocdbt.dump(base, location).result(),
                            f"{STATE}/ (its index of arrays)")
        for entry in node["entries"]:
            if "location" in entry:  # a child of an interior node
                nodes.append(entry["location"])
            elif "indirect_value" in entry:  # 'value:<prefix>:<file>:<offset>:<length>'
                where, offset, length = entry["indirect_value"].rsplit(":", 2)
                if int(length):
                    last = f"{where}:{int(offset) + int(length) - 1}:1"
                    tails.append((entry["key"].decode(), "".join(where.split(":")[1:]),
                                  ts.ocdbt.dump(base, last)))
    for key, file, tail in tails:
        _tensorstore(tail.result, f"{STATE}/{file}, which holds {key},")


def _read_array(store: dict | str, name: str, zarr3: bool, fill_missing: bool) -> None:
    """Reads the array `name` one stored chunk at a time (the memory of one chunk)."""
    kvstore = ({**store, "path": f"{name}/"} if isinstance(store, dict)
               else f"{store}{name}/")
    spec = {"driver": "zarr3" if zarr3 else "zarr", "kvstore": kvstore,
            "fill_missing_data_reads": fill_missing}
    array = _tensorstore(lambda: ts.open(spec, open=True, read=True).result(),
                         f"{STATE}/ array {name}")
    shape = tuple(array.shape)
    chunk = tuple(array.chunk_layout.read_chunk.shape or shape)
    starts = itertools.product(*(range(0, n, max(c, 1)) for n, c in zip(shape, chunk)))
    for start in starts:
        region = tuple(slice(s, min(s + c, n)) for s, c, n in zip(start, chunk, shape))
        _tensorstore(lambda: array[region].read().result(), f"{STATE}/ array {name}")


def _tensorstore(read, what: str):
    """`read()`, with the tensorstore statuses that prove damage turned into _Damage."""
    try:
        return read()
    except ValueError as error:
        message = str(error)
        code = message.split(":", 1)[0]
        if code in _DAMAGE_CODES and "os_error_code" not in message:
            raise _Damage(f"{what} does not read back ({message[:500]})") from None
        raise
