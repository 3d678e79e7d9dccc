"""MLM masking: rates over >= 100k tokens, special and excluded ids, whole words, determinism,
the grain transform (dynamic but reproducible masks), config validation.

Tolerance of the rate checks. Each chosen token is corrupted independently, so the number of
tokens in one category among n chosen is Binomial(n, p): its fraction has standard error
sqrt(p (1 - p) / n). We accept |observed - p| <= 4 standard errors, which a correct implementation
fails with probability about 6e-5 per check for any seed (a rate of exactly 0 or 1 must then be
met exactly). With ~17,000 chosen tokens (setting 80/10/10) that is +-0.012 on the 80% rate and
+-0.009 on the 10% rates.
"""

from __future__ import annotations

import math

import grain
import numpy as np
import pytest

from data.pipelines.masking import MaskingConfig, MaskTokens, mask_batch, mask_tokens

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
SPECIAL = (PAD, UNK, CLS, SEP, MASK)
VOCAB = 1000
LENGTH = 128


def make_corpus(rows: int, seed: int = 0) -> np.ndarray:
    """[CLS] A [SEP] B [SEP] [PAD]...: two segments of ordinary ids, 100 to 125 of them."""
    rng = np.random.default_rng(seed)
    out = np.full((rows, LENGTH), PAD, np.int32)
    for r in range(rows):
        n = int(rng.integers(100, 126))
        a = int(rng.integers(1, n))
        words = rng.integers(len(SPECIAL), VOCAB, size=n)
        out[r, :n + 3] = [CLS, *words[:a], SEP, *words[a:], SEP]
    return out


def config(**overrides) -> MaskingConfig:
    fields = dict(vocab_size=VOCAB, mask_id=MASK, special_ids=SPECIAL)
    fields.update(overrides)
    return MaskingConfig(**fields)


def within(observed: float, p: float, n: int, num_se: float = 4.0) -> bool:
    return abs(observed - p) <= num_se * math.sqrt(p * (1 - p) / n)


CORPUS = make_corpus(1000)   # 1,000 x 128 = 128,000 tokens, about 112,000 of them candidates


@pytest.mark.parametrize("select, mask, rand, keep, max_predictions", [
    (0.15, 0.8, 0.1, 0.1, 20),    # BERT
    (0.20, 0.0, 0.8, 0.2, 32),    # BERT Table 8 row "MASK 0%, SAME 20%, RND 80%"
    (0.20, 1.0, 0.0, 0.0, 32),    # Table 8 row "MASK 100%"
])
def test_rates_match_the_config(select, mask, rand, keep, max_predictions):
    cfg = config(select_prob=select, mask_prob=mask, random_prob=rand, keep_prob=keep,
                 max_predictions=max_predictions)
    out = mask_batch(CORPUS, np.random.default_rng(0), cfg)
    candidates = ~np.isin(CORPUS, SPECIAL)
    assert candidates.sum() >= 100_000
    weights = out["masked_weights"]

    # Exactly round(n * select) positions per row (all below max_predictions here).
    per_row = weights.sum(1).astype(int)
    expected = [min(max_predictions, max(1, round(n * select))) for n in candidates.sum(1)]
    np.testing.assert_array_equal(per_row, expected)
    assert abs(per_row.sum() / candidates.sum() - select) < 0.005

    rows = np.repeat(np.arange(len(CORPUS)), max_predictions).reshape(weights.shape)
    real = weights > 0
    positions = out["masked_positions"][real]
    original = CORPUS[rows[real], positions]
    shown = out["input_ids"][rows[real], positions]
    np.testing.assert_array_equal(out["masked_ids"][real], original)
    assert not np.isin(original, SPECIAL).any()          # specials are never chosen

    n = int(real.sum())
    pool = VOCAB - len(SPECIAL)                           # a random draw is the original 1/pool
    assert within(np.mean(shown == MASK), mask, n)
    assert within(np.mean((shown != MASK) & (shown != original)), rand * (1 - 1 / pool), n)
    assert within(np.mean(shown == original), keep + rand / pool, n)
    assert not np.isin(shown[shown != original], SPECIAL[:-1]).any()  # random never draws specials

    # Nothing else changes.
    touched = np.zeros(CORPUS.shape, bool)
    touched[rows[real], positions] = True
    np.testing.assert_array_equal(out["input_ids"][~touched], CORPUS[~touched])

    # Chosen positions are uniform over the candidates: relative rank in 10 equal bins.
    ranks = np.cumsum(candidates, axis=1) - 1
    relative = ranks[rows[real], positions] / candidates.sum(1)[rows[real]]
    counts = np.bincount((relative * 10).astype(int), minlength=10)
    for c in counts:
        assert within(c / n, 0.1, n, num_se=5.0)


