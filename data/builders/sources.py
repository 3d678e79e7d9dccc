"""Random-access data sources by dataset name: our local builders or the standard TFDS catalog.

    get_data_source("fashion_mnist", "train")                    # fetched (python -m data.fetch)
    get_data_source("cifar10", "test", source="tfds")            # TFDS catalog; needs internet once

A data source has len() and [i] -> dict example (numpy arrays / ints), and `__getitems__` for
batched reads (data/builders/examples.py); the pipelines of data/pipelines/ batch it. TFDS
split strings work as usual ('train[:90%]', 'train[90%:]'). `dataset_info` says what a model
needs of an image dataset, with its per-channel normalisation constants (`NORMALIZATION`).
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Literal

from data import builders
from data.errors import DataError

SourceKind = Literal["local", "tfds"]
SOURCE_KINDS = ("local", "tfds")

# Per-channel mean and std of x / 255 over the train split (checked against the data where we
# have it: Fashion-MNIST 0.28604, 0.35302 from the 60,000 train images).
NORMALIZATION: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "fashion_mnist": ((0.2860,), (0.3530,)),
    "fashion_mnist_local": ((0.2860,), (0.3530,)),
    "mnist": ((0.1307,), (0.3081,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
}


@dataclasses.dataclass(frozen=True)
class ImageDatasetInfo:
    """What a model and a pipeline need to know about an image classification dataset."""

    name: str  # the name asked for, e.g. 'fashion_mnist'
    tfds_name: str  # the TFDS builder's name, e.g. 'fashion_mnist_local'
    image_shape: tuple[int, int, int]  # (height, width, channels)
    num_classes: int
    class_names: tuple[str, ...]
    splits: dict[str, int]  # split name -> number of examples
    mean: tuple[float, ...] | None  # per-channel normalisation constants (None: not known)
    std: tuple[float, ...] | None


# TFDS 4.9 imports the packages of its older builders (translate/, text/, ...) lazily, and
# registers a builder when its module is imported: `tfds.builder('wmt14_translate/de-en')` or
# 'wikipedia/20230601.en' is not found in a fresh process until its package is. A name not
# found makes us import them all (about a second; one needing an optional dependency that is
# not installed is skipped) and ask again.
TFDS_BUILDER_PACKAGES = (
    "audio", "graphs", "image", "image_classification", "object_detection",
    "question_answering", "ranking", "recommendation", "structured", "summarization", "text",
    "text_simplification", "time_series", "translate", "video", "vision_language")


def _import_tfds_catalog() -> None:
    import importlib

    for package in TFDS_BUILDER_PACKAGES:
        try:
            importlib.import_module(f"tensorflow_datasets.{package}")
        except ImportError:  # an optional dependency of one of its builders
            pass


def from_catalog(load):
    """`load()` (a TFDS call by dataset name), asked again after importing TFDS's builder
    packages when the name is not registered yet."""
    import tensorflow_datasets as tfds

    try:
        return load()
    except tfds.core.registered.DatasetNotFoundError:
        _import_tfds_catalog()
        return load()


def _check_kind(source: str) -> None:
    if source not in SOURCE_KINDS:
        raise DataError(f"unknown data source kind {source!r}; allowed: {list(SOURCE_KINDS)}")


def _tfds_error(name: str, data_dir, e: Exception) -> DataError:
    return DataError(
        f"TFDS dataset {name!r} could not be loaded ({type(e).__name__}: {e}). It must be "
        "downloaded and prepared once on a machine with internet access (e.g. "
        f"tfds.data_source('{name}', split=...)) into data_dir "
        f"{data_dir or '$TFDS_DATA_DIR or ~/tensorflow_datasets'}. Offline, use source='local' "
        "with a dataset from `python -m data.fetch --list`.")


def _builder(name: str, source: SourceKind, data_dir: str | pathlib.Path | None):
    """A prepared TFDS builder for `name`."""
    _check_kind(source)
    if source == "local":
        return builders.prepare(name, data_dir=data_dir)
    import tensorflow_datasets as tfds

    try:
        builder = from_catalog(lambda: tfds.builder(
            name, data_dir=None if data_dir is None else str(data_dir),
            file_format="array_record"))
        builder.download_and_prepare()
    except Exception as e:  # TFDS raises many kinds (network, registration, missing files).
        raise _tfds_error(name, data_dir, e) from e
    return builder


def get_data_source(name: str, split: str, *, source: SourceKind = "local",
                    data_dir: str | pathlib.Path | None = None):
    """Random-access source of dict examples for `split` of dataset `name`.

    source='local': our builder for a dataset fetched with `python -m data.fetch NAME`; prepared
    on first use when only the raw files are there (data_dir default: paths.tfds_dir()).
    source='tfds': `tfds.data_source(name)` from the standard catalog (data_dir default: TFDS's);
    downloads and prepares on first use, which needs internet access.
    """
    _check_kind(source)
    if source == "tfds":
        import tensorflow_datasets as tfds

        try:
            return from_catalog(lambda: tfds.data_source(
                name, split=split, data_dir=None if data_dir is None else str(data_dir)))
        except Exception as e:  # TFDS raises many kinds (network, registration, missing files).
            raise _tfds_error(name, data_dir, e) from e
    builder = builders.prepare(name, data_dir=data_dir)
    try:
        return builder.as_data_source(split=split)
    except (ValueError, KeyError) as e:
        raise DataError(f"dataset {name!r} ({source}) has no split {split!r}; splits: "
                        f"{sorted(builder.info.splits)} ({e})") from e


def features_of(name: str, source: SourceKind = "local", *,
                data_dir: str | pathlib.Path | None = None) -> list[str]:
    """The names of the features of an example of dataset `name`, sorted."""
    return sorted(_builder(name, source, data_dir).info.features)


def dataset_info(name: str, source: SourceKind = "local", *,
                 data_dir: str | pathlib.Path | None = None) -> ImageDatasetInfo:
    """Image shape, classes, split sizes and normalisation constants of an image dataset."""
    info = _builder(name, source, data_dir).info
    features = info.features
    if "image" not in features or "label" not in features:
        raise DataError(f"dataset {name!r} ({source}) is not an image classification dataset: "
                        f"features {sorted(features)}")
    label = features["label"]
    norm = NORMALIZATION.get(info.name)
    return ImageDatasetInfo(
        name=name,
        tfds_name=info.name,
        image_shape=tuple(int(d) for d in features["image"].shape),
        num_classes=int(label.num_classes),
        class_names=tuple(label.names),
        splits={s: int(v.num_examples) for s, v in info.splits.items()},
        mean=norm[0] if norm else None,
        std=norm[1] if norm else None,
    )
