"""The base of every local builder: a dataset fetched by data.fetch, read by its reader of
data/corpora/, written as array_record files under paths.tfds_dir().

A builder says what its dataset is in class attributes (DESCRIPTION, HOMEPAGE, CITATION,
LICENSE, SUPERVISED_KEYS), its `features()`, how its raw files are checked (`check_raw_files`,
the reader's) and which split each example goes to (`split_examples`). Examples keep the
corpus order (`disable_shuffling`): the pipelines shuffle.
"""

from __future__ import annotations

import pathlib
import sys
from typing import Any, Iterable, Sequence

import tensorflow_datasets as tfds
from etils import epath

from data import paths

Examples = Iterable[tuple[Any, dict]]  # (unique key, example), in corpus order


class LocalBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    """A TFDS builder of a dataset fetched by data.fetch; subclasses define the data."""

    DESCRIPTION = ""
    HOMEPAGE = ""
    CITATION = ""
    LICENSE = ""
    SUPERVISED_KEYS: tuple[str, str] | None = None

    # TFDS looks up a builder's source file through `importlib_resources`, a package it only
    # declares for Python < 3.9 and that is not installed here; name the subclass's file.
    @tfds.core.utils.classproperty
    @classmethod
    def code_path(cls) -> epath.Path:
        return epath.Path(sys.modules[cls.__module__].__file__)

    def __init__(self, *, data_dir: str | pathlib.Path | None = None, **kwargs):
        kwargs.setdefault("file_format", "array_record")
        super().__init__(data_dir=str(data_dir or paths.tfds_dir()), **kwargs)

    @classmethod
    def check_raw_files(cls) -> None:
        """DataError naming `python -m data.fetch NAME` when the raw files are missing."""
        raise NotImplementedError

    def features(self) -> tfds.features.FeaturesDict:
        raise NotImplementedError

    def split_examples(self) -> dict[str, Examples]:
        """{split: its examples}; called after `check_raw_files`."""
        raise NotImplementedError

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(
            builder=self, description=self.DESCRIPTION, features=self.features(),
            supervised_keys=self.SUPERVISED_KEYS, disable_shuffling=True, homepage=self.HOMEPAGE,
            citation=self.CITATION, license=self.LICENSE)

    def _split_generators(self, dl_manager):
        del dl_manager  # Nothing to download: data.fetch put the files in place.
        self.check_raw_files()
        return {split: self._generate_examples(examples)
                for split, examples in self.split_examples().items()}

    def _generate_examples(self, examples: Examples):
        yield from examples


def by_split(examples: Iterable[tuple[str, Any, dict]],
             splits: Sequence[str]) -> dict[str, list[tuple[Any, dict]]]:
    """{split: [(key, example)]} of (split, key, example) triples, each split in their order."""
    parts: dict[str, list] = {split: [] for split in splits}
    for split, key, example in examples:
        parts[split].append((key, example))
    return parts
