"""Reading several examples of a random-access data source at once.

A data source (``data.builders.sources.get_data_source``, a TFDS array_record source, or any object with
``len()`` and ``[i] -> dict``) may also have ``__getitems__(indices)``, one batched read: TFDS
array_record sources do, and the pipelines read a whole batch's examples through it.
"""

from __future__ import annotations

from typing import Sequence


def read_examples(source, indices: Sequence[int]) -> Sequence[dict]:
    """The examples of `source` at `indices`, in that order: one ``__getitems__`` call where the
    source has it, else one ``source[i]`` per index."""
    indices = [int(i) for i in indices]
    if hasattr(source, "__getitems__"):
        return source.__getitems__(indices)
    return [source[i] for i in indices]
