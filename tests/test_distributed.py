"""train/distributed.py: how a process finds the others (flags, environment variables, cluster
environments), the sum of host-side counters over processes, and how all stop together when a
piece of work fails on some of them only."""

from __future__ import annotations

import os
import subprocess
import sys

import jax
import portpicker
import pytest
from cluster_sims import CLUSTER_VARS, MULTI_PROCESS, SIMULATIONS, Machine
from conftest import REPO, json_report, run_two_processes, xla_flags
from jax._src.clusters import ClusterEnv

from data.errors import DataError
from train import distributed
from train.config import ConfigError


@pytest.fixture
def machine(monkeypatch, tmp_path):
    return Machine(monkeypatch, tmp_path)


@pytest.fixture
def joins(monkeypatch):
    """The calls of jax.distributed.initialize, each with what JAX makes of its arguments before
    it connects: (coordinator, processes, process id, local device ids)."""
    calls = []

    def initialize(coordinator_address=None, num_processes=None, process_id=None, **kwargs):
        method = kwargs.get("cluster_detection_method")
        # What jax's State.initialize does before it connects.
        coordinator_address = coordinator_address or os.environ.get("JAX_COORDINATOR_ADDRESS")
        local = kwargs.get("local_device_ids")
        if local is None and (ids := os.environ.get("JAX_LOCAL_DEVICE_IDS")):
            local = [int(i) for i in ids.split(",")]
        resolved = (coordinator_address, num_processes, process_id, local)
        if method != "deactivate" and None in resolved:
            resolved = ClusterEnv.auto_detect_unset_distributed_params(*resolved, method, 300)
        calls.append(dict(kwargs, num_processes=num_processes, process_id=process_id,
                          resolved=resolved))

    monkeypatch.setattr(jax.distributed, "initialize", initialize)
    monkeypatch.setattr(distributed, "_configure_runtime", lambda: None)
    return calls


@pytest.mark.parametrize("simulation", MULTI_PROCESS)
def test_a_detected_cluster_is_joined(machine, joins, simulation):
    set_up, cluster, coordinator = SIMULATIONS[simulation]
    set_up(machine)
    assert distributed.initialize() == (f"process {cluster.process_id} of "
                                        f"{cluster.num_processes} ({cluster.name})")
    [call] = joins
    assert call.get("cluster_detection_method") == cluster.detection_method
    address, count, index, _ = call["resolved"]
    assert (address, count, index) == (coordinator, cluster.num_processes, cluster.process_id)


def test_jax_gives_each_gpu_process_under_slurm_its_own_device(machine, joins):
    SIMULATIONS["slurm"][0](machine)  # local task 1 of its node
    distributed.initialize()
    assert joins[0]["resolved"][3] == [1]


@pytest.mark.parametrize("simulation", ["plain", "slurm_one_task", "gce_tpu_vm_one_worker"])
def test_one_process_joins_nothing(machine, joins, simulation):
    set_up, cluster, _ = SIMULATIONS[simulation]
    set_up(machine)
    expected = "single process" + (f" ({cluster.name})" if cluster else "")
    assert distributed.initialize() == expected
    assert joins == []
    if cluster is None:
        assert machine.asked == []


def test_an_mpi_launch_jax_cannot_join_is_an_error(machine, joins):
    """Open MPI 5 (no ORTE URI) without mpi4py: four processes that must not train apart."""
    machine.setenv(OMPI_COMM_WORLD_SIZE=4, OMPI_COMM_WORLD_RANK=1, PMIX_RANK=1)
    with pytest.raises(ValueError, match="OMPI_COMM_WORLD_SIZE=4: an MPI launcher started "
                                         "several processes.*install mpi4py"):
        distributed.initialize()
    machine.setenv(OMPI_COMM_WORLD_SIZE=1, OMPI_COMM_WORLD_RANK=0, PMIX_RANK=0)
    assert distributed.initialize() == "single process"
    machine.setenv(JAX_COORDINATOR_ADDRESS="10.9.9.9:1234", JAX_NUM_PROCESSES=4, JAX_PROCESS_ID=1,
                   OMPI_COMM_WORLD_SIZE=4)
    assert distributed.initialize() == ("process 1 of 4 (coordinator 10.9.9.9:1234, from the "
                                        "environment)")
    assert joins.pop()["resolved"][:3] == ("10.9.9.9:1234", 4, 1)


