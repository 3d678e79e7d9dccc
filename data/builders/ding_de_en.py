"""TFDS builder for the German-English sentence pairs of the Ding dictionary.

Named `ding_de_en_local`, like the other builders of fetched datasets. Reads the dictionary file
that `python -m data.fetch ding_de_en` fetches (data/corpora/ding.py picks the full-sentence pairs).
GPL-2+: the raw file and this prepared dataset stay in the local cache; never commit either.
Features are `tfds.features.Text`, which encodes and reads back without TensorFlow; a data
source returns every field as UTF-8 **bytes**:

    {"de": b"Er ballerte mit seinem Luftgewehr auf eine Taube.",
     "en": b"He took a pot shot at a pigeon with his air gun."}

Splits by a stable hash of the German sentence (data/corpora/splits.py), so a sentence listed with
two translations never lands in two splits: about 2% validation, 2% test and the rest train, the
same on every machine; examples keep the dictionary's order.

    python -m data.fetch ding_de_en     # fetches the dictionary and prepares this dataset
"""

from __future__ import annotations

import tensorflow_datasets as tfds

from data.builders.local import LocalBuilder
from data.corpora import ding
from data.corpora.splits import SPLITS, split_of

NAME = ding.NAME  # the name data.fetch and data.builders.sources know it by


class DingDeEnLocal(LocalBuilder):
    """German-English sentence pairs from a locally fetched Ding dictionary."""

    VERSION = tfds.core.Version("1.1.0")
    RELEASE_NOTES = {"1.0.0": "First version: Debian's trans-de-en (Ding).",
                     "1.1.0": "Phrases ending in joined placeholders ('jdm./etw.', 'sb./sth.') "
                              "are no longer taken for sentences (18 fewer pairs)."}

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(
            builder=self,
            description="German-English example sentences of the Ding dictionary (TU Chemnitz), "
                        "~18,300 pairs. GPL-2+: fetched at run time, never redistributed.",
            features=tfds.features.FeaturesDict({
                "de": tfds.features.Text(),
                "en": tfds.features.Text(),
            }),
            supervised_keys=("de", "en"),
            disable_shuffling=True,  # keep the dictionary's order
            homepage="https://dict.tu-chemnitz.de/",
            license="GPL-2.0-or-later",
        )

    @classmethod
    def check_raw_files(cls) -> None:
        """DataError with the fetch command when the dictionary is missing or empty."""
        ding.check_raw_files()

    def _split_generators(self, dl_manager):
        del dl_manager  # Nothing to download: data.fetch put the file in place.
        self.check_raw_files()
        by_split = {split: [] for split in SPLITS}
        for i, (de, en) in enumerate(ding.read_sentence_pairs()):
            by_split[split_of(de)].append((i, de, en))
        return {split: self._generate_examples(pairs) for split, pairs in by_split.items()}

    def _generate_examples(self, pairs):
        for i, de, en in pairs:
            yield i, {"de": de, "en": en}
