"""ViT position information: which encodings make patch order matter, where each table enters
(Table 8's columns: once after the stem, at every layer, at every layer from one shared table),
and the relative encodings inside every attention layer, against NumPy."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import position, position_2d
from models.vit import POSEMB_KINDS, ViT

from relative_reference import np_relative_logits
from tiny_vit import EVERY_LAYER, count, randomised_vit, small

def _with_random_head(variables, seed=0):
    """The model's own initialisation with a random (not zero) classifier, so that the logits show
    what the encoder computed. (Randomising every parameter saturates the attention softmax, which
    hides a fixed bias such as ALiBi's: the swap below then moves the logits by < 1e-3.)"""
    params = dict(variables["params"])
    kernel = params["head"]["kernel"]
    params["head"] = {**params["head"], "kernel": jax.random.normal(jax.random.PRNGKey(seed),
                                                                     kernel.shape, kernel.dtype)}
    return {**variables, "params": params}


def _swap_two_patches(images, p):
    swapped = images.copy()
    swapped[:, :p, :p], swapped[:, -p:, -p:] = images[:, -p:, -p:], images[:, :p, :p]
    return swapped


@pytest.mark.parametrize("posemb, posemb_mode",
                         [(kind, "stem") for kind in POSEMB_KINDS] + EVERY_LAYER)
def test_position_embedding_decides_whether_patch_order_matters(posemb, posemb_mode):
    cfg = small(posemb=posemb, posemb_mode=posemb_mode, pool="mean")
    images = np.random.default_rng(0).normal(size=(2, 28, 28, 1)).astype(np.float32)
    model = ViT(cfg)
    variables = _with_random_head(nn.meta.unbox(model.init(jax.random.PRNGKey(0), images)))
    original = model.apply(variables, images)
    swapped = model.apply(variables, _swap_two_patches(images, cfg.patch_size))
    if posemb == "none":  # a bag of patches: mean pooling makes the model permutation invariant
        np.testing.assert_allclose(original, swapped, rtol=1e-4, atol=1e-5)
    else:
        assert np.abs(np.asarray(original) - np.asarray(swapped)).max() > 1e-3


@pytest.mark.parametrize("pool", ["cls", "mean"])
@pytest.mark.parametrize("posemb", ["rope_2d", "alibi_2d"])
def test_rope_2d_and_alibi_2d_forward(posemb, pool):
    cfg = small(posemb=posemb, pool=pool)
    assert count(cfg, 1) == count(small(posemb="none", pool=pool), 1)   # no parameters of their own
    images = np.random.default_rng(0).normal(size=(2, 28, 28, 1)).astype(np.float32)
    model = ViT(cfg)
    variables = _with_random_head(nn.meta.unbox(model.init(jax.random.PRNGKey(0), images)))
    logits = np.asarray(model.apply(variables, images))
    assert logits.shape == (2, 10) and np.all(np.isfinite(logits))
    swapped = np.asarray(model.apply(variables, _swap_two_patches(images, cfg.patch_size)))
    assert np.abs(logits - swapped).max() > 1e-2      # the patches' places reach the output


def _softmax(logits):
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("posemb", ["rope_2d", "alibi_2d", "relative"])
def test_relative_encodings_act_inside_every_attention_layer(posemb):
    """The sown attention maps of each block are softmax(q k^T / sqrt(d) + bias) with q and k
    rotated by the (row + 1, column + 1) of each patch, (0, 0) for the class token (rope_2d),
    with the 2-D ALiBi bias (alibi_2d), or with the logits of the queries against the block's own
    relative keys (relative: the paper's 1-D relative attention over the 16 patches in raster
    order, the class token's pairs with keys of their own)."""
    cfg = small(posemb=posemb, pool="cls")
    images = np.random.default_rng(1).normal(size=(2, 28, 28, 1)).astype(np.float32)
    model = ViT(cfg)
    variables = randomised_vit(nn.meta.unbox(model.init(jax.random.PRNGKey(0), images)), seed=2)
    _, state = model.apply(variables, images,
                           capture_intermediates=lambda mdl, _: mdl.name in ("query", "key"))
    grid, heads, head_dim = 4, cfg.num_heads, cfg.hidden_size // cfg.num_heads
    positions = np.array([(0, 0)] + [(r + 1, c + 1) for r in range(grid) for c in range(grid)])
    positions = jnp.asarray(np.broadcast_to(positions, (2, 1 + grid * grid, 2)))
    bias = np.zeros((heads, 1 + grid * grid, 1 + grid * grid))
    if posemb == "alibi_2d":
        bias = position.alibi_2d_bias(heads, grid, grid, num_prefix_tokens=1)
    for layer in range(cfg.num_layers):
        attention = state["intermediates"][f"block_{layer}"]["attention"]
        (sown,) = attention["attention_weights"]
        q, k = attention["query"]["__call__"][0], attention["key"]["__call__"][0]
        if posemb == "rope_2d":
            q, k = position.apply_rope(q, positions), position.apply_rope(k, positions)
        logits = np.einsum("bqhd,bkhd->bhqk", np.asarray(q, np.float64),
                           np.asarray(k, np.float64)) / np.sqrt(head_dim)
        extra = bias[None]
        if posemb == "relative":  # each layer's own keys, one per offset and head
            table = variables["params"][f"block_{layer}"]["attention"]["relative_attention"][
                "rel_embedding"]
            assert table.shape == (2 * grid * grid - 1 + 3, heads, head_dim)
            extra = np_relative_logits(q, table, grid * grid, prefix=1)
            if layer:  # the layers learn tables of their own
                assert not np.allclose(table, variables["params"]["block_0"]["attention"][
                    "relative_attention"]["rel_embedding"])
        np.testing.assert_allclose(np.asarray(sown), _softmax(logits + extra),
                                   rtol=1e-4, atol=1e-6)


def _np_table(posemb, params, cfg):
    """The [T, D] position table of `posemb` from its parameters, in NumPy: learned_1d one row per
    token (class token included), learned_2d concat(row[y], col[x]) for patch (y, x) in raster
    order, sincos_2d the fixed table; the 2-D kinds give the class token zeros."""
    (gh, gw), prefix, width = cfg.grid, cfg.num_prefix_tokens, cfg.hidden_size
    if posemb == "learned_1d":
        return np.asarray(params["embedding"], np.float64)
    table = np.zeros((prefix + gh * gw, width))
    for y in range(gh):
        for x in range(gw):
            if posemb == "learned_2d":
                table[prefix + y * gw + x] = np.concatenate([params["row_embedding"][y],
                                                             params["col_embedding"][x]])
            else:
                table[prefix + y * gw + x] = position_2d.sincos_2d_table(gh, gw, width)[y * gw + x]
    return table


def _np_layernorm(x, params, eps=1e-6):
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * params["scale"] + params["bias"]


@pytest.mark.parametrize("posemb, posemb_mode, pool", [
    ("learned_1d", "stem", "cls"), ("learned_2d", "stem", "cls"),
    ("learned_1d", "every_layer", "cls"), ("learned_2d", "every_layer", "cls"),
    ("learned_1d", "every_layer_shared", "mean"), ("learned_2d", "every_layer_shared", "cls"),
    ("sincos_2d", "every_layer_shared", "cls")])
def test_position_table_enters_where_its_column_says(posemb, posemb_mode, pool):
    """ViT App. D.4, Table 8's columns. The input of block i is the output of block i-1 (block 0:
    the class token and the patch embeddings) plus: 'stem' the table in block 0 only,
    'every_layer' block i's own table (params block_i/posemb), 'every_layer_shared' the one table
    (params posemb) in every block. Checked through each block's first LayerNorm."""
    cfg = small(posemb=posemb, posemb_mode=posemb_mode, pool=pool, num_layers=3)
    images = np.random.default_rng(6).normal(size=(2, 28, 28, 1)).astype(np.float32)
    model = ViT(cfg)
    variables = randomised_vit(nn.meta.unbox(model.init(jax.random.PRNGKey(0), images)), seed=7)
    params = jax.tree.map(lambda x: np.asarray(x, np.float64), variables["params"])
    _, state = model.apply(variables, images, capture_intermediates=lambda mdl, _: (
        mdl.name in ("patch_embedding", "norm_attention") or str(mdl.name).startswith("block_")))
    found = state["intermediates"]
    x = np.asarray(found["patch_embedding"]["__call__"][0], np.float64)
    if pool == "cls":
        x = np.concatenate([np.broadcast_to(params["cls"], (2, 1, cfg.hidden_size)), x], axis=1)
    per_layer = [f"block_{i}" for i in range(cfg.num_layers) if "posemb" in params[f"block_{i}"]]
    assert per_layer == ([f"block_{i}" for i in range(cfg.num_layers)]
                         if posemb_mode == "every_layer" else [])
    assert ("posemb" in params) == (posemb != "sincos_2d" and posemb_mode != "every_layer")
    tables = []
    for i in range(cfg.num_layers):
        block = f"block_{i}"
        if posemb_mode == "every_layer":
            table = _np_table(posemb, params[block]["posemb"], cfg)
        elif posemb_mode == "every_layer_shared" or i == 0:
            table = _np_table(posemb, params.get("posemb"), cfg)
        else:
            table = 0.0
        normed = np.asarray(found[block]["norm_attention"]["__call__"][0], np.float64)
        np.testing.assert_allclose(
            normed, _np_layernorm(x + table, params[block]["norm_attention"]), rtol=1e-4,
            atol=1e-4, err_msg=block)
        tables.append(table)
        x = np.asarray(found[block]["__call__"][0], np.float64)
    if posemb_mode == "every_layer":  # tables of their own
        assert not np.allclose(tables[0], tables[1])
    if pool == "cls" and posemb != "learned_1d":  # the class token sits at no patch
        assert np.all(tables[0][0] == 0)


def test_every_layer_columns_add_one_table_per_layer_or_one_in_all():
    table_1d, table_2d = 17 * 32, 4 * 16 + 4 * 16     # class token + 16 patches; rows + columns
    for posemb, table in (("learned_1d", table_1d), ("learned_2d", table_2d)):
        stem = count(small(posemb=posemb, pool="cls", num_layers=3), 1)
        assert count(small(posemb="none", pool="cls", num_layers=3), 1) == stem - table
        assert count(small(posemb=posemb, posemb_mode="every_layer", pool="cls",
                           num_layers=3), 1) == stem + 2 * table
        assert count(small(posemb=posemb, posemb_mode="every_layer_shared", pool="cls",
                           num_layers=3), 1) == stem
    assert count(small(posemb="sincos_2d", posemb_mode="every_layer_shared"), 1) == count(
        small(posemb="none"), 1)


def test_relative_attention_learns_keys_per_layer_offset_and_head():
    # 2 layers x (2 x 16 - 1 offsets + 3 class-token relations) x 4 heads x 8 (head_dim).
    assert count(small(posemb="relative", pool="cls"), 1) - count(small(posemb="none", pool="cls"),
                                                                  1) == 2 * 34 * 4 * 8
    assert count(small(posemb="relative", pool="mean"), 1) - count(
        small(posemb="none", pool="mean"), 1) == 2 * 31 * 4 * 8
