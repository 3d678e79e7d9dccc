"""The interpolated Kneser-Ney baseline (train/kneser_ney.py): a bigram on a corpus small enough
to count by hand, every distribution summing to 1, the discount estimates, and the command,
which scores exactly the target tokens the causal LM is scored on."""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest

from train import kneser_ney
from train.kneser_ney import KneserNey, discounts_from_counts

# Tokens 1 2 1 3 and 1 2, ids < 4. Bigram counts: (1,2) 2, (2,1) 1, (1,3) 1. Continuation counts
# of the unigrams: each of 1, 2, 3 follows one distinct token: 1 each, 3 in all; D = 1/2.
HAND = [[1, 2, 1, 3], [1, 2]]
P1 = {0: Fraction(1, 8), 1: Fraction(7, 24), 2: Fraction(7, 24), 3: Fraction(7, 24)}
# P1(w) = (max(N(.w) - 1/2, 0) + 1/2 * 3 * 1/4) / 3
# P2(w | 1) = (max(c(1 w) - 1/2, 0) + (1/2 + 1/2) P1(w)) / 3; P2(w | 2) = (max(c(2 w) - 1/2, 0)
# + 1/2 P1(w)) / 1; history 3 never precedes anything: P2(w | 3) = P1(w).
P2 = {1: {0: Fraction(1, 24), 1: Fraction(7, 72), 2: Fraction(43, 72), 3: Fraction(19, 72)},
      2: {0: Fraction(1, 16), 1: Fraction(31, 48), 2: Fraction(7, 48), 3: Fraction(7, 48)},
      3: P1}


def test_bigram_probabilities_equal_the_hand_count():
    model = KneserNey(HAND, order=2, vocab_size=4, discounts=(0.5, 0.5, 0.5))
    for history, expected in P2.items():
        words = np.arange(4)
        got = model.probabilities(np.full((4, 1), history), words)
        np.testing.assert_allclose(got, [float(expected[w]) for w in range(4)], rtol=1e-12)
        assert sum(expected.values()) == 1
    # A unigram model is its own highest order: raw counts 1: 3, 2: 2, 3: 1 of 6 tokens.
    # P(w) = (max(c(w) - 1/2, 0) + 1/2 * 3 * 1/4) / 6
    raw = [Fraction(1, 16), Fraction(23, 48), Fraction(5, 16), Fraction(7, 48)]
    unigram = KneserNey(HAND, order=1, vocab_size=4, discounts=(0.5, 0.5, 0.5))
    np.testing.assert_allclose(unigram.probabilities(np.zeros((4, 0)), np.arange(4)),
                               [float(p) for p in raw], rtol=1e-12)
    assert sum(raw) == 1


# The same corpus as a trigram: trigrams (1 2 1) and (2 1 3), once each. The middle level counts
# continuations, not occurrences: (2 1) and (1 3) each follow one distinct token, and (1 2),
# seen twice, follows none (it only starts sequences), so history 1 predicts 3, not 2. The
# lowest level counts the distinct tokens before each middle-level bigram: 1 after 2, 3 after 1.
# P1(w) = (max(N(.w) - 1/2, 0) + 1/2 * 2 * 1/4) / 2 = 1/8, 3/8, 1/8, 3/8
# P2(w | 2) = max(N(.2w) - 1/2, 0) + 1/2 P1(w); P2(w | 1) likewise with (1 3); P2(w | 0 or 3) = P1
# P3(w | h) = max(c(h w) - 1/2, 0) + 1/2 P2(w | last of h) for h = (1 2), (2 1); else P2
TRI_P1 = [Fraction(1, 8), Fraction(3, 8), Fraction(1, 8), Fraction(3, 8)]
TRI_P2 = {2: [Fraction(1, 16), Fraction(11, 16), Fraction(1, 16), Fraction(3, 16)],
          1: [Fraction(1, 16), Fraction(3, 16), Fraction(1, 16), Fraction(11, 16)],
          0: TRI_P1, 3: TRI_P1}
