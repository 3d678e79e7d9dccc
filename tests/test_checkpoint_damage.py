"""Damaged checkpoints and failures that are not damage: which steps are set aside, which stop
the run with nothing moved, and the refusal to train again from step 0 over damaged ones.

Damage is made in the files (truncated, overwritten, removed); the failures of the host or the
filesystem are injected where orbax restores or tensorstore reads (running as root, a file
cannot be made unreadable)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest
import tensorstore
from conftest import json_report, run_two_processes, start_two_processes
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from train.__main__ import main
from train.checkpoint_damage import find_damage
from train.checkpointing import CheckpointError, Checkpointer
from train.metrics_writer import SUPERSEDED


def _replicated():
    return NamedSharding(Mesh(np.array(jax.devices()), ("data",)), P())


def _largest_file(folder):
    return max((p for p in folder.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)


def _truncate_array_file(step_dir):
    """Cuts the array-data file (the 64x64 weights' zarr chunk, over OCDBT's 1 KiB inline
    size) in half."""
    victim = _largest_file(step_dir / "state" / "ocdbt.process_0")
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])


def _garble_array_file(step_dir):
    """Overwrites the array-data file with as many random bytes: only decoding finds it."""
    _garble(_largest_file(step_dir / "state" / "ocdbt.process_0"))


def _garble(victim):
    victim.write_bytes(np.random.default_rng(0).bytes(victim.stat().st_size))


def _remove_item(step_dir):
    shutil.rmtree(step_dir / "data")


def _garble_metadata(step_dir):
    metadata = step_dir / "state" / "_METADATA"
    metadata.write_text(metadata.read_text()[:-40])


DAMAGE = {"truncated array file": _truncate_array_file,
          "undecodable array file": _garble_array_file, "missing item": _remove_item,
          "unparseable metadata": _garble_metadata}


def _weights(step):
    """Random weights: they do not compress below OCDBT's inline size, so they have a file."""
    return {"w": jax.random.normal(jax.random.key(step), (64, 64))}


def _abstract_weights():
    return {"w": jax.ShapeDtypeStruct((64, 64), jnp.float32, sharding=_replicated())}


def _saved_weights(directory, steps=(1, 2, 3)):
    with Checkpointer(directory, save_every=1, keep=len(steps)) as ckpt:
        for step in steps:
            ckpt.save(step, _weights(step), {"at": step})


@pytest.mark.parametrize("damage", DAMAGE)
def test_damaged_steps_are_set_aside_newest_first_until_one_reads(tmp_path, monkeypatch,
                                                                  damage):
    """restore_latest_good: a damaged newest step is reported with what is damaged, renamed to
    <step>.corrupt-* and the previous step comes back exactly (state, data state, step); orbax
    does not read a step whose damage shows without decoding its arrays. When no step reads,
    all are set aside, nothing is restored, and a start from step 0 is refused naming them
    unless asked for (then they stay where they are)."""
    _saved_weights(tmp_path)
    DAMAGE[damage](tmp_path / "3")
    warnings, read_by_orbax = [], []
    orbax_restore = ocp.StandardCheckpointHandler.restore

    def restore(handler, directory, *args, **kwargs):
        read_by_orbax.append(int(directory.parent.name))
        return orbax_restore(handler, directory, *args, **kwargs)

    monkeypatch.setattr(ocp.StandardCheckpointHandler, "restore", restore)
    with Checkpointer(tmp_path, save_every=1, keep=3) as ckpt:
        restored, data, step = ckpt.restore_latest_good(_abstract_weights(), warnings.append)
        assert (step, data) == (2, {"at": 2})
        # Only bytes that decode wrong need orbax's failed read to be found.
        assert read_by_orbax == ([3, 2] if damage == "undecodable array file" else [2])
        np.testing.assert_array_equal(restored["w"], _weights(2)["w"])
        assert len(warnings) == 1
        assert warnings[0].startswith(f"checkpoint {tmp_path / '3'} cannot be restored: ")
        found = {"truncated array file": ", which holds w/0.0, does not read back "
                                         "(OUT_OF_RANGE",  # found before orbax reads it
                 "undecodable array file": "state/ array w does not read back (",
                 "missing item": "its item data/ is missing",
                 "unparseable metadata": "state/_METADATA is not JSON"}[damage]
        assert found in warnings[0]
        assert ckpt.all_steps() == [1, 2] and len(list(tmp_path.glob("3.corrupt-*"))) == 1
        DAMAGE[damage](tmp_path / "2")
        DAMAGE[damage](tmp_path / "1")
        assert ckpt.restore_latest_good(_abstract_weights(), warnings.append) is None
        assert ckpt.all_steps() == [] and len(warnings) == 3
        names = ckpt.set_aside_folders()
        assert [name.split(".")[0] for name in names] == ["1", "2", "3"]
        with pytest.raises(CheckpointError) as error:
            ckpt.check_start_from_scratch(fresh_start=False)
        message = str(error.value)
        assert f"{tmp_path} holds no usable checkpoint, only damaged ones set aside: " in message
        assert all(name in message for name in names) and "--fresh_start" in message
        assert f"checkpoint {tmp_path / '1'} cannot be restored: " in message  # and why
        note, = ckpt.check_start_from_scratch(fresh_start=True)
        assert note.startswith("fresh start: training from step 0") and names[0] in note
    assert ckpt.set_aside_folders() == names and sorted(os.listdir(tmp_path)) == names


