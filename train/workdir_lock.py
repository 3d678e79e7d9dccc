"""One training run at a time in a workdir: process 0 of a run holds `WORKDIR/.train.lock` while it
trains, and a second start there (a double launch, a scheduler requeueing a job whose first
copy still runs) is refused instead of writing the same metrics.jsonl and checkpoints. With
several processes, process 0 takes the lock and tells the others, so that all stop together.

The lock is the operating system's (flock), so it goes with its holder: a run killed without
a chance to clean up (SIGKILL, the machine lost) leaves no stale lock, only possibly the file.
It holds across machines where the shared file system gives flock its meaning (NFSv4, Lustre
with flock enabled); where the file system refuses flock (Lustre without it, NFSv3 without
lockd) the run goes on unguarded, with a note; an object-store workdir (gs://) has no such
lock and is not guarded.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import sys
import time
from typing import Iterator

from train import storage
from train.config import ConfigError

LOCK = ".train.lock"
UNSUPPORTED = (errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL)  # no flock here


def _acquire(folder) -> int | None:
    """An open file descriptor holding `folder`'s lock (None: the file system has no flock);
    ConfigError naming the holder when another process holds it."""
    path = os.fspath(folder / LOCK)
    while True:
        folder.mkdir(parents=True, exist_ok=True)  # again: a holder may have just removed it
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except FileNotFoundError:
            continue
        try:
            _lock_exclusive(fd)
        except BlockingIOError:
            holder = os.read(fd, 200).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise ConfigError(f"{folder} is in use: a run is training there ({holder}). Wait "
                              "for it to end or stop it, or use another --workdir") from None
        except OSError as error:
            os.close(fd)
            if error.errno not in UNSUPPORTED:
                raise
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)  # local path: the lock file it could not lock
            print(f"note: {folder}'s file system has no flock ({error}"
                  "): nothing stops a second run from starting there", file=sys.stderr)
            return None
        try:
            held = os.path.samestat(os.fstat(fd), os.stat(path))  # local path: as above
        except FileNotFoundError:  # its holder removed it as we opened it: take the new one
            held = False
        if held:
            os.ftruncate(fd, 0)
            os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}, since "
                         f"{time.strftime('%Y-%m-%d %H:%M:%S')}".encode())
            return fd
        os.close(fd)


def _lock_exclusive(fd: int, tries: int = 10) -> None:
    """flock(LOCK_EX) without waiting on a holder; BlockingIOError when one holds it. A reader
    (`training_in`) holds it shared for an instant, so a few tries 20 ms apart."""
    for attempt in range(tries):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if attempt == tries - 1:
                raise
            time.sleep(0.02)


def training_in(workdir) -> str | None:
    """Who is training in `workdir` now ('pid ... on HOST, since ...'), None when no run holds
    its lock (or it cannot tell: gs://, no flock). For readers of a workdir (evaluate,
    predict), whose checkpoint may be pruned under them while a run trains there."""
    path = storage.run_path(workdir) / LOCK
    if storage.is_url(path) or not path.exists():
        return None
    try:
        fd = os.open(os.fspath(path), os.O_RDONLY)  # local path: a local workdir's lock
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return os.read(fd, 200).decode(errors="replace").strip() or "another process"
    except OSError:
        return None
    finally:
        os.close(fd)  # releases the shared lock, if taken
    return None


def _release(folder, fd: int | None, made: bool) -> None:
    if fd is not None:
        # removed while still held: a process that opened it meanwhile takes a new one
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.fspath(folder / LOCK))  # local path: a local workdir's lock
        os.close(fd)
    if made:  # made only to hold the lock: gone again if the run wrote nothing
        with contextlib.suppress(OSError):  # not empty, or another start's lock now
            os.rmdir(os.fspath(folder))  # local path: as above


def _agreed(ok: bool) -> bool:
    """Process 0's `ok`, on every process of the run (one process: `ok`)."""
    import jax

    if jax.process_count() == 1:
        return ok
    import numpy as np
    from jax.experimental import multihost_utils

    return bool(multihost_utils.broadcast_one_to_all(np.int32(ok)))


@contextlib.contextmanager
def hold(workdir, take: bool = True) -> Iterator[None]:
    """Holds `workdir`'s lock for the block: `take` on process 0, whose outcome every process
    of a multi-process run then learns (so call it on all of them). ConfigError naming the
    holder when another run holds it, or why the lock could not be taken (a folder that cannot
    be made); on the other processes, that process 0 could not take it.
    A folder made here only to hold the lock is removed again when the block leaves it empty
    (a run that failed before writing anything leaves no workdir)."""
    fd, failed, made, folder = None, None, False, None
    if take and not storage.is_url(workdir):
        folder = storage.run_path(workdir)
        made = not folder.exists()
        try:
            fd = _acquire(folder)
        except Exception as error:  # every process must learn of it, whatever it is
            failed = error
            if not isinstance(error, ConfigError):
                failed = ConfigError(f"the lock of {workdir} could not be taken: {error}")
                failed.__cause__ = error
            _release(folder, None, made)
    if not _agreed(failed is None):
        raise failed or ConfigError(f"process 0 could not take the lock of {workdir} (another "
                                    "run holds it, or its error says why): see its output")
    try:
        yield
    finally:
        if folder is not None:
            _release(folder, fd, made)
