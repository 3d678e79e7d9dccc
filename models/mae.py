"""Masked autoencoder (He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners").

Pretraining a ViT without labels: most of an image's patches are removed at random, the ViT
encoder sees only the rest, and a light decoder reconstructs the pixels of the removed ones
(Sec. 3):

  masking     each image's N patches in a random order (`patch_order`, a permutation drawn in
              the data pipeline, data/pipelines/patch_masking.py); the first K = int(N (1 - r))
              are visible, the others masked, r = `mask_ratio` (75% by default: Fig. 5).
  encoder     the ViT of models/vit.py, itself: its patch embedding, position embeddings, class
              token (kept, as the paper does: the token a linear probe and fine-tuning read),
              blocks and final norm, run on the K visible patches only, each with the position
              embedding of its place (`ViT(keep_ids=...)`). No mask token enters it. Its
              parameters are `params['encoder']`, a ViT's (without a classifier), so a
              classification run starts from them (train/vit_init.py).
  decoder     its own width, depth and heads: the encoded tokens projected to its width, a
              shared learned mask token appended for every masked patch, the list unshuffled to
              the patches' order (`unshuffle`), fixed 2-D sine-cosine position embeddings added
              (the class token's are zeros), pre-LN Transformer blocks (the encoder's kind), a
              final norm and a linear prediction of each patch's P * P * C pixels; the class
              token's output is dropped.
  loss        mean squared error over the masked patches only (`patch_errors`), on the pixels
              as the model reads them or, with `norm_pix_loss`, on each target patch normalised
              by its own mean and variance (`normalized_patches`).

`mask_token_in_encoder` is Table 1c's other row: the encoder runs on all N patches with its own
mask token in the masked places (`ViT(masked=...)`), and the decoder takes every encoded token
as it is, with no mask tokens of its own. The same parameters otherwise, and about N / K times
the encoder's compute (benchmarks/mae_step.py measures the step).

The model returns the predictions and the mask; the loss's sums and counts are the task's
(train/tasks/mae_pretrain.py).
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax.numpy as jnp

from models.layers import EncoderBlock, make_norm
from models.position_2d import sincos_2d_table
from models.stack import run_blocks
from models.vit import ViT, ViTConfig, patchify

NORM_PIX_EPSILON = 1e-6  # MAE's norm_pix_loss: (x - mean) / sqrt(var + 1e-6)
# MAE's released norm_pix_loss takes PyTorch's default variance, the unbiased one (divided by
# n - 1 for a patch of n values); the paper says only "mean and standard deviation".
NORM_PIX_DDOF = 1


@dataclasses.dataclass(frozen=True)
class MAEDecoderConfig:
    """The decoder's size (the paper's default: 8 blocks of width 512, 16 heads, MLP 2048)."""

    hidden_size: int = 512
    num_layers: int = 8
    num_heads: int = 16
    mlp_dim: int = 2048

    def __post_init__(self):
        for field in ("hidden_size", "num_layers", "num_heads", "mlp_dim"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"decoder {field}={value!r} must be an integer >= 1")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"decoder num_heads={self.num_heads} does not divide its "
                             f"hidden_size={self.hidden_size}")
        if self.hidden_size % 4:
            raise ValueError(f"decoder hidden_size={self.hidden_size} must be divisible by 4 "
                             "(its 2-D sine-cosine position table)")


def num_visible(num_patches: int, mask_ratio: float) -> int:
    """K = int(N (1 - r)), the visible patches of an image (MAE's `len_keep`); the 1e-9 keeps a
    product that is an integer from rounding down below it in floating point."""
    return int(num_patches * (1.0 - mask_ratio) + 1e-9)


@dataclasses.dataclass(frozen=True)
class MAEConfig:
    """Every architectural choice of a masked autoencoder; built from `config.model` by
    train/tasks/mae_pretrain.py. `encoder` is a ViTConfig with num_classes=0."""

    encoder: ViTConfig
    decoder: MAEDecoderConfig = MAEDecoderConfig()
    mask_ratio: float = 0.75
    norm_pix_loss: bool = False
    mask_token_in_encoder: bool = False

    def __post_init__(self):
        if self.encoder.num_classes != 0:
            raise ValueError(f"the encoder has num_classes={self.encoder.num_classes}; an MAE "
                             "encoder has no classifier (num_classes=0)")
        self.encoder.check_per_patch()
        if not 0.0 < self.mask_ratio < 1.0:
            raise ValueError(f"mask_ratio={self.mask_ratio} must be in (0, 1)")
        visible, n = self.num_visible, self.num_patches
        if not 0 < visible < n:
            raise ValueError(
                f"mask_ratio={self.mask_ratio} leaves {visible} of {n} patches visible; at least "
                "one must be visible and one masked: choose a ratio nearer 0.5 or more patches")

    @property
    def num_patches(self) -> int:
        grid_h, grid_w = self.encoder.grid
        return grid_h * grid_w

    @property
    def num_visible(self) -> int:
        return num_visible(self.num_patches, self.mask_ratio)

    @property
    def num_masked(self) -> int:
        return self.num_patches - self.num_visible


# ---- masking: which patches the encoder sees, and the way back to the patches' order ---------

def split_patches(patch_order, num_visible: int):
    """(keep_ids [b, K], restore_ids [b, N], masked [b, N] bool) of a permutation per image.

    MAE Sec. 3, "Simple implementation": shuffle the list of patches, keep the first K.
    `patch_order[b, j]` is the patch at place j of image b's shuffled list; `restore_ids[b, i]`
    is the place of patch i in it (the inverse permutation), so gathering a shuffled list at
    `restore_ids` puts it back in the patches' order; patch i is masked iff its place is >= K.
    """
    restore_ids = jnp.argsort(patch_order, axis=1)
    return patch_order[:, :num_visible], restore_ids, restore_ids >= num_visible


def unshuffle(visible, mask_token, restore_ids):
    """The decoder's input in the patches' order: the K visible tokens [b, K, d] (in shuffled
    order) followed by N - K copies of `mask_token` [d], gathered at `restore_ids` [b, N]: each
    visible patch's token in its own place, the mask token in every other."""
    batch, k, width = visible.shape
    n = restore_ids.shape[1]
    masks = jnp.broadcast_to(mask_token.astype(visible.dtype), (batch, n - k, width))
    shuffled = jnp.concatenate([visible, masks], axis=1)
    return jnp.take_along_axis(shuffled, restore_ids[..., None], axis=1)


# ---- the reconstruction targets and errors ------------------------------------------------

def normalized_patches(patches, epsilon: float = NORM_PIX_EPSILON):
    """MAE Sec. 3, "Reconstruction target" (`norm_pix_loss`): each patch [..., P * P * C] minus
    the mean of its pixels, divided by sqrt(their unbiased variance + epsilon)."""
    mean = patches.mean(axis=-1, keepdims=True)
    var = patches.var(axis=-1, keepdims=True, ddof=NORM_PIX_DDOF)
    return (patches - mean) / jnp.sqrt(var + epsilon)


def denormalized(predictions, patches, epsilon: float = NORM_PIX_EPSILON):
    """Predictions of normalised patches back in pixels with the true patches' means and
    variances (as the paper's figures show norm_pix reconstructions)."""
    mean = patches.mean(axis=-1, keepdims=True)
    var = patches.var(axis=-1, keepdims=True, ddof=NORM_PIX_DDOF)
    return predictions * jnp.sqrt(var + epsilon) + mean


def patch_errors(predictions, targets):
    """MAE's loss per patch: the mean over its pixels of the squared error, [b, N]; the loss is
    their mean over the masked patches (the caller's weights)."""
    return jnp.mean(jnp.square(predictions.astype(jnp.float32) - targets.astype(jnp.float32)),
                    axis=-1)


def unpatchify(patches, patch_size: int, grid: tuple[int, int], channels: int):
    """The inverse of models.vit.patchify: [b, N, P * P * C] -> images [b, H, W, C]."""
    grid_h, grid_w = grid
    p = patch_size
    x = patches.reshape(patches.shape[0], grid_h, grid_w, p, p, channels)
    return x.transpose(0, 1, 3, 2, 4, 5).reshape(patches.shape[0], grid_h * p, grid_w * p,
                                                 channels)


# ---- the model ---------------------------------------------------------------------------------

class MAEDecoder(nn.Module):
    """Encoded tokens -> per-patch pixel predictions [b, N, P * P * C] (module docstring).

    `encoded`: [b, prefix + K, D_enc] with `restore_ids` (the visible patches' tokens, mask
    tokens appended and unshuffled here), or [b, prefix + N, D_enc] in the patches' order with
    restore_ids None (Table 1c's encoder with mask tokens)."""

    config: MAEConfig
    channels: int

    @nn.compact
    def __call__(self, encoded, restore_ids=None, *, train: bool = False):
        cfg, enc, dec = self.config, self.config.encoder, self.config.decoder
        dtype, param_dtype = jnp.dtype(enc.dtype), jnp.dtype(enc.param_dtype)
        prefix = enc.num_prefix_tokens

        def dense(features, axes, name):
            return nn.Dense(features, dtype=dtype, param_dtype=param_dtype, name=name,
                            kernel_init=nn.with_logical_partitioning(
                                nn.initializers.xavier_uniform(), axes),
                            bias_init=nn.with_logical_partitioning(nn.initializers.zeros,
                                                                   axes[1:]))

        x = dense(dec.hidden_size, (None, "embed"), "embed")(encoded)
        if restore_ids is not None:
            mask_token = self.param("mask_token", nn.with_logical_partitioning(
                nn.initializers.normal(stddev=0.02), ("embed",)), (dec.hidden_size,), param_dtype)
            x = jnp.concatenate([x[:, :prefix], unshuffle(x[:, prefix:], mask_token,
                                                          restore_ids)], axis=1)
        grid_h, grid_w = enc.grid
        table = jnp.asarray(sincos_2d_table(grid_h, grid_w, dec.hidden_size))
        x = x + jnp.pad(table, ((prefix, 0), (0, 0)))[None].astype(dtype)
        x = nn.with_logical_constraint(x, ("batch", "length", "embed"))

        def block(name):
            return EncoderBlock(
                num_heads=dec.num_heads, head_dim=dec.hidden_size // dec.num_heads,
                mlp_dim=dec.mlp_dim, activation=enc.activation, norm=enc.norm,
                norm_position="pre", norm_epsilon=enc.layer_norm_eps,
                dropout_rate=enc.dropout_rate, attention_dropout_rate=enc.attention_dropout_rate,
                implementation=enc.attention_implementation, dtype=dtype,
                param_dtype=param_dtype, name=name)

        x = run_blocks(block, dec.num_layers, x, remat=enc.remat, scan=enc.scan_layers,
                       deterministic=not train)
        x = make_norm(enc.norm, epsilon=enc.layer_norm_eps, dtype=dtype, param_dtype=param_dtype,
                      name="norm")(x)
        pixels = enc.patch_size ** 2 * self.channels
        return dense(pixels, ("embed", "patch"), "predict")(x[:, prefix:]).astype(jnp.float32)


class MAE(nn.Module):
    """images [b, H, W, C], patch_order int [b, N] (a permutation per image) -> {'predictions':
    [b, N, P * P * C] float32, 'masked': [b, N] bool}."""

    config: MAEConfig

    @nn.compact
    def __call__(self, images, patch_order, *, train: bool = False):
        cfg = self.config
        n = cfg.num_patches
        if patch_order.shape != (images.shape[0], n):
            raise ValueError(f"patch_order of shape [batch, {n}] expected (a permutation of the "
                             f"{n} patches per image), got {tuple(patch_order.shape)}")
        keep_ids, restore_ids, masked = split_patches(patch_order, cfg.num_visible)
        encoder = ViT(cfg.encoder, name="encoder")
        if cfg.mask_token_in_encoder:
            encoded = encoder(images, train=train, masked=masked)
            restore_ids = None
        else:
            encoded = encoder(images, train=train, keep_ids=keep_ids)
        decoder = MAEDecoder(cfg, channels=images.shape[-1], name="decoder")
        return {"predictions": decoder(encoded, restore_ids, train=train), "masked": masked}


def targets(config: MAEConfig, images):
    """The reconstruction targets [b, N, P * P * C]: the images' patches, normalised per patch
    with `norm_pix_loss`."""
    patches = patchify(images.astype(jnp.float32), config.encoder.patch_size)
    return normalized_patches(patches) if config.norm_pix_loss else patches

