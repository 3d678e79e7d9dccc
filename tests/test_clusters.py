"""train/clusters.py: which cluster environment JAX's detectors see, simulated for each one, and
that the detectors which may ask a server are only consulted where a local sign says so."""

from __future__ import annotations

import pytest
from cluster_sims import SIMULATIONS, Machine
from jax._src import clusters as jax_clusters

from train import clusters


@pytest.fixture
def machine(monkeypatch, tmp_path):
    return Machine(monkeypatch, tmp_path)


@pytest.mark.parametrize("simulation", SIMULATIONS)
def test_each_environment_is_detected(machine, simulation):
    set_up, expected, _ = SIMULATIONS[simulation]
    set_up(machine)
    assert clusters.detect() == expected


def test_a_plain_machine_asks_nothing(machine):
    assert clusters.detect() is None
    assert machine.asked == []


def test_servers_are_asked_only_where_a_local_sign_says_so(machine):
    # JAX's TPU set-up forced (JAX_FORCE_TPU_INIT) on a machine that is no GCE VM.
    machine.cloud_tpu_vm(**{"agent-worker-number": "0"})
    machine.product_name("Standard PC (Q35 + ICH9, 2009)")
    # mpi4py installed, but no MPI launcher started this process.
    machine.mpi4py(size=4, rank=1)
    # A Kubernetes pod that is no Indexed Job's, with the kubernetes package installed.
    machine.kubernetes(parallelism=4)
    machine.setenv(KUBERNETES_SERVICE_HOST="10.96.0.1", HOSTNAME="notebook-0")
    assert clusters.detect() is None
    assert machine.asked == []


def test_a_moved_private_api_is_a_clear_error(monkeypatch):
    kept = [t for t in jax_clusters.ClusterEnv._cluster_types if t.__name__ != "GceTpuCluster"]
    monkeypatch.setattr(jax_clusters.ClusterEnv, "_cluster_types", kept)
    with pytest.raises(RuntimeError, match=r"jax \S+'s cluster detection \(jax._src.clusters\) is "
                                           r"not what train/clusters.py was written for \(jax "
                                           r"0.10.2.*no cluster environment GceTpuCluster"):
        clusters.detect()
    monkeypatch.delattr(jax_clusters.ClusterEnv, "_cluster_types")
    with pytest.raises(RuntimeError, match="_cluster_types.*--coordinator_address"):
        clusters.detect()
