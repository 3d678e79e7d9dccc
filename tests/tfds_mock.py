"""TFDS's mock-data facility for the paper-scale recipes' datasets (wmt14_translate,
imagenet2012, wikipedia), which cannot be downloaded here.

`tfds.testing.mock_data` (what flax's wmt example tests itself with) keeps TFDS's own builders,
with their feature names, dtypes and splits, and replaces their examples by random ones made
from the feature specs: images of random sizes, labels below the class count, strings. The
recipes' tests run the real pipelines and trainer on them, so three things are mended here:

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
  - TFDS's mock ignores the split string: every split, and every slice of one ('train[:-2000]'),
    is the same `num_examples` examples, seeded by their index alone, so a recipe that holds
    out the end of a split (Wikipedia's only split, 'train') would evaluate on its training
    articles without any test noticing. Here each split holds `num_examples` examples of its
    own (split S's example i is the generator's example seeded crc32(S) + i), and a split
    string is read as TFDS reads it: `tfds.core.ReadInstruction.from_spec(spec).to_absolute()`,
    TFDS's own parser (absolute, negative and percent boundaries, 'a+b'; a slice past the
    split's size raises TFDS's ValueError). Only the dataset's real splits exist (`SPLITS`:
    the mock's builders declare none): any other name raises TFDS's ValueError ("Unknown split
    'trian'. Should be one of ['train']."), so a recipe's split typo fails its test.
    `READS[spec]` records the (split, index, seed) of each example read through each split
    string, for tests that check what was trained and evaluated on (examples of different
    seeds differ).
  - A source opened with TFDS's SkipDecoding for a feature (`get_data_source(...,
    undecoded=('image',))`) hands it over as its stored bytes (an image's PNG here): TFDS's
    mock would encode it with TensorFlow, which is not installed. `DECODED[feature]` counts
    the examples read with that feature decoded, for tests that check what was decoded.
  - Under TFDS's mock no builder is prepared (its data_dir does not exist), so a multi-process
    run would refuse every dataset (data/builders/sources.py). The mocked datasets count as
    prepared (`is_prepared()`); mock_tfds(n, prepared=False) keeps TFDS's answer, for the tests
    of what a run does with a dataset not yet prepared.
  - grain's worker processes (`data.worker_count` > 0) are spawned: they unpickle their
    pipeline's sources where TFDS is not mocked, so a mocked source would load the real
    dataset's info and records there, and fail. A mocked source pickles as the call that opens
    it again, under a mock the worker opens for its whole life; READS counts only the examples
    read in the process that reads them.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import zlib

import numpy as np

LETTERS = np.array(list("abcdefghij"))
READS: dict[str, set[tuple[str, int, int]]] = {}  # split string -> (split, index, seed) read
DECODED: collections.Counter = collections.Counter()  # feature -> examples read it decoded


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


# The split names of each mocked dataset (its TFDS builder's, by the name before any '/config').
SPLITS = {
    "imagenet2012": ("train", "validation", "test"),
    "wikipedia": ("train",),
    "wmt14_translate": ("train", "validation", "test"),
}


def split_names(dataset: str) -> tuple[str, ...]:
    """The real split names of mocked `dataset` ('wmt14_translate/de-en' -> train, validation,
    test)."""
    base = dataset.partition("/")[0]
    if base not in SPLITS:
        raise KeyError(f"tests/tfds_mock.py SPLITS has no split names for {dataset!r}: add its "
                       "TFDS builder's")
    return SPLITS[base]


def split_rows(spec: str, num_examples: int, dataset: str) -> list[tuple[str, int]]:
    """The (split, index) rows a TFDS split string selects of `dataset` when every split has
    `num_examples` examples, in TFDS's order: 'train[-2:]' of 5 -> [('train', 3), ('train', 4)];
    TFDS's ValueError for a split the dataset does not have."""
    import tensorflow_datasets as tfds

    splits = {name: tfds.core.SplitInfo(name=name, shard_lengths=[num_examples], num_bytes=0,
                                        filename_template=None)
              for name in split_names(dataset)}
    instructions = tfds.core.ReadInstruction.from_spec(spec).to_absolute(splits)
    return [(i.splitname, index) for i in instructions
            for index in range(i.from_ or 0, num_examples if i.to is None else i.to)]


def stored_bytes(value) -> bytes:
    """A mocked feature as TFDS's SkipDecoding hands it over, undecoded: an image's PNG file,
    anything else its array's bytes."""
    value = np.asarray(value)
    if value.dtype == np.uint8 and value.ndim == 3:
        import io

        from PIL import Image

        buffer = io.BytesIO()
        Image.fromarray(value[..., 0] if value.shape[-1] == 1 else value).save(buffer, "PNG")
        return buffer.getvalue()
    return value.tobytes()


