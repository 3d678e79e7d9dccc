"""How a stack of identical Transformer blocks runs: a Python loop or ``nn.scan``, each block
optionally rematerialised. Used by the Transformer (encoder and decoder), BERT and ViT.

Rematerialisation (gradient checkpointing; Chen et al. 2016, "Training Deep Nets with Sublinear
Memory Cost"), ``remat``, chooses what the backward pass finds stored from the forward pass of each
block. Outputs, gradients and the parameter tree are the same under all three choices (recomputed
dropout masks come from the same rng); only memory and compute move:
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

``scan`` chooses how the blocks are laid out and compiled:
  False  a Python loop: block i is its own submodule ``{prefix}{i}`` (``block_0``, ``layer_0``,
         ...), and XLA compiles every block separately (compile time grows with depth).
  True   ``nn.scan`` over one block: a single submodule (``blocks`` / ``layers``) whose every
         parameter has a leading axis of size num_layers (logical axis name 'layers',
         replicated by the partitioning rules). XLA compiles the block once, so compile time no
         longer grows with depth; the computation is the same. Dropout draws a different mask
         in each layer, but not the masks of the loop (the rng is split, not folded by name).
         ``stack_layers`` / ``unstack_layers`` convert parameters between the two layouts
         (checkpoint import and export, fine-tuning from a run of the other layout).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

REMAT_KINDS = ("none", "minimal", "full")
# What jax.checkpoint keeps from a block's forward pass for its backward pass (module docstring).
REMAT_POLICIES = {"minimal": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
                  "full": jax.checkpoint_policies.nothing_saveable}
LAYERS_AXIS = "layers"  # logical name of the leading axis of scanned parameters


def _call_block_statically(block, x, static, args, kwargs):
    return block(x, *args, **dict(static), **kwargs)


def _split_kwargs(kwargs: Mapping[str, Any]):
    """Python scalars (``deterministic``, ``decode``: they choose code paths) as a hashable
    sorted tuple, arrays and None as a dict."""
    static = {k: v for k, v in kwargs.items() if isinstance(v, (bool, int, float, str))}
    arrays = {k: v for k, v in kwargs.items() if k not in static}
    return tuple(sorted(static.items())), arrays


def _check_remat(remat: str) -> None:
    if remat not in REMAT_KINDS:
        raise ValueError(f"remat={remat!r} is not one of {list(REMAT_KINDS)}")


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
    _check_remat(remat)
    if remat == "none":
        return block(x, *args, **kwargs)
    static, arrays = _split_kwargs(kwargs)
    return _REMAT_CALLS[remat](block, x, static, args, arrays)


@functools.lru_cache(maxsize=None)
def _scanned_call(remat: str, num_layers: int, keep_outputs: bool):
    """``nn.scan`` of one block call over ``num_layers`` layers: every variable collection
    (params, the decoder's cache, recorded intermediates) gets a leading layer axis, the
    'params' and 'dropout' rngs are split per layer, the block's other arguments are the same
    in every layer (broadcast). With ``keep_outputs`` every layer's output is stacked too."""

    def body(block, x, static, args, arrays):
        y = _call_block_statically(block, x, static, args, arrays)
        return y, (y if keep_outputs else None)

    if remat != "none":  # prevent_cse=False: scan already keeps XLA from merging recomputation
        body = nn.remat(body, static_argnums=(2,), policy=REMAT_POLICIES[remat],
                        prevent_cse=False)
    return nn.scan(body, variable_axes={True: 0}, split_rngs={"params": True, "dropout": True},
                   in_axes=(nn.broadcast, nn.broadcast, nn.broadcast), length=num_layers,
                   metadata_params={nn.PARTITION_NAME: LAYERS_AXIS})


def run_blocks(make_block: Callable[[str], nn.Module], num_layers: int, x, *args,
               remat: str = "none", scan: bool = False, prefix: str = "block_",
               scan_name: str = "blocks", return_all: bool = False, **kwargs):
    """``num_layers`` blocks applied in turn to ``x``, each called as ``block(x, *args,
    **kwargs)``; must run inside a compact method.

    ``make_block(name)`` builds one block module with that name: ``f"{prefix}{i}"`` for each
    layer of the loop, ``scan_name`` once under ``scan`` (module docstring). ``return_all``
    returns the tuple of the input and every block's output (``num_layers + 1`` arrays) instead
    of the last output.
    """
    _check_remat(remat)
    if not scan:
        states = [x]
        for i in range(num_layers):
            states.append(call_block(make_block(f"{prefix}{i}"), remat, states[-1], *args,
                                     **kwargs))
        return tuple(states) if return_all else states[-1]
    static, arrays = _split_kwargs(kwargs)
    y, outputs = _scanned_call(remat, num_layers, return_all)(make_block(scan_name), x, static,
                                                               args, arrays)
    return (x, *(outputs[i] for i in range(num_layers))) if return_all else y


def stack_layers(params: Mapping[str, Any], num_layers: int, prefix: str = "block_",
                 scan_name: str = "blocks") -> dict[str, Any]:
    """Loop layout -> scan layout: ``{prefix}0 .. {prefix}{n-1}`` (in the dict of the module that
    holds the stack, e.g. ``params['encoder']``) become one ``scan_name`` subtree whose leaves are
    stacked along a new leading axis. Other entries are kept."""
    names = [f"{prefix}{i}" for i in range(num_layers)]
    missing = [n for n in names if n not in params]
    if missing or f"{prefix}{num_layers}" in params:
        raise ValueError(f"expected the blocks {names[0]}..{names[-1]} of a {num_layers}-layer "
                         f"loop layout, found {sorted(params)}")
    out = {k: v for k, v in params.items() if k not in names}
    out[scan_name] = jax.tree.map(_stack, *(params[n] for n in names))
    return out


def _stack(*leaves):
    """NumPy arrays stay NumPy (checkpoint files); anything else (jax arrays, tracers) goes
    through jnp."""
    if all(isinstance(x, np.ndarray) for x in leaves):
        return np.stack(leaves)
    return jnp.stack(leaves)


def unstack_layers(params: Mapping[str, Any], prefix: str = "block_",
                   scan_name: str = "blocks") -> dict[str, Any]:
    """Scan layout -> loop layout: the inverse of ``stack_layers``."""
    if scan_name not in params:
        raise ValueError(f"expected a scanned stack {scan_name!r}, found {sorted(params)}")
    stacked = params[scan_name]
    num_layers = {np.shape(x)[0] for x in jax.tree.leaves(stacked)}
    if len(num_layers) != 1:
        raise ValueError(f"the leaves of {scan_name!r} disagree on the number of layers: "
                         f"{sorted(num_layers)}")
    out = {k: v for k, v in params.items() if k != scan_name}
    for i in range(num_layers.pop()):
        out[f"{prefix}{i}"] = jax.tree.map(lambda x, i=i: x[i], stacked)
    return out


def to_layout(params: Mapping[str, Any], scan: bool, prefix: str = "block_",
              scan_name: str = "blocks") -> dict[str, Any]:
    """The dict of the module that holds a stack, with the stack in the scan layout
    (``scan=True``) or the loop layout, whichever it holds now: ``stack_layers`` or
    ``unstack_layers`` when the layout differs, a copy otherwise. A dict with neither layout
    (no blocks at all) is returned as it is."""
    params = dict(params)
    if (scan_name in params) == scan:
        return params
    if scan:
        num_layers = sum(1 for k in params if k.startswith(prefix))
        return stack_layers(params, num_layers, prefix, scan_name) if num_layers else params
    return unstack_layers(params, prefix, scan_name)