@pytest.mark.parametrize("error", [
    PermissionError(errno.EACCES, "Permission denied", "state/manifest.ocdbt"),
    OSError(errno.EIO, "Input/output error"),
    OSError(errno.ETIMEDOUT, "Connection timed out"),
    TimeoutError("read of state/ocdbt.process_0/d/... timed out"),
    MemoryError()], ids=lambda e: type(e).__name__ + (f"-{errno.errorcode[e.errno]}"
                                                      if getattr(e, "errno", None) else ""))
def test_a_failure_that_is_not_damage_stops_and_moves_nothing(tmp_path, monkeypatch, error):
    """A restore that fails for a reason of the host or the filesystem (orbax's restore raises
    it here) while the files read back whole: CheckpointError naming the step, the error and
    what to do; every step stays where it is, and the next start resumes from the newest."""
    _saved_weights(tmp_path, steps=(1, 2))

    def fail(*args, **kwargs):
        raise error

    with Checkpointer(tmp_path, save_every=1, keep=2) as ckpt:
        monkeypatch.setattr(ocp.StandardCheckpointHandler, "restore", fail)
        with pytest.raises(CheckpointError) as raised:
            ckpt.restore_latest_good(_abstract_weights())
        message = str(raised.value)
        assert message.startswith(f"checkpoint {tmp_path / '2'} could not be restored "
                                  f"({type(error).__name__}: ")
        assert "its files read back whole: it is not damaged, and nothing was moved" in message
        assert "run the same command again: it resumes from this checkpoint" in message
        assert raised.value.__cause__ is error
        assert sorted(os.listdir(tmp_path)) == ["1", "2"] and ckpt.all_steps() == [1, 2]
        monkeypatch.undo()
        _, data, step = ckpt.restore_latest_good(_abstract_weights())
    assert (step, data) == (2, {"at": 2})


@pytest.mark.parametrize("status", [
    "UNKNOWN: Error reading local file \"{path}\": Input/output error [os_error_code='5']",
    "FAILED_PRECONDITION: Error reading local file \"{path}\": Transport endpoint is not "
    "connected [os_error_code='107']",
    "PERMISSION_DENIED: Error reading local file \"{path}\": Permission denied "
    "[os_error_code='13']",
    "DEADLINE_EXCEEDED: Error reading \"gs://bucket/{path}\": Timed out"], ids=lambda s: s[:12])
def test_damage_that_cannot_be_told_from_an_unreadable_file_stops_too(tmp_path, monkeypatch,
                                                                      status):
    """The newest step really is truncated, but each read of its array bytes fails with a
    tensorstore status of the host or the filesystem (an OS error behind it, or a code that
    is not about the bytes): nothing proves damage, so the run stops and nothing is moved."""
    _saved_weights(tmp_path, steps=(1, 2))
    _truncate_array_file(tmp_path / "2")
    failure = ValueError(status.format(path=tmp_path / "2" / "state" / "ocdbt.process_0"))
    real_open, real_dump = tensorstore.open, tensorstore.ocdbt.dump

    class Failed:  # a tensorstore future: its result raises the read's status
        def result(self):
            raise failure

    def open_array(spec, *args, **kwargs):
        if isinstance(spec, dict) and spec.get("driver") == "zarr":
            return Failed()
        return real_open(spec, *args, **kwargs)

    def dump(base, node=None, **kwargs):
        if node is not None and node.startswith("value:"):
            return Failed()
        return real_dump(base, node, **kwargs)

    with Checkpointer(tmp_path, save_every=1, keep=2) as ckpt:
        monkeypatch.setattr(tensorstore, "open", open_array)
        monkeypatch.setattr(tensorstore.ocdbt, "dump", dump)
        with pytest.raises(CheckpointError) as raised:
            ckpt.restore_latest_good(_abstract_weights())
        assert str(raised.value).startswith(f"checkpoint {tmp_path / '2'} could not be restored")
        assert ("its files could not be read to tell whether they are damaged (ValueError: "
                f"{status.split(':')[0]}: ") in str(raised.value)
        assert sorted(os.listdir(tmp_path)) == ["1", "2"] and ckpt.all_steps() == [1, 2]


