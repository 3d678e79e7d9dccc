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

`config.model.name` picks the model (train/image_models.py): 'vit', or 'convnet' (a small ResNet,
trained from scratch only: DeiT's convnet teacher). DeiT's training recipe (Touvron et al. 2021,
Table 9) is options here: Mixup and CutMix (`config.task.mixup_alpha`, `cutmix_alpha`,
`mixup_prob`, `mixup_switch_prob`; train/mixing.py), drawn on the device from the step's key and
learned with the soft-label cross-entropy; repeated augmentation (`config.data.repeated_augment`,
data/pipelines/images.py); stochastic depth (config.model.drop_path_rate, models/vit.py); the
weights' moving average is the trainer's (config.train.ema_decay). A ViT with DeiT's distillation
token trains with its teacher (train/tasks/deit.py), not here.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from data.pipelines import images as image_data
from data.pipelines.sharding import num_batches
from data.builders import sources
from models.vit import ViTConfig
from train.config import ConfigError, check_choice, to_dataclass
from train.image_models import MODELS
from train.losses import cross_entropy, one_hot_targets, soft_cross_entropy
from train.mixing import MIX_STREAM, MixConfig, mix_batch
from train.pretrained_params import put_pretrained
from train.run_config import Resolution
from train.tasks.base import Task
from train.vit_init import ViTInit, resolve_init

# How pixels become model inputs: the dataset's per-channel mean and std
# (data/builders/sources.py NORMALIZATION), or x / 127.5 - 1, the [-1, 1] range of the ViT
# paper's input pipeline (and of the published ViT checkpoints).
NORMALIZATIONS = {"dataset": None, "minus_one_to_one": (0.5, 0.5)}


def image_init(config: ml_collections.ConfigDict, *, build: bool) -> ViTInit:
    check_choice(config, "model.name", MODELS)
    if config.model.name == "vit":
        return resolve_init(config, build=build)
    if config.init != "scratch":
        raise ConfigError(f"config.init={config.init!r}: a model.name={config.model.name!r} "
                          "run trains from scratch (only ViT weights are read); set "
                          "init='scratch'")
    section = config.model.copy_and_resolve_references()
    with section.unlocked():
        del section["name"]
    return ViTInit(to_dataclass(MODELS[config.model.name].config, section, "model"), None, (), ())


def mix_config(config: ml_collections.ConfigDict) -> MixConfig:
    """config.task's Mixup / CutMix settings (train/mixing.py)."""
    task = config.task
    try:
        return MixConfig(task.mixup_alpha, task.cutmix_alpha, task.mixup_prob,
                         task.mixup_switch_prob)
    except ValueError as error:
        raise ConfigError(f"config.task: {error} (mixup_prob and mixup_switch_prob are prob and "
                          "switch_prob there)") from error


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
        self.init = image_init(config, build=True)
        self.model_config = self.init.model_config
        self.model = MODELS[config.model.name].module(self.model_config)
        self.config = config
        self._check_heads()
        self.mixing = mix_config(config)
        repeats = config.data.repeated_augment
        if repeats < 1 or config.data.batch_size % repeats:
            raise ConfigError(f"config.data.repeated_augment={repeats} must be >= 1 and divide "
                              f"config.data.batch_size={config.data.batch_size}")
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

    def _check_heads(self) -> None:
        """A ViT with a distillation token has a head that learns from a teacher: not here."""
        if isinstance(self.model_config, ViTConfig) and self.model_config.distill_token:
            raise ConfigError("config.model.distill_token=True: the distillation head learns from "
                              "a teacher, which task.name='deit' reads (configs/vit/deit.py); "
                              "here set distill_token=False")

    @staticmethod
    def datasets(config) -> tuple[str, ...]:
        return (config.data.name,) if config.data.source == "local" else ()

    @classmethod
    def plan(cls, config, saved_vocabulary=None) -> Resolution:
        """The model of config.model, or of config.init's checkpoint (its config and tensor
        shapes read, not its weights), and the notes on what is carried over."""
        init = image_init(config, build=False)
        return Resolution(init.model_config, notes=init.notes)

    def resolution(self) -> Resolution:
        return Resolution(self.model_config, notes=self.init.notes)

    # ---- model -----------------------------------------------------------------------------
    def dummy_inputs(self, batch_size: int) -> dict[str, np.ndarray]:
        return {"image": np.zeros((batch_size, *self.image_shape), np.float32)}

    def _model_input(self, images):
        """The batch's images at the model's size: as stored, or resized bilinearly
        (config.data.resize; antialiased when shrinking)."""
        height, width = self.model_config.image_size
        if images.shape[1:3] == (height, width):
            return images
        return jax.image.resize(images, (images.shape[0], height, width, images.shape[3]),
                                method="bilinear")

    def init_variables(self, rng, inputs):
        variables = self.model.init({"params": rng}, self._model_input(inputs["image"]),
                                    train=False)
        if self.init.params is None:
            return variables
        return {**variables, "params": put_pretrained(
            variables["params"], self.init.params, fresh=self.init.fresh,
            what=f"the weights of config.init={self.config.init!r}")}

    def flops_per_example(self) -> float:
        return MODELS[self.config.model.name].train_flops(self.model_config, self.image_shape[-1])

    # ---- pure functions the trainer jits ---------------------------------------------------
    def loss_normalizers(self, batch):
        """The cross-entropy is a mean over the real (mask = 1) examples."""
        return {"cross_entropy": batch["mask"].sum()}

    def mixed(self, batch, rng):
        """(images, target distributions [b, K] or None, the labels accuracy counts against) of
        a training batch: with Mixup / CutMix (train/mixing.py) the mixed images and targets
        and each row's larger share's label, drawn from a key folded from the step's `rng`
        (the dropout key stays as it is); else the batch as it is, None and its labels."""
        if not self.mixing.enabled:
            return batch["image"], None, batch["label"]
        targets = one_hot_targets(batch["label"], self.model_config.num_classes,
                                  self.label_smoothing)
        mixed = mix_batch(jax.random.fold_in(rng, MIX_STREAM), batch["image"], targets,
                          self.mixing)
        return mixed.images, mixed.targets, jnp.argmax(mixed.targets, axis=-1)

    def loss_fn(self, params, batch, rng):
        """({'cross_entropy': sum over real examples}, {'accuracy': (sum, count)})."""
        images, targets, labels = self.mixed(batch, rng)
        logits = self.model.apply({"params": params}, self._model_input(images),
                                  train=True, rngs={"dropout": rng})
        weights = batch["mask"]
        losses = (cross_entropy(logits, labels, self.label_smoothing) if targets is None
                  else soft_cross_entropy(logits, targets)) * weights
        correct = (jnp.argmax(logits, -1) == labels) * weights
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
        data = self.config.data
        centre = NORMALIZATIONS[data.normalize]
        channels = self.image_shape[-1]
        return dict(image_shape=self.image_shape, eval_resize=data.eval_resize,
                    mean=None if centre is None else (centre[0],) * channels,
                    std=None if centre is None else (centre[1],) * channels)

    def train_iterator(self, *, batch_size: int, seed: int, process_index: int, process_count: int):
        """Endless, shuffled, per-process batches; a grain iterator with get_state/set_state."""
        return image_data.image_batches(
            self._source(self.config.data.train_split), batch_size=batch_size, train=True,
            seed=seed, process_index=process_index, process_count=process_count,
            augment=self.config.data.augment,
            repeated_augment=self.config.data.repeated_augment, **self._pixels())

    def eval_batches(self, *, batch_size: int, process_index: int, process_count: int):
        """(iterator over this process's eval batches, number of batches every process runs)."""
        source = self._source(self.config.data.eval_split)
        iterator = image_data.image_batches(
            source, batch_size=batch_size, train=False, seed=0, process_index=process_index,
            process_count=process_count, augment="none", **self._pixels())
        return iterator, num_batches(len(source), batch_size=batch_size,
                                                process_count=process_count)