def test_flags_and_jax_variables_win_over_a_detected_cluster(machine, joins):
    SIMULATIONS["gce_tpu_vm"][0](machine)
    machine.setenv(JAX_COORDINATOR_ADDRESS="10.9.9.9:1234")
    assert distributed.initialize() == "process 3 of 4 (GCE TPU VM)"
    assert joins.pop()["resolved"][:3] == ("10.9.9.9:1234", 4, 3)
    machine.setenv(JAX_NUM_PROCESSES=2, JAX_PROCESS_ID=1)
    assert distributed.initialize() == ("process 1 of 2 (coordinator 10.9.9.9:1234, from the "
                                        "environment)")
    assert joins.pop()["resolved"][:3] == ("10.9.9.9:1234", 2, 1)
    assert distributed.initialize("10.7.7.7:99", 8, 5) == ("process 5 of 8 (coordinator "
                                                             "10.7.7.7:99, from the flags)")
    assert joins.pop()["resolved"][:3] == ("10.7.7.7:99", 8, 5)


def test_flags_and_jax_variables_leave_the_devices_to_the_user_under_srun(machine, joins):
    """Under srun JAX would give each process only the GPU of its SLURM_LOCALID; a launch the
    flags or variables describe detects no cluster, so JAX_LOCAL_DEVICE_IDS alone picks them."""
    SIMULATIONS["slurm"][0](machine)  # local task 1 of its node
    distributed.initialize("10.7.7.7:99", 8, 5)
    assert joins.pop()["resolved"] == ("10.7.7.7:99", 8, 5, None)
    machine.setenv(JAX_COORDINATOR_ADDRESS="10.9.9.9:1234", JAX_NUM_PROCESSES=2, JAX_PROCESS_ID=1)
    distributed.initialize()
    assert joins.pop()["resolved"] == ("10.9.9.9:1234", 2, 1, None)
    machine.setenv(JAX_LOCAL_DEVICE_IDS="2,3")
    distributed.initialize()
    assert joins.pop()["resolved"] == ("10.9.9.9:1234", 2, 1, [2, 3])


# As train/__main__.py does: Python's SIGTERM handler first, then the join.
SIGTERM_AFTER_JOINING = """
import os, signal, sys, time
caught = []
signal.signal(signal.SIGTERM, lambda signum, frame: caught.append(signum))
from train import distributed
print(distributed.initialize(sys.argv[1], 1, 0), flush=True)
os.kill(os.getpid(), signal.SIGTERM)
for _ in range(100):
    if caught:
        break
    time.sleep(0.02)
print("caught", caught, flush=True)
"""


