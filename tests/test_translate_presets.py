"""The paper-size presets of configs/transformer/translate.py (size=base, size=big) batch what
Vaswani et al. 2017 (Sec. 5.1) batch, "approximately 25000 source tokens and 25000 target
tokens", and split over the data-parallel devices of GPU nodes and pods."""

from __future__ import annotations

import numpy as np
import pytest

from data.pipelines import translation as text
from data.vocab.sentencepiece import EOS_ID, PAD_ID
from train.config import load_config_file

CONFIG = "configs/transformer/translate.py"
PAPER_TOKENS = 25_000   # per side and batch
TOLERANCE = 0.08        # "approximately": within 8% on each side


class WordTokenizer:
    """One token per space-separated word: the lengths are all that matters here."""
    pad_id, eos_id = PAD_ID, EOS_ID

    def encode(self, text_: str) -> list[int]:
        return [3] * len(text_.split())


def wmt_like_pairs(n: int, seed: int = 0) -> list[dict[str, str]]:
    """Sentence pairs with subword lengths in the range of WMT 2014 en-de (an assumption, not a
    measurement of it): source lengths log-normal, median 24 and sigma 0.6 (mean 29 tokens
    with EOS, 1.5% of the pairs over 100 tokens); targets 5% longer on average, the ratio
    log-normal with sigma 0.2."""
    rng = np.random.default_rng(seed)
    source = np.maximum(1, np.round(np.exp(np.log(24) + 0.6 * rng.standard_normal(n))))
    target = np.maximum(1, np.round(source * np.exp(0.05 + 0.2 * rng.standard_normal(n))))
    return [{"en": "w " * int(s), "de": "w " * int(t)} for s, t in zip(source, target)]


@pytest.mark.parametrize("size", ["base", "big"])
def test_paper_presets_batch_about_25000_tokens_a_side(size):
    """The preset's rows x row length, packed by the training pipeline as configured, hold
    25,000 +- 8% real tokens on each side (the configs' comment also gives the same preset
    measured on real Bible verses: 25.8k / 25.3k)."""
    data = load_config_file(f"{CONFIG}:size={size}").data
    batches = text.translation_batches(
        wmt_like_pairs(3000), WordTokenizer(), source_key="en", target_key="de",
        batch_size=data.batch_size, max_length=data.max_length, train=True, seed=0,
        pack=data.pack, long_examples=data.long_examples)
    for _ in range(2):
        batch = next(batches)
        for side in ("inputs", "targets"):
            tokens = int(np.sum(batch[side] != PAD_ID))
            assert abs(tokens / PAPER_TOKENS - 1) <= TOLERANCE, (
                f"{size}: {tokens} {side} tokens in a batch of {data.batch_size} rows x "
                f"{data.max_length}; the paper's batches hold ~{PAPER_TOKENS} a side")


@pytest.mark.parametrize("size", ["base", "big"])
def test_paper_presets_split_over_pods_and_decode_within_the_table(size):
    """Train and eval batches split over 8 (a GPU node), 64 and 128 data-parallel devices; the
    longest sentence's input + 50 fits the position table (no sentence's limit is cut)."""
    config = load_config_file(f"{CONFIG}:size={size}")
    for devices in (8, 64, 128):
        assert config.data.batch_size % devices == 0
        assert config.data.eval_batch_size % devices == 0
    assert config.data.max_length + config.task.extra_decode_length <= config.model.max_length
