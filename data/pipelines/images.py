"""Grain pipeline for image classification: shuffled, sharded, batched, normalised.

Every batch is a dict of numpy arrays for ONE process:
  'image'  float32 [b, h, w, c]  (x / 255 - mean) / std, per channel
  'label'  int32   [b]
  'mask'   float32 [b]            1 for a real example, 0 for eval padding
  'patch_order' int32 [b, N]     with `patch_order=N`: a random permutation of each image's N
                                 patches, the masked autoencoder's masks
                                 (data/pipelines/patch_masking.py); in training drawn from an
                                 rng seeded with (seed, global batch index), like the
                                 augmentation, in an eval pass from one seeded with (seed,
                                 example index)

Order of examples. The pipeline works on example indices, so reading is batched
(`source.__getitems__`). All processes build the same global stream of batches of `batch_size`
(`batch_size` is per process); process i takes the batches i, i + P, i + 2P, ... of it
(data/pipelines/sharding.py): the same global batch whatever the number of processes, disjoint
shards that together cover every example, and as many batches in every process.

  train=True   indices shuffled with `seed`, reshuffled differently (deterministically) each
               epoch, repeated forever or `num_epochs` times, batches of `batch_size` (a
               batch may span an epoch boundary; an incomplete last batch is dropped; with
               num_epochs the stream is cut to a multiple of process_count batches).
               Optional augmentation (`augment`: 'none', 'flip', or 'crop_flip' = random crop
               after zero padding of `crop_padding(h)` pixels (2 below 32 px, e.g. 28 px
               MNIST, else 4) then horizontal flip, or 'inception_crop' = a random crop of
               8-100% of the area resized to image_shape, then horizontal flip
               (data/pipelines/image_crops.py)), drawn
               from an rng seeded with (seed, global batch index) through grain's
               `random_map`, so it is reproducible and survives set_state.
               Repeated augmentation (`repeated_augment` = r > 1; Hoffer et al. 2020, "Augment
               Your Batch", Berman et al. 2019, "MultiGrain"; DeiT trains with r = 3): each
               batch holds batch_size / r distinct examples, each r times in a row, so each
               copy gets its own augmentation draw. The sampler shuffles and batches the
               examples as above into groups of batch_size / r and repeats each index r times,
               so every example comes r times in exactly one batch of each epoch, and an epoch
               here is r x len(source) images. DeiT's sampler instead keeps an epoch at
               len(source) draws (so a third as many distinct images) and spreads an image's
               copies over the GPUs; runs here are counted in steps, so only what "epoch" means
               differs.
  train=False  one pass in order, padded with mask=0 rows to a whole number of global batches:
               every example is seen exactly once, all shapes stay static, and every process
               yields `num_batches(len(source), ...)` batches.

Image sizes. With `eval_resize='none'` every image must have `image_shape` (Fashion-MNIST).
Images of any size (ImageNet) need `eval_resize` 'resize' or 'center_crop' (how an eval image
is brought to image_shape) and, for training, augment='inception_crop' (the random crop is
what brings a training image to image_shape); their channels must still be image_shape's.

Normalisation uses fixed per-channel constants from the dataset's train split (`NORMALIZATION` of
data/builders/sources.py, e.g. Fashion-MNIST mean 0.2860, std 0.3530), looked up by the source's
TFDS name, or `mean`/`std` passed in (see `compute_mean_std` for a dataset not in the table).

Checkpointing: the returned `grain.DatasetIterator` has `get_state() -> {'next_index': int}`
(batches this process has taken; JSON-serialisable) and `set_state(state)`. A state resumes
exactly only into a pipeline built with the same source, split, batch_size, seed,
process_index/process_count, num_epochs, augment, eval_resize, patch_order and
repeated_augment.
"""

from __future__ import annotations

from typing import Sequence

import grain
import numpy as np

from data.builders.examples import read_examples
from data.builders.sources import NORMALIZATION
from data.errors import DataError
from data.pipelines import image_crops
from data.pipelines.patch_masking import KEY as PATCH_ORDER
from data.pipelines.patch_masking import AddPatchOrder, ExamplePatchOrder
from data.pipelines.sharding import check_sharding, dataset_name, describe, padded_size, seeds
from data.pipelines.workers import check_worker_count, in_workers