TRI_P3 = {(1, 2): [Fraction(1, 32), Fraction(27, 32), Fraction(1, 32), Fraction(3, 32)],
          (2, 1): [Fraction(1, 32), Fraction(3, 32), Fraction(1, 32), Fraction(27, 32)]}


def test_trigram_probabilities_equal_the_hand_count():
    """Every level of a trigram against the counts above: the middle level's continuation
    counts are what make P(. | 1) favour 3 although (1 2) occurs twice as often as (1 3)."""
    model = KneserNey(HAND, order=3, vocab_size=4, discounts=(0.5, 0.5, 0.5))
    for a in range(4):
        for b in range(4):
            expected = TRI_P3.get((a, b), TRI_P2[b])
            got = model.probabilities(np.tile([a, b], (4, 1)), np.arange(4))
            np.testing.assert_allclose(got, [float(p) for p in expected], rtol=1e-12,
                                       err_msg=f"history {a} {b}")
            assert sum(expected) == 1


# Distinct discounts D(1), D(2), D(3+) = 3/10, 1/2, 7/10 (Chen & Goodman's modified KN), on a
# corpus of bigrams, vocab_size 5 (P0 = 1/5): (1 2) once, (1 3) twice, (1 4) four times, (2 3),
# (2 4), (3 4) once each; so history 1 reaches every discount at the top level:
#   c(1 .) = 7, N1 = N2 = N3+ = 1; gamma(1) = (3/10 + 1/2 + 7/10) / 7 = (3/2) / 7.
# Continuation counts N1+(. w): 2 after {1}: 1; 3 after {1, 2}: 2; 4 after {1, 2, 3}: 3 (and 4,
# not 3, at the top: count 3+ covers every count >= 3); 0 and 1: 0. Sum 6, N1 = N2 = N3+ = 1.
#   P1(w) = (max(N(. w) - D, 0) + (3/10 + 1/2 + 7/10) * 1/5) / 6 = (max(..) + 3/10) / 6:
#   w 0, 1: (3/10) / 6 = 1/20; 2: (7/10 + 3/10) / 6 = 1/6; 3: (3/2 + 3/10) / 6 = 3/10;
#   4: (23/10 + 3/10) / 6 = 13/30.
# P2(w | 1) = (max(c(1 w) - D, 0) + 3/2 P1(w)) / 7:
#   0, 1: (3/40) / 7 = 3/280; 2: (7/10 + 1/4) / 7 = 19/140; 3: (3/2 + 9/20) / 7 = 39/140;
#   4: (33/10 + 13/20) / 7 = 79/140.
# P2(w | 2) = (max(c(2 w) - D, 0) + 2 * 3/10 P1(w)) / 2   (c(2 .) = 2, N1 = 2):
#   0, 1: 3/200; 2: 1/20; 3: (7/10 + 9/50) / 2 = 11/25; 4: (7/10 + 13/50) / 2 = 12/25.
# P2(w | 3) = max(c(3 w) - D, 0) + 3/10 P1(w)   (c(3 .) = 1):
#   0, 1: 3/200; 2: 1/20; 3: 9/100; 4: 7/10 + 13/100 = 83/100. History 0 or 4: unseen, P1.
MODIFIED_CORPUS = [[1, 2]] + [[1, 3]] * 2 + [[1, 4]] * 4 + [[2, 3], [2, 4], [3, 4]]
MOD_P1 = [Fraction(1, 20), Fraction(1, 20), Fraction(1, 6), Fraction(3, 10), Fraction(13, 30)]
MOD_P2 = {1: [Fraction(3, 280), Fraction(3, 280), Fraction(19, 140), Fraction(39, 140),
              Fraction(79, 140)],
          2: [Fraction(3, 200), Fraction(3, 200), Fraction(1, 20), Fraction(11, 25),
              Fraction(12, 25)],
          3: [Fraction(3, 200), Fraction(3, 200), Fraction(1, 20), Fraction(9, 100),
              Fraction(83, 100)],
          0: MOD_P1, 4: MOD_P1}


