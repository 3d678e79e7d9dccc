"""Vision Transformer (Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words").

An image is cut into non-overlapping P x P patches, each flattened and linearly projected to the
model width D (eq. 1), a learned class token is prepended, positions are encoded, a stack of
pre-LN Transformer encoder blocks runs over the N + 1 tokens (eq. 2-3), and the final class token
(or the mean of the patch tokens) goes through a LayerNorm and a linear classifier (eq. 4).

Hybrid input (paper Sec. 3.1, "Hybrid Architecture"): with `stem_channels` > 0 the patches are cut
from a feature map instead of raw pixels, here the smallest CNN there is: one 3x3 convolution
(stride 1) and the blocks' `activation`. It gives each patch local edge features, which a ViT
trained from scratch on little data otherwise learns slowly (Xiao et al. 2021, "Early
Convolutions Help Transformers See Better"). With `stem_channels=0` the model is the plain ViT.

The position encoding is the subject of the paper's Table 8 ablation and is chosen by `posemb`:
  'none'        no position information: the encoder sees a bag of patches.
  'learned_1d'  one learned vector per token index (the paper's default).
  'learned_2d'  learned row and column tables, each D/2 wide, concatenated (paper App. D.4).
  'sincos_2d'   fixed 2-D sine-cosine table (no parameters; not in the paper's table).
  'relative'    the paper's 1-D relative attention (App. D.4, `models.relative_attention`): in
                every attention layer, the query meets a learned key per patch offset p_q - p_k
                (raster order, 2N - 1 offsets, one key per head) and the resulting logits are
                added to the content logits; each layer has its own keys, and three more keys
                serve the class token's pairs. No absolute encoding.
Three later relative encodings, not in the paper's table:
  'relative_bias_2d'  a learned scalar per head and 2-D patch offset (dy, dx), the same for every
                query, added to the logits of every layer (one table shared by all layers,
                `position_2d.RelativePositionBias2D`; the form of Swin's relative position bias,
                Liu et al. 2021, which learns one per layer).
  'rope_2d'     axial 2-D rotary embedding (Heo et al. 2024, RoPE-Axial): in every layer, the first
                half of each query/key head is rotated by the patch's row, the second half by its
                column (`position.apply_rope` with [batch, tokens, 2] positions, base 10000;
                Heo et al.'s axial code uses base 100, which turns every frequency further over
                a small grid: at 10000 the lowest few barely turn across 14 patches), so
                logits depend on the 2-D offset only. Patch (r, c) sits at (r + 1, c + 1) and the
                class token at (0, 0), i.e. it is not rotated and acts as a virtual patch one step
                above and left of the grid, never at the place of a real patch (Heo et al.'s code
                leaves it unrotated too but puts the first patch at (0, 0)). No parameters.
  'alibi_2d'    ALiBi (Press et al. 2022) on the grid: a fixed bias -m_h * (Euclidean distance
                between the two patches, in patches) on the logits of head h, with the ALiBi slopes
                m_h; 0 in the class token's row and column; shared by all layers. No parameters.

Where an absolute table (learned_1d, learned_2d, sincos_2d) enters is `posemb_mode`, the three
columns of Table 8 (App. D.4: "(1) add positional embeddings to the inputs right after the stem
[...]; (2) learn and add positional embeddings to the inputs at the beginning of each layer; (3)
add a learned positional embeddings to the inputs at the beginning of each layer (shared between
layers)"):
  'stem'                once, to the tokens before the first block (the paper's default).
  'every_layer'         each block learns its own table (`block_i/posemb`) and adds it to its input.
  'every_layer_shared'  one table (`posemb`) added to the input of every block.
The 2-D tables give the class token zeros (it has no grid position); learned_1d has a row for it.
The encodings that act inside the attention have only 'stem' (their own place), as in the paper's
table, and so has 'none'; 'sincos_2d' is one fixed table, so 'every_layer' (a table per layer)
does not apply to it. Dropout (App. B.1, "directly after adding positional- to patch
embeddings") stays once, on the tokens before the first block.

`num_classes=0` makes the model an encoder without a classifier: it returns the tokens after the
final norm ([batch, num_prefix_tokens + N, hidden_size]), which is how the masked autoencoder
(models/mae.py) runs this very encoder, so that its weights are a ViT's. Two inputs serve it
(He et al. 2022, "Masked Autoencoders Are Scalable Vision Learners", Sec. 3): `keep_ids`
[batch, K] encodes only those patches (the visible ones; each patch's position embedding is the
one of its place in the grid, the class token is kept), and `masked` [batch, N] replaces the
embeddings of those patches by a learned `mask_token` before the position embeddings are added
(its Table 1c ablation, the encoder that sees mask tokens). Both need a position encoding that
can be gathered per patch: posemb none, learned_1d, learned_2d, sincos_2d (posemb_mode 'stem') or
rope_2d, and no convolutional stem (a 3x3 convolution would show a visible patch the border
pixels of its masked neighbours).

`probe_norm` puts a linear probe's fixed feature standardisation (`ProbeNorm`, MAE's BatchNorm
without affine transformation) between the pooled features and the classifier.

DeiT (Touvron et al. 2021, "Training data-efficient image transformers & distillation through
attention", Sec. 4): `distill_token` adds a learned distillation token beside the class token
(token 1, the class token 0; both prefix tokens of the position tables), which goes through the
blocks like it, and its own linear head `head_dist`; the model then returns both heads' logits,
(class, distillation). What each head learns from (the labels, the teacher) and how the two are
combined at test time (their softmaxes averaged) is the task's (train/tasks/deit.py).
`drop_path_rate` is stochastic depth (Huang et al. 2016; DeiT's Table 9 uses 0.1): each block's
two residual branches dropped whole per example, at a rate rising linearly over the depth to
`drop_path_rate` at the last block (models/dropout.py `stochastic_depth_rates`).

`remat` (none | minimal | full) rematerialises each encoder block in the backward pass (gradient
checkpointing): less activation memory for more compute, the same parameters, logits and
gradients. `scan_layers` runs the blocks as one `nn.scan` (parameters `blocks/...` with a leading
axis of size num_layers instead of `block_0 .. block_{L-1}`), compiled once. See `models.stack`.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from models import position, position_2d
from models.dropout import Dropout, stochastic_depth_rates
from models.layers import ACTIVATIONS, EncoderBlock, make_norm
from models.stack import run_blocks
from models.vit_config import (  # noqa: F401  (the choices' names, re-exported with the config)
    PER_PATCH_POSEMBS, POOL_KINDS, POSEMB_KINDS, POSEMB_MODES, TABLE_POSEMBS, ViTConfig)


def pool_tokens(tokens, pool: str):
    """The image's representation: the class token ('cls') or the mean of the patch tokens
    ('mean', a model without a class token), [batch, hidden_size]."""
    return tokens[:, 0] if pool == "cls" else tokens.mean(axis=1)


class ProbeNorm(nn.Module):
    """A linear probe's BatchNorm without affine transformation (MAE, He et al. 2022, App. A.3:
    "an extra BatchNorm layer without affine transformation" before the probe's classifier, to
    calibrate the feature magnitudes of different encoders) in its inference form:
    (f - mean) / sqrt(var + 1e-6) per feature, with fixed statistics (params 'mean' and 'var'),
    those of the frozen encoder's features over the training images, which the task computes
    when the run starts (train/tasks/classify.py) and never trains. With the encoder frozen the
    features' statistics are constants, the values BatchNorm's running averages estimate; no
    per-batch statistics are used in training. Linear, so it can be folded into the head."""

    epsilon: float = 1e-6
    param_dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, features):
        width = features.shape[-1]
        mean = self.param("mean", nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)),
                          (width,), self.param_dtype)
        var = self.param("var", nn.with_logical_partitioning(nn.initializers.ones, ("embed",)),
                         (width,), self.param_dtype)
        centred = features.astype(jnp.float32) - mean.astype(jnp.float32)
        return (centred * jax.lax.rsqrt(var.astype(jnp.float32) + self.epsilon)).astype(
            features.dtype)


def patchify(images, patch_size: int):
    """Images [batch, H, W, C] -> patches [batch, N, P * P * C], the non-overlapping P x P
    patches in row-major order, each flattened row by row, pixel by pixel (ViT eq. 1's x_p;
    MAE's reconstruction targets)."""
    batch, height, width, channels = images.shape
    p = patch_size
    patches = images.reshape(batch, height // p, p, width // p, p, channels)
    return patches.transpose(0, 1, 3, 2, 4, 5).reshape(
        batch, (height // p) * (width // p), p * p * channels)


def position_table(cfg: ViTConfig, name: str):
    """The absolute position table of `cfg.posemb` (one of TABLE_POSEMBS) for all the tokens,
    [1, num_prefix_tokens + N, hidden_size] in cfg.dtype, the prefix tokens first.

    Called inside a compact method, whose submodule `name` then holds the learned table:
    learned_1d one row per token (class token included), learned_2d row and column tables of the
    patch grid; the 2-D kinds give the prefix tokens zeros (they sit at no patch).
    """
    grid_h, grid_w = cfg.grid
    prefix = cfg.num_prefix_tokens
    dtype, param_dtype = jnp.dtype(cfg.dtype), jnp.dtype(cfg.param_dtype)
    num_tokens = prefix + grid_h * grid_w
    if cfg.posemb == "learned_1d":
        return position.LearnedPositionEmbedding(
            num_tokens, cfg.hidden_size, param_dtype=param_dtype, name=name)(
                jnp.arange(num_tokens)[None]).astype(dtype)
    if cfg.posemb == "learned_2d":
        patches = position_2d.Learned2DPositionEmbedding(
            grid_h, grid_w, cfg.hidden_size, param_dtype=param_dtype, name=name)()
    elif cfg.posemb == "sincos_2d":
        patches = jnp.asarray(position_2d.sincos_2d_table(grid_h, grid_w, cfg.hidden_size))[None]
    else:
        raise ValueError(f"posemb={cfg.posemb!r} has no position table; those with one: "
                         f"{list(TABLE_POSEMBS)}")
    return jnp.pad(patches, ((0, 0), (prefix, 0), (0, 0))).astype(dtype)


class ViTBlock(EncoderBlock):
    """An encoder block that first adds a position table to its input: Table 8's "Every Layer"
    column with `own_table` (the block learns its own, submodule `posemb`), "Every Layer-Shared"
    with the `shared_table` [1, T, D] passed in. With neither, it is the EncoderBlock."""

    own_table: ViTConfig | None = None   # the config whose position_table this block learns

    @nn.compact
    def __call__(self, x, *, shared_table=None, **kwargs):
        if self.own_table is not None:
            x = x + position_table(self.own_table, "posemb")
        if shared_table is not None:
            x = x + shared_table
        return super().__call__(x, **kwargs)


def rope_2d_positions(grid_h: int, grid_w: int, num_prefix_tokens: int) -> np.ndarray:
    """(row, column) RoPE positions of the tokens, int32 [num_prefix_tokens + grid_h * grid_w, 2].

    Prefix tokens (the class token) come first at (0, 0), then the patches in row-major order,
    patch (r, c) at (r + 1, c + 1): no patch shares the class token's position.
    """
    rows, cols = np.meshgrid(np.arange(grid_h), np.arange(grid_w), indexing="ij")
    patches = np.stack([rows.reshape(-1), cols.reshape(-1)], axis=-1) + 1
    return np.concatenate([np.zeros((num_prefix_tokens, 2), np.int64), patches]).astype(np.int32)


class ViT(nn.Module):
    """Image classifier: images [batch, H, W, C] (float) -> logits [batch, num_classes]; with
    num_classes=0 an encoder: -> tokens [batch, num_prefix_tokens + N (or K), hidden_size]; with
    distill_token the pair (class head's, distillation head's logits)."""

    config: ViTConfig

    @nn.compact
    def __call__(self, images, *, train: bool = False, keep_ids=None, masked=None):
        """`keep_ids` int [batch, K]: encode only these patches (row-major indices); `masked`
        bool [batch, N]: a learned mask token in place of these patches (module docstring)."""
        cfg = self.config
        dtype, param_dtype = jnp.dtype(cfg.dtype), jnp.dtype(cfg.param_dtype)
        expected = cfg.image_size
        if images.ndim != 4 or tuple(images.shape[1:3]) != expected:
            raise ValueError(f"images of shape [batch, {expected[0]}, {expected[1]}, channels] "
                             f"expected, got {tuple(images.shape)}")
        if keep_ids is not None or masked is not None:
            cfg.check_per_patch()
            if keep_ids is not None and masked is not None:
                raise ValueError("pass keep_ids (encode the visible patches) or masked (mask "
                                 "tokens in the masked places), not both")
        batch = images.shape[0]
        grid_h, grid_w = cfg.grid
        prefix = cfg.num_prefix_tokens

        images = images.astype(dtype)
        if cfg.stem_channels:  # hybrid: patches of a convolutional feature map
            images = ACTIVATIONS[cfg.activation](nn.Conv(
                cfg.stem_channels, (3, 3), padding="SAME", dtype=dtype, param_dtype=param_dtype,
                name="stem", kernel_init=nn.with_logical_partitioning(
                    nn.initializers.lecun_normal(), (None, None, None, None)),
                bias_init=nn.with_logical_partitioning(nn.initializers.zeros, (None,)))(images))
        # Eq. 1: x_p in R^{N x (P^2 C)} -> x_p E. Patches in row-major order.
        x = nn.Dense(cfg.hidden_size, dtype=dtype, param_dtype=param_dtype, name="patch_embedding",
                     kernel_init=nn.with_logical_partitioning(nn.initializers.lecun_normal(),
                                                              ("patch", "embed")),
                     bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)))(
                         patchify(images, cfg.patch_size))
        if masked is not None:  # MAE Table 1c: the encoder sees a mask token in each masked place
            mask_token = self.param("mask_token", nn.with_logical_partitioning(
                nn.initializers.normal(stddev=0.02), (None, None, "embed")),
                (1, 1, cfg.hidden_size), param_dtype)
            x = jnp.where(masked[..., None], mask_token.astype(dtype), x)

        positions = None
        attention_bias, shared_table, prefix_table = None, None, None
        if cfg.posemb in TABLE_POSEMBS and cfg.posemb_mode == "stem":  # Table 8, "Default/Stem"
            table = position_table(cfg, "posemb")
            prefix_table, x = table[:, :prefix], x + table[:, prefix:]
        elif cfg.posemb in TABLE_POSEMBS and cfg.posemb_mode == "every_layer_shared":
            shared_table = position_table(cfg, "posemb")
        elif cfg.posemb == "relative_bias_2d":
            attention_bias = position_2d.RelativePositionBias2D(
                cfg.num_heads, grid_h, grid_w, num_prefix_tokens=prefix,
                param_dtype=param_dtype, name="relative_bias")()  # float32: as the logits
        elif cfg.posemb == "alibi_2d":  # a constant; the logits are summed in float32 anyway
            attention_bias = jnp.asarray(position.alibi_2d_bias(
                cfg.num_heads, grid_h, grid_w, prefix))[None]
        elif cfg.posemb == "rope_2d":  # (row, column) per token, rotating queries and keys
            table = jnp.asarray(rope_2d_positions(grid_h, grid_w, prefix))
            positions = jnp.broadcast_to(table, (batch, *table.shape))
        if keep_ids is not None:  # MAE: only the visible patches, at their own positions
            x = jnp.take_along_axis(x, keep_ids[..., None], axis=1)
            if positions is not None:
                positions = jnp.concatenate([positions[:, :prefix], jnp.take_along_axis(
                    positions[:, prefix:], keep_ids[..., None], axis=1)], axis=1)

        if cfg.pool == "cls":
            tokens = self.param("cls", nn.with_logical_partitioning(
                nn.initializers.zeros, (None, None, "embed")), (1, 1, cfg.hidden_size), param_dtype)
            if cfg.distill_token:  # DeiT Sec. 4: the distillation token after the class token
                # Drawn (DeiT's code: truncated normal, std 0.02) where the class token is 0, so
                # the two differ before their heads' targets pull them apart.
                dist = self.param("dist", nn.with_logical_partitioning(
                    nn.initializers.truncated_normal(0.02), (None, None, "embed")),
                    (1, 1, cfg.hidden_size), param_dtype)
                tokens = jnp.concatenate([tokens, dist], axis=1)
            tokens = tokens.astype(dtype)
            if prefix_table is not None:
                tokens = tokens + prefix_table
            x = jnp.concatenate([jnp.broadcast_to(tokens, (batch, prefix, cfg.hidden_size)), x],
                                axis=1)
        num_tokens = x.shape[1]
        if positions is None:
            positions = jnp.broadcast_to(jnp.arange(num_tokens), (batch, num_tokens))
        rotary_base = 10000.0 if cfg.posemb == "rope_2d" else None
        relative = cfg.posemb == "relative"   # each block's attention has its relative keys
        own_table = cfg if cfg.posemb_mode == "every_layer" else None

        x = nn.with_logical_constraint(x, ("batch", "length", "embed"))
        x = Dropout(cfg.dropout_rate)(x, deterministic=not train)

        # Stochastic depth: block i's rate (run_blocks names block i `block_{i}`).
        depth_rates = stochastic_depth_rates(cfg.drop_path_rate, max(cfg.num_layers, 1))

        def block(name):
            drop_path = depth_rates[int(name.rpartition("_")[2])] if cfg.drop_path_rate else 0.0
            return ViTBlock(
                num_heads=cfg.num_heads, head_dim=cfg.hidden_size // cfg.num_heads,
                mlp_dim=cfg.mlp_dim, activation=cfg.activation, norm=cfg.norm,
                norm_position=cfg.norm_position, norm_epsilon=cfg.layer_norm_eps,
                dropout_rate=cfg.dropout_rate,
                attention_dropout_rate=cfg.attention_dropout_rate, rotary_base=rotary_base,
                implementation=cfg.attention_implementation,
                relative_positions=grid_h * grid_w if relative else 0,
                relative_prefix_tokens=prefix if relative else 0,
                own_table=own_table, drop_path_rate=drop_path, dtype=dtype,
                param_dtype=param_dtype, name=name)

        x = run_blocks(block, cfg.num_layers, x, remat=cfg.remat, scan=cfg.scan_layers,
                       bias=attention_bias, positions=positions, shared_table=shared_table,
                       deterministic=not train)
        if cfg.norm_position == "pre":  # pre-LN stacks end with a norm (eq. 4: y = LN(z_L^0))
            x = make_norm(cfg.norm, epsilon=cfg.layer_norm_eps, dtype=dtype, param_dtype=param_dtype,
                          name="final_norm")(x)
        if cfg.num_classes == 0:  # an encoder (MAE's): its tokens
            return x

        pooled = pool_tokens(x, cfg.pool)
        if cfg.probe_norm:
            pooled = ProbeNorm(param_dtype=param_dtype, name="probe_norm")(pooled)
        if cfg.head_hidden_size:
            pooled = jnp.tanh(nn.Dense(
                cfg.head_hidden_size, dtype=dtype, param_dtype=param_dtype, name="pre_logits",
                kernel_init=nn.with_logical_partitioning(nn.initializers.lecun_normal(), ("embed", "mlp")),
                bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("mlp",)))(pooled))
        # Zero-initialised classifier, as the paper does for fine-tuning heads.
        in_axis = "mlp" if cfg.head_hidden_size else "embed"

        def head(name):
            return nn.Dense(
                cfg.num_classes, dtype=dtype, param_dtype=param_dtype, name=name,
                kernel_init=nn.with_logical_partitioning(nn.initializers.zeros,
                                                         (in_axis, "classes")),
                bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("classes",)))

        logits = head("head")(pooled).astype(jnp.float32)
        if cfg.distill_token:  # DeiT: the distillation token's own linear head
            return logits, head("head_dist")(x[:, 1]).astype(jnp.float32)
        return logits

