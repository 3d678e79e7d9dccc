"""ViT: parameter counts of the paper's sizes, patch embedding, the head, logical axes, config
checks, the hybrid stem, bfloat16, remat and dropout (position information:
tests/test_vit_positions.py)."""

from __future__ import annotations

import math
import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import position
from models.sizes import vit_size
from models.vit import POSEMB_KINDS, ViT, ViTConfig

from dropout_sites import dropout_sites
from remat_checks import (REMATS, assert_same_loss_and_grads, assert_same_variables,
                          grad_has_remat, num_saved_residuals)
from tiny_vit import EVERY_LAYER, count, randomised_vit, small


@pytest.mark.parametrize("name, expected", [
    # ImageNet-1k head, 224 x 224 RGB. B/16 is the paper's "86M", H/14 its "632M".
    ("Ti/16", 5_717_416), ("B/16", 86_567_656), ("H/14", 632_045_800)])
def test_parameter_counts_of_paper_sizes(name, expected):
    assert count(ViTConfig(num_classes=1000, image_size=(224, 224), **vit_size(name))) == expected


def test_patch_embedding_matches_numpy_patchify():
    cfg = small(posemb="none", num_layers=0)
    images = np.random.default_rng(0).normal(size=(2, 28, 28, 3)).astype(np.float32)
    variables = ViT(cfg).init(jax.random.PRNGKey(1), images)
    _, state = ViT(cfg).apply(variables, images, capture_intermediates=True)
    embedded = np.asarray(state["intermediates"]["patch_embedding"]["__call__"][0])
    params = nn.meta.unbox(variables)["params"]["patch_embedding"]
    p = cfg.patch_size
    expected = np.zeros((2, 16, cfg.hidden_size))
    for b in range(2):
        for gy in range(4):
            for gx in range(4):  # row-major patch order, each patch flattened (row, col, channel)
                patch = images[b, gy * p:(gy + 1) * p, gx * p:(gx + 1) * p, :].reshape(-1)
                expected[b, gy * 4 + gx] = patch @ np.asarray(params["kernel"]) + np.asarray(params["bias"])
    np.testing.assert_allclose(embedded, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("pool, head_hidden_size", [("cls", 0), ("mean", 0), ("cls", 16),
                                                      ("mean", 16)])
def test_head_reads_the_pooled_final_norm_output(pool, head_hidden_size):
    """Eq. 4: y = LN(z_L^0), the class token of the final norm's output (pool 'cls'), or the mean
    of its tokens (pool 'mean'); then logits = y W + b, or with a pre-logits layer (Sec. 3.1,
    head_hidden_size > 0) logits = tanh(y W1 + b1) W2 + b2. Computed in NumPy from the params."""
    cfg = small(pool=pool, head_hidden_size=head_hidden_size)
    images = np.random.default_rng(4).normal(size=(2, 28, 28, 1)).astype(np.float32)
    model = ViT(cfg)
    variables = randomised_vit(nn.meta.unbox(model.init(jax.random.PRNGKey(0), images)), seed=5)
    logits, state = model.apply(variables, images,
                                capture_intermediates=lambda mdl, _: mdl.name == "final_norm")
    normed = np.asarray(state["intermediates"]["final_norm"]["__call__"][0], np.float64)
    assert normed.shape == (2, 16 + (pool == "cls"), cfg.hidden_size)
    pooled = normed[:, 0] if pool == "cls" else normed.mean(axis=1)
    params = jax.tree.map(lambda x: np.asarray(x, np.float64), variables["params"])
    if head_hidden_size:
        pre_logits = params["pre_logits"]
        assert pre_logits["kernel"].shape == (cfg.hidden_size, head_hidden_size)
        pooled = np.tanh(pooled @ pre_logits["kernel"] + pre_logits["bias"])
    expected = pooled @ params["head"]["kernel"] + params["head"]["bias"]
    np.testing.assert_allclose(np.asarray(logits), expected, rtol=1e-4, atol=1e-5)


def test_every_parameter_has_logical_axis_names():
    for posemb, posemb_mode in [(kind, "stem") for kind in POSEMB_KINDS] + EVERY_LAYER:
        variables = ViT(small(posemb=posemb, posemb_mode=posemb_mode, head_hidden_size=16)).init(
            jax.random.PRNGKey(0), jnp.zeros((1, 28, 28, 1)))
        leaves = jax.tree.leaves(variables, is_leaf=lambda x: isinstance(x, nn.LogicallyPartitioned))
        unnamed = [x for x in leaves if not isinstance(x, nn.LogicallyPartitioned)]
        assert not unnamed, f"{posemb}: parameters without logical axis names"
        for box in leaves:
            assert len(box.names) == box.value.ndim


def test_sincos_and_none_add_no_parameters():
    assert count(small(posemb="sincos_2d"), 1) == count(small(posemb="none"), 1)
    assert count(small(posemb="learned_1d"), 1) - count(small(posemb="none"), 1) == 17 * 32


@pytest.mark.parametrize("overrides, message", [
    (dict(patch_size=5), "patch_size=5 does not divide image_size=(28, 28)"),
    (dict(num_heads=3), "num_heads=3 does not divide hidden_size=32"),
    (dict(posemb="rope"), "posemb='rope' is not one of"),
    (dict(posemb="rope_2d", hidden_size=24), "posemb='rope_2d' rotates two even halves of each "
                                             "head, so it needs hidden_size / num_heads divisible "
                                             "by 4, got 6"),
    (dict(pool="max"), "pool='max' is not one of"),
    (dict(posemb_mode="every_block"), "posemb_mode='every_block' is not one of"),
    (dict(posemb="none", posemb_mode="every_layer"),
     "posemb_mode='every_layer' adds a position table to the input of every layer, but "
     "posemb='none' adds no position information; use posemb_mode='stem', or a posemb with a "
     "table: ['learned_1d', 'learned_2d', 'sincos_2d']"),
    (dict(posemb="relative", posemb_mode="every_layer_shared"),
     "posemb='relative' has no table to add: it acts inside every attention layer already"),
    (dict(posemb="rope_2d", posemb_mode="every_layer"), "posemb='rope_2d' has no table to add"),
    (dict(posemb="sincos_2d", posemb_mode="every_layer"),
     "posemb='sincos_2d' is one fixed table, the same in every layer, so "
     "posemb_mode='every_layer' (a table learned for each layer) does not apply; use "
     "posemb_mode='every_layer_shared'"),
    (dict(layer_norm_eps=0.0), "layer_norm_eps=0.0 must be > 0"),
])
def test_impossible_configs_are_rejected(overrides, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        small(**overrides)


def test_wrong_image_shape_is_named():
    model = ViT(small())
    with pytest.raises(ValueError, match=r"\[batch, 28, 28, channels\] expected, got \(2, 32, 32, 1\)"):
        model.init(jax.random.PRNGKey(0), jnp.zeros((2, 32, 32, 1)))


def test_bfloat16_compute_stays_close_to_float32():
    images = np.random.default_rng(0).normal(size=(2, 28, 28, 1)).astype(np.float32)
    variables = randomised_vit(nn.meta.unbox(ViT(small()).init(jax.random.PRNGKey(0), images)), seed=3)
    full = ViT(small()).apply(variables, images)
    half = ViT(small(dtype="bfloat16")).apply(variables, images)
    assert half.dtype == jnp.float32  # logits are returned in float32
    assert not np.array_equal(half, full)  # bfloat16 was used, not ignored
    np.testing.assert_allclose(half, full, atol=0.05 * np.abs(full).max())


def test_hybrid_stem_adds_one_convolution_and_feeds_the_patches():
    plain, hybrid = small(), small(stem_channels=8)
    # 3x3 kernel over 1 input channel to 8 channels plus 8 biases; the patch embedding then reads
    # 7*7*8 instead of 7*7*1 values per patch.
    extra = (3 * 3 * 1 * 8 + 8) + (7 * 7 * 8 - 7 * 7 * 1) * 32
    assert count(hybrid, 1) - count(plain, 1) == extra
    images = np.random.default_rng(0).normal(size=(2, 28, 28, 1)).astype(np.float32)
    variables = randomised_vit(nn.meta.unbox(ViT(hybrid).init(jax.random.PRNGKey(0), images)))
    _, state = ViT(hybrid).apply(variables, images, capture_intermediates=True)
    conv = np.asarray(state["intermediates"]["stem"]["__call__"][0])
    kernel = np.asarray(variables["params"]["stem"]["kernel"])
    bias = np.asarray(variables["params"]["stem"]["bias"])
    padded = np.pad(images, ((0, 0), (1, 1), (1, 1), (0, 0)))
    for y, x in [(0, 0), (13, 20), (27, 27)]:  # 'SAME' 3x3 convolution at a few pixels
        window = padded[:, y:y + 3, x:x + 3, :]
        expected = np.einsum("byxc,yxco->bo", window, kernel) + bias
        np.testing.assert_allclose(conv[:, y, x], expected, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="stem_channels=-1 must be an integer >= 0"):
        small(stem_channels=-1)


@pytest.mark.parametrize("activation", ["gelu", "relu"])
def test_stem_feature_map_goes_through_the_blocks_activation_into_the_patches(activation):
    """patch_embedding(x) = patches of act(conv(x)) @ E + b, act the config's `activation`."""
    config = small(stem_channels=4, activation=activation)
    images = np.random.default_rng(1).normal(size=(2, 28, 28, 1)).astype(np.float32)
    variables = randomised_vit(nn.meta.unbox(ViT(config).init(jax.random.PRNGKey(0), images)))
    _, state = ViT(config).apply(variables, images, capture_intermediates=True)
    conv = np.asarray(state["intermediates"]["stem"]["__call__"][0], np.float64)
    embedded = np.asarray(state["intermediates"]["patch_embedding"]["__call__"][0])
    if activation == "relu":
        features = np.maximum(conv, 0.0)
    else:  # exact GELU, x * Phi(x)
        features = conv * 0.5 * (1.0 + np.vectorize(math.erf)(conv / math.sqrt(2.0)))
    # Patch (row 1, column 2) of the 4 x 4 grid: pixels 7..13 x 14..20, flattened (y, x, c).
    patch = features[:, 7:14, 14:21, :].reshape(2, -1)
    params = variables["params"]["patch_embedding"]
    expected = patch @ np.asarray(params["kernel"]) + np.asarray(params["bias"])
    np.testing.assert_allclose(embedded[:, 1 * 4 + 2], expected, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match=r"activation='tanh' is not one of \['relu', 'gelu'"):
        small(activation="tanh")
    with pytest.raises(ValueError, match=r"attention_implementation='flash' is not one of "
                                         r"\['xla', 'cudnn', 'auto'\]"):
        small(attention_implementation="flash")


# Rematerialisation ---------------------------------------------------------------------------

def _remat_setup(remat):
    """A small ViT with dropout everywhere and an attention bias (posemb 'relative_bias_2d')
    passed into every block, random images and labels, and its loss as a function of the
    parameters. (The relative attention and the every-layer tables under remat: test_stack.py.)"""
    cfg = small(remat=remat, posemb="relative_bias_2d", dropout_rate=0.1,
                attention_dropout_rate=0.1)
    rng = np.random.default_rng(0)
    images = jnp.asarray(rng.normal(size=(2, 28, 28, 1)), jnp.float32)
    labels = jnp.asarray(rng.integers(0, 10, size=2))

    def loss(params, train=False, seed=0):
        logits = ViT(cfg).apply({"params": params}, images, train=train,
                                rngs={"dropout": jax.random.PRNGKey(seed)})
        return -jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], -1).mean()

    return cfg, images, loss


