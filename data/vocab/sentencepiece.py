"""A SentencePiece vocabulary shared by source and target, trained once and cached on disk.

    tokenizer = load_or_train_for_dataset("bible_en_es", split="train", keys=("en", "es"))
    tokenizer = vocab_for_source(train_source, ("en", "es"), vocab_size=32000)  # any source
    ids = tokenizer.encode("Where is the station?")   # list of ids, no BOS/EOS added
    tokenizer.decode(ids + [tokenizer.eos_id, 0, 0])   # 'Where is the station?'

Vaswani et al. 2017 use one vocabulary for source and target (Sec. 5.1) and share the embedding
weights between them (Sec. 3.4), so one SentencePiece model (Kudo & Richardson 2018) is trained
on the texts of both languages of the training split.

Special ids are fixed, so they agree with models/transformer.py (PAD_ID = 0, BOS not 0):
  pad 0 '<pad>'   eos 1 '</s>'   unk 2 '<unk>'   bos 3 '<s>'
`encode` adds neither BOS nor EOS (the pipeline appends EOS; the model's shift_right adds BOS).

The cache. A model is trained once and kept (data/vocab/cache.py: the folder, the lock, the
atomic write) under a name that encodes everything that changes it: the text name (dataset,
split, keys: see `cache_name`), the model type, vocabulary size, character coverage, sentence cap
and `FORMAT` (bumped when the training options below change), e.g.
    bible_en_es.train.en+es.unigram.v32000.cov1.max1000000.spm1.model
so a different setting never reuses a stale file. What the name cannot see is a change of the
texts themselves under the same dataset name: delete the file then (a training run keeps its own
copy in its workdir, so this never changes a run already started: train/vocabulary.py). A file
that does not load, or whose special ids or size differ from what its name says, raises
DataError naming it (delete it to train again); a model just trained passes the same check
before it is written.

Determinism. Training reads the texts in the order `texts_fn` yields them (capped at
`max_sentences`), with SentencePiece's own sentence sampling and shuffling switched off
(`input_sentence_size=0`, `shuffle_input_sentence=False`) and its random generator seeded; two
trainings on the same texts give byte-identical models (checked in tests/test_text_pipeline.py,
for unigram and bpe). The thread count is fixed (4), so the model does not depend on the machine.

Worker processes. A `Tokenizer` holds the serialized model bytes and pickles as them, so grain
worker processes rebuild it cheaply without reading the cache.
"""

from __future__ import annotations

import io
import itertools
import os
import pathlib
import re
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np
import sentencepiece as spm

from data.builders.examples import as_text
from data.errors import DataError
from data.vocab import cache

PAD_ID, EOS_ID, UNK_ID, BOS_ID = 0, 1, 2, 3
MODEL_TYPES = ("unigram", "bpe")
FORMAT = "spm1"  # bump when _TRAINER_OPTIONS change: old cache files are then not reused
SEED = 1  # SentencePiece's random generator (used by its sampling steps)

_TRAINER_OPTIONS = dict(
    pad_id=PAD_ID, eos_id=EOS_ID, unk_id=UNK_ID, bos_id=BOS_ID,
    pad_piece="<pad>", eos_piece="</s>", unk_piece="<unk>", bos_piece="<s>",
    input_sentence_size=0,            # no sampling inside SentencePiece: we cap the texts ourselves
    shuffle_input_sentence=False,
    max_sentence_length=1 << 16,      # bytes; longer sentences are skipped by the trainer
    num_threads=4,                    # fixed: the model must not depend on the machine
    minloglevel=1,                    # no INFO lines (warnings and errors still show)
)


class Tokenizer:
    """Encodes text to ids and back with one SentencePiece model (see the module docstring)."""

    pad_id, eos_id, unk_id, bos_id = PAD_ID, EOS_ID, UNK_ID, BOS_ID

    def __init__(self, model_proto: bytes, path: str | os.PathLike | None = None):
        self.model_proto = bytes(model_proto)
        self.path = None if path is None else pathlib.Path(path)
        self._sp = spm.SentencePieceProcessor(model_proto=self.model_proto)

    @property
    def vocab_size(self) -> int:
        return self._sp.get_piece_size()

    def encode(self, text: str | bytes) -> list[int]:
        """Ids of `text`, without BOS or EOS."""
        return self._sp.encode(as_text(text))

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        """Text of `ids` up to the first EOS; padding and BOS are skipped."""
        kept = []
        for i in np.asarray(ids, dtype=np.int64).reshape(-1).tolist():
            if i == EOS_ID:
                break
            if i not in (PAD_ID, BOS_ID):
                kept.append(i)
        return self._sp.decode(kept)

    def id_to_piece(self, i: int) -> str:
        return self._sp.id_to_piece(int(i))

    def __getstate__(self):
        return {"model_proto": self.model_proto, "path": self.path}

    def __setstate__(self, state):
        self.__init__(state["model_proto"], state["path"])

    def __repr__(self) -> str:
        return f"Tokenizer(vocab_size={self.vocab_size}, path={self.path})"


