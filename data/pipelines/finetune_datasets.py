"""Labelled datasets for BERT fine-tuning, by name, as random-access lists of raw examples.

    ds = get_dataset("spam")                     # FinetuneDataset: kind, labels, splits
    examples = ds.examples("train")              # len(), [i] -> {'text': ..., 'label': 1}

Each dataset has one `kind`, which fixes the form of its raw examples:

  classify         {'text': str, 'label': int}
  pair_classify    {'text_a': str, 'text_b': str, 'label': int}
  tag              {'words': [str], 'tags': [int]}       one tag per word
  span             {'question': str, 'context': str, 'answers': [(char_start, answer_text)]}
                   (character offsets into the context; [] when there is no answer)
  multiple_choice  {'context': str, 'choices': [str] * num_choices, 'label': int}

Labels and tags are indices into `labels`. data/pipelines/finetune.py turns examples into BERT
inputs.

The datasets (local: `python -m data.fetch NAME` first; tfds: the standard catalog, which needs
internet access once):

  spam         classify, ham/spam emails (data/corpora/spam.py); train/validation/test by text
               hash
  tweets       classify, negative/neutral/positive tweets (data/corpora/tweets.py); the same
               splits
  brown_genre  classify, one Brown PARAGRAPH (its sentences joined) -> its document's genre
               (15 labels)
  brown_pos    tag, one Brown sentence's words -> coarse POS tags (data/corpora/brown_tags.py)
  squad        span, TFDS 'squad' (v1.1): question + Wikipedia paragraph -> answer span;
               train/validation
  swag         multiple_choice, TFDS 'hellaswag': context + 4 endings -> the right one. TFDS
               has no builder named 'swag'; HellaSwag is SWAG's harder successor with the same
               4-way form (Zellers et al. 2018, 2019); train/validation (its test labels are
               hidden: TFDS gives them as -1)

Brown splits follow the documents, so no document is in two splits: `test` is Brown's own
`validation` split (25 documents, ~5% of each genre, also held out of BERT pretraining here),
and `validation` holds ~10% of each genre's remaining documents (data/corpora/splits.py's stable
hash, stratified by genre); `train` is the rest. A genre with a single training document (the
test fixture) has no validation document: evaluate on `test` there.

Every dataset takes TFDS's split slices: `examples("train[:10%]")`, `"test[-100:]"`,
`"train+validation"` (the Brown ones slice their examples as TFDS would).

`register(dataset)` adds a dataset (tests add generated ones; users their own).
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
import types
from typing import Any, Callable, Sequence

import numpy as np

from data import paths
from data.builders.documents import read_documents
from data.builders.examples import as_text, as_texts, read_examples
from data.builders.sources import SOURCE_KINDS, get_data_source
from data.corpora import brown, spam, tweets
from data.corpora.brown_tags import COARSE_TAGS, coarse_tag
from data.corpora.splits import SPLITS, assign_splits
from data.errors import DataError

KINDS = ("classify", "pair_classify", "tag", "span", "multiple_choice")
BROWN_VALIDATION_FRACTION = 0.1  # of each genre's Brown training documents


@dataclasses.dataclass(frozen=True)
class FinetuneDataset:
    """A named labelled dataset: its kind, label names, splits, and how to read a split."""

    name: str
    kind: str
    labels: tuple[str, ...]  # class / tag names; () for span
    splits: tuple[str, ...]
    # (split, source kind, data_dir) -> random-access examples in the kind's form
    read: Callable[[str, str, Any], Sequence[dict]]
    source: str = "local"  # where its data comes from by default: 'local' | 'tfds'
    num_choices: int = 0  # multiple_choice only
    description: str = ""
    fetched: tuple[str, ...] = ()  # what its local source reads: `python -m data.fetch` names

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"dataset {self.name!r}: kind {self.kind!r} is not one of "
                             f"{list(KINDS)}")
        if self.kind == "multiple_choice" and self.num_choices < 2:
            raise ValueError(f"dataset {self.name!r}: multiple_choice needs num_choices >= 2")

    @property
    def num_labels(self) -> int:
        return len(self.labels)

    def examples(self, split: str, *, source: str | None = None,
                 data_dir: str | pathlib.Path | None = None) -> Sequence[dict]:
        """The raw examples of `split` (module docstring); DataError for an unknown split."""
        source = self.source if source is None else source
        if source not in SOURCE_KINDS:
            raise DataError(f"unknown data source kind {source!r}; allowed: {list(SOURCE_KINDS)}")
        for base in split_names(split):  # TFDS's grammar: 'train[:10%]', 'test+train[-5:]'
            if base not in self.splits:
                raise DataError(f"dataset {self.name!r} has no split {base!r} (in {split!r}); "
                                f"splits: {list(self.splits)}")
        examples = self.read(split, source, data_dir)
        if len(examples) == 0:
            raise DataError(f"split {split!r} of dataset {self.name!r} has no examples"
                            + (" (a Brown genre with one training document has no validation "
                               "document: use the 'test' split)" if self.name.startswith("brown")
                               else ""))
        return examples


class MappedExamples:
    """A random-access source with each example converted by `fn`; batched reads go through
    the source's `__getitems__` when it has one (TFDS array_record sources do)."""

    def __init__(self, source, fn: Callable[[dict], dict]):
        self.source, self.fn = source, fn

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, index: int) -> dict:
        return self.fn(self.source[int(index)])

    def __iter__(self):  # explicit: TFDS sources raise ValueError, not IndexError, past the end
        for start in range(0, len(self), 256):
            yield from self.__getitems__(range(start, min(len(self), start + 256)))

    def __getitems__(self, indices: Sequence[int]) -> list[dict]:
        return [self.fn(e) for e in read_examples(self.source, indices)]


