"""A WordPiece vocabulary (BERT's tokenizer): trained on a training split and cached, or loaded.

    tok = vocab_for_documents(lambda: list(read_documents("brown", "train")),
                              datasets="brown", split="train", vocab_size=8000, lowercase=True)
    ids = tok.encode("The schoolteacher wasn't there.")   # no [CLS]/[SEP] added
    [tok.id_to_token(i) for i in ids]   # e.g. ['the', 'school', '##teach', '##er', 'was', '##n',
                                        #       "'", 't', 'there', '.']
    tok.word_starts(ids)                # False for the '##' pieces (whole-word masking)
    tok.decode(ids)                     # "the schoolteacher wasn ' t there."

The pipeline is BERT's (Devlin et al. 2019; its BasicTokenizer + WordpieceTokenizer), built from
HF `tokenizers` components:
  normalizer      BertNormalizer: clean control characters, space around CJK characters, and
                  for an *uncased* vocabulary lowercase and strip accents ('Élise' -> 'elise');
                  a *cased* one keeps both (as BERT's cased models do)
  pre-tokenizer   BertPreTokenizer: split on whitespace and on every punctuation character
  model           WordPiece: greedy longest-match-first; a piece that continues a word is
                  written with the prefix '##'; a word of more than 100 characters, or one that
                  cannot be covered by pieces, becomes [UNK]
Special tokens [PAD] [UNK] [CLS] [SEP] [MASK] are ids 0..4 of a trained vocabulary ([PAD] = 0 as
in BERT's vocab.txt); a loaded vocabulary keeps its own ids (Google's vocab.txt: [PAD] = 0,
[UNK] = 100, [CLS] = 101, [SEP] = 102, [MASK] = 103). `encode` adds no special token.

Training. Google's WordPiece trainer is not public; like HF's WordPieceTrainer we learn the pieces
by BPE merges (Sennrich et al. 2016) over word counts, in which every character after the first of
a word is a distinct "continuation" symbol, and keep the merged strings as the vocabulary (a piece
made of continuation symbols is written '##...'). HF's WordPieceTrainer is not deterministic (the
ids of its '##' symbols follow hash-map order and break ties: huggingface/tokenizers#1794), so we
run its plain BPE trainer, which sorts its alphabet, on words whose continuation characters are
mapped to private-use code points, and map them back: byte-identical files from the same texts.
Every character seen gets both its forms ('e' and '##e'), so a known character never makes a word
[UNK] only because it was not seen at that place in a word during training. Those and the special
tokens are the smallest vocabulary of the texts (`minimum_size`: 3,103 tokens for the spam emails'
1,549 characters): a smaller `vocab_size` gets exactly them, characters only, and `load_or_train`
says so. `max_characters` keeps only that many, the most frequent, the words with any other
becoming [UNK] (data/vocab/alphabet.py: why, and what it costs).

The cache. A trained vocabulary is a `tokenizer.json` (loadable by any HF `tokenizers`), trained
once and kept (data/vocab/cache.py: the folder, the lock, the atomic write) under a name that
encodes the datasets, split, vocabulary size, casing and `FORMAT` (bumped when the training
procedure changes; `.c1000` after the casing with max_characters=1000), e.g.
    brown+austen+sotu.train.wordpiece.v8000.uncased.wp1.json
A different setting never reuses a stale file; a change of the texts under the same names is not
seen: delete the file then (a run keeps its own copy: train/vocabulary.py). A file that does not
load, or does not match its name, raises DataError naming it; a vocabulary just trained passes
the same check before it is written. A `WordPieceTokenizer` pickles as its serialized JSON.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import json
import os
import pathlib
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from data.errors import DataError
from data.vocab import cache
from data.vocab.alphabet import check_max_characters, limit_alphabet

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)  # ids 0..4 of a trained vocabulary
PREFIX = "##"                 # marks a piece that continues a word
MAX_CHARS_PER_WORD = 100      # BERT's WordpieceTokenizer: longer words become [UNK]
MIN_FREQUENCY = 2             # a merge needs a pair seen at least this often
FORMAT = "wp1"                # bump when the training procedure changes: old caches not reused
_PRIVATE_USE = range(0xF0000, 0x110000)  # Unicode planes 15-16: continuation symbols in training


def _normalizer(lowercase: bool) -> normalizers.Normalizer:
    # BERT strips accents exactly when it lowercases (uncased models).
    return normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                      strip_accents=lowercase, lowercase=lowercase)


class WordPieceTokenizer:
    """Text <-> WordPiece ids with one vocabulary (see the module docstring).

    Attributes: `vocab_size`, `pad_id`, `unk_id`, `cls_id`, `sep_id`, `mask_id`, `special_ids`
    (the five, sorted), `lowercase` (uncased vocabulary), `is_continuation` (bool [vocab_size],
    True for '##' pieces), `path` (the file it came from, or None).
    """

    def __init__(self, tokenizer_json: str, path: str | os.PathLike | None = None):
        self.tokenizer_json = str(tokenizer_json)
        self.path = None if path is None else pathlib.Path(path)
        where = (f"the WordPiece tokenizer file {self.path}" if self.path
                 else "a WordPiece tokenizer")
        try:
            spec = json.loads(self.tokenizer_json)
            self._tok = Tokenizer.from_str(self.tokenizer_json)
            # A saved tokenizer.json may pad or truncate every text to a fixed length (e.g. 128);
            # the pipelines here add specials, truncate and pad themselves.
            self._tok.no_padding()
            self._tok.no_truncation()
        except Exception as e:  # json errors, and the Rust library's own exception type
            raise DataError(f"{where} is corrupt: not a tokenizer.json ({type(e).__name__}: "
                            f"{str(e).strip()[:200]})") from e
        model = spec.get("model") or {}
        if model.get("type") != "WordPiece":
            raise DataError(f"{where} holds a {model.get('type')!r} model, not WordPiece")
        self.prefix = model.get("continuing_subword_prefix", PREFIX)
        vocab = self._tok.get_vocab(with_added_tokens=True)
        missing = [t for t in SPECIAL_TOKENS if t not in vocab]
        if missing:
            raise DataError(f"{where} lacks the special tokens {missing}")
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        if sorted(vocab.values()) != list(range(self.vocab_size)):
            raise DataError(f"{where} does not number its {self.vocab_size} tokens 0..V-1")
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
            vocab[t] for t in SPECIAL_TOKENS)
        self.special_ids = tuple(sorted(vocab[t] for t in SPECIAL_TOKENS))
        self._tokens = [""] * self.vocab_size
        for token, i in vocab.items():
            self._tokens[i] = token
        self.is_continuation = np.array([t.startswith(self.prefix) for t in self._tokens], bool)
        self.lowercase = _lowercases(spec.get("normalizer"))

    # ----------------------------------------------------------------------------- encoding

    def encode(self, text: str) -> list[int]:
        """Ids of `text`, without [CLS] or [SEP]."""
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """(`encode(text)`, each piece's character span `(start, end)` in `text`)."""
        encoding = self._tok.encode(text, add_special_tokens=False)
        return encoding.ids, encoding.offsets

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """`encode` of each text (in parallel threads of the `tokenizers` library)."""
        return [e.ids for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]

    def word_starts(self, ids) -> np.ndarray:
        """bool, same shape as `ids`: True where a token begins a word (is not a '##' piece)."""
        return ~self.is_continuation[np.asarray(ids, dtype=np.int64)]

    def decode(self, ids, *, skip_special_tokens: bool = True) -> str:
        """Text of `ids` ('##' pieces joined to their word; lowercased if the vocabulary is)."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1).tolist()
        return self._tok.decode(ids, skip_special_tokens=skip_special_tokens)

    def id_to_token(self, i: int) -> str:
        return self._tokens[int(i)]

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    @property
    def tokens(self) -> tuple[str, ...]:
        """Every token, in id order."""
        return tuple(self._tokens)

    # ----------------------------------------------------------------------------- files

    @functools.cached_property
    def fingerprint(self) -> str:
        """sha256 of the serialized tokenizer: equal fingerprints tokenize alike."""
        return hashlib.sha256(self.tokenizer_json.encode()).hexdigest()

    def save_vocab_txt(self, path: str | os.PathLike) -> None:
        """BERT's vocab.txt: one token per line, line i holding id i."""
        pathlib.Path(path).write_text("".join(t + "\n" for t in self._tokens), encoding="utf-8")

    def __getstate__(self):
        return {"tokenizer_json": self.tokenizer_json, "path": self.path}

    def __setstate__(self, state):
        self.__init__(state["tokenizer_json"], state["path"])

    def __repr__(self) -> str:
        casing = "uncased" if self.lowercase else "cased"
        return f"WordPieceTokenizer(vocab_size={self.vocab_size}, {casing}, path={self.path})"


def _lowercases(normalizer: dict | None) -> bool:
    if not normalizer:
        return False
    if normalizer.get("type") == "BertNormalizer":
        return bool(normalizer.get("lowercase"))
    if normalizer.get("type") == "Lowercase":
        return True
    return any(_lowercases(n) for n in normalizer.get("normalizers", []) or [])


def from_vocab(vocab: dict[str, int], *, lowercase: bool,
               path: str | os.PathLike | None = None) -> WordPieceTokenizer:
    """The BERT tokenizer (module docstring) around a token -> id vocabulary."""
    missing = [t for t in SPECIAL_TOKENS if t not in vocab]
    if missing:
        where = f"the vocabulary {path}" if path else "the vocabulary"
        raise DataError(f"{where} lacks the special tokens {missing}")
    tok = Tokenizer(models.WordPiece(dict(vocab), unk_token=UNK, continuing_subword_prefix=PREFIX,
                                     max_input_chars_per_word=MAX_CHARS_PER_WORD))
    tok.normalizer = _normalizer(lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix=PREFIX)
    tok.add_special_tokens(list(SPECIAL_TOKENS))  # never split, e.g. '[MASK]' in a text
    return WordPieceTokenizer(tok.to_str(), path)


def load_vocab_txt(path: str | os.PathLike, *, lowercase: bool) -> WordPieceTokenizer:
    """A tokenizer from BERT's vocab.txt (one token per line; line i is id i), which does not say
    its casing: `lowercase=True` for an uncased one (False for one without capitals is refused)."""
    path = pathlib.Path(path)
    try:
        text = path.read_text(encoding="utf-8")  # (\r\n read as \n)
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"the WordPiece vocabulary {path} is missing, unreadable or not UTF-8 "
                        f"text ({type(e).__name__}: {e})") from e
    tokens = text.removesuffix("\n").split("\n")  # as BERT's, HF's: U+2028 may be a token
    if not tokens or any(not t for t in tokens):
        raise DataError(f"the WordPiece vocabulary {path} is corrupt: it is empty or has an "
                        "empty line (expected one token per line)")
    duplicates = sorted({t for t, n in collections.Counter(tokens).items() if n > 1})
    if duplicates:
        raise DataError(f"the WordPiece vocabulary {path} is corrupt: tokens {duplicates[:5]} "
                        "appear more than once")
    if not lowercase and not any(c.isupper() for t in tokens if t[:1] != "[" for c in t):
        raise DataError(f"{path} has no token with a capital letter (an uncased vocabulary): with "
                        "lowercase=False every capitalised word would be [UNK]; pass lowercase="
                        "True (config.data.lowercase)")
    return from_vocab({t: i for i, t in enumerate(tokens)}, lowercase=lowercase, path=path)


