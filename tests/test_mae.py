"""The masked autoencoder (models/mae.py): masking and unmasking against NumPy, the targets, the
encoder that sees no mask tokens and is the ViT's own, and the loss on the masked patches only
(train/tasks/mae_pretrain.py)."""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import mae
from models.layers import EncoderBlock
from models.vit import ViT, ViTConfig, patchify

ENCODER = ViTConfig(num_classes=0, image_size=(8, 12), patch_size=2, hidden_size=16,
                    num_layers=2, num_heads=2, mlp_dim=32, posemb="sincos_2d", pool="cls")
DECODER = mae.MAEDecoderConfig(hidden_size=8, num_layers=2, num_heads=2, mlp_dim=16)
N = 24  # 4 x 6 patches


def _orders(seed: int, batch: int, n: int = N) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.stack([rng.permutation(n) for _ in range(batch)]).astype(np.int32)


def test_split_patches_keeps_the_first_k_and_restores_the_order():
    """Against NumPy: the kept ids are the first K of each permutation, restore_ids its inverse
    (place of each patch in the shuffled list), masked exactly the other N - K patches."""
    orders = _orders(0, 5)
    keep, restore, masked = (np.asarray(x) for x in mae.split_patches(jnp.asarray(orders), 7))
    for order, k, r, m in zip(orders, keep, restore, masked):
        np.testing.assert_array_equal(k, order[:7])
        inverse = np.empty(N, np.int64)
        inverse[order] = np.arange(N)
        np.testing.assert_array_equal(r, inverse)
        np.testing.assert_array_equal(np.flatnonzero(m), np.sort(order[7:]))
        assert m.sum() == N - 7 and not m[order[:7]].any()


def test_the_decoder_sees_every_position_once_the_mask_token_in_the_masked_ones():
    """`unshuffle` puts the token of visible patch p (here a vector holding p + 1) at position p
    and the mask token (here -1) at every masked position: every position once, in order."""
    orders = _orders(1, 3)
    k = 10
    keep, restore, masked = mae.split_patches(jnp.asarray(orders), k)
    visible = jnp.broadcast_to(keep[..., None].astype(jnp.float32) + 1, (3, k, 4))
    full = np.asarray(mae.unshuffle(visible, -jnp.ones(4), restore))
    assert full.shape == (3, N, 4)
    for b in range(3):
        expected = np.where(np.asarray(masked[b]), -1.0, np.arange(N) + 1.0)
        np.testing.assert_array_equal(full[b], np.repeat(expected[:, None], 4, axis=1))
        seen = full[b, :, 0][full[b, :, 0] > 0] - 1
        assert sorted(seen) == sorted(orders[b, :k])  # each visible patch exactly once


