"""One training run at a time in a workdir (train/workdir_lock.py): a second start is refused
naming the holder, a finished or killed holder frees the workdir, and a run refused or failed
before writing anything leaves no folder behind."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

import pytest

from train.config import ConfigError
from train.workdir_lock import LOCK, hold

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_second_hold_is_refused_naming_the_first(tmp_path):
    workdir = tmp_path / "run"
    with hold(workdir):
        assert f"pid {os.getpid()} on " in (workdir / LOCK).read_text()
        with pytest.raises(ConfigError, match=rf"{workdir} is in use: a run is training there "
                                              rf"\(pid {os.getpid()} on .*use another --workdir"):
            with hold(workdir):
                pass
        with hold(workdir, take=False):  # another process of the same run
            pass
    assert not workdir.exists()  # made for the lock alone, and left empty
    (workdir / "checkpoints").mkdir(parents=True)
    with hold(workdir):
        pass
    assert sorted(p.name for p in workdir.iterdir()) == ["checkpoints"]


def test_a_reader_asking_who_trains_does_not_keep_a_start_out(tmp_path):
    """training_in holds the lock shared for an instant: a start then waits it out."""
    import fcntl
    import threading

    from train.workdir_lock import training_in

    workdir = tmp_path / "run"
    assert training_in(workdir) is None
    with hold(workdir):
        assert training_in(workdir).startswith(f"pid {os.getpid()} on ")
    workdir.mkdir()
    (workdir / LOCK).write_text("pid 1 on a machine gone, since yesterday")
    fd = os.open(workdir / LOCK, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_SH)  # a reader's shared lock, released 50 ms later
    threading.Timer(0.05, os.close, [fd]).start()
    with hold(workdir):
        assert f"pid {os.getpid()} on " in (workdir / LOCK).read_text()


def test_a_killed_holder_leaves_the_workdir_free(tmp_path):
    """SIGKILL gives its holder no chance to clean up: the lock goes with the process."""
    workdir = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from train.workdir_lock import hold\n"
         f"with hold({str(workdir)!r}):\n    print('held', flush=True); time.sleep(600)"],
        cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError, match=f"pid {holder.pid} on "):
            with hold(workdir):
                pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert (workdir / LOCK).exists()  # the file stays; its lock went with the process
    with hold(workdir):
        pass


def test_python_m_train_refuses_a_workdir_another_run_trains_in(tmp_path, capsys, monkeypatch,
                                                               fashion_mnist_env):
    """Refused before the trainer is built (which may train a vocabulary, place a teacher on
    the device): the lock is there when it is built."""
    from train.__main__ import main
    from train.trainer import Trainer

    built, real = [], Trainer.__init__

    def init(self, config, workdir, **kwargs):
        built.append((workdir / LOCK).exists())
        real(self, config, workdir, **kwargs)

    monkeypatch.setattr(Trainer, "__init__", init)
    assert main(["--config", "configs/vit/fashion_mnist.py:smoke", "--workdir",
                 str(tmp_path / "first"), "--config.train.num_steps=6"]) == 0
    assert built == [True] and not (tmp_path / "first" / LOCK).exists()

    workdir = tmp_path / "run"
    with hold(workdir):
        assert main(["--config", "configs/vit/fashion_mnist.py:smoke",
                     "--workdir", str(workdir)]) == 2
        assert "is in use: a run is training there" in capsys.readouterr().err
        assert sorted(p.name for p in workdir.iterdir()) == [LOCK]  # nothing written
    assert built == [True]  # the second start was not built


def test_every_process_of_a_run_learns_that_process_0_was_refused(tmp_path):
    """Only process 0 takes the lock; the others must stop too, not wait in the first step's
    collectives for a process that left."""
    from conftest import json_report, start_two_processes

    workdir = tmp_path / "run"
    (tmp_path / "a_file").write_text("")

    def reports(path):
        processes = start_two_processes(["tests/scripts/workdir_holders.py", str(path)])
        return [json_report(process.communicate(timeout=300)[0]) for process in processes]

    free = reports(workdir)
    assert [r["process"] for r in free] == [0, 1] and all(r.get("held") for r in free), free
    with hold(workdir):
        refused = reports(workdir)
    assert "is in use: a run is training there" in refused[0]["refused"]
    assert "process 0 could not take the lock" in refused[1]["refused"]
    broken = reports(tmp_path / "a_file" / "run")  # no folder can be made there: an OSError
    assert "the lock of" in broken[0]["refused"] and "could not be taken" in broken[0]["refused"]
    assert "process 0 could not take the lock" in broken[1]["refused"]


def test_a_file_system_without_flock_trains_unguarded_with_a_note(tmp_path, monkeypatch,
                                                                  capsys):
    import errno
    import fcntl

    def no_flock(fd, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    with hold(tmp_path / "run"):
        pass
    assert "has no flock ([Errno 37] No locks available): nothing stops a second run" in \
        capsys.readouterr().err
    assert not (tmp_path / "run").exists()  # neither the lock file nor a folder made for it
