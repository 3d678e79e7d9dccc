"""Reader of Fashion-MNIST as Debian's `dataset-fashion-mnist` ships it: four gzip'd IDX files.

    images, labels = load_split("train")   # uint8 [60000, 28, 28], uint8 [60000]

The package keeps `{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz` under
`usr/share/datasets/fashion-mnist/` (read by data/formats/idx.py). Split sizes come from the files,
so a small excerpt (the test fixture) reads as well as the full 60,000 / 10,000.
"""

from __future__ import annotations

import pathlib

import numpy as np

from data import paths
from data.errors import DataError
from data.formats.idx import read_idx, read_idx_shape

NAME = "fashion_mnist"  # the name data.fetch and the builder know it by
RAW_SUBDIR = "usr/share/datasets/fashion-mnist"  # where the package keeps the files
SPLIT_FILES = {  # split -> (images, labels)
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
CLASS_NAMES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
               "Sneaker", "Bag", "Ankle boot")
IMAGE_SHAPE = (28, 28, 1)  # as the builder stores an image: one channel


def raw_folder() -> pathlib.Path:
    """Folder holding the four IDX files (read from PAPERS_JAX_DATA at call time)."""
    return paths.raw_dir(NAME) / RAW_SUBDIR


def _check_counts(split: str, images_path: pathlib.Path, labels_path: pathlib.Path,
                  num_images: int, num_labels: int) -> None:
    if num_images != num_labels:
        raise DataError(f"Fashion-MNIST {split}: {num_images} images in {images_path} but "
                        f"{num_labels} labels in {labels_path}")


def check_raw_files() -> None:
    """DataError with the fetch command when a raw file is missing, or when the counts in the
    headers of a split's images and labels differ (cheap: reads only the headers)."""
    files = paths.require_files(NAME, raw_folder(), [f for fs in SPLIT_FILES.values()
                                                     for f in fs])
    for split, names in SPLIT_FILES.items():
        images_path, labels_path = (files[f] for f in names)
        images_shape, labels_shape = read_idx_shape(images_path), read_idx_shape(labels_path)
        _check_shapes(images_path, images_shape, labels_path, labels_shape)
        _check_counts(split, images_path, labels_path, images_shape[0], labels_shape[0])


def _check_shapes(images_path, images_shape, labels_path, labels_shape) -> None:
    if len(images_shape) != 3 or tuple(images_shape[1:]) != IMAGE_SHAPE[:2]:
        raise DataError(f"{images_path}: images of shape (n, 28, 28) expected, found "
                        f"{tuple(images_shape)}")
    if len(labels_shape) != 1:
        raise DataError(f"{labels_path}: labels of shape (n,) expected, found "
                        f"{tuple(labels_shape)}")


def load_split(split: str) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 [n, 28, 28], labels uint8 [n]) of a split, checked for consistency."""
    files = paths.require_files(NAME, raw_folder(), SPLIT_FILES[split])
    images_path, labels_path = (files[f] for f in SPLIT_FILES[split])
    images, labels = read_idx(images_path), read_idx(labels_path)
    _check_shapes(images_path, images.shape, labels_path, labels.shape)
    for path, array in ((images_path, images), (labels_path, labels)):
        if array.dtype != np.uint8:
            raise DataError(f"{path}: unsigned bytes (IDX type 0x08) expected, found {array.dtype}")
    _check_counts(split, images_path, labels_path, len(images), len(labels))
    if len(labels) and labels.max() >= len(CLASS_NAMES):
        raise DataError(f"{labels_path}: label {labels.max()} out of range 0..9")
    return images, labels
