"""One training run at a time in a workdir: process 0 of a run holds `WORKDIR/.train.lock` while it
trains, and a second start there (a double launch, a scheduler requeueing a job whose first
copy still runs) is refused instead of writing the same metrics.jsonl and checkpoints.

The lock is the operating system's (flock), so it goes with its holder: a run killed without
a chance to clean up (SIGKILL, the machine lost) leaves no stale lock, only possibly the file.
It holds across machines where the shared file system gives flock its meaning (NFSv4, Lustre
with flock enabled); an object-store workdir (gs://) has no such lock and is not guarded.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
from typing import Iterator

from train import storage
from train.config import ConfigError

LOCK = ".train.lock"


@contextlib.contextmanager
def hold(workdir, take: bool = True) -> Iterator[None]:
    """Holds `workdir`'s lock for the block (`take` False: another process of the run holds
    it). ConfigError naming the holder when another run holds it. A folder made here only to
    hold the lock is removed again when the block leaves it empty (a run that failed before
    writing anything leaves no workdir)."""
    if not take or storage.is_url(workdir):
        yield
        return
    folder = storage.run_path(workdir)
    made = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    path = os.fspath(folder / LOCK)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 200).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise ConfigError(f"{folder} is in use: a run is training there ({holder}). Wait "
                              "for it to end or stop it, or use another --workdir") from None
        try:
            held = os.path.samestat(os.fstat(fd), os.stat(path))  # local path: as above
        except FileNotFoundError:  # its holder removed it as we opened it: take the new one
            held = False
        if held:
            break
        os.close(fd)
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}, since "
                 f"{time.strftime('%Y-%m-%d %H:%M:%S')}".encode())
    try:
        yield
    finally:
        # removed while still held: a process that opened it meanwhile takes a new one
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # local path: a local workdir's lock
        os.close(fd)
        if made and not any(folder.iterdir()):
            folder.rmdir()
