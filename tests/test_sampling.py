"""Temperature, top-k and top-p sampling (models/sampling.py) against a NumPy transcription of
the definitions, the draws against their distribution (chi-square), and the sampling search
loop (models/search.py): its limits are greedy search, its first-step draws follow the model,
several stop tokens."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from models import search as S
from models.sampling import Sampling, choose_tokens, filter_logits, sampling_probabilities

SETTINGS = [Sampling(), Sampling(temperature=0.5), Sampling(temperature=2.0, top_k=3),
            Sampling(top_p=0.6), Sampling(temperature=0.7, top_k=5, top_p=0.8),
            Sampling(top_k=1), Sampling(top_p=1e-6), Sampling(top_k=100)]


def numpy_probabilities(logits, temperature, top_k, top_p):
    """The sampling distribution of one row, from the definitions: softmax at temperature T;
    keep the k most probable (Fan et al. 2018); keep the smallest most-probable set with mass
    >= p (Holtzman et al. 2020, eq. 2); renormalise after each cut (eq. 3)."""
    p = np.exp(logits / temperature - np.max(logits / temperature))
    p /= p.sum()
    order = np.argsort(-p)
    if top_k:
        p[order[top_k:]] = 0
        p /= p.sum()
    if top_p < 1:
        mass, kept = 0.0, []
        for token in order:
            kept.append(token)
            mass += p[token]
            if mass >= top_p:
                break
        cut = np.zeros_like(p)
        cut[kept] = p[kept]
        p = cut / cut.sum()
    return p


@pytest.mark.parametrize("sampling", SETTINGS, ids=str)
def test_filtered_probabilities_match_numpy(sampling):
    logits = np.random.default_rng(0).normal(scale=2.0, size=(4, 12))
    got = np.asarray(sampling_probabilities(jnp.asarray(logits, jnp.float32), sampling))
    for row in range(4):
        want = numpy_probabilities(logits[row], sampling.temperature, sampling.top_k,
                                   sampling.top_p)
        np.testing.assert_allclose(got[row], want, atol=2e-6)
        assert np.array_equal(got[row] > 0, want > 0)   # the same support


def test_the_nucleus_is_taken_from_what_top_k_kept_ties_included():
    """Top-k keeps every token tied with its k-th; top-p then cuts the distribution top-k left,
    ties and all. Here k = 5 keeps all 12 tokens (eight tie at the fifth place), the four
    largest hold 0.4934 of that mass at T = 1.5, so the nucleus of p = 0.5 needs the tied ones
    too (planted, a nucleus over the first k alone kept four)."""
    logits = np.array([1.0] * 4 + [0.0] * 8)
    z = logits / 1.5
    assert np.exp(z[:4]).sum() / np.exp(z).sum() == pytest.approx(0.4934, abs=1e-4)
    got = np.asarray(sampling_probabilities(jnp.asarray(logits[None], jnp.float32),
                                            Sampling(temperature=1.5, top_k=5, top_p=0.5)))[0]
    np.testing.assert_allclose(got, np.exp(z) / np.exp(z).sum(), atol=1e-6)
    keeps_four = Sampling(temperature=1.5, top_k=5, top_p=0.45)  # 0.4934 >= 0.45: the four
    np.testing.assert_array_equal(np.asarray(sampling_probabilities(
        jnp.asarray(logits[None], jnp.float32), keeps_four))[0] > 0, logits > 0)


@pytest.mark.parametrize("sampling", [Sampling(temperature=0.8),
                                      Sampling(temperature=1.5, top_k=4),
                                      Sampling(top_p=0.7)], ids=str)
def test_draws_follow_the_distribution(sampling):
    """20,000 draws per row: no token outside the support, and the counts pass a chi-square
    goodness-of-fit test against the NumPy distribution (p > 1e-3; with the fixed key this is
    deterministic: the temperature applied twice gives p < 1e-15 here, a nucleus one token too
    small draws tokens outside it)."""
    logits = np.random.default_rng(1).normal(size=(2, 8))
    draws = 20_000
    key = jax.random.PRNGKey(0)
    batch = jnp.asarray(np.repeat(logits, draws, axis=0), jnp.float32)
    tokens = np.asarray(choose_tokens(batch, sampling, key)).reshape(2, draws)
    for row in range(2):
        want = numpy_probabilities(logits[row], sampling.temperature, sampling.top_k,
                                   sampling.top_p)
        counts = np.bincount(tokens[row], minlength=8)
        assert np.all(counts[want == 0] == 0)
        support = want > 0
        result = stats.chisquare(counts[support], draws * want[support])
        assert result.pvalue > 1e-3, (counts, draws * want)


def test_temperature_zero_is_greedy_and_the_settings_are_checked():
    logits = jnp.asarray(np.random.default_rng(2).normal(size=(3, 9)), jnp.float32)
    greedy = np.argmax(np.asarray(logits), axis=-1)
    np.testing.assert_array_equal(choose_tokens(logits, Sampling(temperature=0.0)), greedy)
    np.testing.assert_array_equal(choose_tokens(logits, None), greedy)
    # Small temperatures tend to the argmax (the limit greedy stands for).
    for key in range(5):
        np.testing.assert_array_equal(
            choose_tokens(logits, Sampling(temperature=1e-3), jax.random.PRNGKey(key)), greedy)
    np.testing.assert_array_equal(
        sampling_probabilities(logits, Sampling(temperature=0.0)), np.eye(9)[greedy])
    # ... even where logits / temperature overflows float32: every logit negative, the best is
    # still drawn (not token 0 of an all -inf row, padding), and positive, not nan
    for shift in (-100.0, 100.0):
        tiny = Sampling(temperature=1e-37)
        np.testing.assert_array_equal(
            choose_tokens(logits + shift, tiny, jax.random.PRNGKey(0)), greedy)
        np.testing.assert_array_equal(sampling_probabilities(logits + shift, tiny),
                                      np.eye(9)[greedy])
    with pytest.raises(ValueError, match="greedy decoding"):
        filter_logits(logits, Sampling(temperature=0.0))
    with pytest.raises(ValueError, match="needs a jax.random key"):
        choose_tokens(logits, Sampling())
    for fields, message in ((dict(temperature=-1.0), "temperature=-1.0 must be a finite"),
                            (dict(temperature=float("inf")), "temperature=inf"),
                            (dict(temperature=1e-40), "temperature=1e-40 is below float32's "
                                                      "smallest normal number"),
                            (dict(top_k=-2), "top_k=-2 must be an integer >= 0"),
                            (dict(top_k=2.5), "top_k=2.5"),
                            (dict(top_p=0.0), r"top_p=0.0 must be in \(0, 1\]"),
                            (dict(top_p=1.5), "top_p=1.5")):
        with pytest.raises(ValueError, match=message):
            Sampling(**fields)


# ---------------------------------------------------------------------------------------------
# The search loop on a first-order Markov chain: logits = table[example, last token]
# ---------------------------------------------------------------------------------------------

BOS, EOS = 2, 1


def chain(table):
    table = jnp.asarray(table, jnp.float32)

    def tokens_to_logits(tokens, cache):
        return table[cache["example"], tokens[:, 0]], cache

    return tokens_to_logits


def test_sample_search_limits_equal_greedy_search():
    table = np.random.default_rng(3).normal(size=(3, 8, 8))
    cache = {"example": jnp.arange(3)}
    kwargs = dict(batch_size=3, max_length=6, bos_id=BOS, eos_id=EOS)
    greedy, greedy_lp = S.greedy_search(chain(table), cache, **kwargs)
    for sampling in (Sampling(temperature=0.0), Sampling(temperature=1e-4), Sampling(top_k=1),
                     Sampling(temperature=5.0, top_p=1e-6)):
        tokens, lp = S.sample_search(chain(table), cache, sampling, jax.random.PRNGKey(4),
                                     **kwargs)
        np.testing.assert_array_equal(tokens, greedy, err_msg=str(sampling))
        np.testing.assert_allclose(lp, greedy_lp, rtol=1e-6)


def test_sample_search_draws_the_first_token_from_the_model():
    """4,000 rows of one example: the first tokens follow the sampling distribution of the
    logits after BOS (padding suppressed), and each row's score is its token's log-probability
    under the model itself."""
    table = np.random.default_rng(5).normal(size=(1, 6, 6))
    rows, sampling = 4000, Sampling(temperature=1.3, top_k=4)
    cache = {"example": jnp.zeros((rows,), jnp.int32)}
    tokens, lp = S.sample_search(chain(table), cache, sampling, jax.random.PRNGKey(6),
                                 batch_size=rows, max_length=1, bos_id=BOS, eos_id=EOS)
    logits = table[0, BOS].copy()
    logits[0] = -np.inf                                     # the padding token is never drawn
    want = numpy_probabilities(logits, 1.3, 4, 1.0)
    counts = np.bincount(np.asarray(tokens)[:, 0], minlength=6)
    assert np.all(counts[want == 0] == 0)
    assert stats.chisquare(counts[want > 0], rows * want[want > 0]).pvalue > 1e-3
    model_logp = logits - np.log(np.exp(table[0, BOS]).sum())
    np.testing.assert_allclose(lp, model_logp[np.asarray(tokens)[:, 0]], rtol=1e-5)


def test_several_stop_tokens():
    """Token 3 always follows BOS, then 4, then 5: with stop tokens {4, 5} every row ends at 4,
    with {5, 6} at 5; padding follows."""
    table = np.full((1, 8, 8), -5.0)
    table[0, BOS, 3] = table[0, 3, 4] = table[0, 4, 5] = table[0, 5, 6] = table[0, 6, 7] = 5.0
    cache = {"example": jnp.zeros((2,), jnp.int32)}
    for stops, want in (([4, 5], [3, 4, 0, 0, 0]), ((5, 6), [3, 4, 5, 0, 0]),
                        (7, [3, 4, 5, 6, 7])):
        tokens, _ = S.greedy_search(chain(table), cache, batch_size=2, max_length=5,
                                    bos_id=BOS, eos_id=stops)
        np.testing.assert_array_equal(tokens, [want] * 2)
    with pytest.raises(ValueError, match="eos_id=\\[\\]"):
        S.greedy_search(chain(table), cache, batch_size=2, max_length=5, bos_id=BOS, eos_id=[])
    with pytest.raises(ValueError, match=r"bos_id has shape \(3,\)"):
        S.greedy_search(chain(table), cache, batch_size=2, max_length=5,
                        bos_id=jnp.array([2, 2, 2]), eos_id=EOS)


def test_successive_draws_are_independent():
    """A chain whose next-token distribution never changes: each row's second draw repeats its
    first as often as chance says (sum of p_i^2; a key reused across steps would repeat it
    always), and the two steps' joint counts fit the product of the marginals."""
    logits = np.log([0.05, 0.3, 0.25, 0.2, 0.15, 0.05])
    table = np.broadcast_to(logits, (1, 6, 6))
    rows = 4000
    tokens, _ = S.sample_search(chain(table), {"example": jnp.zeros((rows,), jnp.int32)},
                                Sampling(), jax.random.PRNGKey(7), batch_size=rows,
                                max_length=2, bos_id=BOS, eos_id=[9], suppress_pad=False)
    tokens = np.asarray(tokens)
    p = np.exp(logits)
    joint = np.zeros((6, 6))
    np.add.at(joint, (tokens[:, 0], tokens[:, 1]), 1)
    assert stats.chisquare(joint.ravel(), rows * np.outer(p, p).ravel()).pvalue > 1e-3
    assert abs(np.mean(tokens[:, 0] == tokens[:, 1]) - np.sum(p ** 2)) < 0.03
