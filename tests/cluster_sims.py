"""Simulated cluster environments for the tests of train/clusters.py and train/distributed.py:
what each of JAX's detectors reads (variables, the GCE metadata server, the mpi4py and kubernetes
packages), faked with `monkeypatch`, on a machine whose network use fails the test."""

from __future__ import annotations

import importlib.machinery
import socket
import sys
import types
from types import SimpleNamespace

from jax._src.clusters import cloud_tpu_cluster
from jax._src.clusters.k8s_cluster import K8sCluster

from train import clusters

CLUSTER_VARS = (
    "OMPI_MCA_orte_hnp_uri", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK", "PMI_SIZE", "PMIX_RANK",
    "SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID",
    "TPU_SKIP_MDS_QUERY", "TPU_PROCESS_ADDRESSES", "TPU_WORKER_HOSTNAMES", "TPU_WORKER_ID",
    "MEGASCALE_COORDINATOR_ADDRESS", "MEGASCALE_NUM_SLICES", "MEGASCALE_SLICE_ID",
    "KUBERNETES_SERVICE_HOST", "JOB_COMPLETION_INDEX", "HOSTNAME",
    "JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID", "JAX_COORDINATOR_PORT",
    "JAX_LOCAL_DEVICE_IDS")
_K8S_CACHED = ("_namespace", "_pod", "_job", "_headless_svc", "_controller")


class Machine:
    """A machine with no cluster: JAX found no TPU chip (so it set TPU_SKIP_MDS_QUERY), the
    metadata server answers what `metadata` holds (404 otherwise), host names resolve to
    10.0.0.99, and any other network use fails. `asked` lists what the detectors asked."""

    def __init__(self, monkeypatch, tmp_path):
        self.monkeypatch, self.tmp_path = monkeypatch, tmp_path
        self.metadata: dict[str, str] = {}
        self.asked: list[str] = []
        for name in CLUSTER_VARS:
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("TPU_SKIP_MDS_QUERY", "1")
        monkeypatch.setattr(cloud_tpu_cluster, "running_in_cloud_tpu_vm", False)
        monkeypatch.setattr(cloud_tpu_cluster, "get_metadata", self._get_metadata)
        self.product_name("Standard PC (Q35 + ICH9, 2009)")
        monkeypatch.setattr(socket, "gethostbyname", self._resolve)
        for module, name in ((socket, "getaddrinfo"), (socket, "create_connection"),
                             (socket.socket, "connect")):
            monkeypatch.setattr(module, name, self._no_network)

    def _get_metadata(self, key):
        self.asked.append(f"metadata {key}")
        return (self.metadata[key], 200) if key in self.metadata else ("", 404)

    def _resolve(self, host):
        self.asked.append(f"resolve {host}")
        return "10.0.0.99"

    @staticmethod
    def _no_network(*args, **kwargs):
        raise AssertionError(f"network use in a simulated cluster: {args}")

    def product_name(self, name: str) -> None:
        path = self.tmp_path / "product_name"
        path.write_text(name + "\n")
        self.monkeypatch.setattr(clusters, "_DMI_PRODUCT_NAME", path)

    def setenv(self, **variables) -> None:
        for name, value in variables.items():
            self.monkeypatch.setenv(name, str(value))

    def cloud_tpu_vm(self, **metadata) -> None:
        """A Cloud TPU VM: JAX found its TPU chips, the DMI names Google, `metadata` is served."""
        self.monkeypatch.delenv("TPU_SKIP_MDS_QUERY")
        self.monkeypatch.setattr(cloud_tpu_cluster, "running_in_cloud_tpu_vm", True)
        self.product_name("Google Compute Engine")
        self.metadata.update(metadata)

    def mpi4py(self, size: int, rank: int) -> None:
        """mpi4py installed; MPI says this is rank `rank` of `size`, rank 0 on 10.0.0.5."""
        world = SimpleNamespace(
            Get_size=lambda: self.asked.append("MPI size") or size,
            Get_rank=lambda: self.asked.append("MPI rank") or rank,
            bcast=lambda value, root: "10.0.0.5:61234",
            Split_type=lambda kind: SimpleNamespace(Get_rank=lambda: rank % 2))
        module = types.ModuleType("mpi4py")
        module.__spec__ = importlib.machinery.ModuleSpec("mpi4py", None)
        module.MPI = SimpleNamespace(COMM_WORLD=world, COMM_TYPE_SHARED=1)
        self.monkeypatch.setitem(sys.modules, "mpi4py", module)

    def kubernetes(self, parallelism: int) -> None:
        """The kubernetes package, whose API server describes this pod of the Indexed Job
        `train` (headless service `jaxpods`) of `parallelism` pods."""
        job = SimpleNamespace(metadata=SimpleNamespace(name="train", labels={"job-name": "train"}),
                              spec=SimpleNamespace(parallelism=parallelism))
        pod = SimpleNamespace(
            metadata=SimpleNamespace(name="train-1-x7k2p", labels={"job-name": "train"},
                                     owner_references=[SimpleNamespace(controller=True,
                                                                       kind="Job")]),
            spec=SimpleNamespace(subdomain="jaxpods"))

        def api(name, **calls):
            def make():
                self.asked.append(f"kubernetes {name}")
                return SimpleNamespace(**calls)
            return make

        client = SimpleNamespace(
            CoreV1Api=api("CoreV1Api", list_namespaced_pod=lambda **_: SimpleNamespace(
                items=[pod])),
            BatchV1Api=api("BatchV1Api", read_namespaced_job=lambda **_: job),
            exceptions=SimpleNamespace(ApiException=type("ApiException", (Exception,), {})))
        module = SimpleNamespace(config=SimpleNamespace(load_incluster_config=lambda: None),
                                 client=client)
        self.monkeypatch.setitem(sys.modules, "kubernetes", module)
        # The service account's namespace file; the class attributes detection sets; the
        # per-class caches of what the API server said, emptied before and after.
        self.monkeypatch.setattr(K8sCluster, "_namespace", classmethod(lambda cls: "default"))
        for name in ("_core_api", "_batch_api", "_ApiException"):
            self.monkeypatch.setattr(K8sCluster, name, None, raising=False)
        for name in _K8S_CACHED[1:]:
            self.monkeypatch.setattr(K8sCluster, name, _uncached(getattr(K8sCluster, name)))


