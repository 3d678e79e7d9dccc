"""TFDS builder for the German-English sentence pairs of the Ding dictionary.

Named `ding_de_en_local`, like the other builders of fetched datasets. Reads the dictionary file
that `python -m data.fetch ding_de_en` fetches (data/corpora/ding.py picks the full-sentence
pairs). GPL-2+: the raw file and this prepared dataset stay in the local cache; never commit
either. Features are `tfds.features.Text`, which encodes and reads back without TensorFlow; a
data source returns every field as UTF-8 **bytes**:

    {"de": b"Er ballerte mit seinem Luftgewehr auf eine Taube.",
     "en": b"He took a pot shot at a pigeon with his air gun."}

Splits by a stable hash of the German sentence (data/corpora/splits.py), so a sentence listed with
two translations never lands in two splits: about 2% validation, 2% test and the rest train, the
same on every machine; examples keep the dictionary's order.

    python -m data.fetch ding_de_en     # fetches the dictionary and prepares this dataset
"""

from __future__ import annotations

import tensorflow_datasets as tfds

from data.builders.local import LocalBuilder, by_split
from data.corpora import ding
from data.corpora.splits import SPLITS, split_of


class DingDeEnLocal(LocalBuilder):
    """German-English sentence pairs from a locally fetched Ding dictionary."""

    VERSION = tfds.core.Version("1.1.0")
    RELEASE_NOTES = {"1.0.0": "First version: Debian's trans-de-en (Ding).",
                     "1.1.0": "Phrases ending in joined placeholders ('jdm./etw.', 'sb./sth.') "
                              "are no longer taken for sentences (18 fewer pairs)."}
    DESCRIPTION = ("German-English example sentences of the Ding dictionary (TU Chemnitz), "
                   "~18,300 pairs. GPL-2+: fetched at run time, never redistributed.")
    HOMEPAGE = "https://dict.tu-chemnitz.de/"
    LICENSE = "GPL-2.0-or-later"
    SUPERVISED_KEYS = ("de", "en")
    check_raw_files = staticmethod(ding.check_raw_files)

    def features(self) -> tfds.features.FeaturesDict:
        return tfds.features.FeaturesDict({"de": tfds.features.Text(),
                                           "en": tfds.features.Text()})

    def split_examples(self):
        return by_split(((split_of(de), i, {"de": de, "en": en})
                         for i, (de, en) in enumerate(ding.read_sentence_pairs())), SPLITS)
