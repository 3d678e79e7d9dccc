"""Masked-autoencoder pretraining (He et al. 2022): reconstruct the masked patches of unlabelled
training images (models/mae.py).

The data are config.data's images (their labels are never read): each batch carries a random
order of every image's patches (data/pipelines/patch_masking.py), of which the model keeps the
first K visible. The loss is the mean squared error over the masked patches only, on the pixels
as the model reads them (config.data.normalize) or, with config.model.norm_pix_loss, on each
target patch normalised by its own mean and variance:

    loss = sum over real images, masked patches of mean over pixels (prediction - target)^2
           / (real images x masked patches per image)

returned as the sum with its count as normalizer (train/tasks/base.py): the count is the number
of masked patches in the whole batch, so gradient accumulation is exact, and padded eval rows
(mask 0) count for nothing.

Metrics: `loss` (the objective) and `pixel_mse`, the same error on the model's input pixels
(for norm_pix_loss the predictions are taken back to pixels with each true patch's mean and
variance, `models.mae.denormalized`; without it the two are equal), which compares runs of
either target. The eval reads the test images with masks fixed by the eval pipeline's seed,
the same at every eval of every run.

config.model: `encoder` (a ViT's keys, without its classifier's: num_classes is 0),
`decoder` (hidden_size, num_layers, num_heads, mlp_dim), mask_ratio, norm_pix_loss,
mask_token_in_encoder. The fine-tuning and linear-probe runs start from the workdir
(`configs/vit/fashion_mnist.py:init=WORKDIR`, train/vit_init.py).
"""

from __future__ import annotations

import jax.numpy as jnp
import ml_collections
import numpy as np

from data.pipelines.patch_masking import KEY
from models import mae
from models.vit import ViTConfig, patchify
from train import flops
from train.config import ConfigError, check_choice, check_keys, to_dataclass
from train.run_config import Resolution
from train.tasks.base import Task
from train.tasks.image_data import ImageData, check_data, check_dataset


MODEL_KEYS = ("name", "encoder", "decoder", "mask_ratio", "norm_pix_loss",
              "mask_token_in_encoder")


def model_config(config: ml_collections.ConfigDict) -> mae.MAEConfig:
    """The MAEConfig of config.model; errors name the key."""
    check_choice(config, "model.name", ("mae",))
    model = config.model
    check_keys(model, "model", MODEL_KEYS, "the MAE task")
    for key in ("norm_pix_loss", "mask_token_in_encoder"):
        if not isinstance(model[key], bool):
            raise ConfigError(f"config.model.{key}={model[key]!r} must be True or False")
    for key in ("num_classes", "head_hidden_size", "probe_norm"):
        if key in model.encoder:
            raise ConfigError(f"config.model.encoder.{key}: the MAE encoder has no classifier "
                              "(num_classes=0); remove the key")
    encoder = to_dataclass(ViTConfig, model.encoder, "model.encoder", num_classes=0)
    decoder = to_dataclass(mae.MAEDecoderConfig, model.decoder, "model.decoder")
    try:
        return mae.MAEConfig(encoder, decoder, mask_ratio=float(model.mask_ratio),
                             norm_pix_loss=model.norm_pix_loss,
                             mask_token_in_encoder=model.mask_token_in_encoder)
    except ValueError as error:
        raise ConfigError(f"config.model: {error}") from error


class MAEPretrainingTask(ImageData, Task):
    """A masked autoencoder on the training images of an image dataset."""

    DATA_KEYS = Task.DATA_KEYS + ImageData.IMAGE_KEYS

    def __init__(self, config: ml_collections.ConfigDict, saved_vocabulary=None):
        if saved_vocabulary is not None:
            raise ConfigError(f"this workdir holds a vocabulary ({saved_vocabulary.path}): it was "
                              "used by a text task, not MAE pretraining; use a new --workdir")
        check_data(config)
        check_dataset(config)
        self.config = config
        self.model_config = model_config(config)
        self.model = mae.MAE(self.model_config)
        shape = tuple(config.data.image_shape)
        if shape[:2] != self.model_config.encoder.image_size:
            raise ConfigError(f"config.model.encoder.image_size="
                              f"{self.model_config.encoder.image_size} does not match "
                              f"config.data.image_shape={shape}")
        values = self.model_config.encoder.patch_size ** 2 * shape[-1]
        if self.model_config.norm_pix_loss and values < 2:
            raise ConfigError(f"config.model.norm_pix_loss=True normalises each patch's "
                              f"{values} value by its variance, which one value does not have "
                              "(every target would be NaN): use patches of more than one pixel "
                              "(config.model.encoder.patch_size) or norm_pix_loss=False")
        self.image_shape = shape
        self.patch_order = self.model_config.num_patches
        self.d_model = self.model_config.encoder.hidden_size

    @classmethod
    def plan(cls, config, saved_vocabulary=None) -> Resolution:
        check_data(config)
        return Resolution(model_config(config))

    # ---- model -----------------------------------------------------------------------------
    def dummy_inputs(self, batch_size: int) -> dict[str, np.ndarray]:
        order = np.broadcast_to(np.arange(self.patch_order, dtype=np.int32),
                                (batch_size, self.patch_order))
        return {"image": np.zeros((batch_size, *self.image_shape), np.float32), KEY: order}

    def init_variables(self, rng, inputs):
        return self.model.init({"params": rng}, inputs["image"], inputs[KEY], train=False)

    def flops_per_example(self) -> float:
        return flops.mae_train_flops_per_example(self.model_config, channels=self.image_shape[-1])

    # ---- pure functions the trainer jits ---------------------------------------------------
    def loss_normalizers(self, batch):
        """The loss is a mean over the masked patches of the real images."""
        return {"mse": batch["mask"].sum() * self.model_config.num_masked}

    def _sums(self, params, batch, *, train: bool, rng=None):
        """(sum of the loss, sum of the pixel error, count of masked patches) over the batch."""
        out = self.model.apply({"params": params}, batch["image"], batch[KEY], train=train,
                               rngs=None if rng is None else {"dropout": rng})
        predictions = out["predictions"]
        weights = out["masked"] * batch["mask"][:, None]
        loss = mae.patch_errors(predictions, mae.targets(self.model_config, batch["image"]))
        patches = patchify(batch["image"].astype(jnp.float32), self.model_config.encoder.patch_size)
        pixels = mae.denormalized(predictions, patches) if self.model_config.norm_pix_loss \
            else predictions
        pixel_error = mae.patch_errors(pixels, patches)
        return (loss * weights).sum(), (pixel_error * weights).sum(), weights.sum()

    def loss_fn(self, params, batch, rng):
        """({'mse': sum over the masked patches of real images}, {'pixel_mse': (sum, count)})."""
        loss, pixel_error, count = self._sums(params, batch, train=True, rng=rng)
        return {"mse": loss}, {"pixel_mse": (pixel_error, count)}

    def eval_fn(self, params, batch):
        """Metric sums over the masked patches of the real (mask = 1) images of one batch."""
        loss, pixel_error, count = self._sums(params, batch, train=False)
        return {"loss": (loss, count), "pixel_mse": (pixel_error, count)}