_DEFAULT_READ = grain.ReadOptions(num_threads=4, prefetch_buffer_size=8)


def crop_padding(height: int) -> int:
    """Zero padding before the random crop: 2 pixels below 32 px (28 px MNIST), else 4."""
    return 2 if height < 32 else 4


def compute_mean_std(source, *, max_examples: int | None = None
                     ) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and std of image / 255 over (the first `max_examples` of) a source."""
    n = len(source) if max_examples is None else min(len(source), max_examples)
    total = total_sq = count = 0
    for start in range(0, n, 1024):
        chunk = read_examples(source, range(start, min(n, start + 1024)))
        images = np.stack([np.asarray(e["image"]) for e in chunk])
        x = images.astype(np.float64).reshape(-1, images.shape[-1]) / 255.0
        total, total_sq, count = total + x.sum(0), total_sq + (x * x).sum(0), count + len(x)
    mean = total / count
    std = np.sqrt(total_sq / count - mean * mean)
    return tuple(float(m) for m in mean), tuple(float(s) for s in std)


class _LoadBatch:
    """Batch of example indices -> {'image': uint8 [b,h,w,c], 'label': int32, 'mask': float32}.

    Indices >= len(source) are padding: zero image, label 0, mask 0. With `any_size`, 'image' is
    a list of the decoded images as they are (padding: None), for a later step to bring to
    image_shape; else each must have image_shape. With `patch_order` (an eval pass) the batch
    also holds each index's patch permutation. With `num_classes`, a label outside
    [0, num_classes) is a DataError (the loss would wrap -1 to the last class, or be NaN).
    """

    def __init__(self, source, image_shape: tuple[int, ...], any_size: bool = False,
                 patch_order: ExamplePatchOrder | None = None, num_classes: int | None = None):
        self.source, self.image_shape, self.length = source, image_shape, len(source)
        self.any_size, self.patch_order, self.num_classes = any_size, patch_order, num_classes

    def __call__(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        real = indices[indices < self.length]
        examples = read_examples(self.source, real)
        if self.any_size:
            images = [None] * len(indices)
        else:
            images = np.zeros((len(indices), *self.image_shape), np.uint8)
        labels = np.zeros((len(indices),), np.int32)
        for j, example in enumerate(examples):
            image = np.asarray(example["image"])
            expected = self.image_shape[-1:] if self.any_size else self.image_shape
            if image.ndim != 3 or image.shape[-len(expected):] != expected:
                what = (f"{self.image_shape[-1]} channels" if self.any_size else
                        f"images of shape {self.image_shape}")
                raise DataError(f"{what} expected, found {image.shape} in "
                                f"{describe(self.source)} (example {real[j]})")
            images[j] = image
            labels[j] = self._label(example["label"], real[j])
        mask = np.zeros((len(indices),), np.float32)
        mask[: len(real)] = 1.0
        batch = {"image": images, "label": labels, "mask": mask}
        if self.patch_order is not None:  # an eval pass: each example's own permutation
            batch[PATCH_ORDER] = self.patch_order(indices)
        return batch

    def _label(self, label, index: int) -> int:
        label = int(label)
        if self.num_classes is None or 0 <= label < self.num_classes:
            return label
        why = ("-1 marks an unlabelled example in TFDS (imagenet2012's test split has no labels: "
               "evaluate on 'validation')" if label < 0 else
               "config.model.num_classes must be the dataset's number of classes")
        raise DataError(f"label {label} of example {index} in {describe(self.source)} is not "
                        f"one of the model's {self.num_classes} classes (0 to "
                        f"{self.num_classes - 1}): {why}")


AUGMENTATIONS = ("none", "flip", "crop_flip", "inception_crop")
EVAL_RESIZES = ("none", *image_crops.EVAL_RESIZES)


class _Augment:
    """Per example: horizontal flip with probability 1/2 ('flip'), after a random crop of the
    zero-padded image ('crop_flip'), or an Inception crop resized to image_shape and then
    flipped ('inception_crop', on images of any size)."""

    def __init__(self, mode: str, image_shape: tuple[int, ...] = ()):
        self.mode, self.size = mode, tuple(image_shape[:2])
        self.crop = mode == "crop_flip"

    def __call__(self, batch: dict[str, np.ndarray], rng: np.random.Generator) -> dict[str, np.ndarray]:
        if self.mode == "inception_crop":
            images = batch["image"]
            out = np.zeros((len(images), *self.size, _channels(images)), np.uint8)
            for j, image in enumerate(images):
                out[j] = image_crops.inception_crop(image, self.size, rng)
            return {**batch, "image": out}
        images = batch["image"]
        b, h, w, _ = images.shape
        if self.crop:
            pad = crop_padding(h)
            padded = np.pad(images, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
            dy = rng.integers(0, 2 * pad + 1, size=b)
            dx = rng.integers(0, 2 * pad + 1, size=b)
        flip = rng.random(size=b) < 0.5
        out = np.empty_like(images)
        for j in range(b):
            image = padded[j, dy[j]:dy[j] + h, dx[j]:dx[j] + w] if self.crop else images[j]
            out[j] = image[:, ::-1] if flip[j] else image
        return {**batch, "image": out}


def _channels(images: list) -> int:
    return next((image.shape[-1] for image in images if image is not None), 3)


class _RepeatIndices:
    """A group of example indices -> each repeated `times` times in a row (repeated
    augmentation: i, i, i, j, j, j, ...)."""

    def __init__(self, times: int):
        self.times = times

    def __call__(self, indices: np.ndarray) -> np.ndarray:
        return np.repeat(np.asarray(indices), self.times)


class _EvalResize:
    """Images of any size -> uint8 [b, *image_shape] by image_crops.eval_resize (padding rows:
    zeros)."""

    def __init__(self, mode: str, image_shape: tuple[int, ...]):
        self.mode, self.shape = mode, tuple(image_shape)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = np.zeros((len(batch["image"]), *self.shape), np.uint8)
        for j, image in enumerate(batch["image"]):
            if image is not None:
                out[j] = image_crops.eval_resize(image, self.shape[:2], self.mode)
        return {**batch, "image": out}


def normalization(name: str, mean: Sequence[float] | None, std: Sequence[float] | None,
                  channels: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The per-channel (mean, std) images of dataset `name` (its TFDS name, as
    `dataset_name(source)` gives it) are normalised with: `mean` and `std` when given, else the
    dataset's constants (`NORMALIZATION`); DataError for a dataset without constants, values
    that are not one per channel, a mean that is not finite or a std that is not positive."""
    if (mean is None) != (std is None):
        raise DataError(f"mean={mean} and std={std}: pass both (per channel) or neither (the "
                        "dataset's constants)")
    if mean is None:
        if name not in NORMALIZATION:
            raise DataError(f"no normalisation constants for dataset {name!r} (known: "
                            f"{sorted(NORMALIZATION)}); pass mean= and std= (per channel), e.g. "
                            "from data.pipelines.images.compute_mean_std(train_source)")
        mean, std = NORMALIZATION[name]
    if len(mean) != channels or len(std) != channels:
        raise DataError(f"mean {mean} and std {std} need one value per channel ({channels})")
    if not all(np.isfinite(mean)) or not all(s > 0 for s in std):  # `not >` catches NaN too
        raise DataError(f"mean {mean} must be finite and std {std} positive")
    return tuple(float(m) for m in mean), tuple(float(s) for s in std)


