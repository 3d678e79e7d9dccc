"""Image classification: softmax cross-entropy (optionally label-smoothed), accuracy.

A task is what the trainer is generic over (train/tasks/base.py): it builds the model and the
data from the config, and gives the pure loss and eval functions that the trainer jits. Losses
and metrics are returned as sums with their counts; the trainer normalises (and the host
divides when it logs), so padded examples and gradient accumulation never bias an average.

Initialisation (`config.init`, train/vit_init.py): 'scratch', an .npz or Hugging Face ViT
checkpoint, or an earlier classification workdir, whose weights replace the random ones in
`init_variables` (the head kept or new, `config.init_head`). With `config.data.resize` the
stored images are resized bilinearly to config.model.image_size on the device, before the model
(the ViT paper fine-tunes at a higher resolution than it pre-trains at, Sec. 3.2).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from data.pipelines import images as image_data
from data.pipelines.sharding import num_batches
from data.builders import sources
from models.vit import ViT, ViTConfig
from train import flops
from train.config import ConfigError, check_choice
from train.losses import cross_entropy
from train.pretrained_params import put_pretrained
from train.run_config import Resolution
from train.tasks.base import Task
from train.vit_init import resolve_init

MODELS = {"vit": (ViT, ViTConfig)}
# How pixels become model inputs: the dataset's per-channel mean and std
# (data/builders/sources.py NORMALIZATION), or x / 127.5 - 1, the [-1, 1] range of the ViT
# paper's input pipeline (and of the published ViT checkpoints).
NORMALIZATIONS = {"dataset": None, "minus_one_to_one": (0.5, 0.5)}


def _init(config: ml_collections.ConfigDict, *, build: bool):
    check_choice(config, "model.name", MODELS)
    return resolve_init(config, build=build)


def model_input(images, image_size: tuple[int, int]):
    """A batch of normalised images [b, h, w, c] at the model's `image_size`: as stored, or
    resized bilinearly (config.data.resize; antialiased when shrinking). The task's steps and
    `python -m train.predict` both feed the model through it."""
    height, width = image_size
    if images.shape[1:3] == (height, width):
        return images
    return jax.image.resize(images, (images.shape[0], height, width, images.shape[3]),
                            method="bilinear")


def pixel_scale(data, channels: int) -> tuple[tuple[float, ...] | None, tuple[float, ...] | None]:
    """The (mean, std) per channel that config.data.normalize gives the image pipeline
    (data/pipelines/images.py `normalization`): (None, None) for the dataset's own constants."""
    centre = NORMALIZATIONS[data.normalize]
    if centre is None:
        return None, None
    return (centre[0],) * channels, (centre[1],) * channels


