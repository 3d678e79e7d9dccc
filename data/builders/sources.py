"""Random-access data sources by dataset name: our local builders or the standard TFDS catalog.

    get_data_source("fashion_mnist", "train")                   # fetched (python -m data.fetch)
    get_data_source("cifar10", "test", source="tfds")           # TFDS catalog; needs internet once

A data source has len() and [i] -> dict example (numpy arrays / ints), and `__getitems__` for
batched reads (data/builders/examples.py); the pipelines of data/pipelines/ batch it. TFDS
split strings work as usual ('train[:90%]', 'train[90%:]'). `dataset_info` says what a model
needs of an image dataset, with its per-channel normalisation constants (`NORMALIZATION`).

A TFDS catalog dataset not yet prepared in its data_dir is downloaded and prepared on first use
by a single process; a multi-process run (`process_count() > 1`) never does, since every host
would at once (wmt14's 4.5M pairs, Wikipedia's tens of GB, into a data_dir they may share): it
stops with a DataError naming the `tfds build` command that prepares it once before launching
(docs/launch.md, "The data, prepared once").
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import socket
import sys
from typing import Literal, Sequence

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
    image_shape: tuple[int | None, ...]  # (height, width, channels); None: any (ImageNet's)
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
        "downloaded and prepared once on a machine with internet access (`tfds build "
        f"{name} --file_format=array_record --data_dir=DIR`) into data_dir "
        f"{data_dir or '$TFDS_DATA_DIR or ~/tensorflow_datasets'}. Offline, use source='local' "
        "with a dataset from `python -m data.fetch --list`.")


def process_count() -> int:
    """The processes of this run: jax.process_count() once JAX's distributed system has been
    started (train/distributed.py does, before any data is read), else 1. It neither imports JAX
    nor starts its backends (which must wait for jax.distributed.initialize)."""
    jax = sys.modules.get("jax")
    if jax is None or not jax.distributed.is_initialized():
        return 1
    return jax.process_count()


def _unprepared_error(name: str, builder, data_dir, processes: int) -> DataError:
    root = data_dir or os.environ.get("TFDS_DATA_DIR") or "~/tensorflow_datasets"
    return DataError(
        f"TFDS dataset {name!r} is not prepared in {builder.data_dir}, and a run of {processes} "
        "processes does not download or prepare it (every host would at once). Prepare it once "
        "before launching, where it can be downloaded, into the data_dir every host reads: "
        f"tfds build {name} --file_format=array_record --data_dir={root}"
        f"{' --manual_dir=DIR' if name.startswith('imagenet') else ''} "
        "(docs/launch.md, 'The data, prepared once').")


PROBE_HOST = "storage.googleapis.com"  # TFDS's own bucket: dataset infos and many downloads
PROXY_VARIABLES = ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY", "all_proxy",
                   "ALL_PROXY")


def offline_reason() -> str | None:
    """Why this machine cannot download (its resolver knows no PROBE_HOST: offline, as the
    build machines are), else None; TFDS's downloader would retry each file with a growing
    back-off, minutes, before failing. Behind a proxy (which resolves names for the machine)
    nothing is probed."""
    if any(os.environ.get(variable) for variable in PROXY_VARIABLES):
        return None
    try:
        socket.getaddrinfo(PROBE_HOST, 443)
    except OSError as error:
        return f"no internet here: the host name {PROBE_HOST} does not resolve ({error})"
    return None


def _catalog_builder(name: str, data_dir: str | pathlib.Path | None):
    """The TFDS catalog's builder for `name`, prepared (module docstring: downloaded and
    prepared here by a single process; a DataError in a multi-process run)."""
    import tensorflow_datasets as tfds

    try:
        builder = from_catalog(lambda: tfds.builder(
            name, data_dir=None if data_dir is None else str(data_dir),
            file_format="array_record"))
    except Exception as e:  # TFDS raises many kinds (registration, bad config names).
        raise _tfds_error(name, data_dir, e) from e
    if not builder.is_prepared():
        if (processes := process_count()) > 1:
            raise _unprepared_error(name, builder, data_dir, processes)
        if (offline := offline_reason()) is not None:  # TFDS would retry each file for minutes
            raise _tfds_error(name, data_dir, ConnectionError(offline))
        try:
            builder.download_and_prepare()
        except Exception as e:  # network, missing manual files, optional dependencies.
            raise _tfds_error(name, data_dir, e) from e
    return builder


def _builder(name: str, source: SourceKind, data_dir: str | pathlib.Path | None):
    """A prepared TFDS builder for `name`."""
    _check_kind(source)
    if source == "local":
        return builders.prepare(name, data_dir=data_dir)
    return _catalog_builder(name, data_dir)


def get_data_source(name: str, split: str, *, source: SourceKind = "local",
                    data_dir: str | pathlib.Path | None = None, undecoded: Sequence[str] = ()):
    """Random-access source of dict examples for `split` of dataset `name`.

    source='local': our builder for a dataset fetched with `python -m data.fetch NAME`; prepared
    on first use when only the raw files are there (data_dir default: paths.tfds_dir()).
    source='tfds': the builder of `name` in the standard catalog (data_dir default: TFDS's),
    read as `tfds.data_source` reads it; downloads and prepares on first use in a single
    process, which needs internet access (module docstring).
    undecoded: features read as their stored bytes (TFDS's SkipDecoding), e.g. ('image',) to
    read the labels of ImageNet without decoding a JPEG.
    """
    import tensorflow_datasets as tfds

    builder = _builder(name, source, data_dir)
    decoders = {key: tfds.decode.SkipDecoding() for key in undecoded} or None
    if source == "tfds":
        try:
            return builder.as_data_source(split=split, decoders=decoders)
        except Exception as e:  # TFDS raises many kinds (an unknown split, missing files).
            raise DataError(f"TFDS dataset {name!r} (in {builder.data_dir}) could not open "
                            f"split {split!r}: {type(e).__name__}: {e}") from e
    try:
        return builder.as_data_source(split=split, decoders=decoders)
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
        image_shape=tuple(None if d is None else int(d) for d in features["image"].shape),
        num_classes=int(label.num_classes),
        class_names=tuple(label.names),
        splits={s: int(v.num_examples) for s, v in info.splits.items()},
        mean=norm[0] if norm else None,
        std=norm[1] if norm else None,
    )