def test_distinct_discounts_for_counts_one_two_and_three_plus_equal_the_hand_count():
    """Each count meets its own discount, in the numerator and in gamma, at the top level
    (raw counts) and the lower one (continuation counts): a swapped count -> discount mapping
    keeps every sum at 1 but not these values."""
    model = KneserNey(MODIFIED_CORPUS, order=2, vocab_size=5, discounts=(0.3, 0.5, 0.7))
    assert model.levels[0].discounts == model.levels[1].discounts == (0.3, 0.5, 0.7)
    unigram = model.probabilities(np.zeros((5, 1), np.int64), np.arange(5))  # via history 0
    np.testing.assert_allclose(unigram, [float(p) for p in MOD_P1], rtol=1e-12)
    assert sum(MOD_P1) == 1
    for history, expected in MOD_P2.items():
        got = model.probabilities(np.full((5, 1), history), np.arange(5))
        np.testing.assert_allclose(got, [float(p) for p in expected], rtol=1e-12,
                                   err_msg=f"history {history}")
        assert sum(expected) == 1


def test_trigram_distributions_sum_to_one_seen_or_not():
    rng = np.random.default_rng(0)
    zipf = 1.0 / np.arange(1, 201) ** 1.2  # rare tokens: every count of counts is there
    corpus = [rng.choice(200, size=n, p=zipf / zipf.sum()) for n in rng.integers(200, 400, 8)]
    model = KneserNey(corpus, order=3, vocab_size=200, discounts="modified")
    histories = [(a, b) for a in range(0, 200, 20) for b in range(0, 200, 7)]
    for h in histories:
        p = model.probabilities(np.tile(h, (200, 1)), np.arange(200))
        assert np.all(p > 0)
        assert p.sum() == pytest.approx(1.0, abs=1e-12)
    nats, tokens = model.score([np.r_[0, 0, corpus[0][:50]]])
    assert tokens == 50 and nats > 0


def test_modified_and_single_discounts_from_the_counts_of_counts():
    counts = np.array([1] * 10 + [2] * 4 + [3] * 3 + [4] * 2 + [7])
    n1, n2, n3, n4 = 10, 4, 3, 2
    y = n1 / (n1 + 2 * n2)
    assert discounts_from_counts(counts, "modified") == pytest.approx(
        (1 - 2 * y * n2 / n1, 2 - 3 * y * n3 / n2, 3 - 4 * y * n4 / n3))
    assert discounts_from_counts(counts, "single") == pytest.approx((y, y, y))
    with pytest.raises(ValueError, match="counts of counts"):
        discounts_from_counts(np.array([1, 1, 2, 2, 3]), "modified")  # no 4s


@pytest.mark.parametrize("eval_tokens", [0, 600])
def test_the_command_scores_the_lm_task_targets_and_writes_a_record(english_lm_env, tmp_path,
                                                                    eval_tokens):
    from train import run_record
    from train.config import load_config_file
    from train.tasks import get_task

    config = "configs/lm/english.py:smoke"
    assert kneser_ney.main(["--config", config, f"--config.task.eval_tokens={eval_tokens}",
                            "--discounts=single", "--workdir", str(tmp_path)]) == 0
    record = run_record.load(tmp_path / "record.json")
    ev = record["metrics"]["eval"]
    lm_config = load_config_file(config)
    lm_config.task.eval_tokens = eval_tokens
    task = get_task(lm_config)
    rows = task.eval_rows()[0]
    assert ev["tokens"] == int(rows["weights"].sum())
    scored = task.tokenizer.token_bytes[rows["targets"]] * rows["weights"]
    assert ev["bytes"] == int(scored.sum())
    assert ev["perplexity"] == pytest.approx(np.exp(ev["nll"]))
    assert ev["bits_per_byte"] == pytest.approx(ev["nll"] * ev["tokens"] / ev["bytes"] / np.log(2))