def test_max_predictions_respected_and_padding():
    cfg = config(select_prob=0.5, max_predictions=5)
    out = mask_batch(CORPUS[:50], np.random.default_rng(1), cfg)
    assert out["masked_positions"].shape == (50, 5)
    np.testing.assert_array_equal(out["masked_weights"], 1.0)

    short = np.asarray([CLS, 10, 11, 12, SEP, PAD, PAD, PAD])     # 3 candidates -> 1 prediction
    one = mask_tokens(short, np.random.default_rng(0), config(max_predictions=4))
    assert one["masked_weights"].tolist() == [1.0, 0.0, 0.0, 0.0]
    assert one["masked_positions"][1:].tolist() == [0, 0, 0]
    assert one["masked_ids"][1:].tolist() == [0, 0, 0]
    assert one["masked_positions"][0] in (1, 2, 3)
    assert one["input_ids"].dtype == np.int32 and one["masked_weights"].dtype == np.float32

    nothing = mask_tokens(np.asarray([CLS, SEP, PAD]), np.random.default_rng(0), config())
    assert nothing["masked_weights"].sum() == 0
    np.testing.assert_array_equal(nothing["input_ids"], [CLS, SEP, PAD])


def test_random_replacements_never_draw_excluded_ids():
    excluded = SPECIAL + tuple(range(5, 10))
    cfg = MaskingConfig(vocab_size=30, mask_id=MASK, special_ids=SPECIAL,
                        random_exclude_ids=excluded, mask_prob=0.0, random_prob=1.0,
                        keep_prob=0.0, select_prob=0.5, max_predictions=64)
    tokens = np.random.default_rng(2).integers(5, 30, size=(200, 64)).astype(np.int32)
    out = mask_batch(tokens, np.random.default_rng(3), cfg)
    rows = np.repeat(np.arange(200), 64).reshape(200, 64)
    real = out["masked_weights"] > 0
    drawn = out["input_ids"][rows[real], out["masked_positions"][real]]
    assert set(np.unique(drawn)) == set(range(10, 30))            # all allowed ids, nothing else
    assert cfg.random_pool.tolist() == list(range(10, 30))
    counts = np.bincount(drawn, minlength=30)[10:]
    assert all(within(c / drawn.size, 1 / 20, drawn.size) for c in counts)


def test_a_google_vocabularys_unused_placeholders_are_never_drawn():
    """Google's vocab.txt holds [unused0] ... between its special tokens: the pretraining
    pipeline's masking (data/pipelines/pretraining.py) draws random replacements from the real
    tokens only."""
    from data.pipelines.pretraining import masking_config
    from data.vocab import wordpiece

    tokens = ["[PAD]", *(f"[unused{i}]" for i in range(3)), "[UNK]", "[CLS]", "[SEP]", "[MASK]",
              "[unused3]", "the", "cat", "##s", "unused", "[unused]"]
    tok = wordpiece.from_vocab({t: i for i, t in enumerate(tokens)}, lowercase=True)
    pool = masking_config(tok, max_predictions=20).random_pool
    assert [tokens[i] for i in pool] == ["the", "cat", "##s", "unused", "[unused]"]