def load_tokenizer_json(path: str | os.PathLike) -> WordPieceTokenizer:
    """A tokenizer from an HF `tokenizer.json` holding a WordPiece model."""
    path = pathlib.Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as e:
        raise DataError(f"the WordPiece tokenizer file {path} does not exist") from e
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"the WordPiece tokenizer file {path} is unreadable "
                        f"({type(e).__name__}: {e})") from e
    return WordPieceTokenizer(text, path)


def load_tokenizer(path: str | os.PathLike, *, lowercase: bool | None = None) -> WordPieceTokenizer:
    """`load_tokenizer_json` for a .json file (its normalizer decides the casing: a `lowercase`
    given must agree), else `load_vocab_txt` (which needs `lowercase`)."""
    path = pathlib.Path(path)
    if path.suffix == ".json":
        tok = load_tokenizer_json(path)
        if lowercase not in (None, tok.lowercase):
            raise DataError(f"{path} is {'an un' if tok.lowercase else 'a '}cased tokenizer, but "
                            f"lowercase={lowercase} was asked for: set the run's casing "
                            f"(config.data.lowercase) to {tok.lowercase}, or give another file")
        return tok
    if lowercase is None:
        raise DataError(f"{path}: a vocab.txt does not record its casing; pass lowercase=True "
                        "(uncased) or lowercase=False (cased)")
    return load_vocab_txt(path, lowercase=lowercase)


