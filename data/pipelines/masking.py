"""Masked-language-model inputs: choose positions to predict and corrupt them (pure NumPy).

BERT (Devlin et al. 2019, Sec. 3.1 and App. A.1): choose 15% of the token positions at random
for prediction; replace the chosen token by [MASK] 80% of the time, by a random token 10% of
the time, and leave it unchanged 10% of the time; the model predicts the original token at every
chosen position. The three rates are an ablation (BERT Table 8), so they come from the config.

RoBERTa (Liu et al. 2019, Sec. 4.1) masks *dynamically*: a new pattern every time a sequence is
fed, instead of once when the data is written. `MaskTokens` does that inside a grain pipeline.

How many positions. With ``n`` candidates (tokens whose id is not in ``special_ids``), exactly
``min(max_predictions, max(1, round(n * select_prob)))`` are chosen (0 when ``n == 0``), as in
BERT's ``create_pretraining_data.py``. Two small differences, both deliberate: BERT counts
``len(tokens)``, i.e. also its [CLS]/[SEP] (never chosen), while we count the candidates, which
stays right when sequences arrive padded (the two differ by at most one position); and the
rounding is Python's ``round`` (half to even), as BERT's code under Python 3.

Which positions. Uniformly at random among the candidates (a random subset of the exact size).
With ``whole_word``, the candidates are grouped into words (a word starts where
``word_starts`` is True, e.g. every token that is not a WordPiece '##' continuation, or right
after a special token) and words are visited in random order: a word is taken whole when it
still fits in the count, skipped when it would overshoot it, and the visit stops when the count
is reached (BERT's whole-word-masking rule). So the chosen number may fall short of the target
only when no remaining word fits.

How each chosen position is corrupted. Decided independently per chosen *token* (word piece),
also with whole-word masking: this is what BERT's reference code does (its whole-word option
changes only which positions are chosen; the [MASK]/random/keep draw stays per piece). A random
replacement is uniform over the vocabulary minus ``random_exclude_ids`` (default: the special ids;
BERT's code draws from the whole vocabulary, [CLS]/[SEP]/[PAD]/[MASK] included, which only adds
noise). It may draw the original token, which then reads as "unchanged".

Outputs (one sequence of length ``l``, ``P = max_predictions``):
  input_ids       int32 [l]  the corrupted sequence
  masked_positions int32 [P] chosen positions in increasing order, then 0-padding
  masked_ids      int32 [P]  the original tokens there (the labels), then 0
  masked_weights  float32 [P] 1.0 for a real prediction, 0.0 for padding
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Mapping

import grain
import numpy as np

from data.errors import DataError

OUTPUT_KEYS = ("input_ids", "masked_positions", "masked_ids", "masked_weights")


def _int_tuple(values) -> tuple[int, ...]:
    return tuple(sorted({int(v) for v in values}))


@dataclasses.dataclass(frozen=True)
class MaskingConfig:
    """What to mask and how; see the module docstring. Rates are probabilities."""

    vocab_size: int
    mask_id: int
    special_ids: tuple[int, ...] = ()      # never chosen: [CLS], [SEP], [PAD], [MASK], [UNK], ...
    select_prob: float = 0.15              # fraction of candidates chosen for prediction
    mask_prob: float = 0.8                 # chosen -> [MASK]
    random_prob: float = 0.1               # chosen -> random token
    keep_prob: float = 0.1                 # chosen -> unchanged
    max_predictions: int = 20              # P: at most this many per sequence (20 for length 128)
    whole_word: bool = False               # choose whole words (needs word_starts)
    random_exclude_ids: tuple[int, ...] | None = None  # never drawn as random; None: special_ids

    def __post_init__(self):
        set_ = functools.partial(object.__setattr__, self)
        set_("special_ids", _int_tuple(self.special_ids))
        set_("random_exclude_ids", self.special_ids if self.random_exclude_ids is None
             else _int_tuple(self.random_exclude_ids))
        if not isinstance(self.vocab_size, (int, np.integer)) or self.vocab_size < 1:
            raise DataError(f"vocab_size={self.vocab_size!r} must be a positive integer")
        if not 0 <= self.mask_id < self.vocab_size:
            raise DataError(f"mask_id={self.mask_id} is not in [0, vocab_size={self.vocab_size})")
        for field in ("special_ids", "random_exclude_ids"):
            bad = [i for i in getattr(self, field) if not 0 <= i < self.vocab_size]
            if bad:
                raise DataError(f"{field} {bad} not in [0, vocab_size={self.vocab_size})")
        if not 0.0 < self.select_prob <= 1.0:
            raise DataError(f"select_prob={self.select_prob} must be in (0, 1]")
        for field in ("mask_prob", "random_prob", "keep_prob"):
            if not 0.0 <= getattr(self, field) <= 1.0:
                raise DataError(f"{field}={getattr(self, field)} must be in [0, 1]")
        total = self.mask_prob + self.random_prob + self.keep_prob
        if abs(total - 1.0) > 1e-6:
            raise DataError(
                f"mask_prob + random_prob + keep_prob must sum to 1, got {self.mask_prob} + "
                f"{self.random_prob} + {self.keep_prob} = {total:g}")
        if not isinstance(self.max_predictions, (int, np.integer)) or self.max_predictions < 1:
            raise DataError(f"max_predictions={self.max_predictions!r} must be a positive integer")
        if self.random_prob > 0 and len(self.random_exclude_ids) >= self.vocab_size:
            raise DataError(f"random_exclude_ids exclude the whole vocabulary "
                            f"(vocab_size={self.vocab_size}) but random_prob={self.random_prob}")

    @functools.cached_property
    def random_pool(self) -> np.ndarray:
        """The ids a random replacement draws from, uniformly: int32 [vocab_size - excluded]."""
        return np.setdiff1d(np.arange(self.vocab_size, dtype=np.int32),
                            np.asarray(self.random_exclude_ids, dtype=np.int32))

    def num_to_predict(self, num_candidates: int) -> int:
        """``min(max_predictions, max(1, round(n * select_prob)))``, 0 without candidates."""
        if num_candidates <= 0:
            return 0
        return min(self.max_predictions, max(1, int(round(num_candidates * self.select_prob))))


def _choose_whole_words(candidates: np.ndarray, word_starts: np.ndarray, target: int,
                        rng: np.random.Generator) -> np.ndarray:
    """Positions of whole words, visited in random order, taken while they fit in ``target``."""
    starts = word_starts[candidates].copy()
    starts[0] = True
    starts[1:] |= np.diff(candidates) != 1     # a special token in between starts a new word
    words = np.split(candidates, np.flatnonzero(starts)[1:])
    chosen: list[np.ndarray] = []
    count = 0
    for w in rng.permutation(len(words)):
        if count >= target:
            break
        if count + len(words[w]) > target:
            continue                           # this word would overshoot; try the others
        chosen.append(words[w])
        count += len(words[w])
    return np.sort(np.concatenate(chosen)) if chosen else np.zeros((0,), np.int64)


def mask_tokens(tokens, rng: np.random.Generator, cfg: MaskingConfig,
                word_starts=None) -> dict[str, np.ndarray]:
    """Masks one sequence ``tokens`` [l] (see the module docstring for the rules and outputs).

    ``word_starts`` (bool [l], True where a token begins a word) is required and used only when
    ``cfg.whole_word``.
    """
    tokens = np.asarray(tokens)
    if tokens.ndim != 1 or not np.issubdtype(tokens.dtype, np.integer):
        raise DataError(f"tokens must be a 1-D integer array, got {tokens.dtype} of shape "
                        f"{tokens.shape}")
    candidates = np.flatnonzero(~np.isin(tokens, cfg.special_ids))
    target = cfg.num_to_predict(len(candidates))
    if cfg.whole_word:
        if word_starts is None:
            raise DataError("MaskingConfig.whole_word=True needs word_starts (True where a token "
                            "begins a word)")
        word_starts = np.asarray(word_starts, dtype=bool)
        if word_starts.shape != tokens.shape:
            raise DataError(f"word_starts of shape {word_starts.shape} does not match tokens "
                            f"of shape {tokens.shape}")
        chosen = (_choose_whole_words(candidates, word_starts, target, rng) if target
                  else np.zeros((0,), np.int64))
    else:
        chosen = np.sort(rng.choice(candidates, size=target, replace=False))

    n = len(chosen)
    # Per chosen token: [MASK] with mask_prob, random with random_prob, else unchanged.
    u = rng.random(n)
    to_mask = u < cfg.mask_prob
    to_random = ~to_mask & (u < cfg.mask_prob + cfg.random_prob)
    random_ids = (cfg.random_pool[rng.integers(0, len(cfg.random_pool), size=n)]
                  if cfg.random_prob > 0 else np.zeros((n,), np.int32))

    input_ids = tokens.astype(np.int32)
    input_ids[chosen[to_mask]] = cfg.mask_id
    input_ids[chosen[to_random]] = random_ids[to_random]

    p = cfg.max_predictions
    masked_positions = np.zeros((p,), np.int32)
    masked_ids = np.zeros((p,), np.int32)
    masked_weights = np.zeros((p,), np.float32)
    masked_positions[:n] = chosen
    masked_ids[:n] = tokens[chosen]
    masked_weights[:n] = 1.0
    return {"input_ids": input_ids, "masked_positions": masked_positions,
            "masked_ids": masked_ids, "masked_weights": masked_weights}


def mask_batch(tokens, rng: np.random.Generator, cfg: MaskingConfig,
               word_starts=None) -> dict[str, np.ndarray]:
    """``mask_tokens`` on every row of ``tokens`` [b, l] (one rng, rows in order); outputs get a
    leading batch axis."""
    tokens = np.asarray(tokens)
    if tokens.ndim != 2:
        raise DataError(f"tokens must be [batch, length], got shape {tokens.shape}")
    if word_starts is not None:
        word_starts = np.asarray(word_starts, dtype=bool)
        if word_starts.shape != tokens.shape:
            raise DataError(f"word_starts of shape {word_starts.shape} does not match tokens "
                            f"of shape {tokens.shape}")
    rows = [mask_tokens(tokens[i], rng, cfg, None if word_starts is None else word_starts[i])
            for i in range(len(tokens))]
    return {key: np.stack([row[key] for row in rows]) for key in OUTPUT_KEYS}


class MaskTokens(grain.transforms.RandomMap):
    """Dynamic masking in a grain pipeline: ``ds.random_map(MaskTokens(cfg), seed=seed)``.

    The element is a dict holding ``tokens_key`` (int [l], or [b, l] for a batch) and, for
    whole-word masking, ``word_starts_key``. The result is the same dict with ``tokens_key``
    replaced by the corrupted ids and ``masked_positions``, ``masked_ids`` and
    ``masked_weights`` added (``input_ids`` too when ``tokens_key`` has another name).

    Grain seeds the generator from (seed, element index). Put the transform after ``shuffle``
    and ``repeat``: the same sequence then sits at a new index every epoch and gets a new mask
    (RoBERTa's dynamic masking), while a rebuilt or restored pipeline reproduces every mask.
    """

    def __init__(self, config: MaskingConfig, *, tokens_key: str = "input_ids",
                 word_starts_key: str = "word_starts"):
        self.config = config
        self.tokens_key = tokens_key
        self.word_starts_key = word_starts_key

    def random_map(self, element: Mapping[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        if self.tokens_key not in element:
            raise DataError(f"MaskTokens: element has no {self.tokens_key!r} (keys: "
                            f"{sorted(element)})")
        tokens = np.asarray(element[self.tokens_key])
        word_starts = element.get(self.word_starts_key) if self.config.whole_word else None
        fn = mask_batch if tokens.ndim == 2 else mask_tokens
        masked = fn(tokens, rng, self.config, word_starts)
        return {**element, **masked, self.tokens_key: masked["input_ids"]}
