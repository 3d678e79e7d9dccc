"""TFDS builder for Fashion-MNIST read from the Debian package `dataset-fashion-mnist`.

Named `fashion_mnist_local` so it never shadows TFDS's own `fashion_mnist` (which downloads from
the internet). Images are stored as uint8 tensors (28, 28, 1): `tfds.features.Image` would need
TensorFlow to encode PNGs. The IDX files are read by data/corpora/fashion_mnist.py.

    python -m data.fetch fashion_mnist     # fetches the raw files and prepares this dataset
"""

from __future__ import annotations

import numpy as np
import tensorflow_datasets as tfds

from data.builders.local import LocalBuilder
from data.corpora import fashion_mnist

_CITATION = """@article{xiao2017fashion,
  title   = {Fashion-MNIST: a Novel Image Dataset for Benchmarking Machine Learning Algorithms},
  author  = {Han Xiao and Kashif Rasul and Roland Vollgraf},
  journal = {arXiv preprint arXiv:1708.07747},
  year    = {2017}
}"""


class FashionMnistLocal(LocalBuilder):
    """Fashion-MNIST from locally fetched IDX files."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "First version: the IDX files of Debian's dataset-fashion-mnist."}
    DESCRIPTION = ("Fashion-MNIST (Zalando): 28x28 grayscale images of 10 kinds of clothing, "
                   "60,000 train and 10,000 test. MIT license.")
    HOMEPAGE = "https://github.com/zalandoresearch/fashion-mnist"
    CITATION = _CITATION
    LICENSE = "MIT"
    SUPERVISED_KEYS = ("image", "label")
    check_raw_files = staticmethod(fashion_mnist.check_raw_files)

    def features(self) -> tfds.features.FeaturesDict:
        return tfds.features.FeaturesDict({
            "image": tfds.features.Tensor(shape=fashion_mnist.IMAGE_SHAPE, dtype=np.uint8),
            "label": tfds.features.ClassLabel(names=list(fashion_mnist.CLASS_NAMES)),
        })

    def split_examples(self):
        return {split: _examples(split) for split in fashion_mnist.SPLIT_FILES}


def _examples(split: str):
    """The examples of `split` in the IDX order: example i is image i of the file."""
    images, labels = fashion_mnist.load_split(split)
    for i in range(len(labels)):
        yield i, {"image": images[i][:, :, None], "label": int(labels[i])}
