"""The shared shape of the TFDS builders of labelled texts (spam, tweets).

Each example is one text with its label and a little metadata:

    text      Text          the input of the classifier
    label     ClassLabel    its names are the builder's LABELS
    <more>    scalar metadata of the dataset (an id, a group, ...)

Splits: `train` / `validation` / `test`, about 80 / 10 / 10, by a stable hash of the text
itself (`text_split` of data/corpora/splits.py), so identical texts (forwarded emails, retweets)
always land in the same split and never leak from train into test. Examples keep the corpus
order within a split.
"""

from __future__ import annotations

from typing import Any, Iterable

import tensorflow_datasets as tfds

from data.builders.local import LocalBuilder, by_split
from data.corpora.splits import SPLITS, text_split


class TextClassificationBuilder(LocalBuilder, skip_registration=True):
    """Base of the labelled-text builders: features, hashed splits and examples."""

    LABELS: tuple[str, ...] = ()

    @classmethod
    def metadata_features(cls) -> dict:
        """Metadata feature name -> tfds feature (scalars)."""
        return {}

    @classmethod
    def read_examples(cls) -> Iterable[tuple[str, dict[str, Any]]]:
        """(unique key, {'text', 'label' name, metadata...}) of every example, in corpus order."""
        raise NotImplementedError

    def features(self) -> tfds.features.FeaturesDict:
        return tfds.features.FeaturesDict({
            "text": tfds.features.Text(),
            "label": tfds.features.ClassLabel(names=list(self.LABELS)),
            **self.metadata_features()})

    def split_examples(self):
        return by_split(((text_split(example["text"]), key, example)
                         for key, example in self.read_examples()), SPLITS)