# ------------------------------------------------------------------------------------- cache


def cache_name(dataset: str, split: str, keys: Sequence[str]) -> str:
    """The texts' part of a cache file name, e.g. 'bible_en_es.train.en+es'."""
    return f"{dataset}.{split}.{'+'.join(keys)}"


def cache_path(name: str, *, vocab_size: int, model_type: str = "unigram",
               character_coverage: float = 1.0, max_sentences: int | None = 1_000_000,
               cache_dir: str | os.PathLike | None = None) -> pathlib.Path:
    """The cache file of a model of texts `name` with these settings (see the module docstring)."""
    cap = "all" if max_sentences is None else str(int(max_sentences))
    return cache.folder(cache_dir) / (
        f"{cache.safe_name(name)}.{model_type}.v{int(vocab_size)}.cov{character_coverage:g}"
        f".max{cap}.{FORMAT}.model")


def load_model_file(path: str | os.PathLike, *, vocab_size: int | None = None,
                    fix: str | None = None) -> Tokenizer:
    """The SentencePiece model file at `path`, checked (our special ids; `vocab_size` pieces,
    if given). DataError naming the file, and `fix` (what to do), when it is unusable."""
    path = pathlib.Path(path)
    fix = fix or f"delete {path} and run again to train a new one"
    try:
        tokenizer = Tokenizer(path.read_bytes(), path)
    except (RuntimeError, OSError) as e:
        raise DataError(f"the SentencePiece model file {path} is corrupt or unreadable "
                        f"({type(e).__name__}: {str(e).strip()[:200]}); {fix}") from e
    problem = _mismatch(tokenizer, vocab_size)
    if problem:
        raise DataError(f"the SentencePiece model file {path} has {problem}; it is corrupt or "
                        f"not ours: {fix}")
    return tokenizer


def _mismatch(tokenizer: Tokenizer, vocab_size: int | None) -> str | None:
    """None when `tokenizer` has our special ids (and `vocab_size` pieces, if given), else what
    it has instead."""
    sp = tokenizer._sp
    found = (sp.pad_id(), sp.eos_id(), sp.unk_id(), sp.bos_id())
    wanted = (PAD_ID, EOS_ID, UNK_ID, BOS_ID)
    if vocab_size is not None:
        found, wanted = found + (sp.get_piece_size(),), wanted + (vocab_size,)
    if found == wanted:
        return None
    names = "(pad, eos, unk, bos" + (", size)" if vocab_size is not None else ")")
    return f"{names} = {found}, expected {wanted}"


def _train_model(texts: Iterable[str], *, vocab_size: int, model_type: str,
                 character_coverage: float) -> bytes:
    """Serialized SentencePiece model trained on `texts` (deterministic: module docstring)."""
    spm.set_random_generator_seed(SEED)
    buffer = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(texts), model_writer=buffer, model_type=model_type,
            vocab_size=vocab_size, character_coverage=character_coverage, **_TRAINER_OPTIONS)
    except RuntimeError as e:
        message = str(e).strip()
        hint = ""
        if "Vocabulary size too high" in message:
            hint = " (the texts are too few for this vocabulary: lower vocab_size)"
        too_small = re.search(r"smaller than required_chars\. \d+ vs (\d+)", message)
        if too_small:  # every character kept (character_coverage) needs a piece of its own
            hint = (f" (vocab_size={vocab_size} is below the {too_small[1]} pieces that the "
                    "special pieces and the characters of the texts need: raise vocab_size to "
                    f"at least {too_small[1]}, or lower character_coverage)")
        raise DataError(f"SentencePiece training failed{hint}: {message}") from e
    return buffer.getvalue()


