"""Train / validation / test of translation pairs by a stable hash of a key.

    split_of("Gen.1.1")   # 'train', 'validation' or 'test', the same on every machine

A key (a verse reference, a source sentence) goes to a split by where the first 8 bytes of its
SHA-256 fall in [0, 1): below TEST_FRACTION to test, then VALIDATION_FRACTION more to validation,
the rest to train. Each key decides alone, so adding or removing pairs never moves the others,
and equal keys (a source sentence listed twice) always share a split. The fractions are expected
values: 2% of 31,000 verses is 620 +- 25.
"""

from __future__ import annotations

import hashlib

from data.errors import DataError

SPLITS = ("train", "validation", "test")
VALIDATION_FRACTION = 0.02
TEST_FRACTION = 0.02


def stable_unit(key: str) -> float:
    """A number in [0, 1) from `key`, the same in every process (unlike Python's hash)."""
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def split_of(key: str, validation: float = VALIDATION_FRACTION,
             test: float = TEST_FRACTION) -> str:
    """'train', 'validation' or 'test' for `key` (see the module docstring)."""
    if not (validation >= 0 and test >= 0 and validation + test < 1):  # NaN fails too
        raise DataError(f"split fractions validation={validation}, test={test} must be >= 0 "
                        "and add up to less than 1")
    unit = stable_unit(key)
    if unit < test:
        return "test"
    if unit < test + validation:
        return "validation"
    return "train"
