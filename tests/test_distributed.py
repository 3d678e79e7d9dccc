"""train/distributed.py: how a process finds the others (flags, environment variables, cluster
environments) and the sum of host-side counters over processes."""

from __future__ import annotations

import os
import subprocess
import sys

import jax
import portpicker
import pytest
from conftest import REPO, json_report, xla_flags

from train import distributed

CLUSTER_VARS = ("SLURM_NTASKS", "SLURM_JOB_ID", "OMPI_COMM_WORLD_SIZE", "TPU_WORKER_HOSTNAMES",
                "MEGASCALE_COORDINATOR_ADDRESS", *distributed.ENV_VARS)


@pytest.fixture
def clean_env(monkeypatch):
    for name in CLUSTER_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.parametrize("env, kind", [
    ({}, None),
    ({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "1"}, None),      # one task: nothing to join
    ({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "16"}, "SLURM"),
    ({"OMPI_COMM_WORLD_SIZE": "4"}, "Open MPI"),
    ({"TPU_WORKER_HOSTNAMES": "localhost"}, None),           # a single-host TPU VM
    ({"TPU_WORKER_HOSTNAMES": "t1,t2,t3,t4"}, "TPU pod"),
    ({"MEGASCALE_COORDINATOR_ADDRESS": "10.0.0.2"}, "TPU pod"),
])
def test_cluster_environments(clean_env, env, kind):
    for name, value in env.items():
        clean_env.setenv(name, value)
    assert distributed._cluster_environment() == kind


def test_launch_from_environment_variables(clean_env):
    assert distributed._environment_launch() is None
    clean_env.setenv("JAX_COORDINATOR_ADDRESS", "10.0.0.1:1234")
    assert distributed._environment_launch() is None  # a cluster may supply the other two
    clean_env.setenv("JAX_NUM_PROCESSES", "4")
    with pytest.raises(ValueError, match="JAX_PROCESS_ID not set: a launch from the environment"):
        distributed._environment_launch()
    clean_env.setenv("JAX_PROCESS_ID", "3")
    assert distributed._environment_launch() == ("10.0.0.1:1234", 4, 3)
    clean_env.setenv("JAX_PROCESS_ID", "three")
    with pytest.raises(ValueError, match="must be integers"):
        distributed._environment_launch()


def test_single_process_and_argument_errors(clean_env):
    assert distributed.initialize() == "single process"
    with pytest.raises(ValueError, match="go together; give all three"):
        distributed.initialize("127.0.0.1:1234", 2)
    with pytest.raises(ValueError, match=r"process id 2 \(from the flags\) must be in \[0, 2\)"):
        distributed.initialize("127.0.0.1:1234", 2, 2)
    clean_env.setenv("JAX_COORDINATOR_ADDRESS", "127.0.0.1:1234")
    with pytest.raises(ValueError, match="JAX_COORDINATOR_ADDRESS is set but neither"):
        distributed.initialize()
    clean_env.setenv("JAX_NUM_PROCESSES", "2")
    clean_env.setenv("JAX_PROCESS_ID", "5")
    with pytest.raises(ValueError, match=r"process id 5 \(from the environment\) must be in"):
        distributed.initialize()


def test_sum_over_one_process_is_the_counts():
    assert jax.process_count() == 1
    assert distributed.sum_over_processes({"examples": 5.0}) == {"examples": 5.0}
    assert distributed.differing_processes("ab" * 32) == []


def test_two_processes_join_from_environment_variables_and_sum_counts():
    """Two local processes of two CPU devices each, launched with only JAX_COORDINATOR_ADDRESS,
    JAX_NUM_PROCESSES and JAX_PROCESS_ID set, form one 4-device run, and both get the totals of
    counters beyond int32's range and the list of processes whose digest differs."""
    port = portpicker.pick_unused_port()
    base = {k: v for k, v in os.environ.items() if k not in CLUSTER_VARS}
    base.update(JAX_PLATFORMS="cpu", XLA_FLAGS=xla_flags(2),
                JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES="2")
    processes = [subprocess.Popen([sys.executable, "tests/scripts/process_sums.py"], cwd=REPO,
                                  env=dict(base, JAX_PROCESS_ID=str(index)),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for index in range(2)]
    for index, process in enumerate(processes):
        stdout, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, stderr[-3000:]
        report = json_report(stdout)
        assert report["process"] == index and report["processes"] == 2
        assert report["devices"] == 4
        assert "from the environment" in report["joined"]
        assert report["totals"] == {"dropped": 1.0, "examples": 6e9 + 1}
        # How the trainer checks that every process built the same vocabulary.
        assert report["differ_shared"] == [] and report["differ_own"] == [1]
