"""Device mesh, logical-axis rules and shardings: the whole of the parallelism story.

Model code names every parameter dimension with a *logical* axis ('embed', 'mlp', 'heads', ...)
and constrains activations the same way ('batch', 'length', 'embed'). This file owns the one small
table that maps those names onto the three *mesh* axes:

    data    plain data parallelism: the batch is split, parameters are replicated.
    fsdp    fully sharded data parallelism: the batch is split AND parameters / optimizer state
            are sharded along their 'embed' dimension (gathered on use by XLA).
    tensor  tensor (model) parallelism: attention heads and the MLP hidden dimension are split.

A config picks the mesh shape (`config.mesh.data/fsdp/tensor`, one of them may be -1 = "the rest
of the devices"). Changing the parallelism of a run is a config change, never a code change.

Flax assigns each mesh axis at most once per array, taking rules in order. So activations
('batch', 'length', 'embed') get batch -> ('data', 'fsdp') and their 'embed' stays unsharded
(fsdp is already used), while parameters ('embed', 'mlp') get embed -> fsdp, mlp -> tensor.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

MESH_AXES = ("data", "fsdp", "tensor")
BATCH_AXES = ("data", "fsdp")  # mesh axes that split the batch

# Logical axis name -> mesh axis (or axes, or None = replicated). Order matters: see module doc.
LOGICAL_RULES: tuple[tuple[str, Any], ...] = (
    ("batch", BATCH_AXES),
    ("vocab", "tensor"),
    ("mlp", "tensor"),
    ("heads", "tensor"),
    ("kv_heads", "tensor"),
    ("embed", "fsdp"),
    ("kv", None),
    ("length", None),
    ("relpos_buckets", None),
    ("classes", None),
    ("type_vocab", None),  # BERT's token-type (segment) embeddings: two rows
    ("patch", None),
    ("layers", None),   # the stacked axis of scanned blocks (models/stack.py)
)


class MeshError(ValueError):
    """The configured mesh cannot be built on the available devices."""


def resolve_mesh_shape(mesh_cfg: Mapping[str, int], num_devices: int) -> dict[str, int]:
    """Turns `{'data': -1, 'fsdp': 2, 'tensor': 1}` into concrete sizes whose product is num_devices."""
    sizes = {axis: int(mesh_cfg[axis]) for axis in MESH_AXES}
    free = [axis for axis, size in sizes.items() if size == -1]
    bad = {axis: size for axis, size in sizes.items() if size == 0 or size < -1}
    if bad:
        key, value = next(iter(bad.items()))
        raise MeshError(f"config.mesh.{key}={value}: mesh sizes must be positive, or -1 for "
                        "'all remaining devices'.")
    if len(free) > 1:
        raise MeshError(f"config.mesh: only one axis may be -1, got {free}. Set all but one to a "
                        "positive size.")
    fixed = math.prod(size for size in sizes.values() if size != -1)
    if free:
        if num_devices % fixed:
            raise MeshError(
                f"config.mesh={sizes}: the fixed axes multiply to {fixed}, which does not divide "
                f"the {num_devices} available devices. Choose sizes whose product divides "
                f"{num_devices}.")
        sizes[free[0]] = num_devices // fixed
    elif fixed != num_devices:
        raise MeshError(
            f"config.mesh={sizes} needs {fixed} devices but {num_devices} are available "
            f"({jax.devices()[0].platform}). Make data*fsdp*tensor equal {num_devices}, or set "
            "one axis to -1.")
    return sizes


def make_mesh(mesh_cfg: Mapping[str, int], devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A mesh over all (global) devices with axes ('data', 'fsdp', 'tensor').

    `jax.sharding.Mesh` gives axes of the default (auto) type, so XLA's sharding propagation fills
    in whatever the logical constraints leave open.
    """
    devices = list(jax.devices() if devices is None else devices)
    sizes = resolve_mesh_shape(mesh_cfg, len(devices))
    shape = tuple(sizes[axis] for axis in MESH_AXES)
    try:  # topology-aware device order on TPU/GPU; plain reshape elsewhere.
        from jax.experimental import mesh_utils
        grid = mesh_utils.create_device_mesh(shape, devices=devices)
    except Exception:  # noqa: BLE001 - any topology failure falls back to the simple order.
        grid = np.array(devices).reshape(shape)
    check_batch_shards_in_one_process(grid)
    return Mesh(grid, MESH_AXES)


def check_batch_shards_in_one_process(grid: np.ndarray) -> None:
    """MeshError unless the devices of each shard of the batch (one (data, fsdp) position: its
    `tensor` devices) belong to one process. Each process loads rows of its own
    (`global_batch`): two processes holding one shard would each give it other rows, which
    jax takes for one replicated shard, silently a smaller batch whose tensor-parallel sums
    mix examples and whose "replicated" state differs between processes."""
    for position in np.ndindex(grid.shape[:-1]):
        owners = sorted({device.process_index for device in grid[position]})
        if len(owners) > 1:
            per_process = sum(d.process_index == owners[0] for d in grid.flat)
            raise MeshError(
                f"mesh tensor={grid.shape[-1]} spans processes {owners}: the tensor-parallel "
                f"devices of a batch shard must belong to one process, which loads its rows; "
                f"here each process has {per_process} device(s). Use --config.mesh.tensor at "
                f"most {per_process} (a divisor of it), or one process per host driving all "
                "its devices")


