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

from data.builders.local import LocalBuilder
from data.corpora.splits import SPLITS, text_split


class TextClassificationBuilder(LocalBuilder, skip_registration=True):
    """Base of the labelled-text builders: features, hashed splits and examples."""

    NAME = ""  # the name data.fetch knows the dataset by
    LABELS: tuple[str, ...] = ()
    DESCRIPTION = ""
    HOMEPAGE = ""
    CITATION = ""
    LICENSE = ""

    @classmethod
    def metadata_features(cls) -> dict:
        """Metadata feature name -> tfds feature (scalars)."""
        return {}

    @classmethod
    def check_raw_files(cls) -> None:
        """DataError naming `python -m data.fetch NAME` when the raw files are missing."""
        raise NotImplementedError

    @classmethod
    def read_examples(cls) -> Iterable[tuple[str, dict[str, Any]]]:
        """(unique key, {'text', 'label' name, metadata...}) of every example, in corpus order."""
        raise NotImplementedError

    def _info(self) -> tfds.core.DatasetInfo:
        features = {"text": tfds.features.Text(),
                    "label": tfds.features.ClassLabel(names=list(self.LABELS))}
        features.update(self.metadata_features())
        return tfds.core.DatasetInfo(
            builder=self, description=self.DESCRIPTION,
            features=tfds.features.FeaturesDict(features),
            disable_shuffling=True,  # keep corpus order: pipelines shuffle
            homepage=self.HOMEPAGE, citation=self.CITATION, license=self.LICENSE)

    def _split_generators(self, dl_manager):
        del dl_manager  # Nothing to download: data.fetch put the files in place.
        self.check_raw_files()
        parts: dict[str, list] = {split: [] for split in SPLITS}
        for key, example in self.read_examples():
            parts[text_split(example["text"])].append((key, example))
        return {split: self._generate_examples(examples) for split, examples in parts.items()}

    def _generate_examples(self, examples):
        yield from examples