# ---------------------------------------------------------------------------------- training


def word_counts(texts: Iterable[str], *, lowercase: bool) -> collections.Counter:
    """How often each word (BERT normalization and pre-tokenization) occurs in `texts`."""
    normalizer, pre = _normalizer(lowercase), pre_tokenizers.BertPreTokenizer()
    counts: collections.Counter = collections.Counter()
    for text in texts:
        counts.update(w for w, _ in pre.pre_tokenize_str(normalizer.normalize_str(text)))
    return counts


def minimum_size(tok: WordPieceTokenizer) -> int:
    """The special tokens plus every single character, as a word start or a '##' continuation:
    the size of a vocabulary trained with a `vocab_size` too small for any longer piece."""
    single = sum(len(t) == 1 or (t.startswith(tok.prefix) and len(t) == len(tok.prefix) + 1)
                 for t in tok.tokens)
    return len(SPECIAL_TOKENS) + single


def train_wordpiece(texts: Iterable[str], *, vocab_size: int, lowercase: bool,
                    min_frequency: int = MIN_FREQUENCY, max_characters: int = 0,
                    verbose: bool = False) -> WordPieceTokenizer:
    """A WordPiece vocabulary of at most `vocab_size` tokens learned from `texts` (module
    docstring: BPE merges with continuation symbols; deterministic). It has fewer tokens when
    the texts run out of pairs seen `min_frequency` times, and more (`minimum_size`: the special
    tokens and every character in both forms, nothing longer) when `vocab_size` is smaller.
    `max_characters` > 0 keeps that many characters (data/vocab/alphabet.py; `verbose`: a note)."""
    if not isinstance(vocab_size, (int, np.integer)) or vocab_size <= len(SPECIAL_TOKENS):
        raise DataError(f"vocab_size={vocab_size!r} must be an integer > {len(SPECIAL_TOKENS)}")
    max_characters = check_max_characters(max_characters)
    counts = word_counts(texts, lowercase=lowercase)
    counts.pop("", None)
    if not counts:
        raise DataError("no words to train a WordPiece vocabulary on: the texts are empty")
    counts, alphabet, note = limit_alphabet(counts, max_characters)
    if note and verbose:
        print(f"note: {note}", flush=True)
    used = set(alphabet)
    free = (chr(cp) for cp in _PRIVATE_USE if chr(cp) not in used)
    to_cont = {c: next(free, None) for c in alphabet}
    if None in to_cont.values():
        raise DataError(f"{len(alphabet)} distinct characters: too many to train on")
    table = str.maketrans(to_cont)
    from_cont = {v: k for k, v in to_cont.items()}

    def lines() -> Iterator[str]:  # each word as often as it occurs; the trainer counts them
        for word, count in sorted(counts.items()):
            coded = word[0] + word[1:].translate(table)
            for start in range(0, count, 1000):
                yield " ".join([coded] * min(1000, count - start))

    scratch = Tokenizer(models.BPE())
    scratch.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    size = max(int(vocab_size), len(SPECIAL_TOKENS) + 2 * len(alphabet))  # module docstring
    trainer = trainers.BpeTrainer(vocab_size=size, min_frequency=min_frequency,
                                  special_tokens=list(SPECIAL_TOKENS), show_progress=False,
                                  initial_alphabet=alphabet + [to_cont[c] for c in alphabet])
    scratch.train_from_iterator(lines(), trainer=trainer)

    vocab = {}
    for piece, i in scratch.get_vocab().items():
        if piece in SPECIAL_TOKENS:
            vocab[piece] = i
        elif piece[0] in from_cont:  # only continuation symbols: a '##' piece
            vocab[PREFIX + "".join(from_cont[c] for c in piece)] = i
        else:
            vocab[piece[0] + "".join(from_cont[c] for c in piece[1:])] = i
    return from_vocab(vocab, lowercase=lowercase)