def _uncached(method):
    """A classmethod with functools.cache's memory taken off, so no test sees another's pod."""
    return classmethod(method.__func__.__wrapped__)


# name: (set-up on a Machine, the Cluster expected, the coordinator JAX then picks)
SIMULATIONS = {
    "plain": (lambda m: None, None, None),
    "slurm_one_task": (
        lambda m: m.setenv(SLURM_JOB_ID=7, SLURM_STEP_NODELIST="node001", SLURM_NTASKS=1,
                           SLURM_PROCID=0, SLURM_LOCALID=0),
        clusters.Cluster("SLURM", 1, 0, "slurm"), None),
    "slurm": (
        lambda m: m.setenv(SLURM_JOB_ID=7, SLURM_STEP_NODELIST="node[001-004],gpu9",
                           SLURM_NTASKS=16, SLURM_PROCID=5, SLURM_LOCALID=1),
        clusters.Cluster("SLURM", 16, 5, "slurm"), "node001:61447"),  # 61440 + job id % 4096
    "open_mpi": (
        lambda m: m.setenv(OMPI_MCA_orte_hnp_uri="1531576320.0;tcp://10.96.0.1,10.148.0.1:34911",
                           OMPI_COMM_WORLD_SIZE=4, OMPI_COMM_WORLD_RANK=2,
                           OMPI_COMM_WORLD_LOCAL_RANK=0),
        clusters.Cluster("Open MPI", 4, 2, "ompi"), "10.96.0.1:62624"),
    # Open MPI 5 (no ORTE URI) through mpi4py, which only an MPI launcher's variables make count.
    "mpi4py": (
        lambda m: (m.mpi4py(size=4, rank=1),
                   m.setenv(OMPI_COMM_WORLD_SIZE=4, OMPI_COMM_WORLD_RANK=1, PMIX_RANK=1)),
        clusters.Cluster("MPI via mpi4py", 4, 1, "mpi4py"), "10.0.0.5:61234"),
    "gce_tpu_vm_one_worker": (
        lambda m: m.cloud_tpu_vm(**{"agent-worker-number": "0",
                                    "worker-network-endpoints": "w-0:0:10.0.0.1",
                                    "tpu-env": "ACCELERATOR_TYPE: 'v4-8'"}),
        clusters.Cluster("GCE TPU VM", 1, 0, "gcetpu"), None),
    "gce_tpu_vm": (
        lambda m: m.cloud_tpu_vm(**{"agent-worker-number": "3",
                                    "worker-network-endpoints": "w-0:0:10.0.0.1,w-1:1:10.0.0.2,"
                                                                "w-2:2:10.0.0.3,w-3:3:10.0.0.4",
                                    "tpu-env": "ACCELERATOR_TYPE: 'v4-32'"}),
        clusters.Cluster("GCE TPU VM", 4, 3, "gcetpu"), "10.0.0.1:8482"),
    "gce_tpu_multislice": (
        lambda m: m.cloud_tpu_vm(**{"agent-worker-number": "3",
                                    "worker-network-endpoints": "t-0,t-1,t-2,t-3",
                                    "tpu-env": "MEGASCALE_NUM_SLICES: '2'\nMEGASCALE_SLICE_ID: '1'"
                                               "\nMEGASCALE_COORDINATOR_ADDRESS: '10.0.1.1:8080'"}),
        clusters.Cluster("GCE TPU VM", 8, 7, "gcetpu"), "10.0.1.1:8482"),
    # A GKE node is a GCE VM whose metadata server lacks agent-worker-number.
    "gke_tpu": (
        lambda m: (m.cloud_tpu_vm(), m.setenv(TPU_WORKER_HOSTNAMES="10.0.0.1,10.0.0.2,10.0.0.3,"
                                                                   "10.0.0.4", TPU_WORKER_ID=2)),
        clusters.Cluster("GKE TPU", 4, 2, "gketpu"), "10.0.0.1:8482"),
    "kubernetes_job": (
        lambda m: (m.kubernetes(parallelism=4),
                   m.setenv(KUBERNETES_SERVICE_HOST="10.96.0.1", JOB_COMPLETION_INDEX=1,
                            HOSTNAME="train-1-x7k2p")),
        clusters.Cluster("Kubernetes", 4, 1, ""), "train-0.jaxpods:55527"),
}
MULTI_PROCESS = [name for name, (_, cluster, _) in SIMULATIONS.items()
                 if cluster is not None and cluster.num_processes > 1]