def test_an_interrupt_goes_through_and_moves_nothing(tmp_path, monkeypatch):
    """Ctrl-C during a restore, raised as it is or wrapped the way orbax wraps a read's error."""
    _saved_weights(tmp_path, steps=(1, 2))

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    def interrupted_read(*args, **kwargs):
        raise Exception("Encountered error while reading array index") from KeyboardInterrupt()

    with Checkpointer(tmp_path, save_every=1, keep=2) as ckpt:
        for restore in (interrupted, interrupted_read):
            monkeypatch.setattr(ocp.StandardCheckpointHandler, "restore", restore)
            with pytest.raises(KeyboardInterrupt):
                ckpt.restore_latest_good(_abstract_weights())
            assert sorted(os.listdir(tmp_path)) == ["1", "2"] and ckpt.all_steps() == [1, 2]


def test_whole_checkpoints_show_no_damage_and_each_kind_is_named(tmp_path):
    """find_damage on whole steps (nested params, a tuple of optimizer states, a typed rng key,
    scalars) finds nothing; the kinds of damage are each named."""
    train_state = {"params": {"dense": {"kernel": jnp.ones((40, 40)), "bias": jnp.zeros((40,))}},
                   "opt_state": ({"mu": jnp.full((40, 40), 0.5)}, {"count": jnp.int32(2)}),
                   "rng": jax.random.key(0), "step": jnp.int32(7)}
    with Checkpointer(tmp_path, save_every=1, keep=3) as ckpt:
        ckpt.save(1, train_state, {"at": 1})
        ckpt.save(2, {"w": jnp.zeros((2, 2)), "v": jnp.ones((3,))}, {"at": 2})
        ckpt.save(3, {"w": jnp.zeros((2, 2))}, {"at": 3})
    assert [find_damage(tmp_path / str(step)) for step in (1, 2, 3)] == [None] * 3
    # An index that lacks an array its _METADATA names.
    shutil.copy(tmp_path / "2" / "state" / "_METADATA", tmp_path / "3" / "state" / "_METADATA")
    assert find_damage(tmp_path / "3") == "state/ lacks the arrays v that its _METADATA names"
    (tmp_path / "2" / "state" / "manifest.ocdbt").unlink()
    assert find_damage(tmp_path / "2") == ("state/manifest.ocdbt (the index of its arrays) "
                                           "is missing")
    (tmp_path / "1" / "data" / "process_0-of-1.json").write_bytes(b"\x9f{")
    assert find_damage(tmp_path / "1").startswith(
        "data/process_0-of-1.json is not JSON (UnicodeDecodeError")
    with pytest.raises(FileNotFoundError, match="is not there"):
        find_damage(tmp_path / "4")


SHARES = "tests/scripts/shard_damage.py"  # two processes, each writing its share of the arrays


@pytest.fixture(scope="module")
def shared_checkpoint(tmp_path_factory):
    """Steps 1 and 2 saved by two processes of two devices each, each its rows of the arrays."""
    directory = tmp_path_factory.mktemp("shares") / "ckpt"
    run_two_processes([SHARES, "save", str(directory)])
    return directory


def _two_reports(directory, env=None, action="restore") -> list[dict]:
    """Each process's JSON report of `restore_latest_good` (or `action`) on `directory`
    (shard_damage.py); fails the test when they have not both ended within 180 s (they would
    wait for ever in each other's collectives)."""
    processes = start_two_processes([SHARES, action, str(directory)], env=env)
    try:
        outputs = [process.communicate(timeout=180) for process in processes]
    except subprocess.TimeoutExpired:
        raise AssertionError("the processes did not both end: one waits for the other") from None
    finally:
        for process in processes:
            process.kill()
    assert [process.returncode for process in processes] == [0, 0], outputs[1][1][-3000:]
    return [json_report(stdout) for stdout, _ in outputs]


