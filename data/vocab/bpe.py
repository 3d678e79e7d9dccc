"""A byte-level BPE vocabulary (GPT-2's kind of tokenizer), trained on a training split and cached.

    tok = load_or_train_for_dataset("english_lm", "train", vocab_size=8192)
    ids = tok.encode("It is a truth universally acknowledged")   # no special token added
    tok.decode(ids)             # the text back, exactly: byte-level BPE loses nothing
    tok.token_bytes[ids].sum()  # 38: the UTF-8 bytes those tokens spell

Byte-level BPE (Radford et al. 2019, Sec. 2.2): the text's UTF-8 bytes are the base symbols, so
every string is encoded without an unknown token, and merges (Sennrich et al. 2016) learn the
frequent byte sequences. Built from HF `tokenizers` components:
  pre-tokenizer   ByteLevel with GPT-2's splitting regex (letters, digits, punctuation runs and
                  spaces apart; a word keeps the space before it, 'Ġthe'), no prefix space added,
                  so decoding gives back the very text encoded
  model           BPE over the 256 byte symbols, merges of pairs seen at least `MIN_FREQUENCY`
                  times, no unknown token
  decoder         ByteLevel: tokens back to bytes, bytes to text
Special tokens: PAD '<|pad|>' id 0 (padding; never a target) and EOS '<|endoftext|>' id 1,
GPT-2's document separator, which the causal LM puts before and after every document (it is
the BOS of a prompt and the stop token of generation). `encode` adds neither.

Bits per byte. A byte-level token stands for a fixed byte string, so `token_bytes[i]` (the
length of token i's bytes; 0 for the special tokens) adds up, over the tokens of a text, to the
text's UTF-8 length: the denominator of bits per byte (train/lm_metrics.py), which makes losses
comparable across tokenizers.

The cache (data/vocab/cache.py): trained once on the split's texts and kept under a name that
encodes the dataset, split, size and `FORMAT`, e.g. `english_lm.train.bpe.v8192.bpe1.json`; a
run keeps its own copy in its workdir (train/vocabulary.py). Training is deterministic: two
trainings on the same texts give byte-identical files (tests/test_bpe_vocab.py).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import os
import pathlib
from typing import Callable, Iterable

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from data.errors import DataError
from data.vocab import cache

PAD, EOS = "<|pad|>", "<|endoftext|>"
SPECIAL_TOKENS = (PAD, EOS)  # ids 0, 1
PAD_ID, EOS_ID = 0, 1
MIN_FREQUENCY = 2
FORMAT = "bpe1"      # bump when the training procedure changes: old caches are not reused
NUM_BYTES = 256


class BPETokenizer:
    """Text <-> byte-level BPE ids (module docstring). Attributes: `vocab_size`, `pad_id`,
    `eos_id`, `token_bytes` (int32 [vocab_size]), `tokenizer_json`, `path` (or None)."""

    def __init__(self, tokenizer_json: str, path: str | os.PathLike | None = None):
        self.tokenizer_json = str(tokenizer_json)
        self.path = None if path is None else pathlib.Path(path)
        where = f"the BPE tokenizer file {self.path}" if self.path else "a BPE tokenizer"
        try:
            self._tok = Tokenizer.from_str(self.tokenizer_json)
            self._tok.no_padding()
            self._tok.no_truncation()
            # the special tokens' strings inside a text are text (bytes like any other), never
            # the ids of padding or of a document's end
            self._tok.encode_special_tokens = True
        except Exception as e:  # json errors, and the Rust library's own exception type
            raise DataError(f"{where} is corrupt: not a tokenizer.json ({type(e).__name__}: "
                            f"{str(e).strip()[:200]})") from e
        vocab = self._tok.get_vocab(with_added_tokens=True)
        if [vocab.get(t) for t in SPECIAL_TOKENS] != [PAD_ID, EOS_ID]:
            raise DataError(f"{where} does not hold {PAD!r} and {EOS!r} as ids 0 and 1")
        if type(self._tok.pre_tokenizer).__name__ != "ByteLevel":
            raise DataError(f"{where} is not byte-level (pre-tokenizer "
                            f"{type(self._tok.pre_tokenizer).__name__})")
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        if sorted(vocab.values()) != list(range(self.vocab_size)):
            raise DataError(f"{where} does not number its {self.vocab_size} tokens 0..V-1")
        self.pad_id, self.eos_id = PAD_ID, EOS_ID
        self._tokens = [""] * self.vocab_size
        for token, i in vocab.items():
            self._tokens[i] = token
        # A byte-level token is written with one character per byte (GPT-2's byte-to-unicode
        # table), so its length in characters is its length in bytes.
        self.token_bytes = np.array([0 if t in SPECIAL_TOKENS else len(t) for t in self._tokens],
                                    np.int32)

    def encode(self, text: str) -> list[int]:
        """Ids of `text`, no special token added."""
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts) -> list[list[int]]:
        """`encode` of each text (in parallel threads of the `tokenizers` library)."""
        return [e.ids for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids, *, skip_special_tokens: bool = True) -> str:
        ids = np.asarray(ids, dtype=np.int64).reshape(-1).tolist()
        return self._tok.decode(ids, skip_special_tokens=skip_special_tokens)

    def id_to_token(self, i: int) -> str:
        return self._tokens[int(i)]

    @property
    def tokens(self) -> tuple[str, ...]:
        return tuple(self._tokens)

    @functools.cached_property
    def fingerprint(self) -> str:
        return hashlib.sha256(self.tokenizer_json.encode()).hexdigest()

    def __getstate__(self):
        return {"tokenizer_json": self.tokenizer_json, "path": self.path}

    def __setstate__(self, state):
        self.__init__(state["tokenizer_json"], state["path"])

    def __repr__(self) -> str:
        return f"BPETokenizer(vocab_size={self.vocab_size}, path={self.path})"


def train_bpe(texts: Iterable[str], *, vocab_size: int,
              min_frequency: int = MIN_FREQUENCY) -> BPETokenizer:
    """A byte-level BPE vocabulary of at most `vocab_size` tokens (the 2 special tokens, the 256
    bytes and the merges) learned from `texts`; fewer when the texts run out of pairs seen
    `min_frequency` times."""
    least = len(SPECIAL_TOKENS) + NUM_BYTES
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)) or (
            vocab_size < least):
        raise DataError(f"vocab_size={vocab_size!r} must be an integer >= {least} (2 special "
                        f"tokens and the {NUM_BYTES} bytes)")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=int(vocab_size), min_frequency=min_frequency,
                                  special_tokens=list(SPECIAL_TOKENS), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    texts = iter(texts)
    first = next(texts, None)
    if first is None:
        raise DataError("no text to train a BPE vocabulary on")
    tok.train_from_iterator(itertools.chain([first], texts), trainer=trainer)  # streamed
    return BPETokenizer(tok.to_str())


# ------------------------------------------------------------------------------------- cache


def cache_path(dataset: str, split: str, *, vocab_size: int,
               cache_dir: str | os.PathLike | None = None) -> pathlib.Path:
    """The cache file of the vocabulary of `dataset`/`split` of this size (module docstring)."""
    name = cache.safe_name(f"{dataset}.{split}")
    return cache.folder(cache_dir) / f"{name}.bpe.v{int(vocab_size)}.{FORMAT}.json"


def _load_cached(path: pathlib.Path, vocab_size: int) -> BPETokenizer:
    fix = f"delete {path} and run again to train a new one"
    try:
        tok = BPETokenizer(path.read_text(encoding="utf-8"), path)
    except (OSError, UnicodeDecodeError, DataError) as e:
        raise DataError(f"the BPE cache file {path} is unreadable or corrupt ({e}); {fix}") from e
    if tok.vocab_size > vocab_size:
        raise DataError(f"the BPE cache file {path} holds {tok.vocab_size} tokens, more than "
                        f"its name's {vocab_size}: it is not ours; {fix}")
    return tok


def cache_name(name: str, source: str = "local", key: str = "text") -> str:
    """The name a dataset's vocabularies are cached under: `name` for our local datasets,
    'tfds.NAME' for the TFDS catalog's (the two may share a name), followed by '.KEY' for a
    vocabulary of another field than 'text' (each field its own vocabulary)."""
    name = name if source == "local" else f"{source}.{name}"
    return name if key == "text" else f"{name}.{key}"


def cached(dataset: str, split: str, *, vocab_size: int,
           cache_dir: str | os.PathLike | None = None) -> BPETokenizer | None:
    """The cached vocabulary of `dataset`/`split` of this size, or None when it has not been
    trained: nothing is trained here (what `python -m train --print_config` reads)."""
    path = cache_path(dataset, split, vocab_size=vocab_size, cache_dir=cache_dir)
    return _load_cached(path, vocab_size) if path.exists() else None


def load_or_train(dataset: str, split: str, texts_fn: Callable[[], Iterable[str]], *,
                  vocab_size: int, cache_dir: str | os.PathLike | None = None,
                  verbose: bool = True) -> BPETokenizer:
    """The cached vocabulary of `dataset`/`split`, trained on `texts_fn()` when missing (once
    between processes: data/vocab/cache.py)."""
    path = cache_path(dataset, split, vocab_size=vocab_size, cache_dir=cache_dir)

    def train() -> bytes:
        if verbose:
            print(f"training a byte-level BPE vocabulary of {vocab_size} tokens on {dataset} "
                  f"{split} -> {path}", flush=True)
        return train_bpe(texts_fn(), vocab_size=vocab_size).tokenizer_json.encode("utf-8")

    return cache.load_or_create(path, lambda p: _load_cached(p, vocab_size), train)


def load_or_train_for_dataset(name: str, split: str = "train", *, vocab_size: int,
                              key: str = "text", source: str = "local",
                              cache_dir: str | os.PathLike | None = None,
                              verbose: bool = True) -> BPETokenizer:
    """`load_or_train` on the `key` field of every example of `split` of dataset `name`."""
    from data.builders.examples import as_text
    from data.builders.sources import get_data_source

    def texts():
        data = get_data_source(name, split, source=source)
        for i in range(len(data)):
            example = data[i]
            if key not in example:
                raise DataError(f"{name} ({split}): examples have no field {key!r} (fields: "
                                f"{sorted(example)}): set the config's data.text_key to the "
                                "field that holds the text")
            yield as_text(example[key])

    return load_or_train(cache_name(name, source, key), split, texts, vocab_size=vocab_size,
                         cache_dir=cache_dir, verbose=verbose)
