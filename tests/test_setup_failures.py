"""A multi-process run whose setup fails on one process only (its host lacks the data, its disk
is full): every process stops, soon, the failing one with its own error and the others with one
naming it, instead of waiting in their next collective (train/trainer.py, `together` blocks of
train/distributed.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import portpicker
import pytest
from conftest import REPO, json_report, start_two_processes, xla_flags


def _outputs(processes, timeout: int = 240) -> list[tuple[str, str]]:
    """Each process's (stdout, stderr); fails the test when they have not both ended."""
    try:
        return [process.communicate(timeout=timeout) for process in processes]
    except subprocess.TimeoutExpired:
        raise AssertionError("the processes did not both end: one waits for the other") from None
    finally:
        for process in processes:
            process.kill()


def test_a_host_without_the_data_stops_every_process_naming_it(fixture_data_root, tmp_path):
    """python -m train as two processes, process 1's data root empty (its host never fetched
    Fashion-MNIST): process 1 stops with its own error, which names the fetch command; process 0
    with one naming process 1, its error and where to read the whole of it. Both exit 2 and
    nothing is written in the workdir."""
    port = portpicker.pick_unused_port()
    workdir = tmp_path / "run"
    command = [sys.executable, "-m", "train", "--config", "configs/vit/fashion_mnist.py:smoke",
               "--workdir", str(workdir), "--config.mesh.data=2", "--config.mesh.fsdp=2",
               "--coordinator_address", f"127.0.0.1:{port}", "--num_processes", "2"]
    environment = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=xla_flags(2))
    roots = [fixture_data_root, tmp_path / "empty_root"]
    processes = [subprocess.Popen(
        [*command, "--process_id", str(index)], cwd=REPO, text=True, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, env=dict(environment, PAPERS_JAX_DATA=str(roots[index])))
        for index in range(2)]
    (_, first), (_, second) = _outputs(processes)
    assert [process.returncode for process in processes] == [2, 2], second[-3000:]
    own = second.split("error: ", 1)[1]
    assert "python -m data.fetch fashion_mnist" in own
    assert ("error: process 1 of 2 failed setting up the task (DataError: "
            f"{own.splitlines()[0][:100]}") in first
    assert "so process 0 stops too: the whole error is in process 1's output" in first
    assert not workdir.exists()


@pytest.mark.parametrize("point,failing,block,kind", [
    ("data", 1, "opening the data", "DataError"),
    ("run_files", 0, "preparing the first step", "RuntimeError")])
def test_a_setup_step_failing_on_one_process_stops_every_process(fixture_data_root, tmp_path,
                                                                 point, failing, block, kind):
    """Trainer.run on two processes where one process's train iterator finds no data, or
    process 0 (which alone writes the run's files) finds its disk full after the state is
    initialised: that process raises its own error, the other one of the same kind (an
    OSError's is a RuntimeError) naming it and what it was doing."""
    processes = start_two_processes(
        ["tests/scripts/setup_failure.py", str(tmp_path / "run"), point, str(failing)],
        env={"PAPERS_JAX_DATA": str(fixture_data_root)})
    outputs = _outputs(processes)
    assert [process.returncode for process in processes] == [0, 0], outputs[1][1][-3000:]
    reports = [json_report(stdout) for stdout, _ in outputs]
    own = {"data": ["DataError", "fashion_mnist is not fetched on this host"],
           "run_files": ["OSError", "[Errno 28] No space left on device"]}[point]
    assert reports[failing]["error"] == own
    other = reports[1 - failing]["error"]
    assert other[0] == kind
    assert other[1] == (f"process {failing} of 2 failed {block} ({own[0]}: {own[1]}), so "
                        f"process {1 - failing} stops too: the whole error is in process "
                        f"{failing}'s output")