def test_damage_in_one_process_share_sets_the_step_aside_on_every_process(shared_checkpoint,
                                                                          tmp_path):
    """Bytes that do not decode in process 1's own array file (the cheap check, which reads no
    array, sees nothing): only process 1's restore fails, and its full check proves the
    damage. Both processes set step 2 aside together, process 0's warning saying what process
    1 found, and both resume from step 1, each its own rows."""
    directory = tmp_path / "ckpt"
    shutil.copytree(shared_checkpoint, directory)
    _garble(_largest_file(directory / "2" / "state" / "ocdbt.process_1"))
    assert find_damage(directory / "2", read_arrays=False) is None
    reports = _two_reports(directory)
    assert [(r["process"], r["step"], r["rows_match"]) for r in reports] == [
        (0, 1, True), (1, 1, True)]
    for report in reports:
        warning, = report["warnings"]
        assert warning.startswith(f"checkpoint {directory / '2'} cannot be restored: state/ "
                                  "array w does not read back (")
    assert "(found by process 1, which reads that part)" in reports[0]["warnings"][0]
    assert "found by process" not in reports[1]["warnings"][0]
    assert sorted(p.name.split(".")[0] for p in directory.iterdir()) == ["1", "2"]
    assert len(list(directory.glob("2.corrupt-*"))) == 1


def test_a_failure_on_one_process_stops_every_process_and_moves_nothing(shared_checkpoint,
                                                                       tmp_path):
    """EIO while process 1 alone reads the arrays: process 1 stops with its own error (the
    files read back whole), process 0 with one naming process 1 and its error; nothing moved."""
    directory = tmp_path / "ckpt"
    shutil.copytree(shared_checkpoint, directory)
    first, second = _two_reports(directory, env={"FAIL_RESTORE_ON_PROCESS": "1"})
    own = (f"checkpoint {directory / '2'} could not be restored (OSError: [Errno 5] "
           "Input/output error), but its files read back whole")
    assert second["error"][0] == "CheckpointError" and second["error"][1].startswith(own)
    assert first["error"][0] == "CheckpointError"
    assert first["error"][1].startswith(f"checkpoint {directory / '2'} could not be restored by "
                                        f"process 1 of 2 (CheckpointError: {own}")
    assert "the whole error is in process 1's output); nothing was moved" in first["error"][1]
    assert sorted(os.listdir(directory)) == ["1", "2"]


def test_a_signal_on_one_process_or_a_stale_listing_stops_every_process(shared_checkpoint,
                                                                       tmp_path):
    """SIGTERM while process 1 reads its share: both stop as by that signal (python -m train:
    143 on both), nothing moved. A process that lists other steps than process 0 (a stale view
    of the folder) would restore another step: both stop, naming it, before any restore."""
    directory = tmp_path / "ckpt"
    shutil.copytree(shared_checkpoint, directory)
    first, second = _two_reports(directory, env={"INTERRUPT_RESTORE_ON_PROCESS": "1"})
    assert (second["error"], second["signum"]) == (["StoppedBySignal", "SIGTERM"], 15)
    assert first["error"][0] == "StoppedBySignal" and first["signum"] == 15
    assert "could not be restored by process 1 of 2 (StoppedBySignal: SIGTERM" in first[
        "error"][1]
    reports = _two_reports(directory, env={"OLDER_LISTING_ON_PROCESS": "1"})
    for report, steps in zip(reports, ("[1, 2]", "[1]")):
        assert report["error"][0] == "CheckpointError"
        assert report["error"][1].startswith(
            f"processes [1] list other checkpoints in {directory} than process 0 (process "
            f"{report['process']} lists steps {steps})")
    assert sorted(os.listdir(directory)) == ["1", "2"]


def _truncate_largest_state_file(step_dir):
    victim = _largest_file(step_dir / "state")
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])