# ------------------------------------------------------------------------------------- cache


def _names(datasets: str | Sequence[str]) -> str:
    names = [datasets] if isinstance(datasets, str) else list(datasets)
    if not names or not all(names):
        raise DataError(f"datasets={datasets!r}: name at least one dataset")
    return "+".join(names)


def cache_path(datasets: str | Sequence[str], split: str, *, vocab_size: int, lowercase: bool,
               cache_dir: str | os.PathLike | None = None, max_characters: int = 0) -> pathlib.Path:
    """The cache file of a vocabulary of these texts and settings (module docstring)."""
    casing = ("uncased" if lowercase else "cased") + (
        f".c{check_max_characters(max_characters)}" if max_characters else "")
    name = cache.safe_name(_names(datasets) + "." + str(split))
    return cache.folder(cache_dir) / f"{name}.wordpiece.v{int(vocab_size)}.{casing}.{FORMAT}.json"


def _mismatch(tok: WordPieceTokenizer, vocab_size: int, lowercase: bool) -> str | None:
    """None when `tok` is what `train_wordpiece` gives for these settings, else how it differs."""
    ids = (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id)
    limit = max(vocab_size, minimum_size(tok))
    if ids == tuple(range(len(SPECIAL_TOKENS))) and tok.vocab_size <= limit and (
            tok.lowercase == lowercase):
        return None
    return (f"special ids {ids}, {tok.vocab_size} tokens, lowercase={tok.lowercase}; expected "
            f"(0..4), <= {limit}, lowercase={lowercase}")