class SlicedRecords:
    """The records of one split string (what the mocked ArrayRecordDataSource reads), the
    features `undecoded` as their stored bytes (a source opened with TFDS's SkipDecoding)."""

    def __init__(self, spec: str, generator, num_examples: int, dataset: str,
                 undecoded: tuple[str, ...] = ()):
        self.spec, self.generator, self.undecoded = spec, generator, undecoded
        self.rows = split_rows(spec, num_examples, dataset)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, key: int):
        split, index = self.rows[key]
        seed = zlib.crc32(split.encode()) + index
        READS.setdefault(self.spec, set()).add((split, index, seed))
        example = dict(self.generator[seed])
        for feature in example:
            if feature in self.undecoded:
                example[feature] = stored_bytes(example[feature])
            else:
                DECODED[feature] += 1
        return example

    def __getitems__(self, keys):
        return [self[int(key)] for key in keys]


def _sliced(as_data_source, num_examples: int):
    """The mocked `DatasetBuilder.as_data_source`, its string splits read as TFDS reads them,
    its features of SkipDecoding decoders undecoded (TFDS's mock would encode them with
    TensorFlow), its sources opened again, mocked, where they are unpickled (`_reopened`)."""
    import tensorflow_datasets as tfds

    def sliced(self, split=None, *args, decoders=None, **kwargs):
        if not isinstance(split, str):
            return as_data_source(self, split, *args, decoders=decoders, **kwargs)
        undecoded = tuple(sorted(decoders or ()))
        assert all(isinstance(decoders[f], tfds.decode.SkipDecoding) for f in undecoded), (
            f"the mock reads only SkipDecoding decoders: {decoders}")
        source = as_data_source(self, split, *args, **kwargs)
        name = f"{self.name}/{self.builder_config.name}" if self.builder_config else self.name
        source.data_source = SlicedRecords(split, source.data_source._generator, num_examples,
                                           name, undecoded)
        source.__class__ = _reopened(type(source))
        source.reopen = (name, split, num_examples, undecoded)
        return source
    return sliced


@functools.cache
def _reopened(cls: type) -> type:
    """`cls` pickled as the call that opens it again under the mock: grain's worker processes
    (data.worker_count > 0) are spawned, and unpickle their pipeline's sources with TFDS
    unmocked, where a source's dataset info and records would be the real dataset's."""
    def reduce(source):
        return _reopen, source.reopen
    return type(cls.__name__, (cls,), {"__reduce__": reduce})


_ACTIVE: list[int] = []              # mock_tfds contexts open in this process
_WORKER = contextlib.ExitStack()     # the one a worker process opens, for its whole life


def _reopen(name: str, split: str, num_examples: int, undecoded: tuple[str, ...] = ()):
    """The source of `name` / `split` as mock_tfds(num_examples) gives it: under the mock open
    in this process, or in a worker process that has none, under one opened for the rest of
    its life. Anywhere else (the main process after its mock closed) it is refused: a mock
    left open there would fake TFDS for everything after."""
    import multiprocessing

    from data.builders.sources import get_data_source

    if not _ACTIVE:
        if multiprocessing.parent_process() is None:
            raise RuntimeError(f"a mocked TFDS source ({name} {split}) was unpickled outside "
                               "tests/tfds_mock.py's mock_tfds: open the source within it")
        _WORKER.enter_context(mock_tfds(num_examples))
    elif _ACTIVE[-1] != num_examples:
        raise RuntimeError(f"a source mocked with {num_examples} examples a split was "
                           f"unpickled under a mock of {_ACTIVE[-1]}")
    return get_data_source(name, split, source="tfds", undecoded=undecoded)


@contextlib.contextmanager
def mock_tfds(num_examples: int, *, prepared: bool = True):
    """tfds.testing.mock_data(num_examples, policy=USE_CODE), mended (module docstring); the
    mocked datasets count as prepared unless `prepared` is False."""
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
        _ACTIVE.append(num_examples)
        stack.callback(_ACTIVE.pop)
        stack.enter_context(mock_patch(mocking, "_getitems", getitems))
        stack.enter_context(mock_patch(mocking.RandomFakeGenerator,
                                       "_generate_random_string_array", strings))
        stack.enter_context(tfds.testing.mock_data(num_examples=num_examples,
                                                   policy=tfds.testing.MockPolicy.USE_CODE))
        builder = tfds.core.DatasetBuilder
        stack.enter_context(mock_patch(builder, "as_data_source",
                                       _sliced(builder.as_data_source, num_examples)))
        if prepared:
            stack.enter_context(mock_patch(builder, "is_prepared", lambda self: True))
        yield


def mock_patch(target, name, value):
    from unittest import mock

    return mock.patch.object(target, name, value)
