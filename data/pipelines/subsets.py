"""A fraction of a labelled split: the training images of a limited-labels experiment.

MAE (He et al. 2022) and the ViT lecture notes ask what pretraining buys when labels are few;
a run fine-tunes on 1% or 10% of the training labels. Two ways to draw the fraction f of N
examples of C classes, both seeded, so a seed picks the same subset in every run:

  random     round(f N) examples uniformly at random, without replacement (the classes in
             whatever proportion the draw gives; a class may be missing at 1% of a small set);
  balanced   round(f N / C) examples of every class, each class's drawn uniformly at random
             (every class present, equally often: the usual few-labels protocol).

`Subset` then presents the chosen examples as a data source of their own (len, [i],
__getitems__), which the image pipeline reads as it reads any split. The labels are read once,
before the first step, with the images left undecoded (`split_labels`): drawing 1% of ImageNet
must not decode its 1.28M training JPEGs.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from data.builders import sources
from data.builders.examples import read_examples
from data.errors import DataError

HOW = ("random", "balanced")


def split_labels(name: str, split: str, *, source: sources.SourceKind = "local",
                 data_dir=None) -> np.ndarray:
    """The 'label' of every example of `split` of image dataset `name`, int64, in the split's
    order, read from a source that leaves the images undecoded (their stored bytes)."""
    return labels_of(sources.get_data_source(name, split, source=source, data_dir=data_dir,
                                             undecoded=("image",)))


def labels_of(source, chunk: int = 4096) -> np.ndarray:
    """The 'label' of every example of `source`, int64 [len(source)], read in chunks. Every
    feature of an example is read as the source hands it over: for an image dataset's split,
    `split_labels` reads them without decoding the images."""
    labels = np.empty(len(source), np.int64)
    for start in range(0, len(source), chunk):
        stop = min(len(source), start + chunk)
        labels[start:stop] = [int(e["label"]) for e in read_examples(source, range(start, stop))]
    return labels


def choose(labels: Sequence[int], fraction: float, how: str, seed: int) -> np.ndarray:
    """The sorted indices of the subset (module docstring) of examples with these labels."""
    labels = np.asarray(labels)
    if how not in HOW:
        raise DataError(f"subset how={how!r} is not one of {list(HOW)}")
    if not 0.0 < fraction <= 1.0:
        raise DataError(f"fraction={fraction} must be in (0, 1] (1: every example)")
    rng = np.random.default_rng(seed)
    if how == "random":
        count = round(fraction * len(labels))
        if count < 1:
            raise DataError(f"fraction={fraction} of {len(labels)} examples is none; use a "
                            f"fraction of at least {1 / len(labels):.2g}")
        return np.sort(rng.choice(len(labels), size=count, replace=False))
    classes = np.unique(labels)
    per_class = round(fraction * len(labels) / len(classes))
    if per_class < 1:
        raise DataError(f"fraction={fraction} of {len(labels)} examples of {len(classes)} "
                        "classes gives no example of each class; use a larger fraction or "
                        "how='random'")
    chosen = []
    for label in classes:
        members = np.flatnonzero(labels == label)
        if len(members) < per_class:
            raise DataError(f"class {label} has {len(members)} examples, fewer than the "
                            f"{per_class} of each class that fraction={fraction} asks for; use "
                            "a smaller fraction or how='random'")
        chosen.append(rng.choice(members, size=per_class, replace=False))
    return np.sort(np.concatenate(chosen))


class Subset:
    """The examples of `source` at `indices`, as a data source (the i-th is source[indices[i]]).
    Keeps the source's `dataset_info` (its normalisation constants are looked up by name)."""

    def __init__(self, source, indices: Sequence[int]):
        self.source, self.indices = source, np.asarray(indices, np.int64)
        if hasattr(source, "dataset_info"):
            self.dataset_info = source.dataset_info
        self.split = getattr(source, "split", None)

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, index: int):
        return self.source[int(self.indices[index])]

    def __getitems__(self, indices: Sequence[int]):
        return read_examples(self.source, [int(self.indices[i]) for i in indices])

    def __repr__(self) -> str:
        return f"Subset({len(self)} of {len(self.source)} examples of {self.source!r})"
