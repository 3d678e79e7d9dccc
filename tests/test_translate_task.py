"""The translation task: smoke training on real Bible verses, packed == unpacked loss, length
checks, and the logged truncation count."""

from __future__ import annotations

import json
import math
from collections import Counter

import jax
import numpy as np
import pytest
from flax import linen as nn
from random_params import perturbed

from data.pipelines import translation as text_data
from models import decode as decoding
from train.config import ConfigError, apply_override, load_config_file
from train.tasks.base import batch_objective
from train.tasks.translate import TranslationTask, bleu

SMOKE = "configs/transformer/translate.py:smoke"


def smoke_config(arg: str = "", **overrides):
    config = load_config_file(SMOKE + ("," + arg if arg else ""))
    for key, value in overrides.items():
        apply_override(config, key, str(value))
    return config


def test_smoke_training_lowers_the_loss_and_reports_bleu(bible_env, tmp_path):
    from train.trainer import Trainer

    config = smoke_config(**{"train.num_steps": 30, "train.log_every": 10, "train.eval_every": 0,
                             "optimizer.learning_rate": 3.0})
    trainer = Trainer(config, tmp_path)
    before = trainer.evaluate(trainer.init_state().params)
    final = trainer.run()
    assert final["loss"] < before["loss"] - 0.5
    assert final["perplexity"] == pytest.approx(np.exp(final["nll"]), rel=1e-6)
    assert 0.0 <= final["bleu"] <= 100.0
    assert final["decoded"] == len(trainer.task._source("test"))  # every test verse translated
    assert isinstance(final["decoded"], int)  # a count: printed as one ("decoded 575")
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train_records = [r for r in records if r["split"] == "train"]
    assert [r["step"] for r in train_records] == [10, 20, 30]
    # The pipeline's counters are logged with the train metrics (cumulative over the run).
    assert all({"examples", "truncated", "dropped"} <= r.keys() for r in train_records)
    assert train_records[-1]["examples"] > train_records[0]["examples"] > 0
    assert all(isinstance(r[name], int) for r in train_records
               for name in ("examples", "truncated", "dropped"))


def test_packed_rows_give_the_same_loss_as_unpacked_examples(bible_env):
    """The same verse pairs, packed several per row or one per row, have the same summed
    token loss and token count under the same parameters (no attention across segments)."""
    task = TranslationTask(smoke_config(**{"data.max_length": 128}))  # rows of several verses
    params = task.init_variables(jax.random.PRNGKey(0), task.dummy_inputs(1))["params"]
    source = task._source("train")
    examples = [source[i] for i in range(12)]
    args = dict(tokenizer=task.tokenizer, source_key="en", target_key="es",
                max_length=task.max_length, train=True, seed=0, process_index=0,
                process_count=1)

    def total(batch):
        weights = (batch["targets"] != 0).astype(np.float32)
        logits = task._logits(params, batch, train=False)
        _, count, metrics = task._metric_sums(logits, batch["targets"], weights, 0.0)
        return float(metrics["nll"][0]), float(count)

    packed = next(text_data.translation_batches(examples, batch_size=4, pack=True, **args))
    segments = {int(s) for s in np.unique(packed["targets_segmentation"]) if s}
    assert max(segments) >= 2, "the packed batch should hold several pairs per row"
    in_packed = {(r, s) for r in range(4) for s in np.unique(packed["targets_segmentation"][r]) if s}
    unpacked = next(text_data.translation_batches(examples, batch_size=len(in_packed),
                                                  pack=False, **args))
    packed_nll, packed_count = total(packed)
    unpacked_nll, unpacked_count = total(unpacked)
    assert packed_count == unpacked_count
    assert packed_nll == pytest.approx(unpacked_nll, rel=1e-5)


def test_sequences_longer_than_the_position_table_fail_before_compiling(bible_env):
    with pytest.raises(ConfigError, match=r"config.data.max_length=200 is longer than the "
                                          r"position table \(config.model.max_length=128"):
        TranslationTask(smoke_config(**{"data.max_length": 200}))
    with pytest.raises(ConfigError, match=r"config.task.max_decode_length=300"):
        TranslationTask(smoke_config(**{"task.max_decode_length": 300}))
    # Relative encodings have no table: the same lengths are fine.
    TranslationTask(smoke_config("posemb=rope", **{"data.max_length": 200}))
    with pytest.raises(ConfigError, match=r"config.task.extra_decode_length=-1 must be >= 0"):
        TranslationTask(smoke_config(**{"task.extra_decode_length": -1}))