def _load_cached(path: pathlib.Path, vocab_size: int, lowercase: bool) -> WordPieceTokenizer:
    fix = f"delete {path} and run again to train a new one"
    try:
        tok = load_tokenizer_json(path)
    except DataError as e:
        raise DataError(f"{e}; {fix}") from e
    problem = _mismatch(tok, vocab_size, lowercase)
    if problem:
        raise DataError(f"the WordPiece cache file {path} has {problem}: it is corrupt or not "
                        f"ours; {fix}")
    return tok


def _note_size(tok: WordPieceTokenizer, vocab_size: int) -> None:
    if tok.vocab_size > vocab_size:
        characters = minimum_size(tok) - len(SPECIAL_TOKENS)
        print(f"note: vocab_size={vocab_size} is below the {tok.vocab_size} tokens these texts "
              f"need at least ({len(SPECIAL_TOKENS)} special tokens and {characters // 2} "
              f"characters, each as a word start and as a '##' continuation): the vocabulary "
              f"holds those {tok.vocab_size}, characters only; a vocab_size above "
              f"{tok.vocab_size} also learns longer word pieces", flush=True)


def cached(datasets: str | Sequence[str], split: str, *, vocab_size: int, lowercase: bool,
           cache_dir: str | os.PathLike | None = None,
           max_characters: int = 0) -> WordPieceTokenizer | None:
    """The cached vocabulary of `datasets`/`split` and these settings, or None when it has not
    been trained: nothing is trained here (what `python -m train --print_config` reads)."""
    path = cache_path(datasets, split, vocab_size=vocab_size, lowercase=lowercase,
                      cache_dir=cache_dir, max_characters=max_characters)
    if path.exists():  # files appear only by an atomic rename: no lock needed to read
        return _load_cached(path, vocab_size, lowercase)
    return None


def load_or_train(datasets: str | Sequence[str], split: str,
                  texts_fn: Callable[[], Iterable[str]], *, vocab_size: int, lowercase: bool,
                  cache_dir: str | os.PathLike | None = None,
                  verbose: bool = True, max_characters: int = 0) -> WordPieceTokenizer:
    """The cached vocabulary of `datasets`/`split`, trained on `texts_fn()` when missing.

    `texts_fn()` yields the training texts (e.g. every sentence of the training split, in a fixed
    order) and is called only when the vocabulary must be trained. A `vocab_size` below the
    texts' `minimum_size` gives that many tokens (`verbose`: notes say so and what
    `max_characters` cost).
    """
    path = cache_path(datasets, split, vocab_size=vocab_size, lowercase=lowercase,
                      cache_dir=cache_dir, max_characters=max_characters)

    def train() -> bytes:
        """The vocabulary, checked as the cache checks a file before it is written: one this
        code just trained that fails the check is a bug here, never a corrupt file left for the
        user to delete."""
        if verbose:
            print(f"training a WordPiece vocabulary of {vocab_size} tokens "
                  f"({'uncased' if lowercase else 'cased'}) on {_names(datasets)} {split} -> "
                  f"{path}", flush=True)
        tok = train_wordpiece(texts_fn(), vocab_size=vocab_size, lowercase=lowercase,
                              max_characters=max_characters, verbose=verbose)
        problem = _mismatch(tok, vocab_size, lowercase)
        if problem:
            raise RuntimeError(f"the WordPiece vocabulary just trained for {path} has {problem}: "
                               "a bug in data/vocab/wordpiece.py (the file was not written)")
        return tok.tokenizer_json.encode("utf-8")

    tok = cache.load_or_create(path, lambda p: _load_cached(p, vocab_size, lowercase), train)
    if verbose:
        _note_size(tok, vocab_size)
    return tok


def document_texts(documents) -> Iterator[str]:
    """Every sentence of `documents` (an iterable of data.corpora.documents.Document), in order."""
    for doc in documents:
        for paragraph in doc.paragraphs:
            yield from paragraph


def vocab_for_documents(documents_fn: Callable[[], Iterable], *, datasets: str | Sequence[str],
                        split: str, vocab_size: int, lowercase: bool,
                        cache_dir: str | os.PathLike | None = None,
                        verbose: bool = True, max_characters: int = 0) -> WordPieceTokenizer:
    """The cached vocabulary of the training documents of `datasets`/`split`.

    `documents_fn()` returns the Documents (called only when the vocabulary must be trained).
    """
    return load_or_train(datasets, split, lambda: document_texts(documents_fn()),
                         vocab_size=vocab_size, lowercase=lowercase, cache_dir=cache_dir,
                         verbose=verbose, max_characters=max_characters)