def test_the_trainer_stops_rather_than_lose_checkpoints_or_train_over_damaged_ones(
        fashion_mnist_env, tmp_path, capsys, monkeypatch):
    """python -m train on a workdir with checkpoints at steps 10 and 20: an I/O error while
    restoring stops it with nothing moved or written; once both steps are damaged they are set
    aside and the run stops naming them, again at the next start, and trains from step 0 only
    with --fresh_start, which keeps them (and the old log records, in the superseded log)."""
    command = ["--config", "configs/vit/fashion_mnist.py:smoke", "--workdir", str(tmp_path)]
    checkpoints = tmp_path / "checkpoints"
    assert main(command) == 0
    capsys.readouterr()
    assert main([*command, "--fresh_start"]) == 0  # healthy: resumed, and the flag said unused
    assert "--fresh_start is not used" in capsys.readouterr().err
    kept = {name: (tmp_path / name).read_bytes()
            for name in ("config.json", "metrics.jsonl", "requested_config.json", "record.json")}
    assert main([*command, "--allow_config_change", "--config.train.num_steps=15"]) == 2
    assert "config.train.num_steps=15 is below step 20, the checkpoint in" in (
        capsys.readouterr().err)
    assert {name: (tmp_path / name).read_bytes() for name in kept} == kept

    def unchanged():
        return {name: (tmp_path / name).read_bytes() for name in kept} == kept

    def eio(*args, **kwargs):
        raise OSError(errno.EIO, "Input/output error")

    with monkeypatch.context() as patch:  # undoes this patch alone, not the fixture's data root
        patch.setattr(ocp.StandardCheckpointHandler, "restore", eio)
        capsys.readouterr()
        assert main(command) == 3
        err = capsys.readouterr().err
        assert (f"checkpoint {checkpoints / '20'} could not be restored (OSError: [Errno 5] "
                "Input/output error), but its files read back whole") in err
        assert sorted(os.listdir(checkpoints)) == ["10", "20"] and unchanged()

    for step in ("10", "20"):
        _truncate_largest_state_file(checkpoints / step)
    errors = []
    for _ in ("this start sets them aside", "the next start finds only them"):
        assert main(command) == 3
        errors.append(capsys.readouterr().err)
        aside = sorted(os.listdir(checkpoints))
        assert [name.split(".")[0] for name in aside] == ["10", "20"]
        assert all(".corrupt-" in name for name in aside) and unchanged()
    for err in errors:
        assert (f"{checkpoints} holds no usable checkpoint, only damaged ones set aside: "
                f"{aside[0]}, {aside[1]}") in err and "--fresh_start" in err
    for step in ("10", "20"):  # why, said where they were set aside
        assert f"checkpoint {checkpoints / step} cannot be restored: state/" in errors[0]

    assert main([*command, "--fresh_start"]) == 0
    err = capsys.readouterr().err
    assert (f"fresh start: training from step 0; the damaged checkpoints set aside stay in "
            f"{checkpoints}: {aside[0]}, {aside[1]}") in err
    assert sorted(os.listdir(checkpoints)) == sorted(["10", "20", *aside])
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["split"] == "train"] == [5, 10, 15, 20]
    assert (tmp_path / SUPERSEDED).read_bytes() == kept["metrics.jsonl"]


def test_averaging_stops_every_process_when_one_fails_or_lists_other_steps(shared_checkpoint,
                                                                           tmp_path):
    """The final eval's checkpoint average (train/checkpoint_averaging.py) on two processes:
    each averages its own rows of steps 1 and 2; EIO while process 1 reads stops both, process
    0 naming process 1 (it would wait in the eval's collectives); a stale listing on process 1
    stops both before any read (each would average other steps)."""
    directory = tmp_path / "ckpt"
    shutil.copytree(shared_checkpoint, directory)
    assert [(r["step"], r["rows_match"]) for r in _two_reports(directory, action="average")] == [
        ([1, 2], True), ([1, 2], True)]
    first, second = _two_reports(directory, {"FAIL_RESTORE_ON_PROCESS": "1"}, action="average")
    assert second["error"][0] == "OSError"
    assert first["error"] == ["RuntimeError", "process 1 of 2 failed reading checkpoint 1 "
                              "to average it (OSError: [Errno 5] Input/output error), so "
                              "process 0 stops too: the whole error is in process 1's output"]
    first, second = _two_reports(directory, {"OLDER_LISTING_ON_PROCESS": "1"}, action="average")
    assert first["error"][0] == second["error"][0] == "CheckpointError"
    assert first["error"][1].startswith("processes [1] list other checkpoints")
    assert sorted(os.listdir(directory)) == ["1", "2"]