class ClassificationTask(Task):
    """ViT (or any `images -> logits` model) on a labelled image dataset."""

    def __init__(self, config: ml_collections.ConfigDict, saved_vocabulary=None):
        if saved_vocabulary is not None:
            raise ConfigError(f"this workdir holds a vocabulary ({saved_vocabulary.path}): it was "
                              "used by a text task, not image classification; use a new --workdir")
        check_choice(config, "data.source", ("local", "tfds"))
        check_choice(config, "data.augment", image_data.AUGMENTATIONS)
        check_choice(config, "data.eval_resize", image_data.EVAL_RESIZES)
        check_choice(config, "data.normalize", NORMALIZATIONS)
        self.init = _init(config, build=True)
        self.model_config = self.init.model_config
        self.model = MODELS[config.model.name][0](self.model_config)
        self.config = config
        self.label_smoothing = float(config.task.label_smoothing)
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ConfigError(f"config.task.label_smoothing={self.label_smoothing} must be in [0, 1)")
        shape = tuple(config.data.image_shape)
        if shape[:2] != self.model_config.image_size and not config.data.resize:
            raise ConfigError(f"config.model.image_size={self.model_config.image_size} does not "
                              f"match config.data.image_shape={shape}; set config.data.resize="
                              "True to resize the images to the model's size")
        self.image_shape = shape
        self.d_model = self.model_config.hidden_size

    @staticmethod
    def datasets(config) -> tuple[str, ...]:
        return (config.data.name,) if config.data.source == "local" else ()

    @classmethod
    def plan(cls, config, saved_vocabulary=None) -> Resolution:
        """The model of config.model, or of config.init's checkpoint (its config and tensor
        shapes read, not its weights), and the notes on what is carried over."""
        init = _init(config, build=False)
        return Resolution(init.model_config, notes=init.notes)

    def resolution(self) -> Resolution:
        return Resolution(self.model_config, notes=self.init.notes)

    # ---- model -----------------------------------------------------------------------------
    def dummy_inputs(self, batch_size: int) -> dict[str, np.ndarray]:
        return {"image": np.zeros((batch_size, *self.image_shape), np.float32)}

    def _model_input(self, images):
        return model_input(images, self.model_config.image_size)

    def init_variables(self, rng, inputs):
        variables = self.model.init({"params": rng}, self._model_input(inputs["image"]),
                                    train=False)
        if self.init.params is None:
            return variables
        return {**variables, "params": put_pretrained(
            variables["params"], self.init.params, fresh=self.init.fresh,
            what=f"the weights of config.init={self.config.init!r}")}

    def flops_per_example(self) -> float:
        return flops.vit_train_flops_per_example(self.model_config, channels=self.image_shape[-1])

    # ---- pure functions the trainer jits ---------------------------------------------------
    def loss_normalizers(self, batch):
        """The cross-entropy is a mean over the real (mask = 1) examples."""
        return {"cross_entropy": batch["mask"].sum()}

    def loss_fn(self, params, batch, rng):
        """({'cross_entropy': sum over real examples}, {'accuracy': (sum, count)})."""
        logits = self.model.apply({"params": params}, self._model_input(batch["image"]),
                                  train=True, rngs={"dropout": rng})
        weights = batch["mask"]
        losses = cross_entropy(logits, batch["label"], self.label_smoothing) * weights
        correct = (jnp.argmax(logits, -1) == batch["label"]) * weights
        return {"cross_entropy": losses.sum()}, {"accuracy": (correct.sum(), weights.sum())}

    def eval_fn(self, params, batch):
        """Metric sums over the real (mask = 1) examples of one eval batch."""
        logits = self.model.apply({"params": params}, self._model_input(batch["image"]),
                                  train=False)
        weights = batch["mask"]
        losses = cross_entropy(logits, batch["label"]) * weights
        correct = (jnp.argmax(logits, -1) == batch["label"]) * weights
        count = weights.sum()
        return {"loss": (losses.sum(), count), "accuracy": (correct.sum(), count)}

    # ---- data --------------------------------------------------------------------------------
    def _source(self, split: str):
        return sources.get_data_source(self.config.data.name, split, source=self.config.data.source)

    def _pixels(self) -> dict:
        """How the pipeline brings images to the model's size and scale (config.data)."""
        mean, std = pixel_scale(self.config.data, self.image_shape[-1])
        return dict(image_shape=self.image_shape, eval_resize=self.config.data.eval_resize,
                    mean=mean, std=std)

    def train_iterator(self, *, batch_size: int, seed: int, process_index: int, process_count: int):
        """Endless, shuffled, per-process batches; a grain iterator with get_state/set_state."""
        return image_data.image_batches(
            self._source(self.config.data.train_split), batch_size=batch_size, train=True,
            seed=seed, process_index=process_index, process_count=process_count,
            augment=self.config.data.augment, **self._pixels())

    def eval_batches(self, *, batch_size: int, process_index: int, process_count: int):
        """(iterator over this process's eval batches, number of batches every process runs)."""
        source = self._source(self.config.data.eval_split)
        iterator = image_data.image_batches(
            source, batch_size=batch_size, train=False, seed=0, process_index=process_index,
            process_count=process_count, augment="none", **self._pixels())
        return iterator, num_batches(len(source), batch_size=batch_size,
                                                process_count=process_count)
