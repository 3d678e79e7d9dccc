"""The mesh shape a config asks for (train/partitioning.py): -1 takes the remaining devices, and
every shape that cannot be built is refused with the key and the fix named."""

from __future__ import annotations

import pytest

from train.partitioning import MeshError, resolve_mesh_shape


@pytest.mark.parametrize("mesh, devices, expected", [
    ({"data": -1, "fsdp": 1, "tensor": 1}, 8, {"data": 8, "fsdp": 1, "tensor": 1}),
    ({"data": 2, "fsdp": -1, "tensor": 2}, 8, {"data": 2, "fsdp": 2, "tensor": 2}),
    ({"data": 1, "fsdp": 2, "tensor": -1}, 8, {"data": 1, "fsdp": 2, "tensor": 4}),
    ({"data": 2, "fsdp": 2, "tensor": 2}, 8, {"data": 2, "fsdp": 2, "tensor": 2}),
    ({"data": -1, "fsdp": 4, "tensor": 1}, 4, {"data": 1, "fsdp": 4, "tensor": 1}),
])
def test_the_free_axis_takes_the_remaining_devices(mesh, devices, expected):
    assert resolve_mesh_shape(mesh, devices) == expected


@pytest.mark.parametrize("mesh, devices, message", [
    ({"data": 0, "fsdp": 1, "tensor": 1}, 8,
     r"config.mesh.data=0: mesh sizes must be positive, or -1 for 'all remaining devices'"),
    ({"data": 1, "fsdp": -2, "tensor": 1}, 8, r"config.mesh.fsdp=-2: mesh sizes must be positive"),
    ({"data": -1, "fsdp": -1, "tensor": 1}, 8,
     r"config.mesh: only one axis may be -1, got \['data', 'fsdp'\]"),
    ({"data": -1, "fsdp": 3, "tensor": 1}, 8,
     r"the fixed axes multiply to 3, which does not divide the 8 available devices"),
    ({"data": 2, "fsdp": 2, "tensor": 1}, 8,
     r"needs 4 devices but 8 are available .* Make data\*fsdp\*tensor equal 8, or set one axis "
     r"to -1"),
])
def test_impossible_meshes_are_named(mesh, devices, message):
    with pytest.raises(MeshError, match=message):
        resolve_mesh_shape(mesh, devices)


def test_a_tensor_axis_across_processes_is_refused():
    """Each process loads the rows of the batch shards it holds: a shard whose tensor-parallel
    devices sit in two processes would get two sets of rows, which jax silently reads as one
    replicated shard (half the batch, its sums mixing examples). One device per process (one
    SLURM task per GPU) and tensor=2: refused; two per process: each shard in one process."""
    from types import SimpleNamespace

    import numpy as np

    from train.partitioning import check_batch_shards_in_one_process, make_mesh

    def devices(processes, each):
        return [SimpleNamespace(id=i, process_index=i // each, platform="cpu")
                for i in range(processes * each)]

    with pytest.raises(MeshError, match=r"mesh tensor=2 spans processes \[0, 1\]: .* here each "
                                        r"process has 1 device\(s\). Use --config.mesh.tensor "
                                        r"at most 1"):
        make_mesh({"data": -1, "fsdp": 1, "tensor": 2}, devices(4, 1))
    check_batch_shards_in_one_process(np.array(devices(2, 2), object).reshape(2, 1, 2))
    check_batch_shards_in_one_process(np.array(devices(4, 1), object).reshape(2, 2, 1))
    with pytest.raises(MeshError, match="mesh tensor=4 spans processes"):
        check_batch_shards_in_one_process(np.array(devices(2, 2), object).reshape(1, 1, 4))


def test_a_dimension_the_mesh_does_not_divide_is_named_before_any_compile():
    """An odd vocabulary over tensor=2, 12 heads over tensor=8: the array, its axis, its logical
    name and the mesh axes are named (jit's IndivisibleError names no config key); axes the
    mesh divides, and replicated ones of any size, pass."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    from jax.sharding import AbstractMesh

    from train.partitioning import check_divisible, logical_shardings

    class Model(nn.Module):
        vocab: int
        heads: int

        @nn.compact
        def __call__(self, x):
            init = nn.initializers.zeros
            table = self.param("embedding", nn.with_logical_partitioning(
                init, ("vocab", "embed")), (self.vocab, 8))
            query = self.param("query", nn.with_logical_partitioning(
                init, ("embed", "heads", "kv")), (8, self.heads, 3))
            return x @ table.T, query

    def check(vocab, heads, tensor):
        boxed = jax.eval_shape(lambda: Model(vocab, heads).init(jax.random.PRNGKey(0),
                                                                jnp.ones((1, 8))))
        mesh = AbstractMesh((1, 2, tensor), ("data", "fsdp", "tensor"))
        check_divisible(boxed, logical_shardings(boxed, mesh), mesh)

    check(302, 8, 2)   # the kv axis (3) is replicated
    with pytest.raises(MeshError, match=r"\['params'\]\['embedding'\] of shape \(301, 8\): its "
                                        r"axis 0 \('vocab'\) of 301 is split over mesh tensor=2 "
                                        r"\(2 shares\), which does not divide it; choose "
                                        r"config.mesh.tensor dividing 301, or a model whose "
                                        r"size there it divides \(a vocabulary of a multiple"):
        check(301, 8, 2)
    with pytest.raises(MeshError, match=r"\['query'\] of shape \(8, 12, 3\): its axis 1 "
                                        r"\('heads'\) of 12 is split over mesh tensor=8"):
        check(304, 12, 8)
