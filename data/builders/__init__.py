"""TFDS datasets: our builders of the fetched raw files, and any dataset opened by name.

`LOCAL_BUILDERS` maps a dataset name (the name `python -m data.fetch` knows) to the builder class
that turns its raw files, read by its reader of data/corpora/, into a TFDS dataset under
`paths.tfds_dir()`. Builder modules import TFDS, so they are loaded only when asked for.

    local.py                LocalBuilder, the base of every builder: info, splits, array_record
    fashion_mnist.py        Fashion-MNIST images and labels
    bible_en_es.py          English-Spanish verse pairs
    ding_de_en.py           German-English sentence pairs
    documents.py            a Document as a TFDS example and back (read_documents)
    document_corpus.py      the base of the document corpora:
    brown.py                  Brown: documents, and the words and POS tags of each sentence
    austen.py                 Austen's novels, one document per chapter
    sotu.py                   State of the Union speeches, one document per speech
    text_classification.py  the base of the labelled texts:
    spam.py                   SpamAssassin emails, ham / spam
    tweets.py                 tweets, negative / neutral / positive
    english_lm.py           English running text of austen, brown, sotu and the WEB Bible
    sources.py              get_data_source(name, split, source='local'|'tfds'), dataset_info
    examples.py             read_examples (one batched read), as_text (a text field as str)
"""

from __future__ import annotations

import importlib
import pathlib

from data.errors import DataError

# dataset name -> "module:Class"
LOCAL_BUILDERS: dict[str, str] = {
    "fashion_mnist": "data.builders.fashion_mnist:FashionMnistLocal",
    "bible_en_es": "data.builders.bible_en_es:BibleEnEsLocal",
    "ding_de_en": "data.builders.ding_de_en:DingDeEnLocal",
    "brown": "data.builders.brown:BrownLocal",
    "austen": "data.builders.austen:AustenLocal",
    "sotu": "data.builders.sotu:SotuLocal",
    "spam": "data.builders.spam:SpamLocal",
    "tweets": "data.builders.tweets:TweetsLocal",
    "english_lm": "data.builders.english_lm:EnglishLmLocal",
}


def builder_class(name: str):
    """The TFDS builder class for the locally fetched dataset `name`."""
    if name not in LOCAL_BUILDERS:
        raise DataError(f"no local builder for dataset {name!r}; local datasets: "
                        f"{sorted(LOCAL_BUILDERS)} (or use source='tfds' for the TFDS catalog)")
    module, cls = LOCAL_BUILDERS[name].split(":")
    return getattr(importlib.import_module(module), cls)


def get_builder(name: str, data_dir: str | pathlib.Path | None = None):
    """Builder of local dataset `name`, reading and writing `data_dir` (default tfds_dir())."""
    return builder_class(name)(data_dir=data_dir)


def is_prepared(name: str, data_dir: str | pathlib.Path | None = None) -> bool:
    """Whether local dataset `name` is prepared under `data_dir` (default tfds_dir())."""
    return get_builder(name, data_dir).is_prepared()


def prepare(name: str, *, data_dir: str | pathlib.Path | None = None, force: bool = False):
    """Prepares local dataset `name` (again when `force`) and returns its builder.

    Raises DataError with the fetch command when the raw files are missing.
    """
    import tensorflow_datasets as tfds

    builder = get_builder(name, data_dir)
    if force or not builder.is_prepared():
        builder.check_raw_files()
        mode = tfds.download.GenerateMode.REUSE_CACHE_IF_EXISTS
        builder.download_and_prepare(download_config=tfds.download.DownloadConfig(
            download_mode=mode if force else tfds.download.GenerateMode.REUSE_DATASET_IF_EXISTS))
    return builder