def test_remat_keeps_parameters_loss_and_gradients():
    cfg, images, loss = _remat_setup("none")
    init = lambda cfg: jax.jit(lambda: ViT(cfg).init(jax.random.PRNGKey(0), images))()  # noqa: E731
    boxed = init(cfg)
    # The zero-initialised head would zero every other gradient: randomise all parameters.
    params = randomised_vit(nn.meta.unbox(boxed), seed=2)["params"]

    def losses_and_grads(loss):  # dropout off and on (the same dropout rng for every remat)
        return jax.jit(lambda p: [jax.value_and_grad(loss)(p, train) for train in (False, True)])(
            params)

    expected = losses_and_grads(loss)
    for remat in REMATS:
        remat_cfg, _, remat_loss = _remat_setup(remat)
        assert_same_variables(init(remat_cfg), boxed)
        for got, want in zip(losses_and_grads(remat_loss), expected):
            assert_same_loss_and_grads(got, want)
    assert not np.allclose(expected[0][0], expected[1][0])  # dropout did act


def test_remat_appears_in_the_gradient_and_keeps_fewer_residuals():
    _, images, _ = _remat_setup("none")
    params = nn.meta.unbox(ViT(small(posemb="relative_bias_2d")).init(
        jax.random.PRNGKey(0), images))["params"]
    residuals = {}
    for remat in ("none",) + REMATS:
        _, _, loss = _remat_setup(remat)
        assert grad_has_remat(loss, params) == (remat != "none")
        residuals[remat] = num_saved_residuals(loss, params)
    # 'full' keeps the blocks' inputs only, 'minimal' also the projections' outputs.
    assert residuals["full"] < residuals["minimal"] < residuals["none"], residuals


