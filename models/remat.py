"""Rematerialisation of Transformer blocks (gradient checkpointing; Chen et al. 2016, "Training
Deep Nets with Sublinear Memory Cost").

``remat`` chooses what the backward pass finds stored from the forward pass of each block of the
Transformer, BERT and ViT stacks. Outputs, gradients and the parameter tree are the same under
all three choices (recomputed dropout masks come from the same rng); only memory and compute move:
  'none'     no remat: every intermediate of every block is kept (queries, keys, values, the
             attention logits and probabilities [b, h, l, l], the feed-forward hidden layer
             [b, l, d_ff], norm statistics, dropout masks). Most memory, no recomputation.
  'minimal'  keep the outputs of the matmuls without batch dimensions, i.e. the projections
             (query, key, value, output, both feed-forward layers;
             ``jax.checkpoint_policies.dots_with_no_batch_dims_saveable``), and recompute the rest
             in the backward pass: the two batched attention einsums (logits and the weighted sum
             of values), softmax, GELU/ReLU, norms, dropout. Frees the [b, h, l, l] attention
             tensors and the elementwise temporaries for little extra compute (no projection is
             recomputed).
  'full'     keep only each block's inputs (``jax.checkpoint_policies.nothing_saveable``, plain
             ``nn.remat``): the backward pass runs the whole block forward again, about one
             extra forward pass of the stack (training ~4/3 of the blocks' FLOPs), while the
             activations stored between passes shrink to one [b, l, d_model] input per block.
"""

from __future__ import annotations

import flax.linen as nn
import jax

REMAT_KINDS = ("none", "minimal", "full")
# What jax.checkpoint keeps from a block's forward pass for its backward pass (module docstring).
REMAT_POLICIES = {"minimal": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
                  "full": jax.checkpoint_policies.nothing_saveable}


def _call_block_statically(block, x, static, args, kwargs):
    return block(x, *args, **dict(static), **kwargs)


# nn.remat of a function of the block module (not of a block class): the block keeps its name
# and scope, so its parameters sit where they do without remat. static_argnums counts the module
# as argument 0; argument 2 holds the Python flags (deterministic, decode), which choose code
# paths and so must not be traced; keyword arguments would be, hence the positional tuple.
_REMAT_CALLS = {kind: nn.remat(_call_block_statically, static_argnums=(2,), policy=policy)
                for kind, policy in REMAT_POLICIES.items()}


def call_block(block: nn.Module, remat: str, x, *args, **kwargs):
    """``block(x, *args, **kwargs)`` with the rematerialisation ``remat`` (module docstring).

    ``block`` is a block module just built in a compact method (``EncoderBlock(...,
    name=f"block_{i}")``); under remat it keeps that name, so the parameter tree is unchanged.
    Keyword arguments that are Python scalars (``deterministic``, ``decode``) are static under
    remat, arrays and None are traced. ``remat='none'`` is the plain call.
    """
    if remat == "none":
        return block(x, *args, **kwargs)
    if remat not in _REMAT_CALLS:
        raise ValueError(f"remat={remat!r} is not one of {list(REMAT_KINDS)}")
    static = {k: v for k, v in kwargs.items() if isinstance(v, (bool, int, float, str))}
    arrays = {k: v for k, v in kwargs.items() if k not in static}
    return _REMAT_CALLS[remat](block, x, tuple(sorted(static.items())), args, arrays)
