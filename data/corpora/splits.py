"""Train / validation (/ test) splits by a stable hash: the same on every machine and in every
process, and each item decided by its own key, not by its position in the corpus.

    stable_hash("ca01")    # 0xAD2106C73D2EE53F: the first 8 bytes of SHA-256, big-endian

Python's `hash` changes between processes; SHA-256 does not. Three rules use it, by what a
dataset holds (each rule decides what its datasets were prepared with: changing one changes
them):

  assign_splits  documents (Brown, Austen, SOTU): train / validation by held-out documents.
                 Within each group (a Brown genre, an Austen novel; one group when `groups` is
                 None) the round(fraction * n) documents with the smallest hash go to validation,
                 at least one when the group has two or more documents, so every group is in
                 both splits. It depends only on the ids and groups, never on their order;
                 adding documents to a group can move others of that group, as with any
                 exact-fraction split.
  split_of       sentence pairs (Bible verses by reference, Ding pairs by German sentence):
                 where `stable_unit(key)` falls in [0, 1): below TEST_FRACTION test, then
                 VALIDATION_FRACTION more validation, the rest train. Each key decides alone,
                 so adding or removing pairs never moves the others, and equal keys (a source
                 sentence listed twice) always share a split. The fractions are expected values:
                 2% of 31,000 verses is 620 +- 25.
  text_split     labelled texts (spam, tweets), by the text itself: hash buckets 0..99, 80 / 10 /
                 10 to train / validation / test, so identical texts (forwarded emails,
                 retweets) always share a split and never leak from train into test.
"""

from __future__ import annotations

import collections
import hashlib
import math
from typing import Sequence

from data.errors import DataError

SPLITS = ("train", "validation", "test")  # of sentence pairs and labelled texts
DOCUMENT_SPLITS = ("train", "validation")
DOCUMENT_VALIDATION_FRACTION = 0.05
VALIDATION_FRACTION = 0.02  # of sentence pairs
TEST_FRACTION = 0.02
TEXT_SPLIT_PERCENT = (80, 10, 10)  # of the hash buckets 0..99, in the order of SPLITS


def stable_hash(key: str) -> int:
    """A 64-bit hash of `key` that is the same on every machine and in every process."""
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big")


def stable_unit(key: str) -> float:
    """`stable_hash(key)` scaled to [0, 1)."""
    return stable_hash(key) / 2.0**64


# ----------------------------------------------------------------------------- documents


def num_validation(n: int, fraction: float = DOCUMENT_VALIDATION_FRACTION) -> int:
    """Documents held out of a group of n: round(fraction * n), at least 1 when n >= 2."""
    if n < 2:
        return 0
    return min(n - 1, max(1, math.floor(fraction * n + 0.5)))


def assign_splits(doc_ids: Sequence[str], groups: Sequence[str] | None = None,
                  fraction: float = DOCUMENT_VALIDATION_FRACTION) -> dict[str, str]:
    """{doc_id: 'train' or 'validation'} by the rule in the module docstring."""
    if not 0 <= fraction < 1:
        raise DataError(f"validation fraction {fraction} is not in [0, 1)")
    duplicates = sorted(d for d, c in collections.Counter(doc_ids).items() if c > 1)
    if duplicates:
        raise DataError(f"document ids must be unique; repeated: {duplicates[:10]}")
    groups = [""] * len(doc_ids) if groups is None else list(groups)
    if len(groups) != len(doc_ids):
        raise DataError(f"{len(doc_ids)} document ids but {len(groups)} groups")
    members: dict[str, list[str]] = collections.defaultdict(list)
    for doc_id, group in zip(doc_ids, groups):
        members[group].append(doc_id)
    splits = {}
    for ids in members.values():
        ranked = sorted(ids, key=lambda d: (stable_hash(d), d))
        held_out = num_validation(len(ids), fraction) if fraction > 0 else 0
        for i, doc_id in enumerate(ranked):
            splits[doc_id] = "validation" if i < held_out else "train"
    return splits


# ----------------------------------------------------------------------------- pairs, texts


def split_of(key: str, validation: float = VALIDATION_FRACTION,
             test: float = TEST_FRACTION) -> str:
    """'train', 'validation' or 'test' for the key of a sentence pair (module docstring)."""
    if not (validation >= 0 and test >= 0 and validation + test < 1):  # NaN fails too
        raise DataError(f"split fractions validation={validation}, test={test} must be >= 0 "
                        "and add up to less than 1")
    unit = stable_unit(key)
    if unit < test:
        return "test"
    if unit < test + validation:
        return "validation"
    return "train"


def text_split(text: str) -> str:
    """'train', 'validation' or 'test' for a labelled text by its hash bucket (module
    docstring)."""
    bucket = stable_hash(text) % 100
    bound = 0
    for split, percent in zip(SPLITS, TEXT_SPLIT_PERCENT):
        bound += percent
        if bucket < bound:
            return split
    raise AssertionError("the split percentages must add up to 100")