def test_unknown_remat_is_rejected():
    with pytest.raises(ValueError, match=r"remat='all' is not one of \['none', 'minimal', 'full'\]"):
        small(remat="all")


def test_dropout_sites_and_rates():
    """ViT (Dosovitskiy et al. 2021, Appendix B.1): dropout after every dense layer except the
    qkv projections (the attention's output projection and both feed-forward layers) and right
    after the position embeddings are added, at dropout_rate; the attention probabilities at
    attention_dropout_rate; nothing in evaluation."""
    cfg = small(dropout_rate=0.1, attention_dropout_rate=0.2)
    images = jnp.zeros((2, 28, 28, 3))
    variables = jax.eval_shape(lambda: ViT(cfg).init(jax.random.PRNGKey(0), images))

    def sites(train):
        return dropout_sites(lambda: jax.eval_shape(
            lambda v: ViT(cfg).apply(v, images, train=train,
                                     rngs={"dropout": jax.random.PRNGKey(1)}), variables))

    expected = {("Dropout_0", 0.1)}  # after adding the position embeddings
    for i in range(cfg.num_layers):  # Dropout_0 after the attention, Dropout_1 after the MLP
        block = f"block_{i}"
        expected |= {(f"{block}/attention:probabilities", 0.2), (f"{block}/Dropout_0", 0.1),
                     (f"{block}/mlp/Dropout_0", 0.1), (f"{block}/Dropout_1", 0.1)}
    assert sites(train=True) == expected
    assert sites(train=False) == set()