def split_names(spec: str) -> list[str]:
    """The split names of a TFDS split spec: 'train[:10%]+test' -> ['train', 'test']."""
    return [part.split("[", 1)[0].strip() for part in spec.split("+")]


def sliced(spec: str, read_split: Callable[[str], Sequence[dict]]) -> list[dict]:
    """TFDS's split slicing ('train[:50%]', 'test[-10:]', 'test+train[:2]', its rounding) for
    a reader that knows only whole splits: `read_split(name)` gives one split's examples."""
    import tensorflow_datasets as tfds

    try:
        instruction = tfds.core.ReadInstruction.from_spec(spec)
    except (ValueError, AssertionError) as error:
        raise DataError(f"split {spec!r} is not a split name with an optional TFDS slice "
                        "('train', 'train[:50%]', 'test[-10:]', 'train+test'): "
                        f"{str(error).strip()}") from error
    whole = {name: list(read_split(name)) for name in dict.fromkeys(split_names(spec))}
    sizes = {name: types.SimpleNamespace(num_examples=len(examples))
             for name, examples in whole.items()}
    try:
        parts = instruction.to_absolute(sizes)
    except (ValueError, AssertionError) as error:
        raise DataError(f"split {spec!r}: {error} (sizes: "
                        f"{ {n: len(e) for n, e in whole.items()} })") from error
    return [e for part in parts for e in whole[str(part.splitname)][part.from_:part.to]]


# ----------------------------------------------------------------------------- local: texts


def _text_example(example: dict) -> dict:
    return {"text": as_text(example["text"]), "label": int(example["label"])}


def _read_tfds_text(name: str) -> Callable:
    def read(split: str, source: str, data_dir) -> Sequence[dict]:
        return MappedExamples(get_data_source(name, split, source=source, data_dir=data_dir),
                              _text_example)

    return read


# ----------------------------------------------------------------------------- local: Brown


@functools.lru_cache(maxsize=4)
def _brown_documents(split: str, root: str, data_dir: str | None) -> tuple:
    """The Brown Documents of one of OUR splits (module docstring), cached per data root."""
    del root  # part of the cache key only: PAPERS_JAX_DATA may change between calls
    if split == "test":
        return tuple(read_documents(brown.NAME, "validation", data_dir=data_dir))
    docs = list(read_documents(brown.NAME, "train", data_dir=data_dir))
    assignment = assign_splits([d.doc_id for d in docs], [d.metadata["genre"] for d in docs],
                               BROWN_VALIDATION_FRACTION)
    return tuple(d for d in docs if assignment[d.doc_id] == split)


def _brown(split: str, data_dir) -> tuple:
    return _brown_documents(split, str(paths.data_root()), None if data_dir is None
                            else str(data_dir))


def _check_local(name: str, source: str) -> None:
    if source != "local":
        raise DataError(f"dataset {name!r} is built from the local Brown corpus; use "
                        "source='local'")


