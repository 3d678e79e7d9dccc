"""The cache of trained vocabularies: one file per texts and settings, trained once.

    path = folder(cache_dir) / f"{safe_name('brown+austen.train')}.wordpiece.v8000...json"
    tok = load_or_create(path, load=read_it, create=train_it)   # bytes of a new file

A vocabulary's file name says which texts it was trained on and every setting that changes it
(each vocabulary's `cache_path`), so a different setting never reuses a stale file; the folder is
`<root>/vocab/` (data/paths.py) unless a `cache_dir` is given. A file that is there is read
without a lock: files appear only by an atomic rename. A missing one is created while holding a
lock file (`.<name>.lock`, there only while held), so two processes never train it twice; the
one that waited reads the other's file. It is written to a temporary file in the same folder and
renamed into place, so no process reads half a file, and it is never rewritten once in place.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import re
from typing import Callable, TypeVar

from data import paths

T = TypeVar("T")


def folder(cache_dir: str | os.PathLike | None = None) -> pathlib.Path:
    """`cache_dir`, or `<root>/vocab/` when it is None."""
    return paths.data_root() / "vocab" if cache_dir is None else pathlib.Path(cache_dir)


def safe_name(name: str) -> str:
    """`name` as a file name; a short hash keeps apart names that differ only in odd characters."""
    safe = re.sub(r"[^A-Za-z0-9._+-]", "_", name)
    if safe != name:
        safe += "-" + hashlib.sha256(name.encode()).hexdigest()[:8]
    return safe


def load_or_create(path: pathlib.Path, load: Callable[[pathlib.Path], T],
                   create: Callable[[], bytes]) -> T:
    """`load(path)`; when there is no file at `path`, `create()`'s bytes are written there
    first (once between processes: module docstring)."""
    if path.exists():  # files appear only by an atomic rename: no lock needed to read
        return load(path)
    with paths.file_lock(path.parent / f".{path.name}.lock"):
        if not path.exists():  # else another process created it while we waited
            paths.write_atomically(path, create())
    return load(path)