def data_parallel_size(mesh: Mesh) -> int:
    """How many ways the global batch is split."""
    return math.prod(mesh.shape[axis] for axis in BATCH_AXES)


def logical_shardings(abstract_tree: Any, mesh: Mesh, rules=LOGICAL_RULES) -> Any:
    """NamedShardings for a tree of (boxed) abstract values, from their logical axis names.

    Leaves without logical metadata (the step counter, rng key, optimizer counts) are replicated.
    """
    specs = nn.get_partition_spec(abstract_tree)
    return nn.logical_to_mesh_sharding(specs, mesh, rules)


def check_divisible(abstract_tree: Any, shardings: Any, mesh: Mesh) -> None:
    """MeshError naming the first array of `abstract_tree` (boxed abstract values, as
    `logical_shardings` takes them) with a dimension its sharding splits over mesh axes whose
    sizes do not divide it: jit would stop with an IndivisibleError naming no config key (an odd
    vocabulary with tensor > 1, 12 heads over tensor=8, fewer kv heads than tensor)."""
    leaves = jax.tree_util.tree_leaves_with_path(
        abstract_tree, is_leaf=lambda x: isinstance(x, nn.meta.AxisMetadata))
    for (path, leaf), sharding in zip(leaves, jax.tree.leaves(shardings)):
        names = getattr(leaf, "names", None) or ()
        value = leaf.value if isinstance(leaf, nn.meta.AxisMetadata) else leaf  # (no constraint)
        for dim, (size, axes) in enumerate(zip(value.shape, sharding.spec)):
            axes = () if axes is None else (axes,) if isinstance(axes, str) else tuple(axes)
            devices = math.prod(mesh.shape[axis] for axis in axes)
            if size % devices:
                logical = f" ('{names[dim]}')" if dim < len(names) else ""
                split = " x ".join(f"{axis}={mesh.shape[axis]}" for axis in axes)
                vocab = dim < len(names) and names[dim] == "vocab"
                raise MeshError(
                    f"{jax.tree_util.keystr(path).lstrip('.')} of shape {tuple(value.shape)}: "
                    f"its axis {dim}{logical} of {size} is split over mesh {split} ({devices} "
                    f"shares), which does not divide it; choose config.mesh.{'/'.join(axes)} "
                    f"dividing {size}, or a model whose size there it divides"
                    + (" (a vocabulary of a multiple of the shares)" if vocab else ""))


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Leading (batch) dimension split over the data-parallel axes, the rest replicated."""
    return NamedSharding(mesh, PartitionSpec(BATCH_AXES))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def global_batch(local_batch: Mapping[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
    """Assembles each process's slice of the batch into one global jax.Array per field.

    Every process passes the rows it loaded (its shard of the global batch); the result is the
    same global array on every process. This is what keeps multi-host input correct: host-local
    numpy arrays handed directly to a sharded jit would be taken as the *global* value.
    """
    sharding = batch_sharding(mesh)
    return {name: jax.make_array_from_process_local_data(sharding, np.asarray(value))
            for name, value in local_batch.items()}


def place(values: Any, abstract_tree: Any, mesh: Mesh, rules=LOGICAL_RULES) -> Any:
    """Host NumPy arrays -> global jax.Arrays in the shardings of their logical axis names.

    `abstract_tree`: the same tree of (boxed) abstract values (jax.eval_shape of the model's
    init), which names each array's logical axes; `values` holds the whole of each array on
    every process (read by each from the same files), and each device gets its own shard of it
    (`jax.make_array_from_callback`, which works with many hosts). How the trainer places frozen
    parameters (a distillation teacher) without compiling them into an init function.
    """
    shardings = logical_shardings(abstract_tree, mesh, rules)
    abstract = nn.meta.unbox(abstract_tree)
    flat_values, tree = jax.tree.flatten(values)
    flat_abstract = tree.flatten_up_to(abstract)
    flat_shardings = tree.flatten_up_to(shardings)
    placed = []
    for path, value, shape, sharding in zip(jax.tree_util.tree_flatten_with_path(values)[0],
                                            flat_values, flat_abstract, flat_shardings):
        value = np.asarray(value, dtype=shape.dtype)
        if value.shape != tuple(shape.shape):
            raise ValueError(f"{jax.tree_util.keystr(path[0])}: the values have shape "
                             f"{value.shape}, the model {tuple(shape.shape)}: they come from a "
                             "model of another size; load them into a config of the same "
                             "sizes")
        placed.append(jax.make_array_from_callback(value.shape, sharding,
                                                   lambda index, v=value: v[index]))
    return tree.unflatten(placed)
