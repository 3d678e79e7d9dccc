"""Which cluster launched this process, as JAX's own cluster detection sees it.

`jax.distributed.initialize()` finds its peers through the cluster environments that JAX
registers (`jax._src.clusters`); in JAX 0.10.2, checked in this order:
  Open MPI        `mpirun` of Open MPI 4 or earlier: OMPI_MCA_orte_hnp_uri;
  SLURM           an `srun` step: SLURM_JOB_ID, SLURM_STEP_NODELIST, SLURM_NTASKS, SLURM_PROCID
                  and SLURM_LOCALID;
  MPI via mpi4py  any MPI launcher, through the mpi4py package (opt-in in JAX);
  GCE TPU VM      a Cloud TPU VM (JAX found Google TPU chips on the PCI bus at import) whose
                  metadata server knows its agent-worker-number;
  GKE TPU         a Cloud TPU VM with TPU_PROCESS_ADDRESSES or TPU_WORKER_HOSTNAMES;
  Kubernetes      KUBERNETES_SERVICE_HOST and the `kubernetes` package: the pod's Job, read from
                  the API server.
The public API only offers to connect; deciding first whether the environment holds more than
one process (a one-worker TPU VM, a one-task SLURM step stays a single process) needs the
detectors themselves, a private API: `_environments` is the one place that touches it.

Some detectors ask a server. JAX asks the GCE metadata server only on a Cloud TPU VM; this module
also skips it where the DMI product name (readable on Linux) is not Google's, as on a machine
that forces JAX's TPU set-up. mpi4py is asked only when an MPI launcher's variables are set
(finding the package says nothing about a launch), the Kubernetes API server only in an Indexed
Job's pod (JOB_COMPLETION_INDEX, which JAX needs for the process id anyway; every pod has
KUBERNETES_SERVICE_HOST). Elsewhere detection reads a few environment variables: no network.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

import jax

# What the log calls each environment, by JAX's class name; another registered class (a plugin's)
# is called by its own name.
_NAMES = {"OmpiCluster": "Open MPI", "SlurmCluster": "SLURM", "Mpi4pyCluster": "MPI via mpi4py",
          "GceTpuCluster": "GCE TPU VM", "GkeTpuCluster": "GKE TPU",
          "K8sCluster": "Kubernetes"}
_DMI_PRODUCT_NAME = Path("/sys/class/dmi/id/product_name")
MPI_LAUNCHER_VARS = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")  # Open MPI, MPICH/Hydra, PMIx
MPI_WORLD_SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE")  # Open MPI, MPICH/Hydra


class Cluster(NamedTuple):
    name: str  # for the log: "SLURM", "GCE TPU VM", ...
    num_processes: int
    process_id: int
    detection_method: str | None  # selects this environment in jax.distributed.initialize


def _on_google_compute_engine() -> bool:
    """False where JAX found no TPU chip (it then sets TPU_SKIP_MDS_QUERY) or where the DMI
    product name is readable and not Google's (as google-auth checks); an unreadable one leaves
    the decision to JAX's own TPU-chip check."""
    if "TPU_SKIP_MDS_QUERY" in os.environ:
        return False
    try:
        return _DMI_PRODUCT_NAME.read_text().startswith("Google")
    except OSError:
        return True


def _under_mpi_launcher() -> bool:
    return any(name in os.environ for name in MPI_LAUNCHER_VARS)


def _in_indexed_kubernetes_job() -> bool:
    return "KUBERNETES_SERVICE_HOST" in os.environ and "JOB_COMPLETION_INDEX" in os.environ


# Cheap local signs without which an environment's detector (which may ask a server) is skipped.
_PRECONDITIONS = {"GceTpuCluster": _on_google_compute_engine,
                  "Mpi4pyCluster": _under_mpi_launcher,
                  "K8sCluster": _in_indexed_kubernetes_job}


def _environments() -> list[type]:
    """JAX's registered cluster environments, in its order of checking; a clear error where the
    private API this relies on has moved (jax is pinned in constraints.txt)."""
    try:
        from jax._src import clusters

        types = list(clusters.ClusterEnv._cluster_types)
        names = {t.__name__ for t in types}
        missing = sorted(set(_PRECONDITIONS) - names)
        if missing:
            raise AttributeError(f"no cluster environment {', '.join(missing)}")
        for t in types:
            for attribute in ("name", "opt_in_only_method", "is_env_present",
                              "get_process_count", "get_process_id"):
                getattr(t, attribute)
    except (ImportError, AttributeError) as error:
        raise RuntimeError(
            f"jax {jax.__version__}'s cluster detection (jax._src.clusters) is not what "
            f"train/clusters.py was written for (jax 0.10.2, pinned in constraints.txt): {error}. "
            "Install the pinned jax, or launch with --coordinator_address, --num_processes and "
            "--process_id (or JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and JAX_PROCESS_ID)"
        ) from error
    return types


def detect() -> Cluster | None:
    """The first cluster environment, in JAX's order, that describes this process; None on a
    plain machine. Opt-in environments (mpi4py) count only with their precondition."""
    types = _environments()
    for env in types:
        precondition = _PRECONDITIONS.get(env.__name__)
        if precondition is None and env.opt_in_only_method:
            continue
        if precondition is not None and not precondition():
            continue
        if not env.is_env_present():
            continue
        # K8sCluster's name is "" and JAX selects it by that too; a name that does not single
        # out one environment leaves the choice to JAX's own order.
        unique = sum(t.name == env.name for t in types) == 1
        return Cluster(_NAMES.get(env.__name__, env.__name__), env.get_process_count(),
                       env.get_process_id(), env.name if unique else None)
    return None


def undetected_mpi_launch() -> str | None:
    """The variable by which an MPI launcher says it started several processes, when `detect`
    found none (Open MPI 5 or MPICH without mpi4py): joining nothing would run them apart."""
    for name in MPI_WORLD_SIZE_VARS:
        if os.environ.get(name, "1").strip() not in ("", "0", "1"):
            return f"{name}={os.environ[name]}"
    return None