def _read_brown_genre(split: str, source: str, data_dir) -> list[dict]:
    _check_local("brown_genre", source)
    index = {g: i for i, g in enumerate(brown.GENRE_NAMES)}
    return sliced(split, lambda name: [
        {"text": " ".join(paragraph), "label": index[doc.metadata["genre"]]}
        for doc in _brown(name, data_dir) for paragraph in doc.paragraphs])


def _read_brown_pos(split: str, source: str, data_dir) -> list[dict]:
    _check_local("brown_pos", source)
    index = {t: i for i, t in enumerate(COARSE_TAGS)}
    return sliced(split, lambda name: [
        {"words": list(words), "tags": [index[coarse_tag(t)] for t in tags]}
        for doc in _brown(name, data_dir)
        for words, tags in zip(doc.tokens, doc.tags, strict=True)])


# ----------------------------------------------------------------------------- TFDS catalog


def _tfds_source(name: str, split: str, source: str, data_dir):
    if source != "tfds":
        raise DataError(f"dataset {name!r} comes from the TFDS catalog (no package carries it "
                        "here); use source='tfds' on a machine that can download it")
    return get_data_source(name, split, source="tfds", data_dir=data_dir)


def _squad_example(example: dict) -> dict:
    answers = example["answers"]
    return {"question": as_text(example["question"]), "context": as_text(example["context"]),
            "answers": [(int(s), t) for s, t in zip(np.asarray(answers["answer_start"]).reshape(-1),
                                                     as_texts(answers["text"]))]}


def _read_squad(split: str, source: str, data_dir) -> Sequence[dict]:
    return MappedExamples(_tfds_source("squad", split, source, data_dir), _squad_example)


def _hellaswag_example(example: dict) -> dict:
    return {"context": as_text(example["context"]), "choices": as_texts(example["endings"]),
            "label": int(example["label"])}


def _read_hellaswag(split: str, source: str, data_dir) -> Sequence[dict]:
    return MappedExamples(_tfds_source("hellaswag", split, source, data_dir), _hellaswag_example)


# ----------------------------------------------------------------------------- registry


def _builtin() -> dict[str, FinetuneDataset]:
    return {d.name: d for d in (
        FinetuneDataset("spam", "classify", spam.LABELS, SPLITS, _read_tfds_text(spam.NAME),
                        description="SpamAssassin emails: ham or spam", fetched=(spam.NAME,)),
        FinetuneDataset("tweets", "classify", tweets.LABELS, SPLITS,
                        _read_tfds_text(tweets.NAME),
                        description="tweets: negative, neutral or positive",
                        fetched=(tweets.NAME,)),
        FinetuneDataset("brown_genre", "classify", brown.GENRE_NAMES, SPLITS, _read_brown_genre,
                        description="Brown paragraphs: the genre of their document",
                        fetched=(brown.NAME,)),
        FinetuneDataset("brown_pos", "tag", COARSE_TAGS, SPLITS, _read_brown_pos,
                        description="Brown sentences: 12 coarse POS tags per word",
                        fetched=(brown.NAME,)),
        FinetuneDataset("squad", "span", (), ("train", "validation"), _read_squad,
                        source="tfds", description="SQuAD v1.1 (TFDS 'squad')"),
        FinetuneDataset("swag", "multiple_choice", (), ("train", "validation"),
                        _read_hellaswag, source="tfds", num_choices=4,
                        description="HellaSwag (TFDS 'hellaswag'), SWAG's 4-ending form"),
    )}


DATASETS: dict[str, FinetuneDataset] = {}


def register(dataset: FinetuneDataset, *, replace: bool = False) -> FinetuneDataset:
    """Adds `dataset` under its name (replace=True to overwrite one)."""
    if not DATASETS:
        DATASETS.update(_builtin())
    if dataset.name in DATASETS and not replace:
        raise DataError(f"a fine-tuning dataset named {dataset.name!r} exists; pass "
                        "replace=True to overwrite it")
    DATASETS[dataset.name] = dataset
    return dataset


def get_dataset(name: str) -> FinetuneDataset:
    if not DATASETS:
        DATASETS.update(_builtin())
    if name not in DATASETS:
        raise DataError(f"unknown fine-tuning dataset {name!r}; known: {sorted(DATASETS)}")
    return DATASETS[name]
