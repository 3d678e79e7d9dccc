"""The base of every local builder: array_record files under paths.tfds_dir(), and the
builder's source file named directly."""

from __future__ import annotations

import pathlib
import sys

import tensorflow_datasets as tfds
from etils import epath

from data import paths


class LocalBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    """A TFDS builder of a dataset fetched by data.fetch; subclasses define the data."""

    # TFDS looks up a builder's source file through `importlib_resources`, a package it only
    # declares for Python < 3.9 and that is not installed here; name the subclass's file.
    @tfds.core.utils.classproperty
    @classmethod
    def code_path(cls) -> epath.Path:
        return epath.Path(sys.modules[cls.__module__].__file__)

    def __init__(self, *, data_dir: str | pathlib.Path | None = None, **kwargs):
        kwargs.setdefault("file_format", "array_record")
        super().__init__(data_dir=str(data_dir or paths.tfds_dir()), **kwargs)
