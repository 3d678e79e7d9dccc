"""The base of every local builder: a dataset fetched by data.fetch, read by its reader of
data/corpora/, written as array_record files under paths.tfds_dir().

A builder says what its dataset is in class attributes (DESCRIPTION, HOMEPAGE, CITATION,
LICENSE, SUPERVISED_KEYS), its `features()`, how its raw files are checked (`check_raw_files`,
the reader's) and which split each example goes to (`split_examples`). Examples keep the
corpus order (`disable_shuffling`): the pipelines shuffle.

Preparing says what it does in our words, wherever it happens (`python -m data.fetch`, or a run
that finds only the raw files): one line when it starts, one progress bar per split, and one line
with the split sizes and the time. TFDS's own words are for downloads and do not fit a local
build: a "Downloading and preparing dataset Unknown size" banner, an absl warning that the
folder about to be made has no dataset_info.json, and nested progress bars that name temporary
files.
"""

from __future__ import annotations

import pathlib
import sys
import time
from typing import Any, Iterable, Sequence

import tensorflow_datasets as tfds
import tqdm
from etils import epath
from tensorflow_datasets.core.utils import tqdm_utils

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

    def is_prepared(self) -> bool:
        # TFDS asks the folder for its dataset_info.json and logs a warning when it has none,
        # which is every time before the first build: look for the folder first.
        return self.data_path.exists() and super().is_prepared()

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(
            builder=self, description=self.DESCRIPTION, features=self.features(),
            supervised_keys=self.SUPERVISED_KEYS, disable_shuffling=True, homepage=self.HOMEPAGE,
            citation=self.CITATION, license=self.LICENSE)

    def _split_generators(self, dl_manager):
        del dl_manager  # Nothing to download: data.fetch put the files in place.
        self.check_raw_files()
        return {split: self._generate_examples(split, examples)
                for split, examples in self.split_examples().items()}

    def _generate_examples(self, split: str, examples: Examples):
        yield from tqdm.tqdm(examples, desc=f"{self.info.full_name} {split}", unit=" examples",
                             total=len(examples) if hasattr(examples, "__len__") else None,
                             file=sys.stderr, mininterval=1.0, dynamic_ncols=True)

    def _download_and_prepare(self, dl_manager, download_config):
        # TFDS's bars (splits, then examples, then "Shuffling <temporary file>") are switched
        # off for this build only: `_generate_examples` draws one bar per split instead.
        shown = tqdm_utils._active  # the user's setting (tfds.display_progress_bar), restored
        tfds.display_progress_bar(False)
        try:
            super()._download_and_prepare(dl_manager, download_config)
        finally:
            tfds.display_progress_bar(shown)

    def _log_download_bytes(self) -> None:
        """Said as the build starts (TFDS's hook for its download banner)."""
        self._started = time.perf_counter()
        print(f"{self.info.full_name}: preparing the TFDS dataset from the fetched raw files, "
              f"into {self.data_dir} ...", flush=True)

    def _log_download_done(self) -> None:
        """Said once the dataset is in place (TFDS's hook for its "downloaded" line)."""
        print(f"{self.info.full_name}: prepared ({self.split_sizes()}; "
              f"{time.perf_counter() - self._started:.1f} s)", flush=True)

    def split_sizes(self) -> str:
        """'train 60,000, test 10,000 examples' of a prepared dataset."""
        return ", ".join(f"{split} {info.num_examples:,}"
                         for split, info in self.info.splits.items()) + " examples"


def by_split(examples: Iterable[tuple[str, Any, dict]],
             splits: Sequence[str]) -> dict[str, list[tuple[Any, dict]]]:
    """{split: [(key, example)]} of (split, key, example) triples, each split in their order."""
    parts: dict[str, list] = {split: [] for split in splits}
    for split, key, example in examples:
        parts[split].append((key, example))
    return parts