def load_or_train(name: str, texts_fn: Callable[[], Iterable[str | bytes]], *,
                  vocab_size: int = 32000, model_type: str = "unigram",
                  character_coverage: float = 1.0, max_sentences: int | None = 1_000_000,
                  cache_dir: str | os.PathLike | None = None, verbose: bool = True) -> Tokenizer:
    """The cached model for `name` and these settings, trained on `texts_fn()` when missing.

    `name` says which texts (`cache_name(dataset, split, keys)`); `texts_fn()` yields them (both
    languages, for a shared vocabulary) and is called only when a model must be trained; the
    first `max_sentences` non-empty texts are used (None: all). `model_type` is 'unigram' or
    'bpe'; `character_coverage` the fraction of characters the model covers (1.0 suits
    alphabetic scripts; SentencePiece suggests 0.9995 for Chinese or Japanese).
    """
    if model_type not in MODEL_TYPES:
        raise DataError(f"model_type={model_type!r} is not one of {list(MODEL_TYPES)}")
    if not isinstance(vocab_size, (int, np.integer)) or vocab_size <= BOS_ID + 1:
        raise DataError(f"vocab_size={vocab_size!r} must be an integer > {BOS_ID + 1}")
    if not 0.0 < character_coverage <= 1.0:
        raise DataError(f"character_coverage={character_coverage} must be in (0, 1]")
    if max_sentences is not None and max_sentences < 1:
        raise DataError(f"max_sentences={max_sentences} must be positive or None (all)")
    path = cache_path(name, vocab_size=vocab_size, model_type=model_type,
                      character_coverage=character_coverage, max_sentences=max_sentences,
                      cache_dir=cache_dir)

    def train() -> bytes:
        texts = (t for t in map(as_text, texts_fn()) if t)
        texts = itertools.islice(texts, max_sentences)
        if verbose:
            print(f"training a {model_type} SentencePiece model of {vocab_size} pieces on "
                  f"{name} -> {path}", flush=True)
        proto = _train_model(texts, vocab_size=vocab_size, model_type=model_type,
                             character_coverage=character_coverage)
        problem = _mismatch(Tokenizer(proto), vocab_size)
        if problem:  # the cache's own check, before writing: never a file called corrupt
            raise RuntimeError(f"the SentencePiece model just trained for {path} has {problem}: "
                               "a bug in data/vocab/sentencepiece.py (the file was not written)")
        return proto

    return cache.load_or_create(path, lambda p: load_model_file(p, vocab_size=vocab_size), train)


# ------------------------------------------------------------------------- from a data source


def source_texts(source, keys: Sequence[str], *, max_sentences: int | None = None
                 ) -> Callable[[], Iterator[str]]:
    """`texts_fn` yielding the `keys` fields of the examples of `source`, key by key per example.

    With `max_sentences`, the examples are `max_sentences // len(keys)` evenly spaced ones over
    the whole source (deterministic, and not biased to its beginning).
    """
    keys = tuple(keys)

    def texts() -> Iterator[str]:
        n = len(source)
        count = n if max_sentences is None else min(n, max(1, max_sentences // len(keys)))
        indices = np.linspace(0, n - 1, count).round().astype(np.int64) if count < n else range(n)
        for i in indices:
            example = source[int(i)]
            for key in keys:
                if key not in example:
                    raise DataError(f"examples have no field {key!r} (fields: {sorted(example)})")
                yield as_text(example[key])

    return texts


def vocab_for_source(source, keys: Sequence[str], *, dataset: str | None = None,
                     split: str | None = None, vocab_size: int = 32000,
                     model_type: str = "unigram", character_coverage: float = 1.0,
                     max_sentences: int | None = 1_000_000,
                     cache_dir: str | os.PathLike | None = None,
                     verbose: bool = True) -> Tokenizer:
    """The shared vocabulary of the `keys` texts of a training `source` (trained once, cached).

    `dataset` and `split` name the cache file; by default they come from a TFDS data source
    (`source.dataset_info.name`, `source.split`). Pass them for any other source.
    """
    info = getattr(source, "dataset_info", None)
    dataset = dataset or getattr(info, "name", None)
    split = split or getattr(source, "split", None)
    if not dataset or not split:
        raise DataError("the vocabulary cache needs the dataset name and split: pass dataset= "
                        "and split= for a source that is not a TFDS data source")
    return load_or_train(cache_name(dataset, str(split), keys),
                         source_texts(source, keys, max_sentences=max_sentences),
                         vocab_size=vocab_size, model_type=model_type,
                         character_coverage=character_coverage, max_sentences=max_sentences,
                         cache_dir=cache_dir, verbose=verbose)


def load_or_train_for_dataset(name: str, *, split: str, keys: Sequence[str],
                              source: str = "local", vocab_size: int = 32000,
                              model_type: str = "unigram", character_coverage: float = 1.0,
                              max_sentences: int | None = 1_000_000,
                              cache_dir: str | os.PathLike | None = None,
                              verbose: bool = True) -> Tokenizer:
    """The shared vocabulary of dataset `name` (`data.builders.sources.get_data_source(name, split,
    source=source)`), whose data source is opened only when the model must be trained."""

    def texts() -> Iterator[str]:
        from data.builders.sources import get_data_source  # imports the image pipeline

        yield from source_texts(get_data_source(name, split, source=source), keys,
                                max_sentences=max_sentences)()

    return load_or_train(cache_name(name, split, keys), texts, vocab_size=vocab_size,
                         model_type=model_type, character_coverage=character_coverage,
                         max_sentences=max_sentences, cache_dir=cache_dir, verbose=verbose)