def normalize(images: np.ndarray, mean: Sequence[float], std: Sequence[float]) -> np.ndarray:
    """uint8 images [..., c] -> float32 (x / 255 - mean) / std, per channel (in place on the
    one float copy: a quarter less time than new arrays for each operation)."""
    mean = np.asarray(mean, np.float32)
    scale = 1.0 / (255.0 * np.asarray(std, np.float32))
    out = images.astype(np.float32)
    out -= mean * 255.0
    out *= scale
    return out


class _Normalize:
    def __init__(self, mean: Sequence[float], std: Sequence[float]):
        self.mean, self.std = mean, std

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {**batch, "image": normalize(batch["image"], self.mean, self.std)}


def image_batches(source, *, batch_size: int, train: bool, seed: int,
                  image_shape: Sequence[int], process_index: int = 0, process_count: int = 1,
                  augment: str = "none", eval_resize: str = "none",
                  num_epochs: int | None = None, patch_order: int = 0,
                  repeated_augment: int = 1,
                  mean: Sequence[float] | None = None, std: Sequence[float] | None = None,
                  worker_count: int = 0, num_classes: int | None = None,
                  read_options: grain.ReadOptions | None = None) -> grain.DatasetIterator:
    """Iterator over this process's batches of `source` (see the module docstring);
    `worker_count` > 0 (training) makes them in that many processes, the same batches
    (data/pipelines/workers.py). `num_classes`: the classifier's, which every label must be
    one of (a DataError names the first that is not); None: labels unchecked (pretraining)."""
    image_shape = tuple(int(d) for d in image_shape)
    name = dataset_name(source)
    if augment not in AUGMENTATIONS:
        raise DataError(f"augment={augment!r} is not one of {list(AUGMENTATIONS)}")
    if eval_resize not in EVAL_RESIZES:
        raise DataError(f"eval_resize={eval_resize!r} is not one of {list(EVAL_RESIZES)}")
    any_size = eval_resize != "none"
    if train and any_size != (augment == "inception_crop"):
        raise DataError(
            f"augment={augment!r} with eval_resize={eval_resize!r}: images of any size "
            "(eval_resize 'resize' or 'center_crop') train with augment='inception_crop', the "
            "crop that brings them to image_shape; images of one size (eval_resize='none') "
            "with 'none', 'flip' or 'crop_flip'")
    check_sharding(batch_size, process_index, process_count)
    if check_worker_count(worker_count) and not train:
        raise DataError(f"worker_count={worker_count}: evaluation batches are made in this "
                        "process (one pass, in order); worker processes are for training")
    if repeated_augment < 1 or batch_size % repeated_augment:
        raise DataError(f"repeated_augment={repeated_augment} must be >= 1 and divide the "
                        f"per-process batch_size={batch_size} (each batch holds its examples "
                        "repeated_augment times)")
    if train and repeated_augment > 1 and augment == "none":
        raise DataError(f"repeated_augment={repeated_augment} with augment='none' puts "
                        f"{repeated_augment} identical copies of each image in a batch; choose an "
                        "augmentation (flip, crop_flip, inception_crop) or repeated_augment=1")
    if num_epochs is not None and num_epochs < 1:
        raise DataError(f"num_epochs must be None (forever) or positive, got {num_epochs}")
    n = len(source)
    if n == 0:
        raise DataError(f"{describe(source)} has no examples")
    first = np.asarray(source[0]["image"])
    if (first.shape[-1:] if any_size else first.shape) != (
            image_shape[-1:] if any_size else image_shape):
        raise DataError(f"images of shape {image_shape} expected, found {first.shape} in "
                        f"{describe(source)}" + ("" if any_size else
                                                 " (images of any size need eval_resize "
                                                 "'resize' or 'center_crop')"))
    mean, std = normalization(name, mean, std, image_shape[-1])
    shuffle_seed, augment_seed, patch_order_seed = seeds(seed, 3)

    ds = grain.MapDataset.range(n)
    if train:
        ds = ds.shuffle(seed=shuffle_seed).repeat(num_epochs)
        ds = ds.batch(batch_size // repeated_augment, drop_remainder=True)
        if repeated_augment > 1:
            ds = ds.map(_RepeatIndices(repeated_augment))
        if num_epochs is not None:  # every process gets the same number of batches
            ds = ds[: len(ds) // process_count * process_count]
    else:
        padded = padded_size(n, batch_size=batch_size, process_count=process_count)
        ds = grain.MapDataset.range(padded).batch(batch_size)
    example_orders = (ExamplePatchOrder(patch_order, patch_order_seed)
                      if patch_order and not train else None)
    ds = ds.map(_LoadBatch(source, image_shape, any_size, example_orders, num_classes))
    if train and augment != "none":
        ds = ds.random_map(_Augment(augment, image_shape),  # seeded by global batch index
                           seed=augment_seed)
    elif any_size:
        ds = ds.map(_EvalResize(eval_resize, image_shape))
    if patch_order and train:  # seeded by global batch index, before the batches are shared out
        ds = ds.random_map(AddPatchOrder(patch_order), seed=patch_order_seed)
    ds = ds[process_index::process_count]
    if len(ds) == 0:
        raise DataError(f"{describe(source)}: {n} examples x {num_epochs} epochs give no batch "
                        f"of {batch_size} for each of {process_count} processes")
    ds = ds.map(_Normalize(mean, std)).to_iter_dataset(read_options or _DEFAULT_READ)
    return iter(in_workers(ds, worker_count))