def _words(rng, rows, length=64):
    """Ids and word starts for [CLS] words... [SEP], words of 1-4 pieces."""
    tokens = np.full((rows, length), PAD, np.int32)
    starts = np.zeros((rows, length), bool)
    for r in range(rows):
        pos = 1
        tokens[r, 0] = CLS
        while True:
            size = int(rng.integers(1, 5))
            if pos + size >= length - 1:
                break
            tokens[r, pos:pos + size] = rng.integers(len(SPECIAL), VOCAB, size=size)
            starts[r, pos] = True
            pos += size
        tokens[r, pos] = SEP
    return tokens, starts


def test_whole_word_masking_takes_whole_words():
    """Chosen words are whole; the count never exceeds the target, and (the documented rule:
    words that would overshoot are skipped, the others still tried) falls short of it only when
    no unchosen word would still fit; the [MASK]/keep draw is per piece."""
    rng = np.random.default_rng(4)
    tokens, starts = _words(rng, 300)
    cfg = config(whole_word=True, select_prob=0.15, mask_prob=0.5, random_prob=0.0,
                 keep_prob=0.5, max_predictions=12)
    out = mask_batch(tokens, np.random.default_rng(5), cfg, word_starts=starts)
    mixed = short_of_target = 0
    for r in range(len(tokens)):
        real = out["masked_weights"][r] > 0
        chosen = np.zeros(tokens.shape[1], bool)
        chosen[out["masked_positions"][r][real]] = True
        word_id = np.cumsum(starts[r])
        target = cfg.num_to_predict(int((~np.isin(tokens[r], SPECIAL)).sum()))
        assert real.sum() <= target
        candidate = ~np.isin(tokens[r], SPECIAL)
        unchosen_sizes = [int((word_id[candidate] == w).sum())
                          for w in np.unique(word_id[candidate & ~chosen])]
        room = target - int(real.sum())
        assert all(size > room for size in unchosen_sizes), (r, room, unchosen_sizes)
        short_of_target += room > 0
        for w in np.unique(word_id[chosen]):
            piece = (word_id == w) & ~np.isin(tokens[r], SPECIAL)
            assert chosen[piece].all()                 # every piece of a chosen word is chosen
            masked = out["input_ids"][r][piece] == MASK
            mixed += 0 < masked.sum() < piece.sum()
        np.testing.assert_array_equal(out["masked_ids"][r][real], tokens[r][chosen])
    # The [MASK]/keep decision is per word piece, as in BERT's code: some words come out mixed.
    assert mixed > 0
    # Some rows did end short (every word left was too long), so the bound above was exercised.
    assert short_of_target > 0

    with pytest.raises(ValueError, match="word_starts"):
        mask_tokens(tokens[0], np.random.default_rng(0), cfg)


def test_a_continuation_after_a_special_token_starts_a_new_word():
    tokens = np.asarray([CLS, 10, 11, SEP, 12, 13, SEP])
    starts = np.asarray([False, True, False, False, False, False, False])  # 12 looks like '##'
    cfg = config(whole_word=True, select_prob=1.0, max_predictions=2)
    for seed in range(10):
        out = mask_tokens(tokens, np.random.default_rng(seed), cfg, starts)
        assert sorted(out["masked_positions"].tolist()) in ([1, 2], [4, 5])


def test_determinism_given_the_seed():
    cfg = config()
    a = mask_batch(CORPUS[:20], np.random.default_rng(9), cfg)
    b = mask_batch(CORPUS[:20], np.random.default_rng(9), cfg)
    c = mask_batch(CORPUS[:20], np.random.default_rng(10), cfg)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    assert not np.array_equal(a["masked_positions"], c["masked_positions"])
    # mask_batch = mask_tokens row by row with the same generator.
    rng = np.random.default_rng(9)
    rows = [mask_tokens(t, rng, cfg) for t in CORPUS[:20]]
    np.testing.assert_array_equal(np.stack([r["input_ids"] for r in rows]), a["input_ids"])