def test_a_joined_process_still_handles_sigterm_itself():
    """JAX's preemption service, on by default, would take over SIGTERM when the process joins
    and only log it, so a signal while loading or compiling would not end the run."""
    base = {k: v for k, v in os.environ.items() if k not in CLUSTER_VARS}
    address = f"127.0.0.1:{portpicker.pick_unused_port()}"
    result = subprocess.run([sys.executable, "-c", SIGTERM_AFTER_JOINING, address], cwd=REPO,
                            env=dict(base, JAX_PLATFORMS="cpu"), capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == [
        f"process 0 of 1 (coordinator {address}, from the flags)", "caught [15]"], result.stderr


def test_launch_from_environment_variables(machine):
    assert distributed._environment_launch() is None
    machine.setenv(JAX_COORDINATOR_ADDRESS="10.0.0.1:1234")
    assert distributed._environment_launch() is None  # a cluster may supply the other two
    machine.setenv(JAX_NUM_PROCESSES="4")
    with pytest.raises(ValueError, match="JAX_PROCESS_ID not set: a launch from the environment"):
        distributed._environment_launch()
    machine.setenv(JAX_PROCESS_ID="3")
    assert distributed._environment_launch() == ("10.0.0.1:1234", 4, 3)
    machine.setenv(JAX_PROCESS_ID="three")
    with pytest.raises(ValueError, match="must be integers"):
        distributed._environment_launch()


def test_single_process_and_argument_errors(machine):
    assert distributed.initialize() == "single process"
    with pytest.raises(ValueError, match="go together; give all three"):
        distributed.initialize("127.0.0.1:1234", 2)
    with pytest.raises(ValueError, match=r"process id 2 \(from the flags\) must be in \[0, 2\)"):
        distributed.initialize("127.0.0.1:1234", 2, 2)
    machine.setenv(JAX_COORDINATOR_ADDRESS="127.0.0.1:1234")
    with pytest.raises(ValueError, match="JAX_COORDINATOR_ADDRESS is set but neither"):
        distributed.initialize()
    machine.setenv(JAX_NUM_PROCESSES="2")
    machine.setenv(JAX_PROCESS_ID="5")
    with pytest.raises(ValueError, match=r"process id 5 \(from the environment\) must be in"):
        distributed.initialize()


def test_sum_over_one_process_is_the_counts():
    assert jax.process_count() == 1
    assert distributed.sum_over_processes({"examples": 5.0}) == {"examples": 5.0}
    assert distributed.differing_processes("ab" * 32) == []


@pytest.mark.parametrize("launch", ["environment", "slurm"])
def test_two_processes_join_and_sum_counts(launch):
    """Two local processes of two CPU devices each form one 4-device run, launched with only
    JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and JAX_PROCESS_ID set, or as the two tasks of a
    SLURM step on this host (JAX's own detection, port from JAX_COORDINATOR_PORT); both get the
    totals of counters beyond int32's range and the list of processes whose digest differs."""
    port = portpicker.pick_unused_port()
    base = {k: v for k, v in os.environ.items() if k not in CLUSTER_VARS}
    base.update(JAX_PLATFORMS="cpu", XLA_FLAGS=xla_flags(2))
    if launch == "environment":
        base.update(JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES="2")
        variables = [dict(JAX_PROCESS_ID=str(index)) for index in range(2)]
        joined = ["from the environment"] * 2
    else:
        base.update(SLURM_JOB_ID="7", SLURM_STEP_NODELIST="127.0.0.1", SLURM_NTASKS="2",
                    JAX_COORDINATOR_PORT=str(port))
        variables = [dict(SLURM_PROCID=str(index), SLURM_LOCALID=str(index)) for index in range(2)]
        joined = ["process 0 of 2 (SLURM)", "process 1 of 2 (SLURM)"]
    processes = [subprocess.Popen([sys.executable, "tests/scripts/process_sums.py"], cwd=REPO,
                                  env=dict(base, **variables[index]),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for index in range(2)]
    for index, process in enumerate(processes):
        stdout, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, stderr[-3000:]
        report = json_report(stdout)
        assert report["process"] == index and report["processes"] == 2
        assert report["devices"] == 4
        assert joined[index] in report["joined"]
        assert report["totals"] == {"dropped": 1.0, "examples": 6e9 + 1}
        # How the trainer checks that every process built the same vocabulary.
        assert report["differ_shared"] == [] and report["differ_own"] == [1]


def test_together_alone_runs_the_block_and_gathers_nothing():
    """One process: the block's error goes through as it is; the reports are its own."""
    assert distributed.gather_reports(3, "x") == [(3, "x")]
    with pytest.raises(DataError, match="^missing$"):
        with distributed.together("reading", (ConfigError, DataError)):
            raise DataError("missing")
    with distributed.together("reading"):
        pass


def test_a_block_failing_on_one_process_stops_every_process():
    """Two processes: where a block under `together` raised on one, that one raises its own
    error and the other an error of the same kind (RuntimeError for a kind not named) naming
    the failing process, its error and where to read the whole of it; each its own where all
    failed. They stay in step: a collective after the blocks adds up on both."""
    script = "tests/scripts/together_processes.py"
    reports = [json_report(stdout) for stdout, _ in run_two_processes([script])]
    assert [(r["process"], r["total"]) for r in reports] == [(0, 2), (1, 2)]
    first, second = (r["raised"] for r in reports)
    assert first["none"] is None and second["none"] is None
    assert second["data_on_1"] == ["DataError", "no data/fashion_mnist on this host", True, None]
    assert first["data_on_1"] == [
        "DataError", "process 1 of 2 failed reading its shard (DataError: no data/fashion_mnist "
        "on this host), so process 0 stops too: the whole error is in process 1's output", False,
        None]
    assert first["os_on_0"] == ["OSError", "[Errno 28] No space left on device", True, None]
    assert second["os_on_0"][0] == "RuntimeError" and second["os_on_0"][1].startswith(
        "process 0 of 2 failed reading its shard (OSError: [Errno 28] No space left on device)")
    assert first["everywhere"] == ["ConfigError", "bad key on 0", True, None]
    assert second["everywhere"] == ["ConfigError", "bad key on 1", True, None]
    # A signal on one process stops the other as one (python -m train: 128 + 15 on both).
    assert second["signal_on_1"] == ["StoppedBySignal", "SIGTERM", True, 15]
    assert first["signal_on_1"][0] == "StoppedBySignal" and first["signal_on_1"][3] == 15
    # A text strict UTF-8 cannot encode still reaches the gather (else process 0 waited).
    assert first["undecodable_on_1"][0] == "DataError"
    assert "(DataError: no file data/\\udcff.txt)" in first["undecodable_on_1"][1]
