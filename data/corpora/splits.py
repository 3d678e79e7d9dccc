"""Train / validation splits of a corpus by held-out documents, deterministic and stratified.

    assign_splits(["ca01", "ca02", "cb01", ...], groups=["a", "a", "b", ...])
    -> {"ca01": "train", "ca02": "validation", ...}

Each document's rank comes from a stable hash of its id (the first 8 bytes of SHA-256; not
Python's `hash`, which changes between processes). Within each group (a Brown genre, an Austen
novel; one group when `groups` is None) the round(fraction * n) documents with the smallest hash
go to validation, at least one when the group has two or more documents, so every group is in
both splits. The assignment depends only on the ids and groups, never on their order; adding
documents to a group can move others of that group, as with any exact-fraction split.
"""

from __future__ import annotations

import collections
import hashlib
import math
from typing import Sequence

from data.errors import DataError

SPLITS = ("train", "validation")
VALIDATION_FRACTION = 0.05


def stable_hash(doc_id: str) -> int:
    """A 64-bit hash of `doc_id` that is the same on every machine and in every process."""
    return int.from_bytes(hashlib.sha256(doc_id.encode("utf-8")).digest()[:8], "big")


def num_validation(n: int, fraction: float = VALIDATION_FRACTION) -> int:
    """Documents held out of a group of n: round(fraction * n), at least 1 when n >= 2."""
    if n < 2:
        return 0
    return min(n - 1, max(1, math.floor(fraction * n + 0.5)))


def assign_splits(doc_ids: Sequence[str], groups: Sequence[str] | None = None,
                  fraction: float = VALIDATION_FRACTION) -> dict[str, str]:
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