@pytest.mark.parametrize("arg, overrides, width", [
    ("", {"data.max_length": 64, "task.max_decode_length": 0}, 64 + 50),
    ("", {"data.max_length": 96, "task.max_decode_length": 0}, 128),  # the position table
    ("", {"data.max_length": 64, "task.max_decode_length": 100}, 100),  # the cap
    ("posemb=rope", {"data.max_length": 96, "task.max_decode_length": 0}, 96 + 50),  # no table
], ids=["input+50", "table", "cap", "no-table"])
def test_each_sentence_decodes_up_to_its_input_length_plus_50(bible_env, monkeypatch, arg,
                                                              overrides, width):
    """Sec. 6.1, per sentence: predict_fn limits each eval sentence to its source tokens (EOS
    included, as truncated to data.max_length) + task.extra_decode_length, within the width of
    the decoded arrays (the longest input + 50, at most the cap and the position table)."""
    task = TranslationTask(smoke_config(arg, **overrides))
    assert task.max_decode_length == width
    calls = []

    def fake_predict(model, params, inputs, **kwargs):
        calls.append(kwargs)
        return np.zeros((len(inputs), kwargs["max_decode_len"]), np.int32), None

    monkeypatch.setattr(decoding, "predict", fake_predict)
    batch = next(task.eval_batches(batch_size=16, process_index=0, process_count=1)[0])
    task.predict_fn(None, text_data.without_text(batch))
    (kwargs,) = calls
    assert kwargs["max_decode_len"] == width
    real = batch["mask"] == 1
    source_tokens = np.array([min(len(task.tokenizer.encode(source)) + 1, task.max_length)
                              for source in batch["source_text"][real]])
    limits = np.asarray(kwargs["row_max_decode_len"])[real]
    np.testing.assert_array_equal(limits, np.minimum(source_tokens + 50, width))
    assert len(set(limits.tolist())) > 1, "the sentences should get different limits"


def _np_corpus_bleu(hypotheses: list[str], references: list[str]) -> float:
    """Papineni et al. 2002, eq. (1)-(2), written out for space-separated words without
    punctuation (where sacrebleu's 13a tokenizer splits on spaces only): n-gram matches clipped by
    the reference counts and summed over the corpus *before* dividing, for n = 1..4; geometric
    mean of the 4 precisions; brevity penalty exp(1 - r / c) from the corpus lengths r and c.
    Only for corpora where every n has a match (no smoothing)."""
    matches, totals = [0] * 4, [0] * 4
    hyp_len = ref_len = 0
    for hyp, ref in zip(hypotheses, references):
        h, r = hyp.split(), ref.split()
        hyp_len, ref_len = hyp_len + len(h), ref_len + len(r)
        for n in range(1, 5):
            h_grams = Counter(tuple(h[i:i + n]) for i in range(len(h) - n + 1))
            r_grams = Counter(tuple(r[i:i + n]) for i in range(len(r) - n + 1))
            matches[n - 1] += sum(min(c, r_grams[g]) for g, c in h_grams.items())
            totals[n - 1] += max(len(h) - n + 1, 0)
    assert all(matches), "the reference formula has no smoothing"
    log_precision = sum(math.log(m / t) for m, t in zip(matches, totals)) / 4
    brevity = min(0.0, 1.0 - ref_len / hyp_len)
    return 100.0 * math.exp(brevity + log_precision)


# Hypothesis/reference pairs of unequal lengths and partial overlap: one hypothesis shorter than
# its reference, one longer, so the corpus brevity penalty, clipping, and the order of the
# arguments all matter; a mean of sentence BLEUs differs from the corpus score.
BLEU_HYPOTHESES = [
    "y los hijos de Noé que salieron del arca fueron Sem",
    "el padre de Canaán vio la desnudez de su padre",
    "y dijo Dios sea la luz y fue la luz la luz",
    "en el principio creó Dios",
]
BLEU_REFERENCES = [
    "y los hijos de Noé que salieron del arca fueron Sem Cam y Jafet",
    "y Cam padre de Canaán vio la desnudez de su padre",
    "y dijo Dios sea la luz y fue la luz",
    "en el principio creó Dios los cielos y la tierra",
]


def test_bleu_is_sacrebleus_corpus_bleu():
    """`bleu` is the corpus BLEU (n-gram statistics pooled over all sentences, one brevity
    penalty), with the hypotheses as hypotheses: it equals sacrebleu.corpus_bleu and the formula
    written out above, and differs from the mean of sentence BLEUs and from swapped arguments
    (checked here, so the equalities above are not vacuous)."""
    import sacrebleu

    hyp = ["el padre de Canaán", "y los hijos de Noé"]
    assert bleu(hyp, hyp) == pytest.approx(100.0)
    assert bleu(["nada que ver"], ["y los hijos de Noé salieron"]) < 10.0

    hyps, refs = BLEU_HYPOTHESES, BLEU_REFERENCES
    corpus = sacrebleu.corpus_bleu(hyps, [refs]).score
    assert bleu(hyps, refs) == pytest.approx(corpus, rel=1e-9)
    assert bleu(hyps, refs) == pytest.approx(_np_corpus_bleu(hyps, refs), rel=1e-6)
    for size in (1, 2, 3):  # sub-corpora, each with its own brevity penalty
        assert bleu(hyps[:size], refs[:size]) == pytest.approx(
            _np_corpus_bleu(hyps[:size], refs[:size]), rel=1e-6)
        assert bleu(hyps[-size:], refs[-size:]) == pytest.approx(
            sacrebleu.corpus_bleu(hyps[-size:], [refs[-size:]]).score, rel=1e-9)
    sentence_mean = np.mean([sacrebleu.sentence_bleu(h, [r]).score for h, r in zip(hyps, refs)])
    assert abs(bleu(hyps, refs) - sentence_mean) > 1.0
    assert abs(bleu(hyps, refs) - _np_corpus_bleu(refs, hyps)) > 1.0


