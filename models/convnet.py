"""A small residual convnet for image classification: this project's DeiT teacher.

DeiT (Touvron et al. 2021, Sec. 5.2 and Table 2) finds a convnet a better teacher for a vision
transformer than a transformer of the same accuracy, "probably due to the inductive bias
inherited by the transformers through distillation" (Abnar et al. 2020). Its teachers are
RegNetYs trained on ImageNet; here a ResNet (He et al. 2016, "Deep Residual Learning for Image
Recognition") sized for 28 x 28 images and a 2-core CPU:

  stem     a 3x3 convolution to `widths[0]` channels, norm, ReLU
  stage s  `blocks_per_stage` basic blocks of `widths[s]` channels (He et al. Fig. 2, left: two
           3x3 convolutions, each followed by a norm, the shortcut added before the second
           ReLU); every stage after the first begins with a block of stride 2 (half the
           resolution), whose shortcut is a strided 1x1 convolution and a norm (He et al.'s
           "option B", Sec. 3.3)
  head     global average pooling, dropout (`dropout_rate`), a zero-initialised linear classifier

The norm is GroupNorm (Wu & He 2018, "Group Normalization"), not BatchNorm: it standardises each
example by itself over groups of `norm_groups` channels, so the network is a pure function of its
parameters (the trainer's state holds no batch statistics), computes the same in training and
evaluation, and does not depend on the batch size or on how the batch is split over devices.
Each block's last norm starts with a zero scale (Goyal et al. 2017, "Accurate, Large Minibatch
SGD", Sec. 5.1), so every residual block starts as the identity.

Parameters carry logical axis names as the Transformers' do: every channel axis a kernel writes
is 'mlp' (split over the mesh's tensor axis), the classifier's 'mlp' -> 'classes'.
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax.numpy as jnp

from models.config_checks import DTYPES, check_at_least, check_choices, check_rates
from models.dropout import Dropout


@dataclasses.dataclass(frozen=True)
class ConvNetConfig:
    """Every architectural choice of the convnet; built from `config.model` by the trainer."""

    num_classes: int
    image_size: tuple[int, int] = (28, 28)   # (height, width) the model is trained at
    widths: tuple[int, ...] = (32, 64, 128)  # channels of each stage; stages 2.. halve the size
    blocks_per_stage: int = 2
    norm_groups: int = 8                      # GroupNorm's groups (each width divisible by it)
    dropout_rate: float = 0.0                 # on the pooled features, before the classifier
    dtype: str = "float32"                    # compute dtype
    param_dtype: str = "float32"              # parameter (and optimizer state) dtype

    def __post_init__(self):
        object.__setattr__(self, "image_size", tuple(int(s) for s in self.image_size))
        object.__setattr__(self, "widths", tuple(int(w) for w in self.widths))
        if len(self.image_size) != 2 or min(self.image_size) < 1:
            raise ValueError(f"image_size={self.image_size} must be (height, width), both >= 1")
        if not self.widths or min(self.widths) < 1:
            raise ValueError(f"widths={self.widths} must name at least one stage's channels, "
                             "each >= 1")
        check_at_least(self, {"num_classes": 1, "blocks_per_stage": 1, "norm_groups": 1})
        uneven = [w for w in self.widths if w % self.norm_groups]
        if uneven:
            raise ValueError(f"norm_groups={self.norm_groups} does not divide the widths "
                             f"{uneven}: GroupNorm splits each width into equal groups")
        check_rates(self, ("dropout_rate",))
        check_choices(self, {"dtype": DTYPES, "param_dtype": DTYPES})

    @property
    def hidden_size(self) -> int:
        """The width of the features the classifier reads (a ViT's hidden_size): the last
        stage's channels."""
        return self.widths[-1]


def _conv(features: int, kernel: int, stride: int, cfg: ConvNetConfig, name: str) -> nn.Conv:
    """A bias-free convolution (a norm follows it), He-normal initialised (He et al. 2015)."""
    return nn.Conv(features, (kernel, kernel), strides=(stride, stride), padding="SAME",
                   use_bias=False, dtype=jnp.dtype(cfg.dtype),
                   param_dtype=jnp.dtype(cfg.param_dtype), name=name,
                   kernel_init=nn.with_logical_partitioning(
                       nn.initializers.he_normal(), (None, None, None, "mlp")))


def _norm(cfg: ConvNetConfig, name: str, zero_scale: bool = False) -> nn.GroupNorm:
    scale = nn.initializers.zeros if zero_scale else nn.initializers.ones
    return nn.GroupNorm(num_groups=cfg.norm_groups, epsilon=1e-5, dtype=jnp.float32,
                        param_dtype=jnp.dtype(cfg.param_dtype), name=name,
                        scale_init=nn.with_logical_partitioning(scale, ("mlp",)),
                        bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("mlp",)))


class BasicBlock(nn.Module):
    """He et al. 2016, Fig. 2 (left): relu(x' + norm(conv(relu(norm(conv(x)))))), x' the input,
    or its strided 1x1 projection when the block changes the width or the resolution."""

    features: int
    stride: int
    config: ConvNetConfig

    @nn.compact
    def __call__(self, x):
        cfg, dtype = self.config, jnp.dtype(self.config.dtype)
        y = nn.relu(_norm(cfg, "norm_1")(_conv(self.features, 3, self.stride, cfg, "conv_1")(x)))
        y = _norm(cfg, "norm_2", zero_scale=True)(_conv(self.features, 3, 1, cfg, "conv_2")(y))
        shortcut = x
        if self.stride != 1 or x.shape[-1] != self.features:  # option B: a projection
            shortcut = _norm(cfg, "shortcut_norm")(
                _conv(self.features, 1, self.stride, cfg, "shortcut")(x))
        return nn.relu(y.astype(dtype) + shortcut.astype(dtype))


class ConvNet(nn.Module):
    """Image classifier: images [batch, H, W, C] (float) -> logits [batch, num_classes]."""

    config: ConvNetConfig

    @nn.compact
    def __call__(self, images, *, train: bool = False):
        cfg = self.config
        dtype = jnp.dtype(cfg.dtype)
        if images.ndim != 4 or tuple(images.shape[1:3]) != cfg.image_size:
            raise ValueError(f"images of shape [batch, {cfg.image_size[0]}, {cfg.image_size[1]}, "
                             f"channels] expected, got {tuple(images.shape)}")
        x = nn.relu(_norm(cfg, "stem_norm")(_conv(cfg.widths[0], 3, 1, cfg, "stem")(
            images.astype(dtype)))).astype(dtype)
        for stage, width in enumerate(cfg.widths):
            for index in range(cfg.blocks_per_stage):
                stride = 2 if stage > 0 and index == 0 else 1
                x = BasicBlock(width, stride, cfg, name=f"stage_{stage}_block_{index}")(x)
        pooled = x.astype(jnp.float32).mean(axis=(1, 2))   # global average pooling
        pooled = Dropout(cfg.dropout_rate)(pooled, deterministic=not train)
        logits = nn.Dense(
            cfg.num_classes, dtype=dtype, param_dtype=jnp.dtype(cfg.param_dtype), name="head",
            kernel_init=nn.with_logical_partitioning(nn.initializers.zeros, ("mlp", "classes")),
            bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("classes",)))(
                pooled.astype(dtype))
        return logits.astype(jnp.float32)

