"""The image data of the image tasks (classification, masked-autoencoder pretraining): the
splits of `config.data` through the grain pipeline of data/pipelines/images.py.

config.data keys read here: name, source, image_shape, train_split, eval_split, augment,
eval_resize, normalize, and the training subset: train_fraction (1.0: the whole split; less:
that fraction of it, data/pipelines/subsets.py) drawn as train_subset says ('random' |
'balanced': the same number of every class), seeded with config.seed, so a seed takes the same
examples in every run (fine-tuning from a pretrained encoder and from scratch see the same
labels).
"""

from __future__ import annotations

from data.builders import sources
from data.errors import DataError
from data.pipelines import images as image_data
from data.pipelines import subsets
from data.pipelines.sharding import num_batches
from train.config import ConfigError, check_choice

# How pixels become model inputs: the dataset's per-channel mean and std
# (data/builders/sources.py NORMALIZATION), or x / 127.5 - 1, the [-1, 1] range of the ViT
# paper's input pipeline (and of the published ViT checkpoints).
NORMALIZATIONS = {"dataset": None, "minus_one_to_one": (0.5, 0.5)}


def pixel_scale(data, channels: int) -> tuple[tuple[float, ...] | None, tuple[float, ...] | None]:
    """The (mean, std) per channel that config.data.normalize gives the image pipeline
    (data/pipelines/images.py `normalization`): (None, None) for the dataset's own constants.
    The tasks' pipelines and `python -m train.predict` both normalise through it."""
    centre = NORMALIZATIONS[data.normalize]
    if centre is None:
        return None, None
    return (centre[0],) * channels, (centre[1],) * channels


def check_dataset(config) -> None:
    """ConfigError when config.data.name is not an image classification dataset (a text
    corpus's examples have no 'image' to read); the dataset must be fetched."""
    data = config.data
    features = sources.features_of(data.name, data.source)  # any image size: ImageNet's vary
    if "image" not in features or "label" not in features:
        raise ConfigError(f"config.data.name={data.name!r} ({data.source}) is not an image "
                          f"classification dataset (features {features}). The image tasks read "
                          "one: fashion_mnist (python -m data.fetch fashion_mnist), or one of "
                          "the TFDS catalog's with config.data.source='tfds'")


def check_data(config) -> None:
    """ConfigError for a config.data value the pipeline does not take."""
    check_choice(config, "data.source", ("local", "tfds"))
    check_choice(config, "data.augment", image_data.AUGMENTATIONS)
    check_choice(config, "data.eval_resize", image_data.EVAL_RESIZES)
    check_choice(config, "data.normalize", NORMALIZATIONS)
    check_choice(config, "data.train_subset", subsets.HOW)
    shape = tuple(config.data.image_shape)
    if len(shape) != 3 or not all(isinstance(n, int) and n > 0 for n in shape):
        raise ConfigError(f"config.data.image_shape={shape} must be (height, width, channels), "
                          "e.g. (28, 28, 1)")
    if config.data.worker_count < 0:
        raise ConfigError(f"config.data.worker_count={config.data.worker_count} must be >= 0 "
                          "(0: read in the training process)")
    fraction = config.data.train_fraction
    if not 0.0 < fraction <= 1.0:
        raise ConfigError(f"config.data.train_fraction={fraction} must be in (0, 1] (1: the "
                          "whole training split)")


def check_classes(config, num_classes: int) -> None:
    """ConfigError when the classifier's `num_classes` is not config.data.name's number of
    classes: fewer, and a label past the last makes the loss NaN; more, and the model predicts
    classes the dataset does not have."""
    data = config.data
    classes = sources.dataset_info(data.name, data.source).num_classes
    if num_classes != classes:
        raise ConfigError(f"the classifier has {num_classes} classes (config.model.num_classes, "
                          f"or config.init's), but config.data.name={data.name!r} has {classes}: "
                          f"set --config.model.num_classes={classes}")


class ImageData:
    """The data methods of an image task (train/tasks/base.py); the task sets `config`,
    `image_shape`, `patch_order` (0, or the patches per image whose random order each batch
    carries: data/pipelines/patch_masking.py), `repeated_augment` (DeiT's repeated
    augmentation: each training image this many times in a batch, differently augmented) and
    `num_classes` (a classifier's, which every label must be one of; None: unchecked)."""

    IMAGE_KEYS = ("name", "image_shape", "augment", "eval_resize", "normalize", "train_fraction",
                  "train_subset", "worker_count")  # the config.data keys read here
    config = None
    image_shape: tuple[int, ...] = ()
    patch_order: int = 0
    repeated_augment: int = 1
    num_classes: int | None = None

    @staticmethod
    def datasets(config) -> tuple[str, ...]:
        return (config.data.name,) if config.data.source == "local" else ()

    def _source(self, split: str):
        return sources.get_data_source(self.config.data.name, split, source=self.config.data.source)

    def train_source(self):
        """The training split, or the fraction of it config.data.train_fraction asks for (its
        labels read once per task, the images left undecoded); a classifier of another number
        of classes than the dataset's is refused first (`check_classes`)."""
        if getattr(self, "_train_source", None) is None:
            if self.num_classes is not None:
                check_classes(self.config, self.num_classes)
            source = self._source(self.config.data.train_split)
            data = self.config.data
            if data.train_fraction != 1.0:
                labels = subsets.split_labels(data.name, data.train_split, source=data.source)
                try:
                    chosen = subsets.choose(labels, data.train_fraction, data.train_subset,
                                            seed=self.config.seed)
                except DataError as error:
                    raise ConfigError(f"config.data.train_fraction={data.train_fraction}: "
                                      f"{error}") from error
                source = subsets.Subset(source, chosen)
            self._train_source = source
        return self._train_source

    def _pixels(self) -> dict:
        """How the pipeline brings images to the model's size and scale (config.data)."""
        mean, std = pixel_scale(self.config.data, self.image_shape[-1])
        return dict(image_shape=self.image_shape, eval_resize=self.config.data.eval_resize,
                    patch_order=self.patch_order, mean=mean, std=std)

    def train_iterator(self, *, batch_size: int, seed: int, process_index: int, process_count: int):
        """Endless, shuffled, per-process batches; a grain iterator with get_state/set_state."""
        return image_data.image_batches(
            self.train_source(), batch_size=batch_size, train=True, seed=seed,
            process_index=process_index, process_count=process_count,
            augment=self.config.data.augment, repeated_augment=self.repeated_augment,
            worker_count=self.config.data.worker_count, num_classes=self.num_classes,
            **self._pixels())

    def eval_batches(self, *, batch_size: int, process_index: int, process_count: int):
        """(iterator over this process's eval batches, number of batches every process runs)."""
        source = self._source(self.config.data.eval_split)
        iterator = image_data.image_batches(
            source, batch_size=batch_size, train=False, seed=0, process_index=process_index,
            process_count=process_count, augment="none", num_classes=self.num_classes,
            **self._pixels())
        return iterator, num_batches(len(source), batch_size=batch_size,
                                     process_count=process_count)
