"""Joining a multi-process run: `jax.distributed.initialize` from flags or the cluster environment.

Every process of a multi-host job runs the same command. JAX's distributed runtime connects them
(one coordinator, N processes); afterwards `jax.devices()` lists the devices of *all* processes,
the mesh spans them, each process loads its own slice of every batch, and only process 0 writes
logs and files (orbax checkpoints are written collectively, each process its own shards).

How the processes find each other, in order:
  1. explicit flags `--coordinator_address HOST:PORT --num_processes N --process_id I`;
  2. the same three from the environment, JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and
     JAX_PROCESS_ID, for a launcher that sets variables rather than flags (JAX itself reads only
     the first; the other two are read here); with 1. or 2. no cluster is detected, and a
     process uses every device of its host unless JAX_LOCAL_DEVICE_IDS names its own;
  3. the cluster environment, found by JAX's own detectors (train/clusters.py: Open MPI, SLURM,
     MPI through mpi4py, GCE TPU VMs, GKE TPU, Kubernetes Indexed Jobs), when it holds more than
     one process; JAX_COORDINATOR_ADDRESS, if set, then picks the coordinator;
  4. otherwise a single process, with nothing to join (also in a one-process cluster: a
     one-worker TPU VM, a one-task SLURM step); but several processes of an MPI launcher that
     JAX cannot join (Open MPI 5 or MPICH without mpi4py) are an error, not separate runs.

`sum_over_processes` adds up host-side counters (examples read, dropped, truncated) over the
processes, so what process 0 logs covers every process's shard of the data.

`together` runs a piece of work that may fail on some processes only (it reads a host's own
files: its data, its vocabulary, its shard of a checkpoint) and then has every process learn how
it went, so that all stop, or none: one failing alone would leave the others waiting in their
next collective until the coordination service gives up, with the cause in its output only.
`gather_reports` is the exchange under it: a small code and a line of text from every process.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator

import jax
import numpy as np

from train import clusters
from train.interrupts import StoppedBySignal

ENV_VARS = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")


def _environment_launch() -> tuple[str, int, int] | None:
    """(coordinator address, number of processes, process id) from ENV_VARS when all three are
    set; None when JAX_NUM_PROCESSES and JAX_PROCESS_ID are not (a cluster may supply them)."""
    env = {name: os.environ.get(name, "") for name in ENV_VARS}
    address, count, index = env.values()
    if not count and not index:
        return None
    if not (address and count and index):
        missing = [name for name, value in env.items() if not value]
        raise ValueError(f"{', '.join(missing)} not set: a launch from the environment needs "
                         f"all of {', '.join(ENV_VARS)} (or the flags --coordinator_address, "
                         "--num_processes, --process_id)")
    try:
        return address, int(count), int(index)
    except ValueError:
        raise ValueError(f"JAX_NUM_PROCESSES={count!r} and JAX_PROCESS_ID={index!r} must be "
                         "integers") from None


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None) -> str:
    """Connects this process to the others; returns how (for the log). Call before any other jax
    use. CPU processes exchange data through gloo collectives."""
    explicit = [coordinator_address, num_processes, process_id]
    source = "flags"
    if all(value is None for value in explicit):
        launch = _environment_launch()
        if launch is not None:
            explicit, source = list(launch), "environment"
    if any(value is not None for value in explicit):
        if any(value is None for value in explicit):
            raise ValueError("--coordinator_address, --num_processes and --process_id go together; "
                             "give all three (or none, to read a cluster's environment)")
        coordinator_address, num_processes, process_id = explicit
        if not 0 <= process_id < num_processes:
            raise ValueError(f"process id {process_id} (from the {source}) must be in "
                             f"[0, {num_processes})")
        _configure_runtime()
        # "deactivate": the flags (or variables) say all; JAX detects no cluster, which would
        # pick each process's devices (SLURM_LOCALID, ...). JAX_LOCAL_DEVICE_IDS still applies.
        jax.distributed.initialize(coordinator_address, num_processes=num_processes,
                                   process_id=process_id, cluster_detection_method="deactivate")
        return (f"process {process_id} of {num_processes} (coordinator {coordinator_address}, "
                f"from the {source})")
    cluster = clusters.detect()
    if cluster is None and (launch := clusters.undetected_mpi_launch()):
        raise ValueError(f"{launch}: an MPI launcher started several processes, but JAX finds "
                         "them only under Open MPI 4's mpirun or through the mpi4py package; "
                         "install mpi4py, or set JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and "
                         "JAX_PROCESS_ID")
    if cluster is None:
        if os.environ.get("JAX_COORDINATOR_ADDRESS"):
            raise ValueError("JAX_COORDINATOR_ADDRESS is set but neither JAX_NUM_PROCESSES and "
                             "JAX_PROCESS_ID nor a known cluster (SLURM, MPI, TPU VM, Kubernetes) "
                             "say how many processes take part and which one this is; set both")
        return "single process"
    if cluster.num_processes == 1:
        return f"single process ({cluster.name})"
    _configure_runtime()
    # The counts go in as detected, so the log says what JAX uses; JAX finds the coordinator
    # and, on GPUs under SLURM or Open MPI, the one device of each process.
    jax.distributed.initialize(os.environ.get("JAX_COORDINATOR_ADDRESS") or None,
                               num_processes=cluster.num_processes, process_id=cluster.process_id,
                               cluster_detection_method=cluster.detection_method)
    return f"process {cluster.process_id} of {cluster.num_processes} ({cluster.name})"


def _configure_runtime() -> None:
    """What every join sets first. JAX's preemption service would replace this process's SIGTERM
    handler with its own, which only notes the signal for `reached_preemption_sync_point` (unused
    here; orbax treats the service as off): a SIGTERM while loading or compiling would then be
    lost. train/preemption.py handles signals instead, agreeing over the processes itself."""
    jax.config.update("jax_enable_preemption_service", False)
    # Only the CPU backend reads this; GPU (NCCL) and TPU (ICI/DCN) collectives are unaffected.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")


def sum_over_processes(counts: dict[str, int]) -> dict[str, int]:
    """{name: the sum over all processes of each one's whole-number `counts[name]`}. Every
    process must call it at the same point with the same names (it is a collective); with one
    process it returns `counts` as they are."""
    if jax.process_count() == 1:
        return dict(counts)
    from jax.experimental import multihost_utils

    names = sorted(counts)
    values = np.array([counts[name] for name in names], np.float64)
    if not np.all((values == np.round(values)) & (values >= 0)):
        raise ValueError(f"sum_over_processes adds whole non-negative counts, got {counts}")
    values = values.astype(np.int64)
    # Collectives carry int32 unless jax_enable_x64: send each count as two 31-bit halves.
    halves = np.stack([values >> 31, values & (2 ** 31 - 1)]).astype(np.int32)
    gathered = np.asarray(multihost_utils.process_allgather(halves)).astype(np.int64)
    totals = ((gathered[:, 0] << 31) + gathered[:, 1]).sum(axis=0)
    return {name: int(total) for name, total in zip(names, totals)}


def differing_processes(digest: str) -> list[int]:
    """The processes whose `digest` (hex, at least 32 digits: a sha256) differs from process 0's;
    [] with one process. A collective, like `sum_over_processes`: every process gets the same
    list."""
    if jax.process_count() == 1:
        return []
    from jax.experimental import multihost_utils

    words = np.frombuffer(bytes.fromhex(digest[:32]), np.int32)  # 128 bits as 4 int32
    gathered = np.asarray(multihost_utils.process_allgather(words))
    return [p for p in range(len(gathered)) if not np.array_equal(gathered[p], gathered[0])]


_TEXT_BYTES = 500  # of each process's text in gather_reports (UTF-8, cut there)


def gather_reports(code: int, text: str = "") -> list[tuple[int, str]]:
    """Every process's (`code`, `text`), in process order; the text cut to 500 bytes. A
    collective like `sum_over_processes`; with one process, [(code, text)]."""
    if jax.process_count() == 1:
        return [(code, text)]
    from jax.experimental import multihost_utils

    raw = text.encode("utf-8", "backslashreplace")[:_TEXT_BYTES]  # never raises: a collective
    words = np.zeros(2 + _TEXT_BYTES, np.int32)  # code, length, one byte per word
    words[:2] = code, len(raw)
    words[2:2 + len(raw)] = np.frombuffer(raw, np.uint8)
    gathered = np.asarray(multihost_utils.process_allgather(words))
    return [(int(row[0]), bytes(row[2:2 + row[1]].astype(np.uint8)).decode(errors="replace"))
            for row in gathered]


def summary(error: BaseException) -> str:
    """'Type: the first line of its message' (300 characters at most); never raises (it is
    said in a collective that every process waits for)."""
    try:
        first = (str(error).splitlines() or [""])[0][:300]
    except Exception:  # noqa: BLE001 - a __str__ that fails: the type alone
        first = "(its message could not be read)"
    return f"{type(error).__name__}: {first}"


def report_code(error: BaseException, kinds: tuple[type[Exception], ...]) -> int:
    """What a process that failed says in a gather: minus the signal's number for an
    interrupt, else 1 + the index of the first of `kinds` its error is an instance of
    (len(kinds) + 1 for none of them)."""
    if isinstance(error, KeyboardInterrupt):
        return -int(getattr(error, "signum", signal.SIGINT))
    return 1 + next((i for i, kind in enumerate(kinds) if isinstance(error, kind)), len(kinds))


def raise_reported(code: int, message: str, kinds: tuple[type[Exception], ...]):
    """Raises on this process what another's `code` (report_code) was: StoppedBySignal for an
    interrupt, else its class of `kinds`, else RuntimeError, with `message`."""
    if code < 0:
        raise StoppedBySignal(-code, message) from None
    raise (kinds[code - 1] if code <= len(kinds) else RuntimeError)(message) from None


@contextlib.contextmanager
def together(what: str, kinds: tuple[type[Exception], ...] = ()) -> Iterator[None]:
    """Runs the block, then has every process learn whether it failed on any (one gather; call
    it on all of them, at the same point). A process where it raised raises its own error; when
    it raised on some process, every other one raises an error naming those processes, the
    first one's error and `what` they were doing, and saying to read that process's output: of
    the first class of `kinds` that the failing process's error is an instance of (so the exit
    code is the same on every process), else RuntimeError. With one process, the block alone.
    No collective may run inside the block: a process that failed before it would meet the
    others in it with this one's gather."""
    if jax.process_count() == 1:
        yield
        return
    try:
        yield
    except BaseException as error:  # every process must learn of it, whatever it is
        with contextlib.suppress(Exception):  # the others may be gone: its own error matters
            gather_reports(report_code(error, kinds), summary(error))
        raise
    reports = gather_reports(0)
    failed = [index for index, (code, _) in enumerate(reports) if code]
    if failed:
        code, text = reports[failed[0]]
        raise_reported(code, f"process{'es' if len(failed) > 1 else ''} "
                       f"{', '.join(map(str, failed))} of {len(reports)} failed {what} ({text}), "
                       f"so process {jax.process_index()} stops too: the whole error is in "
                       f"process {failed[0]}'s output", kinds)
