"""The examples of a random-access data source: read several at once, and their text fields.

A data source (``data.builders.sources.get_data_source``, a TFDS array_record source, or any
object with ``len()`` and ``[i] -> dict``) may also have ``__getitems__(indices)``, one batched
read: TFDS array_record sources do, and the pipelines read a whole batch's examples through it.

A TFDS `Text` feature comes back as UTF-8 bytes (a `Tensor` of strings as an object array of
bytes); an in-memory source may hold str. `as_text` turns either into str, wherever a text field
is read (a vocabulary's training texts, a pipeline's inputs, a document read back).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from data.errors import DataError


def read_examples(source, indices: Sequence[int]) -> Sequence[dict]:
    """The examples of `source` at `indices`, in that order: one ``__getitems__`` call where the
    source has it, else one ``source[i]`` per index."""
    indices = [int(i) for i in indices]
    if hasattr(source, "__getitems__"):
        return source.__getitems__(indices)
    return [source[i] for i in indices]


def as_text(value) -> str:
    """A text field of an example (str, UTF-8 bytes, or a 0-d numpy array of either) as str."""
    if isinstance(value, np.ndarray):
        value = value.item()
    if isinstance(value, (bytes, np.bytes_)):
        return bytes(value).decode("utf-8")
    if isinstance(value, str):
        try:  # a lone surrogate ('\ud83d', e.g. half an emoji from JSON) has no UTF-8
            value.encode("utf-8")
        except UnicodeEncodeError as error:
            raise DataError(f"a text is not valid Unicode ({error.reason} at character "
                            f"{error.start}): {value[:60]!r}; mend it in the data (half of an "
                            "emoji's surrogate pair, as JSON can write one)") from error
        return str(value)
    raise DataError(f"a text (str or UTF-8 bytes) expected, got {type(value).__name__}")


def as_texts(values) -> list[str]:
    """`as_text` of every element of a sequence or array of texts, flattened."""
    return [as_text(v) for v in np.asarray(values, dtype=object).reshape(-1)]
