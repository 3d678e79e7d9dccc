"""data/paths.py and data/builders/examples.py: where data lives, files written whole or not at
all, batched reads of a data source and its text fields."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from data import paths
from data.builders.examples import as_text, as_texts, read_examples
from data.errors import DataError


def test_paths_follow_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PAPERS_JAX_DATA", str(tmp_path))
    assert paths.raw_dir("x") == tmp_path / "raw" / "x"
    assert paths.tfds_dir() == tmp_path / "tfds"
    monkeypatch.delenv("PAPERS_JAX_DATA")
    assert paths.data_root() == pathlib.Path("~/.cache/papers-jax").expanduser()
    # Set but empty (`PAPERS_JAX_DATA= cmd`) is the default too, not the current folder.
    monkeypatch.setenv("PAPERS_JAX_DATA", "")
    assert paths.data_root() == pathlib.Path("~/.cache/papers-jax").expanduser()


def test_file_lock_is_exclusive_and_creates_its_folder(tmp_path):
    """While one holder has the lock, another open file cannot take it (flock locks belong to
    the open file, so a second open in this process stands for another process); afterwards
    it can. The lock file's missing folder is created."""
    import fcntl

    lock = tmp_path / "raw" / "nested" / ".x.lock"

    def try_lock() -> bool:
        with open(lock, "w") as other:
            try:
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            fcntl.flock(other, fcntl.LOCK_UN)
            return True

    with paths.file_lock(lock):
        assert lock.is_file()
        assert try_lock() is False
    assert try_lock() is True


def test_file_lock_leaves_no_lock_file_and_hands_over_to_a_waiter(tmp_path):
    """A lock file exists only while held: a run that fails (or finishes) leaves none. A waiter
    that opened the file before its holder removed it must not hold a lock on the removed file
    (where a third process could lock a new file at the same path beside it): it takes the lock
    on the file at the path, which exists while it holds it."""
    import fcntl
    import threading
    import time

    lock = tmp_path / "vocab" / ".x.lock"
    with pytest.raises(RuntimeError):
        with paths.file_lock(lock):
            raise RuntimeError("training failed")
    assert not lock.exists()

    waiter_holds, release_waiter = threading.Event(), threading.Event()
    seen = {}

    def waiter():
        with paths.file_lock(lock):
            waiter_holds.set()
            release_waiter.wait(10)

    with paths.file_lock(lock):
        thread = threading.Thread(target=waiter)
        thread.start()
        time.sleep(0.3)  # the waiter has opened the file and waits in flock
        assert not waiter_holds.is_set()
    assert waiter_holds.wait(10)
    seen["exists"] = lock.is_file()
    with open(lock, "a") as other:  # another process locking the path now must wait
        try:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
            seen["other_locked"] = True
        except BlockingIOError:
            seen["other_locked"] = False
    release_waiter.set()
    thread.join(10)
    assert seen == {"exists": True, "other_locked": False}
    assert not lock.exists()


def test_write_atomically_replaces_whole_files(tmp_path):
    target = tmp_path / "vocab.model"
    paths.write_atomically(target, b"first")
    paths.write_atomically(target, b"second")
    assert target.read_bytes() == b"second"
    assert target.stat().st_mode & 0o777 == 0o644  # readable by others: the cache may be shared
    assert [p.name for p in tmp_path.iterdir()] == ["vocab.model"]


def test_interrupted_atomic_write_keeps_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "vocab.json"
    target.write_bytes(b"old")

    def fail(fd):
        raise KeyboardInterrupt  # interrupted after writing, before the rename

    monkeypatch.setattr(paths.os, "fsync", fail)
    with pytest.raises(KeyboardInterrupt):
        paths.write_atomically(target, b"new and longer")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["vocab.json"]  # no partial file left


class _Indexable:
    def __init__(self, n):
        self.n, self.reads = n, []

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.reads.append(i)
        return {"x": i}


class _Batched(_Indexable):
    def __getitems__(self, indices):
        self.reads.append(list(indices))
        return [{"x": i} for i in indices]


@pytest.mark.parametrize("kind", [_Indexable, _Batched])
def test_read_examples_keeps_the_order_and_batches_where_it_can(kind):
    source = kind(10)
    examples = read_examples(source, np.array([7, 2, 2, 9]))
    assert [e["x"] for e in examples] == [7, 2, 2, 9]
    assert all(type(e["x"]) is int for e in examples)  # numpy indices read as Python ints
    assert source.reads == ([[7, 2, 2, 9]] if kind is _Batched else [7, 2, 2, 9])


def test_as_text_accepts_str_bytes_and_0d_arrays():
    """Text fields arrive as str, UTF-8 bytes or 0-d numpy arrays of either (TFDS and grain
    sources); all read as the same str, and anything else is refused."""
    for value in ("Año nuevo", "Año nuevo".encode("utf-8"), np.array("Año nuevo"),
                  np.array("Año nuevo".encode("utf-8"), dtype=object),
                  np.bytes_("Año nuevo".encode("utf-8"))):
        assert as_text(value) == "Año nuevo" and type(as_text(value)) is str, value
    with pytest.raises(DataError, match="got int"):
        as_text(3)
    # Half an emoji (JSON's "\ud83d" alone) has no UTF-8: named here, not as a tokenizer's
    # UnicodeEncodeError or TypeError deep in vocabulary training.
    with pytest.raises(DataError, match=r"not valid Unicode \(surrogates not allowed at "
                                        r"character 6\): 'tweet \\ud83d'"):
        as_text("tweet \ud83d")
    # A TFDS Tensor of strings reads back as an object array of bytes, of any shape.
    texts = np.array([["Año".encode("utf-8"), b"nuevo"]], dtype=object)
    assert as_texts(texts) == ["Año", "nuevo"] and as_texts(["a", b"b"]) == ["a", "b"]