def test_grain_masking_is_dynamic_per_epoch_and_reproducible():
    examples = [{"input_ids": row, "label": i} for i, row in enumerate(CORPUS[:8])]

    def pipeline():
        ds = grain.MapDataset.source(examples).repeat(2)
        return ds.random_map(MaskTokens(config()), seed=123)

    first, again = list(pipeline()), list(pipeline())
    for x, y in zip(first, again):
        for key in ("input_ids", "masked_positions", "masked_ids", "masked_weights", "label"):
            np.testing.assert_array_equal(x[key], y[key])
    for i in range(8):   # the same sequence in epochs 1 and 2: new mask, same labels' source
        epoch1, epoch2 = first[i], first[i + 8]
        assert epoch1["label"] == epoch2["label"] == i
        assert not np.array_equal(epoch1["masked_positions"], epoch2["masked_positions"])
        for e in (epoch1, epoch2):
            np.testing.assert_array_equal(e["masked_ids"][e["masked_weights"] > 0],
                                          CORPUS[i][e["masked_positions"][e["masked_weights"] > 0]])

    batched = grain.MapDataset.source(examples).batch(4).random_map(MaskTokens(config()), seed=1)
    batch = batched[0]
    assert batch["input_ids"].shape == (4, LENGTH) and batch["masked_positions"].shape == (4, 20)


@pytest.mark.parametrize("overrides, field", [
    (dict(mask_prob=0.8, random_prob=0.1, keep_prob=0.2),
     r"mask_prob \+ random_prob \+ keep_prob must sum to 1, got 0.8 \+ 0.1 \+ 0.2"),
    (dict(select_prob=0.0), "select_prob"),
    (dict(select_prob=1.5), "select_prob"),
    (dict(mask_prob=-0.1, random_prob=0.6, keep_prob=0.5), "mask_prob"),
    (dict(max_predictions=0), "max_predictions"),
    (dict(mask_id=VOCAB), "mask_id"),
    (dict(vocab_size=0), "vocab_size"),
    (dict(special_ids=(VOCAB + 1,)), "special_ids"),
    (dict(random_exclude_ids=tuple(range(VOCAB))), "random_exclude_ids"),
])
def test_invalid_configs_raise_naming_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        config(**overrides)


def test_malformed_inputs_are_named():
    """Token arrays of the wrong rank or dtype, word_starts of another shape, and a pipeline
    element without the tokens are DataErrors that say what was expected."""
    from data.errors import DataError

    cfg, whole = config(), config(whole_word=True)
    rng = np.random.default_rng(0)
    tokens = np.arange(10, 30, dtype=np.int32)
    with pytest.raises(DataError, match=r"tokens must be a 1-D integer array, got float64"):
        mask_tokens(tokens.astype(np.float64), rng, cfg)
    with pytest.raises(DataError, match=r"tokens must be a 1-D integer array, .* shape \(2, 10\)"):
        mask_tokens(tokens.reshape(2, 10), rng, cfg)
    with pytest.raises(DataError, match=r"word_starts of shape \(19,\) does not match tokens of "
                                        r"shape \(20,\)"):
        mask_tokens(tokens, rng, whole, word_starts=np.ones(19, bool))
    with pytest.raises(DataError, match=r"tokens must be \[batch, length\], got shape \(20,\)"):
        mask_batch(tokens, rng, cfg)
    with pytest.raises(DataError, match=r"word_starts of shape \(2, 9\) does not match tokens of "
                                        r"shape \(2, 10\)"):
        mask_batch(tokens.reshape(2, 10), rng, whole, word_starts=np.ones((2, 9), bool))
    with pytest.raises(DataError, match=r"MaskTokens: element has no 'input_ids' \(keys: "
                                        r"\['ids', 'labels'\]\)"):
        MaskTokens(cfg).random_map({"ids": tokens, "labels": tokens}, rng)