def test_normalized_targets_match_numpy():
    """norm_pix_loss: each patch minus the mean of its pixels over sqrt(var + 1e-6), the variance
    unbiased (over n - 1) as in MAE's released code."""
    images = np.random.default_rng(2).normal(2.0, 3.0, size=(2, 8, 12, 3)).astype(np.float32)
    patches = images.reshape(2, 4, 2, 6, 2, 3).transpose(0, 1, 3, 2, 4, 5).reshape(2, 24, 12)
    np.testing.assert_array_equal(np.asarray(patchify(jnp.asarray(images), 2)), patches)
    mean = patches.mean(-1, keepdims=True)
    var = ((patches - mean) ** 2).sum(-1, keepdims=True) / (patches.shape[-1] - 1)
    expected = (patches - mean) / np.sqrt(var + 1e-6)
    cfg = mae.MAEConfig(dataclasses.replace(ENCODER, image_size=(8, 12)), DECODER,
                        norm_pix_loss=True)
    np.testing.assert_allclose(np.asarray(mae.targets(cfg, jnp.asarray(images))), expected,
                               rtol=1e-5, atol=1e-5)
    plain = dataclasses.replace(cfg, norm_pix_loss=False)
    np.testing.assert_array_equal(np.asarray(mae.targets(plain, jnp.asarray(images))), patches)
    np.testing.assert_allclose(np.asarray(mae.denormalized(jnp.asarray(expected),
                                                           jnp.asarray(patches))),
                               patches, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(
        np.asarray(mae.unpatchify(jnp.asarray(patches), 2, (4, 6), 3)), images)


def _token_counts(cfg: mae.MAEConfig, images, orders) -> dict[str, list[int]]:
    """{'encoder': [...], 'decoder': [...]}: the tokens each block of either stack receives."""
    model = mae.MAE(cfg)
    params = model.init(jax.random.PRNGKey(0), images, orders)["params"]
    seen = {}  # block path -> tokens (a ViTBlock's call reaches EncoderBlock's through super)

    def record(next_fun, args, kwargs, context):
        if isinstance(context.module, EncoderBlock) and context.method_name == "__call__":
            seen[context.module.path] = args[0].shape[1]
        return next_fun(*args, **kwargs)

    with nn.intercept_methods(record):
        model.apply({"params": params}, images, orders)
    return {stack: [n for path, n in sorted(seen.items()) if path[0] == stack]
            for stack in ("encoder", "decoder")}


def test_the_encoder_sees_only_the_visible_patches_and_the_decoder_all():
    """Counted at the blocks' inputs: the class token and K visible patches in every encoder
    block, no mask token; the class token and all N in every decoder block. With
    mask_token_in_encoder (Table 1c) the encoder gets all N."""
    images = jnp.asarray(np.random.default_rng(3).normal(size=(2, 8, 12, 1)), jnp.float32)
    orders = jnp.asarray(_orders(3, 2))
    cfg = mae.MAEConfig(ENCODER, DECODER, mask_ratio=0.75)
    assert (cfg.num_visible, cfg.num_masked) == (6, 18)
    assert _token_counts(cfg, images, orders) == {"encoder": [7, 7], "decoder": [25, 25]}
    with_tokens = dataclasses.replace(cfg, mask_token_in_encoder=True)
    assert _token_counts(with_tokens, images, orders) == {"encoder": [25, 25],
                                                          "decoder": [25, 25]}


def test_the_encoder_is_the_vit_and_its_positions_follow_the_patches():
    """The MAE's params['encoder'] run by models.vit.ViT give the MAE's encoding; encoding
    every patch in a shuffled order gives the tokens of the plain ViT, shuffled (each patch
    keeps its own position embedding, for a table and for 2-D RoPE); masked=all False is the
    plain ViT."""
    images = jnp.asarray(np.random.default_rng(4).normal(size=(2, 8, 12, 1)), jnp.float32)
    order = jnp.asarray(_orders(4, 2))
    for posemb in ("sincos_2d", "learned_1d", "learned_2d", "rope_2d", "none"):
        cfg = dataclasses.replace(ENCODER, posemb=posemb)
        vit = ViT(cfg)
        params = vit.init(jax.random.PRNGKey(1), images)["params"]
        plain = np.asarray(vit.apply({"params": params}, images))
        shuffled = np.asarray(vit.apply({"params": params}, images, keep_ids=order))
        np.testing.assert_allclose(shuffled[:, 0], plain[:, 0], atol=2e-5, err_msg=posemb)
        np.testing.assert_allclose(shuffled[:, 1:], np.take_along_axis(
            plain[:, 1:], np.asarray(order)[..., None], axis=1), atol=2e-5, err_msg=posemb)
        tokens = vit.init(jax.random.PRNGKey(1), images, masked=jnp.zeros((2, N), bool))
        unmasked = vit.apply(tokens, images, masked=jnp.zeros((2, N), bool))
        np.testing.assert_allclose(np.asarray(unmasked), plain, atol=2e-5, err_msg=posemb)

    cfg = mae.MAEConfig(ENCODER, DECODER)
    model = mae.MAE(cfg)
    params = model.init(jax.random.PRNGKey(2), images, order)["params"]
    keep, _, _ = mae.split_patches(order, cfg.num_visible)
    encoded = ViT(ENCODER).apply({"params": params["encoder"]}, images, keep_ids=keep)
    captured = model.apply({"params": params}, images, order, capture_intermediates=True,
                           mutable=["intermediates"])[1]["intermediates"]
    np.testing.assert_array_equal(np.asarray(captured["encoder"]["__call__"][0]),
                                  np.asarray(encoded))


def test_bad_configs_name_the_problem():
    with pytest.raises(ValueError, match="stem_channels=16: the 3x3 convolution stem would"):
        mae.MAEConfig(dataclasses.replace(ENCODER, stem_channels=16), DECODER)
    with pytest.raises(ValueError, match="posemb='relative_bias_2d' .* cannot encode a subset"):
        mae.MAEConfig(dataclasses.replace(ENCODER, posemb="relative_bias_2d"), DECODER)
    with pytest.raises(ValueError, match="leaves 0 of 24 patches visible"):
        mae.MAEConfig(ENCODER, DECODER, mask_ratio=0.99)
    with pytest.raises(ValueError, match=r"mask_ratio=1.0 must be in \(0, 1\)"):
        mae.MAEConfig(ENCODER, DECODER, mask_ratio=1.0)
    with pytest.raises(ValueError, match="an MAE encoder has no classifier"):
        mae.MAEConfig(dataclasses.replace(ENCODER, num_classes=10), DECODER)
    with pytest.raises(ValueError, match="decoder hidden_size=6 must be divisible by 4"):
        mae.MAEDecoderConfig(hidden_size=6, num_heads=2)
    with pytest.raises(ValueError, match="pass keep_ids .* or masked .*, not both"):
        ViT(ENCODER).init(jax.random.PRNGKey(0), jnp.zeros((1, 8, 12, 1)),
                          keep_ids=jnp.zeros((1, 2), jnp.int32), masked=jnp.zeros((1, N), bool))
    # K = int(N (1 - r)), as MAE's len_keep, without floating point's 1.9999999999999996 for
    # 10 x (1 - 0.8).
    assert [mae.num_visible(49, r) for r in (0.1, 0.5, 0.75, 0.8, 0.9)] == [44, 24, 12, 9, 4]
    assert mae.num_visible(10, 0.8) == 2 and mae.num_visible(16, 0.75) == 4


def test_the_tasks_loss_ignores_the_predictions_of_visible_patches_and_padded_rows():
    """Through the task's own loss_fn (train/tasks/mae_pretrain.py), with an offset added to
    the decoder's output: the gradient with respect to the predictions is exactly zero at the
    visible patches and at the padded rows (mask 0), and not at the masked patches of the real
    rows; moving those ignored predictions anywhere leaves the loss and pixel_mse as they were,
    moving one masked patch of a real row does not."""
    from train.config import load_config_file
    from train.tasks.mae_pretrain import MAEPretrainingTask

    task = MAEPretrainingTask(load_config_file("configs/vit/mae.py:smoke"))
    cfg = task.model_config
    rng = np.random.default_rng(5)
    n, pixels = cfg.num_patches, cfg.encoder.patch_size ** 2 * task.image_shape[-1]
    batch = {"image": jnp.asarray(rng.normal(size=(4, *task.image_shape)), jnp.float32),
             "patch_order": jnp.asarray(_orders(5, 4, n)),
             "mask": jnp.asarray([1.0, 0.0, 1.0, 0.0])}
    params = task.init_variables(jax.random.PRNGKey(0), task.dummy_inputs(1))["params"]

    @jax.jit
    def loss(offset):
        def shift(next_fun, args, kwargs, context):
            out = next_fun(*args, **kwargs)
            if isinstance(context.module, mae.MAEDecoder) and context.method_name == "__call__":
                out = out + offset
            return out

        with nn.intercept_methods(shift):
            terms, metrics = task.loss_fn(params, batch, jax.random.PRNGKey(1))
        return terms["mse"], metrics["pixel_mse"][0]

    zero = jnp.zeros((4, n, pixels), jnp.float32)
    grad = np.asarray(jax.grad(lambda o: loss(o)[0])(zero))
    # masked: the patches after the first K of each row's order (NumPy, not the model's mask)
    masked = np.zeros((4, n), bool)
    for row, order in enumerate(np.asarray(batch["patch_order"])):
        masked[row, order[cfg.num_visible:]] = True
    counted = masked & (np.asarray(batch["mask"])[:, None] > 0)
    assert masked.sum() == 4 * cfg.num_masked and 0 < counted.sum() < masked.sum()
    assert np.all(grad[~counted] == 0)
    assert np.all(np.abs(grad[counted]).sum(-1) > 0)

    before = [float(x) for x in loss(zero)]
    ignored = np.where(~counted[..., None], rng.normal(scale=10.0, size=zero.shape), 0.0)
    assert [float(x) for x in loss(jnp.asarray(ignored, jnp.float32))] == before
    row, patch = np.argwhere(counted)[0]
    one = np.zeros(zero.shape, np.float32)
    one[row, patch] = 1.0
    changed = [float(x) for x in loss(jnp.asarray(one))]
    assert changed[0] != before[0] and changed[1] != before[1]
