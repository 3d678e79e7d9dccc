"""TFDS builder for the English-Spanish Bible verse pairs (World English Bible, Reina-Valera 1909).

Named `bible_en_es_local`, like the other builders of fetched datasets. Reads the two SWORD
modules that `python -m data.fetch bible_en_es` puts in place (data/corpora/bible.py aligns and
cleans the verses). Features are `tfds.features.Text`, which encodes and reads back without
TensorFlow; a data source returns every field as UTF-8 **bytes**:

    {"en": b"In the beginning, God created ...", "es": b"EN el principio ...", "ref": b"Gen.1.1"}

Splits by a stable hash of the verse reference (data/corpora/splits.py): about 2% validation, 2%
test and the rest train, the same on every machine; examples keep the canonical verse order.

    python -m data.fetch bible_en_es     # fetches the modules and prepares this dataset
"""

from __future__ import annotations

import tensorflow_datasets as tfds

from data.builders.local import LocalBuilder, by_split
from data.corpora import bible
from data.corpora.splits import SPLITS, split_of


class BibleEnEsLocal(LocalBuilder):
    """English-Spanish verse pairs from locally fetched SWORD modules."""

    VERSION = tfds.core.Version("1.1.0")
    RELEASE_NOTES = {"1.0.0": "First version: Debian's sword-text-web 426.0 and "
                              "sword-text-sparv 2.60.",
                     "1.1.0": "Verses where a length alignment (Gale & Church) finds the two "
                              "divisions differ are left out: 30,408 pairs (77 fewer)."}
    DESCRIPTION = ("Verse-aligned English-Spanish Bible: the World English Bible and the "
                   "Reina-Valera 1909, ~30,400 verse pairs of the 66 shared books, footnotes and "
                   "markup removed. Public domain.")
    HOMEPAGE = "https://ebible.org/web/"
    LICENSE = "Public domain"
    SUPERVISED_KEYS = ("en", "es")
    check_raw_files = staticmethod(bible.check_raw_files)

    def features(self) -> tfds.features.FeaturesDict:
        return tfds.features.FeaturesDict({
            "en": tfds.features.Text(),  # World English Bible
            "es": tfds.features.Text(),  # Reina-Valera 1909
            "ref": tfds.features.Text(),  # OSIS reference, e.g. 'Gen.1.1'
        })

    def split_examples(self):
        return by_split(((split_of(ref), ref, {"en": en, "es": es, "ref": ref})
                         for ref, en, es in bible.read_verse_pairs()), SPLITS)