def test_a_workdir_holding_a_run_or_another_record_is_refused_before_the_work(tmp_path, capsys):
    from train import run_record

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "record.json").write_text('{"kind": "train"}')
    other, base = tmp_path / "other", tmp_path / "base"
    for folder, kind, module in ((other, "bench", "benchmarks.x"), (base, "baselines",
                                                                       "train.baselines")):
        folder.mkdir()
        (folder / "record.json").write_text(json.dumps(
            {"kind": kind, "sessions": [{"command": ["python", "-m", module]}]}))
    for folder, what in ((run, "a training run (checkpoints)"), (other, "a 'bench' record"),
                         (base, "a 'python -m train.baselines' record")):
        assert kneser_ney.main(["--config", "configs/lm/english.py:smoke",
                                "--workdir", str(folder)]) == 2
        assert f"holds {what}: its record.json would be replaced" in capsys.readouterr().err
    assert (run / "record.json").read_text() == '{"kind": "train"}'
    assert kneser_ney.main(["--config", "configs/bert/pretrain.py:smoke"]) == 2
    assert "is not a language model's config (task 'bert_pretrain')" in capsys.readouterr().err
    assert kneser_ney.main(["--config", "configs/lm/english.py:smoke", "--order", "30"]) == 2
    assert "--order 30 with config.data.vocab_size=" in capsys.readouterr().err
    assert run_record.own_folder(base, "baselines", "train.baselines") == base  # a rerun


def test_an_eval_budget_of_nothing_to_score_is_an_error(english_lm_env, tmp_path, capsys):
    assert kneser_ney.main(["--config", "configs/lm/english.py:smoke",
                            "--config.task.eval_tokens=1", "--workdir", str(tmp_path)]) == 2
    assert "eval_tokens=1: the first 1 token(s) of" in capsys.readouterr().err
    assert not (tmp_path / "record.json").exists()


@pytest.mark.parametrize("eval_tokens", [0, 600])
def test_at_order_two_the_commands_nll_is_the_mean_over_the_lm_targets(english_lm_env, tmp_path,
                                                                       eval_tokens):
    """A bigram's history is the LM's input token at the target's position, so the command's
    nll (order 2) is the mean of -log P(target | input) over the weighted positions of the LM
    task's own eval rows, the model fitted on the train split's [EOS] + ids + [EOS] documents:
    scored here through the rows, not through the command's document cutting."""
    from data.builders.examples import as_text
    from data.builders.sources import get_data_source
    from train import run_record
    from train.config import load_config_file
    from train.tasks import get_task

    config = "configs/lm/english.py:smoke"
    assert kneser_ney.main(["--config", config, f"--config.task.eval_tokens={eval_tokens}",
                            "--order", "2", "--discounts=single", "--workdir",
                            str(tmp_path)]) == 0
    ev = run_record.load(tmp_path / "record.json")["metrics"]["eval"]
    lm_config = load_config_file(config)
    lm_config.task.eval_tokens = eval_tokens
    task = get_task(lm_config)
    rows, tok, data = task.eval_rows()[0], task.tokenizer, lm_config.data
    source = get_data_source(data.name, data.train_split, source=data.source)
    texts = [as_text(source[i][data.text_key]) for i in range(len(source))]
    train = [np.asarray([tok.eos_id, *ids, tok.eos_id]) for ids in tok.encode_batch(texts)]
    model = KneserNey(train, order=2, vocab_size=tok.vocab_size, discounts="single",
                      vocabulary=[i for i in range(tok.vocab_size) if i != tok.pad_id])
    weighted = rows["weights"] > 0
    p = model.probabilities(rows["tokens"][weighted][:, None], rows["targets"][weighted])
    assert ev["tokens"] == int(weighted.sum())
    assert ev["nll"] == pytest.approx(-np.mean(np.log(p)), rel=1e-9)
