"""The arrays of a train state or of a checkpoint's metadata by path and shape, and the lines
naming how two such differ: what a restore compares before it reads a step
(train/checkpointing.py), so that a checkpoint of another model is named, not half-restored."""

from __future__ import annotations

from typing import Any

import jax
import orbax.checkpoint as ocp

# How many differing paths a mismatch error lists per kind.
_LISTED = 5


def _stored_shape(leaf: Any) -> tuple[int, ...]:
    """The shape an array leaf is stored with; a typed rng key is stored as its key data."""
    if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        return tuple(jax.eval_shape(jax.random.key_data, leaf).shape)
    return tuple(leaf.shape)


def array_shapes(tree: Any, stored: bool) -> dict[str, tuple[int, ...]]:
    """{'params/encoder/.../kernel': shape} of a state (or of a checkpoint's metadata tree)."""
    if not stored:
        tree = ocp.tree.serialize_tree(tree, keep_empty_nodes=True)
    flat = ocp.tree.to_flat_dict(tree, sep="/")
    return {path: tuple(leaf.shape) if stored else _stored_shape(leaf)
            for path, leaf in flat.items() if hasattr(leaf, "shape")}


def state_differences(saved: dict[str, tuple], wanted: dict[str, tuple]) -> list[str]:
    """Lines naming the arrays that one side lacks and those whose shapes differ."""
    lines = []
    for title, paths in (("in this run's state only", sorted(set(wanted) - set(saved))),
                         ("in the checkpoint only", sorted(set(saved) - set(wanted)))):
        if paths:
            more = f" (and {len(paths) - _LISTED} more)" if len(paths) > _LISTED else ""
            lines.append(f"  {title}: {', '.join(paths[:_LISTED])}{more}")
    reshaped = [f"{path}: {saved[path]} in the checkpoint, {wanted[path]} now"
                for path in sorted(set(saved) & set(wanted)) if saved[path] != wanted[path]]
    lines += [f"  other shape: {line}" for line in reshaped[:_LISTED]]
    if len(reshaped) > _LISTED:
        lines.append(f"  (and {len(reshaped) - _LISTED} more of other shape)")
    return lines
