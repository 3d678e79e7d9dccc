"""Where a run's files live: a local folder or a Cloud Storage URL, through one path type.

Every file a run writes or reads (config.json, metrics.jsonl, TensorBoard events, checkpoints,
the vocabulary, record.json, a sweep's results) goes through `etils.epath.Path`, the path type
orbax itself uses. `run_path` makes it: a URL (gs://BUCKET/run) is kept as it is, a local path
is made absolute (relative to the current directory). `pathlib.Path("gs://b/r")` would collapse
the URL into the local folder `gs:/b/r`, so train/ builds workdir paths here alone
(tests/test_storage.py checks).

What differs between a local disk and an object store is decided here too:
  writing a whole file (`write_atomically`): locally a temporary file renamed over the target;
      an object is replaced whole by one upload, so readers see the old or the new object;
  appending (`AppendFile`: metrics.jsonl, TensorBoard events): locally an append; an object
      cannot grow, so the whole object is uploaded again at each flush (a few KiB per log line
      of a run: small beside a checkpoint), after what another writer added meanwhile;
  moving a folder (`move_folder`: a damaged checkpoint set aside): locally one rename; an object
      store has no folders and no rename, so every object is copied, the copy is checked, and
      only then are the originals deleted;
  a child process's output (`output_file`: a sweep's train.log): the child writes to a file
      descriptor, the log itself locally; at a URL a local temporary file, added to the log
      when the child ends.
  listing a folder: locally the disk answers; gcsfs would answer from the listings it made
      before (kept until this process writes there), blind to other processes' changes: on a
      pod, process 0 sets a damaged checkpoint aside, and the others' orbax would still list
      that step and skip a save process 0 makes, which then waits for them forever. So gcsfs
      keeps no listings here (below), and `forget_listings` clears a client made before.

URLs: gs:// only. orbax 0.12.8 writes a checkpoint's arrays through tensorstore to local paths
and gs:// alone (an s3:// checkpoint would land in a local folder `s3:`), so other schemes are
refused: mount such a bucket and give the mount's local path. gs:// needs gcsfs (the `gcs`
extra); credentials are Google's usual ones (Application Default Credentials, the TPU VM's
service account) for gcsfs, tensorstore and google-cloud-storage alike.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pathlib
import tempfile
from collections.abc import Iterator
from typing import IO

from etils import epath
from etils.epath import backend as epath_backend

from train.config import ConfigError

try:
    from fsspec import config as fsspec_config
except ImportError:  # no gcsfs installed: no gs:// workdirs
    fsspec_config = None

SCHEMES = {"gs": "gcsfs"}  # URL scheme -> the package epath reads and writes it with
INSTALL = "pip install -c constraints.txt -e '.[gcs]'"
# fsspec's defaults for every gcsfs client made from now on (epath makes its own on first use):
# each listing asks the store (see the module's docstring). fsspec comes with gcsfs (and
# tokenizers); without gcsfs there is no gs:// to list.
if fsspec_config is not None:
    fsspec_config.conf.setdefault("gs", {})["use_listings_cache"] = False


def is_url(path: str | os.PathLike) -> bool:
    """Whether `path` is an object-store URL (gs://...) rather than a local path."""
    return "://" in os.fspath(path)


def run_path(path: str | os.PathLike) -> epath.Path:
    """`path` (a workdir, a file or folder in one) as the path type every run file goes
    through: a gs:// URL as it is, a local path made absolute (a leading ~ expanded: the shell
    leaves it in `--workdir=~/run`). ConfigError for an empty path, a URL scheme other than
    gs://, or gs:// without gcsfs installed."""
    text = os.fspath(path)
    if not text.strip():
        raise ConfigError("the path is empty (an unset shell variable?): name a folder")
    scheme, has_scheme, _ = text.partition("://")
    if not has_scheme:
        return epath.Path(pathlib.Path(text).expanduser().absolute())
    if scheme not in SCHEMES:
        raise ConfigError(
            f"{text}: {scheme}:// is not supported; a run's files go to a local folder or to "
            "gs://BUCKET/PATH (orbax writes checkpoints' arrays only there). Mount the bucket "
            "and give the mount's local path")
    if importlib.util.find_spec(SCHEMES[scheme]) is None:
        raise ConfigError(f"{text}: {scheme}:// paths need {SCHEMES[scheme]}: {INSTALL}")
    return epath.Path(text)


def make_folder(path: epath.Path) -> None:
    """Makes the folder `path` (and its parents) if missing. At a URL there are no folders to
    make (an object's name holds its folders), but the bucket must exist: gcsfs would create a
    missing one, and a mistyped bucket name would become a new bucket."""
    if not is_url(path):
        path.mkdir(parents=True, exist_ok=True)
        return
    scheme, _, rest = os.fspath(path).partition("://")
    bucket = epath.Path(f"{scheme}://{rest.split('/')[0]}")
    if not bucket.exists():
        raise ConfigError(f"{path}: the bucket {bucket} does not exist (or these credentials "
                          f"cannot see it): create it first (gcloud storage buckets create "
                          f"{bucket}), or give another path")


def forget_listings(path: epath.Path) -> None:
    """Makes this process's next listings at the URL `path` (of every folder) ask the store,
    even through a gcsfs client made before this module turned its listings cache off."""
    if is_url(path):
        epath_backend.fsspec_backend.fs(os.fspath(path)).invalidate_cache()


def write_atomically(path: epath.Path, data: bytes | str) -> None:
    """Writes `data` to `path` whole or not at all: a reader (or a run killed meanwhile) finds
    the old contents or the new ones, never a part."""
    data = data.encode("utf-8") if isinstance(data, str) else data
    if is_url(path):
        path.write_bytes(data)  # an object appears (or is replaced) once its upload completes
        return
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial",
                                             dir=os.fspath(path.parent))
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, 0o644)  # mkstemp made it private
        os.replace(temporary, path)
    except BaseException:
        pathlib.Path(temporary).unlink(missing_ok=True)
        raise