def test_the_tasks_bleu_scores_its_translations_as_hypotheses(bible_env, monkeypatch):
    """score_predictions: each real row's decoded tokens are the hypothesis, the reference the
    verse its index names, padded rows left out; BLEU as sacrebleu's corpus BLEU (the brevity
    penalty makes swapped arguments differ, checked above)."""
    import sacrebleu

    task = TranslationTask(smoke_config())
    source = task._source(task.config.data.eval_split)
    references = [source[i]["es"] for i in range(3)]
    references = [r.decode() if isinstance(r, bytes) else str(r) for r in references]
    # The decoder "translates" row i as the first half of its reference's words.
    shortened = {i: " ".join(ref.split()[: len(ref.split()) // 2])
                 for i, ref in enumerate(references)}
    monkeypatch.setattr(task.tokenizer, "decode", lambda tokens: shortened[tokens[0]])
    outputs = [{"tokens": np.array([[0], [1], [2], [0]]), "index": np.array([0, 1, 2, 0]),
                "mask": np.array([1, 1, 1, 0])}]
    scored = task.score_predictions(outputs, log=lambda _: None)
    hypotheses = [shortened[i] for i in range(3)]
    assert scored["decoded"] == 3
    assert scored["bleu"] == pytest.approx(
        sacrebleu.corpus_bleu(hypotheses, [references]).score, rel=1e-9)
    assert abs(scored["bleu"] - sacrebleu.corpus_bleu(references, [hypotheses]).score) > 1.0


def _np_log_softmax(logits: np.ndarray) -> np.ndarray:
    x = np.asarray(logits, np.float64)
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_loss_fn_smooths_with_the_tasks_label_smoothing(bible_env):
    """Through `loss_fn` (the trainer's objective), with the config's task.label_smoothing = 0.1:
    the `cross_entropy` term is the sum over real target tokens of -sum_k q(k) log p(k) with
    q = (1 - eps) onehot + eps / V (Szegedy et al. Sec. 7, over all V pieces, the true one
    included; train/losses.py), and the `nll` metric the plain -log p(y) sum, both in NumPy
    from the model's logits. The two differ, so neither can stand in for the other."""
    config = smoke_config(**{"data.max_length": 128})  # verses shorter than a row: padding
    assert config.task.label_smoothing == 0.1
    task = TranslationTask(config)
    assert task.label_smoothing == 0.1
    params = task.init_variables(jax.random.PRNGKey(0), task.dummy_inputs(1))["params"]
    params = perturbed(nn.meta.unbox(params), scale=0.5)  # peaked, not near-uniform, predictions
    examples = [task._source("train")[i] for i in range(8)]
    batch = next(text_data.translation_batches(
        examples, tokenizer=task.tokenizer, source_key="en", target_key="es", batch_size=4,
        max_length=task.max_length, train=True, seed=0, pack=False, process_index=0,
        process_count=1))  # one pair per row: padding after each
    batch = text_data.without_text(batch)
    targets = np.asarray(batch["targets"])
    real = targets != 0
    assert 0 < real.sum() < real.size, "the batch should hold padding to leave out"
    rng = jax.random.PRNGKey(3)
    terms, metrics = task.loss_fn(params, batch, rng)
    # The same logits loss_fn saw (same dropout key); the loss itself in NumPy.
    log_p = _np_log_softmax(task._logits(params, batch, train=True, rng=rng))
    eps, vocab = 0.1, log_p.shape[-1]
    assert vocab == task.tokenizer.vocab_size
    q = (1 - eps) * np.eye(vocab)[targets] + eps / vocab
    smoothed = -(q * log_p).sum(-1)
    nll = -np.take_along_axis(log_p, targets[..., None], -1)[..., 0]
    assert set(terms) == {"cross_entropy"}
    np.testing.assert_allclose(float(terms["cross_entropy"]), smoothed[real].sum(), rtol=1e-5)
    # What a step minimises: the mean over the real target tokens (Sec. 5.4), not over every
    # position, nor over the source's tokens (their counts differ here).
    normalizers = task.loss_normalizers(batch)
    assert float(normalizers["cross_entropy"]) == real.sum() != (np.asarray(batch["inputs"]) != 0
                                                                 ).sum()
    np.testing.assert_allclose(float(batch_objective(terms, normalizers)),
                               smoothed[real].mean(), rtol=1e-5)
    np.testing.assert_allclose(float(metrics["nll"][0]), nll[real].sum(), rtol=1e-5)
    assert float(metrics["nll"][1]) == real.sum()
    # Apart by over 100 times the tolerance above (the sums: 2526 and 2535 here).
    assert abs(smoothed[real].sum() - nll[real].sum()) > 1e-3 * nll[real].sum()
    np.testing.assert_allclose(float(metrics["accuracy"][0]),
                               (log_p.argmax(-1) == targets)[real].sum())
