"""TFDS's mock-data facility for the paper-scale recipes' datasets (wmt14_translate,
imagenet2012, wikipedia), which cannot be downloaded here.

`tfds.testing.mock_data` (what flax's wmt example tests itself with) keeps TFDS's own builders,
with their feature names, dtypes and splits, and replaces their examples by random ones made
from the feature specs: images of random sizes, labels below the class count, strings. The
recipes' tests run the real pipelines and trainer on them, so two things are mended here:

  - TFDS 4.9.10's mocked array_record source cannot `__getitems__` (a batched read: the
    pipelines read a batch's examples at once): its mock binds the function without the
    source, so every call fails with a missing argument. The module function it binds is
    replaced by one that takes what the bound call passes.
  - A mocked string is 10-20 random letters and spaces. A pretraining pipeline needs sentences
    and passages to split and pair (a Wikipedia article is paragraphs of sentences under
    headings), and a translation pipeline rows of some length, so a mocked string here is
    prose of such words: a heading line, then one to three paragraphs of two to five
    sentences of 4-12 words, each capitalised and ending with a full stop. The same
    generator (seeded per example) makes the same text.

Everything else is TFDS's: tfds.data_source(name, split) returns its ArrayRecordDataSource over
the builder's real DatasetInfo. Split slicing ('train[:-2000]') is not applied by the mock:
every split has `num_examples` examples.
"""

from __future__ import annotations

import contextlib

import numpy as np

LETTERS = np.array(list("abcdefghij"))


def _word(rng: np.random.Generator) -> str:
    return "".join(rng.choice(LETTERS, size=int(rng.integers(2, 9))))


def _sentence(rng: np.random.Generator) -> str:
    words = [_word(rng) for _ in range(int(rng.integers(4, 13)))]
    return " ".join(words).capitalize() + "."


def prose(rng: np.random.Generator) -> str:
    """A heading line, then paragraphs of sentences (module docstring)."""
    paragraphs = [" ".join(_sentence(rng) for _ in range(int(rng.integers(2, 6))))
                  for _ in range(int(rng.integers(1, 4)))]
    return "\n\n".join([_word(rng).capitalize(), *paragraphs])


@contextlib.contextmanager
def mock_tfds(num_examples: int):
    """tfds.testing.mock_data(num_examples, policy=USE_CODE), mended (module docstring)."""
    import tensorflow_datasets as tfds
    from tensorflow_datasets.testing import mocking

    def getitems(record_keys, generator, serialized=False):
        assert not serialized, "the pipelines read decoded examples"
        return [generator[int(key)] for key in record_keys]

    def strings(self, shape, rng):
        if not shape:
            return prose(rng)
        return np.array([prose(rng) for _ in range(int(np.prod(shape)))]).reshape(shape)

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock_patch(mocking, "_getitems", getitems))
        stack.enter_context(mock_patch(mocking.RandomFakeGenerator,
                                       "_generate_random_string_array", strings))
        stack.enter_context(tfds.testing.mock_data(num_examples=num_examples,
                                                   policy=tfds.testing.MockPolicy.USE_CODE))
        yield


def mock_patch(target, name, value):
    from unittest import mock

    return mock.patch.object(target, name, value)