class AppendFile:
    """A file written at its end, text or `binary`: appended to locally; at a URL kept in
    memory and uploaded whole at each `flush` (what was in the object before is read first,
    so a resumed run continues it). `flush(durable=True)` also forces a local file to disk.

    At a URL another writer may add to the object meanwhile (`python -m train.evaluate --write`
    beside a training run): a flush that finds the object's size other than it left it reads
    the object again and puts this file's new bytes after what is there, so the other
    writer's lines stay (one that lands between that read and the upload, moments apart, is
    still lost: an object store has no append)."""

    def __init__(self, path: epath.Path, *, binary: bool = False):
        self.path = path
        self._binary = binary
        if is_url(path):
            self._file = None
            self._contents = bytearray(path.read_bytes() if path.exists() else b"")
            self._known = len(self._contents)  # the object's size as last read or written
        else:
            self._file = open(path, "ab" if binary else "a", encoding=None if binary else "utf-8")

    def write(self, data: bytes | str) -> None:
        if self._file is not None:
            self._file.write(data)
        else:
            self._contents += data if self._binary else data.encode("utf-8")

    def flush(self, durable: bool = False) -> None:
        if self._file is not None:
            self._file.flush()
            if durable:
                os.fsync(self._file.fileno())
        elif self._known != len(self._contents):
            new = self._contents[self._known:]
            try:  # one metadata request: the object's size, if it is there
                size = self.path.stat().length
            except FileNotFoundError:
                size = self._known
            if size != self._known:
                self._contents = bytearray(self.path.read_bytes()) + new  # another writer's
            self.path.write_bytes(bytes(self._contents))
            self._known = len(self._contents)

    def close(self) -> None:
        self.flush()
        if self._file is not None:
            self._file.close()


def append(path: epath.Path, text: str) -> None:
    """Adds `text` at the end of the file `path` (made if missing), on disk when it returns."""
    file = AppendFile(path)
    file.write(text)
    file.flush(durable=True)
    file.close()


@contextlib.contextmanager
def output_file(path: epath.Path) -> Iterator[IO[str]]:
    """A file to hand a child process as its stdout, whose text ends up at the end of `path`
    (see the module's docstring): at a URL once the block ends, however it ends (a process
    killed meanwhile leaves it out)."""
    if not is_url(path):
        with open(path, "a", encoding="utf-8") as file:
            yield file
        return
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as file:
        try:
            yield file
        finally:
            file.flush()
            file.seek(0)
            append(path, file.read())


def _files(folder: epath.Path, prefix: str = "") -> dict[str, int]:
    """{path relative to `folder`: size} of every file under it. (Not `walk`: through fsspec
    it yields folders without their gs:// prefix.)"""
    found = {}
    for path in folder.iterdir():
        if path.is_dir():
            found.update(_files(path, f"{prefix}{path.name}/"))
        else:
            found[f"{prefix}{path.name}"] = path.stat().length
    return found


def move_folder(source: epath.Path, target: epath.Path, *, delete_first: tuple[str, ...] = ()
                ) -> None:
    """Moves the folder `source` to `target` (which must not exist). Locally one rename. At a
    URL every object is copied, the copies are checked (same names, same sizes), and only then
    are the originals deleted: the files named in `delete_first` (wherever they lie) before the
    others, so that a move stopped half-way leaves `source` without them (e.g. orbax's commit
    marker: a half-deleted checkpoint is then no longer taken for a saved one). A failed copy
    deletes the partial copy and leaves `source` as it was."""
    if not is_url(source):
        source.rename(target)
        return
    if target.exists():
        raise FileExistsError(f"cannot move {source} to {target}: it exists")
    files = _files(source)
    try:
        for name in files:
            (source / name).copy(target / name)
        copied = _files(target)
        if copied != files:
            differ = sorted(set(files.items()) ^ set(copied.items()))[:5]
            raise OSError(f"the copy of {source} at {target} differs from it: {differ}")
    except BaseException:
        target.rmtree(missing_ok=True)
        raise
    for name in sorted(files, key=lambda n: n.rsplit("/", 1)[-1] not in delete_first):
        (source / name).unlink()
    source.rmtree(missing_ok=True)
