"""Joining a multi-process run: `jax.distributed.initialize` from flags or the cluster environment.

Every process of a multi-host job runs the same command. JAX's distributed runtime connects them
(one coordinator, N processes); afterwards `jax.devices()` lists the devices of *all* processes,
the mesh spans them, each process loads its own slice of every batch, and only process 0 writes
logs and files (orbax checkpoints are written collectively, each process its own shards).

How the processes find each other, in order:
  1. explicit flags `--coordinator_address HOST:PORT --num_processes N --process_id I`;
  2. the environment of a known cluster, which `jax.distributed.initialize()` reads itself:
     TPU pod slices, SLURM jobs with more than one task, Open MPI, or
     JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID set by the launcher;
  3. otherwise a single process: nothing to do.
"""

from __future__ import annotations

import os

import jax


def _cluster_environment() -> str | None:
    """The kind of multi-process launch this environment describes, if any."""
    env = os.environ
    if env.get("JAX_COORDINATOR_ADDRESS"):
        return "JAX_COORDINATOR_ADDRESS"
    if int(env.get("SLURM_NTASKS", "1")) > 1 and "SLURM_JOB_ID" in env:
        return "SLURM"
    if int(env.get("OMPI_COMM_WORLD_SIZE", "1")) > 1:
        return "Open MPI"
    if env.get("TPU_WORKER_HOSTNAMES", "localhost") not in ("", "localhost") or \
            env.get("MEGASCALE_COORDINATOR_ADDRESS"):
        return "TPU pod"
    return None


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None) -> str:
    """Connects this process to the others; returns how (for the log). Call before any other jax
    use. CPU processes exchange data through gloo collectives."""
    explicit = [coordinator_address, num_processes, process_id]
    if any(value is not None for value in explicit):
        if any(value is None for value in explicit):
            raise ValueError("--coordinator_address, --num_processes and --process_id go together; "
                             "give all three (or none, to read a cluster's environment)")
        if not 0 <= process_id < num_processes:
            raise ValueError(f"--process_id={process_id} must be in [0, {num_processes})")
        _use_gloo_on_cpu()
        jax.distributed.initialize(coordinator_address, num_processes=num_processes,
                                   process_id=process_id)
        return f"process {process_id} of {num_processes} (coordinator {coordinator_address})"
    cluster = _cluster_environment()
    if cluster is None:
        return "single process"
    _use_gloo_on_cpu()
    jax.distributed.initialize()
    return f"process {jax.process_index()} of {jax.process_count()} ({cluster})"


def _use_gloo_on_cpu() -> None:
    # Only the CPU backend reads this; GPU (NCCL) and TPU (ICI/DCN) collectives are unaffected.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
