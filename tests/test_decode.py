"""Cached decoding and greedy / beam search: the key/value cache reproduces teacher forcing, and
beam search on a hand-made Markov chain finds exactly what brute-force enumeration finds."""

from __future__ import annotations

import functools
import itertools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import beam_search as B
from models import decode as D
from models import search as S
from models.attention import MultiHeadAttention, causal_mask
from models.sampling import Sampling
from models.transformer import Transformer, shift_right

from tiny_transformer import PAD, EOS, BOS, tiny, words


def setup_model(cfg, seed=0):
    rng = np.random.default_rng(seed)
    inputs = words(rng, 2, 7)
    inputs[1, 4:] = PAD                               # the cross-attention must skip padding
    targets = words(rng, 2, 6)
    targets[:, 0] = BOS
    inputs, targets = jnp.asarray(inputs), jnp.asarray(targets)
    model = Transformer(cfg)
    # Random parameters of the right structure (jax.eval_shape compiles nothing): kernels and
    # embeddings ~ N(0, 0.3^2), biases 0 and norm scales 1 as at initialisation.
    shapes = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), inputs, targets))["params"]

    def draw(path, s):
        name = path[-1].key
        if name in ("bias", "scale"):
            return jnp.full(s.shape, float(name == "scale"), s.dtype)
        return jnp.asarray(0.3 * rng.standard_normal(s.shape), s.dtype)

    params = jax.tree_util.tree_map_with_path(draw, nn.meta.unbox(shapes))
    return model, params, inputs, targets


# ---------------------------------------------------------------------------------------------
# Key/value cache
# ---------------------------------------------------------------------------------------------

def test_attention_cache_appends_single_steps_and_chunks():
    """MultiHeadAttention(decode=True): appending 1, 2, 1 and 3 tokens reproduces causal
    self-attention over the whole sequence (RoPE, grouped-query heads, d_v != d_k)."""
    mha = MultiHeadAttention(num_heads=4, head_dim=6, value_head_dim=10, num_kv_heads=2,
                             rotary_base=10000.0)
    x = jnp.asarray(np.random.default_rng(0).normal(size=(2, 7, 16)), jnp.float32)
    shapes = jax.eval_shape(lambda: mha.init(jax.random.PRNGKey(0), x))
    rng = np.random.default_rng(1)
    variables = jax.tree.map(lambda s: jnp.asarray(rng.normal(size=s.shape), s.dtype),
                             nn.meta.unbox(shapes))
    full = mha.apply(variables, x, mask=causal_mask(7))
    _, cache = mha.apply(variables, x, decode=True, mutable=["cache"])     # sizes the cache
    assert cache["cache"]["cached_value"].shape == (2, 2, 7, 10)
    outputs = []
    for start, stop in ((0, 1), (1, 3), (3, 4), (4, 7)):
        out, cache = mha.apply({**variables, **cache}, x[:, start:stop], decode=True,
                               mutable=["cache"])
        outputs.append(out)
    # Outputs reach |40| (unscaled random weights): float32 rounding of sums of such terms
    # leaves ~1e-5 absolute error even on small entries.
    np.testing.assert_allclose(jnp.concatenate(outputs, axis=1), full, rtol=1e-5, atol=5e-5)
    assert int(cache["cache"]["cache_index"]) == 7
    with pytest.raises(ValueError, match="self-attention only"):
        mha.apply(variables, x, x, decode=True, mutable=["cache"])


@pytest.mark.parametrize("overrides", [
    dict(posemb="sinusoidal"),
    dict(posemb="rope", num_kv_heads=2),
    dict(posemb="alibi", norm_position="pre"),
    dict(posemb="t5", share_embeddings=False),
], ids=lambda o: o["posemb"])
def test_cached_steps_equal_teacher_forcing(overrides):
    model, params, inputs, targets = setup_model(tiny(**overrides))
    full = model.apply({"params": params}, inputs, targets)
    encoded = model.apply({"params": params}, inputs, method=Transformer.encode)
    steps = targets.shape[1]
    cache = D.init_cache(model, params, encoded, inputs, steps)
    step = D.make_tokens_to_logits(model, params, encoded, inputs)
    for t in range(steps):
        logits, cache = step(targets[:, t:t + 1], cache)
        np.testing.assert_allclose(logits, full[:, t], atol=2e-5, rtol=1e-5)


# ---------------------------------------------------------------------------------------------
# A second-order Markov chain as the "model": P(next | previous two tokens), per example
# ---------------------------------------------------------------------------------------------

def markov_search_fn(table):
    """tokens_to_logits for logits table[example, token before last, last token, next]; the
    cache holds each row's example and the token before last (so beams must be reordered)."""
    table = jnp.asarray(table, jnp.float32)

    def tokens_to_logits(tokens, cache):
        last = tokens[:, 0]
        logits = table[cache["example"], cache["before_last"], last]
        return logits, {"example": cache["example"], "before_last": last}

    return tokens_to_logits


def markov_cache(batch, beam):
    return {"example": jnp.repeat(jnp.arange(batch), beam),
            "before_last": jnp.full((batch * beam,), BOS, jnp.int32)}


def log_softmax(x):
    x = np.asarray(x, np.float64)
    return x - x.max() - np.log(np.exp(x - x.max()).sum())


def brute_force(table, alpha, max_length):
    """Every hypothesis (EOS-terminated, or max_length tokens long) with its score, best first."""
    vocab = table.shape[-1]
    tokens = range(1, vocab)                           # all but padding
    scored = []
    for n in range(1, max_length + 1):
        for seq in itertools.product(tokens, repeat=n):
            if EOS in seq[:-1] or (n < max_length and seq[-1] != EOS):
                continue
            history, log_p = [BOS, BOS], 0.0
            for tok in seq:
                log_p += log_softmax(table[history[-2], history[-1]])[tok]
                history.append(tok)
            scored.append((log_p / ((5 + n) / 6) ** alpha, seq + (PAD,) * (max_length - n)))
    return sorted(scored, reverse=True)


def hand_made_table(seed=0, vocab=6):
    """Tokens: 0 pad, 1 EOS, 2 BOS (may be generated: it is only a token), 3-5 words.

    For seed 0 the length penalty decides: alpha 0 and 0.6 prefer [3 EOS] and [EOS] for the two
    examples, alpha 2 prefers the longer [5 5 EOS] and [4 2 EOS]."""
    rng = np.random.default_rng(seed)
    table = rng.normal(size=(2, vocab, vocab, vocab))
    table[:, BOS, BOS, EOS] -= 1.0
    return table


def test_length_penalty():
    for n, alpha in ((1, 0.6), (7, 0.6), (3, 0.0), (10, 2.0)):
        assert math.isclose(float(B.length_penalty(n, alpha)), ((5 + n) / 6) ** alpha,
                            rel_tol=1e-6)


def test_beam_search_matches_brute_force():
    table, max_length = hand_made_table(), 3
    best = {}
    for alpha in (0.0, 0.6, 2.0):
        truth = [brute_force(table[i], alpha, max_length) for i in range(2)]
        beam = len(truth[0])    # 1 + 4 + 16 + 64 = 85 hypotheses: nothing is ever pruned
        tokens, scores = B.beam_search(markov_search_fn(table), markov_cache(2, beam),
                                       batch_size=2, beam_size=beam, max_length=max_length,
                                       bos_id=BOS, eos_id=EOS, alpha=alpha)
        for i in range(2):
            np.testing.assert_allclose(scores[i], [s for s, _ in truth[i]], rtol=1e-5)
            assert tuple(np.asarray(tokens[i, 0])) == truth[i][0][1]
            assert ({tuple(map(int, seq)) for seq in np.asarray(tokens[i])}
                    == {seq for _, seq in truth[i]})
        best[alpha] = [truth[i][0][1] for i in range(2)]
    # The length penalty changes the answer (and short and long answers both end with EOS).
    assert best[0.0] == best[0.6] == [(3, EOS, PAD), (EOS, PAD, PAD)]
    assert best[2.0] == [(5, 5, EOS), (4, 2, EOS)]


def test_early_stopping_never_searches_on_where_a_longer_hypothesis_could_still_win():
    """The alive/finished search (models/beam_search_t2t.py) with early_stopping='never' bounds
    the best alive hypothesis by its length limit's penalty, not the current length's: it never
    stops with a worse best hypothesis than the default (False) does, and on some chains finds a
    better one (planted, the current length's bound made it the default search)."""
    from models.beam_search_t2t import beam_search_t2t

    @functools.partial(jax.jit, static_argnames="stopping")
    def best(table, stopping):
        _, scores = beam_search_t2t(markov_search_fn(table), markov_cache(2, 2), batch_size=2,
                                    beam_size=2, max_length=6, bos_id=BOS, eos_id=EOS,
                                    alpha=3.0, early_stopping=stopping)
        return scores[:, 0]

    gains = []
    for seed in range(20):  # seed 16's chain: a longer hypothesis wins by 0.0073
        table = 2.0 * np.random.default_rng(seed).normal(size=(2, 6, 6, 6))
        never, default = (np.asarray(best(table, s)) for s in ("never", False))
        assert np.all(never >= default - 1e-5), seed
        gains.append(float(np.max(never - default)))
    assert max(gains) > 1e-3


def test_small_beam_keeps_scores_consistent():
    """With pruning (beam 3) every returned hypothesis still has its true score."""
    table, max_length = hand_made_table(seed=1), 4
    truth = {seq: s for s, seq in brute_force(table[1], 0.6, max_length)}
    tokens, scores = B.beam_search(markov_search_fn(table), markov_cache(2, 3), batch_size=2,
                                   beam_size=3, max_length=max_length, bos_id=BOS, eos_id=EOS,
                                   alpha=0.6)
    assert np.all(np.diff(np.asarray(scores), axis=1) <= 0)      # best first
    for seq, score in zip(np.asarray(tokens[1]), np.asarray(scores[1])):
        assert math.isclose(truth[tuple(map(int, seq))], score, rel_tol=1e-5)


def test_beam_size_one_is_greedy():
    table = hand_made_table(seed=2, vocab=8)
    kwargs = dict(batch_size=2, max_length=6, bos_id=BOS, eos_id=EOS)
    greedy, log_p = S.greedy_search(markov_search_fn(table), markov_cache(2, 1), **kwargs)
    beam, _ = B.beam_search(markov_search_fn(table), markov_cache(2, 1), beam_size=1, **kwargs)
    np.testing.assert_array_equal(beam[:, 0], greedy)
    # Greedy by hand, and its log-probability.
    for i in range(2):
        history, expected_lp = [BOS, BOS], 0.0
        for _ in range(6):
            logp = log_softmax(table[i, history[-2], history[-1]])
            logp[PAD] = -np.inf
            history.append(int(np.argmax(logp)))
            expected_lp += logp[history[-1]]
            if history[-1] == EOS:
                break
        expected = history[2:] + [PAD] * (6 - len(history[2:]))
        np.testing.assert_array_equal(greedy[i], expected)
        assert math.isclose(float(log_p[i]), expected_lp, rel_tol=1e-5)


def test_eos_ends_a_hypothesis_and_padding_follows():
    # Word 3 is certain after BOS, then EOS is certain after 3; 4 and 5 are never likely.
    table = np.full((2, 6, 6, 6), -10.0)
    table[:, :, :, 4] = -1.0             # a non-EOS default continuation
    table[:, BOS, BOS, 3] = 5.0
    table[:, :, 3, EOS] = 5.0
    kwargs = dict(batch_size=2, max_length=5, bos_id=BOS, eos_id=EOS)
    greedy, _ = S.greedy_search(markov_search_fn(table), markov_cache(2, 1), **kwargs)
    np.testing.assert_array_equal(greedy, [[3, EOS, 0, 0, 0]] * 2)
    tokens, scores = B.beam_search(markov_search_fn(table), markov_cache(2, 4), beam_size=4,
                                   alpha=0.6, **kwargs)
    np.testing.assert_array_equal(tokens[:, 0], [[3, EOS, 0, 0, 0]] * 2)
    for seq in np.asarray(tokens).reshape(-1, 5):
        ends = np.flatnonzero(seq == EOS)
        if ends.size:                    # finished: nothing but padding after the first EOS
            assert np.all(seq[ends[0] + 1:] == PAD) and np.all(seq[:ends[0]] != PAD)
        else:                            # unfinished: ran to max_length
            assert np.all(seq != PAD)
    assert np.all(np.isfinite(scores))


# ---------------------------------------------------------------------------------------------
# predict() on a Transformer
# ---------------------------------------------------------------------------------------------

def teacher_forced_score(model, params, inputs, tokens, alpha):
    """Length-normalised log-probability of each row of ``tokens`` under teacher forcing."""
    logits = model.apply({"params": params}, inputs, shift_right(tokens, BOS))
    logp = np.asarray(jax.nn.log_softmax(logits), np.float64)
    scores = []
    for row, seq in enumerate(np.asarray(tokens)):
        ends = np.flatnonzero(seq == EOS)
        n = ends[0] + 1 if ends.size else len(seq)
        scores.append(sum(logp[row, t, seq[t]] for t in range(n)) / ((5 + n) / 6) ** alpha)
    return np.array(scores)


def test_predict_greedy_and_beam_on_a_transformer():
    cfg = tiny(posemb="rope", num_layers=1)
    model, params, inputs, _ = setup_model(cfg, seed=5)
    # A larger EOS embedding row makes EOS likelier, so that some hypotheses finish early.
    table = params["shared_embedding"]["embedding"]
    params["shared_embedding"]["embedding"] = table.at[EOS].multiply(3.0)
    kwargs = dict(max_decode_len=8, eos_id=EOS, bos_id=BOS)
    greedy, greedy_lp = D.predict(model, params, inputs, beam_size=1, **kwargs)
    np.testing.assert_allclose(greedy_lp, teacher_forced_score(model, params, inputs, greedy, 0.0),
                               atol=1e-4)
    # Beam search: the returned score is the teacher-forced score of the returned tokens (so the
    # cache was reordered with the beams).
    tokens, scores = D.predict(model, params, inputs, beam_size=4, alpha=0.6, **kwargs)
    np.testing.assert_allclose(scores, teacher_forced_score(model, params, inputs, tokens, 0.6),
                               atol=1e-4)
    # This model and input are non-trivial: EOS ends some hypotheses early, padding follows,
    # and beam search departs from greedy.
    for seq in np.concatenate([np.asarray(greedy), np.asarray(tokens)]):
        ends = np.flatnonzero(seq == EOS)
        assert ends.size == 0 or np.all(seq[ends[0] + 1:] == PAD)
    assert np.any(np.asarray(greedy)[:, :-1] == EOS) and np.any(np.asarray(tokens)[:, :-1] == EOS)
    assert not np.array_equal(greedy, tokens)


# ---------------------------------------------------------------------------------------------
# A maximum length per row (Vaswani et al. 2017, Sec. 6.1: input length + 50 per sentence)
# ---------------------------------------------------------------------------------------------

def markov_cache_of(examples, beam):
    """markov_cache for the given examples of the table (e.g. one example decoded alone)."""
    return {"example": jnp.repeat(jnp.asarray(examples), beam),
            "before_last": jnp.full((len(examples) * beam,), BOS, jnp.int32)}


def search(table, examples, beam_size, **kwargs):
    """Greedy search (beam 1, tokens [b, 1, L]) or beam search of `examples` of `table`."""
    fn, cache = markov_search_fn(table), markov_cache_of(examples, beam_size)
    kwargs.update(batch_size=len(examples), bos_id=BOS, eos_id=EOS)
    if beam_size == 1:
        tokens, scores = S.greedy_search(fn, cache, **kwargs)
        return np.asarray(tokens)[:, None], np.asarray(scores)[:, None]
    tokens, scores = B.beam_search(fn, cache, beam_size=beam_size, alpha=0.6, **kwargs)
    return np.asarray(tokens), np.asarray(scores)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_row_limits_decode_each_row_as_if_alone(beam_size):
    """Rows with limits 1, 6, 3 and 4 in one batch of width 7 give the tokens and scores of
    each row decoded alone with its limit as max_length, then only padding. Row 1 never ends
    by itself (EOS is unlikely after every token) and stops exactly at its limit."""
    table = np.random.default_rng(4).normal(size=(4, 8, 8, 8))
    table[1, :, :, EOS] = -20.0
    limits, width = [1, 6, 3, 4], 7
    tokens, scores = search(table, range(4), beam_size, max_length=width,
                            row_max_length=jnp.asarray(limits))
    for row, limit in enumerate(limits):
        alone_tokens, alone_scores = search(table, [row], beam_size, max_length=limit)
        np.testing.assert_array_equal(tokens[row, :, :limit], alone_tokens[0])
        np.testing.assert_allclose(scores[row], alone_scores[0], rtol=1e-6)
        assert np.all(tokens[row, :, limit:] == PAD)
    assert np.all(tokens[1, 0, :6] > EOS)          # ran on: six tokens, no EOS, cut at 6
    # The limits are not all the width: decoding with one limit for all differs.
    one_limit, _ = search(table, range(4), beam_size, max_length=width)
    assert not np.array_equal(one_limit, tokens)


def test_beam_search_row_limits_match_brute_force():
    """Every hypothesis of each example up to its own limit (2 and 3; width 4), scored with the
    length penalty of its own length, unfinished ones with lp(limit): as brute force finds."""
    table, limits = hand_made_table(seed=3), [2, 3]
    beam = 85                              # all 1 + 4 + 16 + 64 hypotheses of length <= 3
    tokens, scores = B.beam_search(markov_search_fn(table), markov_cache(2, beam), batch_size=2,
                                   beam_size=beam, max_length=4, bos_id=BOS, eos_id=EOS,
                                   alpha=0.6, row_max_length=jnp.asarray(limits))
    tokens, scores = np.asarray(tokens), np.asarray(scores)
    for row, limit in enumerate(limits):
        truth = brute_force(table[row], 0.6, limit)
        n = len(truth)                     # 21 for limit 2: the other slots hold nothing
        np.testing.assert_allclose(scores[row, :n], [s for s, _ in truth], rtol=1e-5)
        assert tuple(tokens[row, 0, :limit]) == truth[0][1]
        assert {tuple(map(int, seq)) for seq in tokens[row, :n, :limit]} == {
            seq for _, seq in truth}
        assert np.all(tokens[row, :, limit:] == PAD) and np.all(scores[row, n:] < 0.5 * B.NEG_INF)


@pytest.mark.parametrize("penalty", ["gnmt", "power"])
def test_a_row_limited_to_no_tokens_gives_padding_of_score_zero(penalty):
    """Limit 0 (an empty input with no extra tokens): the row starts finished, its best
    hypothesis all padding with score 0 under either penalty (power's lp(0) = 0 made it NaN
    and picked -inf tokens); the other row decodes as if alone."""
    table = np.random.default_rng(5).normal(size=(2, 8, 8, 8))
    tokens, scores = B.beam_search(markov_search_fn(table), markov_cache(2, 3), batch_size=2,
                                   beam_size=3, max_length=4, bos_id=BOS, eos_id=EOS,
                                   alpha=0.6, penalty=penalty, row_max_length=jnp.array([0, 4]))
    tokens, scores = np.asarray(tokens), np.asarray(scores)
    assert np.all(tokens[0, 0] == PAD) and scores[0, 0] == 0.0
    alone, alone_scores = B.beam_search(markov_search_fn(table[1:]), markov_cache(1, 3),
                                        batch_size=1, beam_size=3, max_length=4, bos_id=BOS,
                                        eos_id=EOS, alpha=0.6, penalty=penalty)
    np.testing.assert_array_equal(tokens[1], np.asarray(alone)[0])
    np.testing.assert_allclose(scores[1], np.asarray(alone_scores)[0], rtol=1e-6)


def test_input_length_limits():
    """Real tokens of each input (EOS included, padding not) + extra, capped; against NumPy."""
    inputs = np.array([[5, 6, EOS, PAD, PAD], [7, EOS, PAD, PAD, PAD], [5, 6, 7, 8, EOS]])
    lengths = np.array([len(np.flatnonzero(row)) for row in inputs])   # 3, 2, 5
    for extra, cap in ((50, 100), (50, 54), (0, 4)):
        np.testing.assert_array_equal(D.input_length_limits(inputs, extra, cap),
                                      np.minimum(lengths + extra, cap))
    with pytest.raises(ValueError, match=r"row_max_length has shape \(2,\); expected \(3,\)"):
        S.greedy_search(markov_search_fn(np.zeros((3, 4, 4, 4))), markov_cache(3, 1),
                        batch_size=3, max_length=4, bos_id=BOS, eos_id=EOS,
                        row_max_length=jnp.array([1, 2]))


def test_predict_passes_row_limits_to_the_search():
    """predict() with limits 3 and 8 gives each example what decoding it alone with that
    max_decode_len gives (on the Transformer, beam 2)."""
    model, params, inputs, _ = setup_model(tiny(posemb="rope", num_layers=1), seed=5)

    @functools.partial(jax.jit, static_argnums=2)
    def predict(inputs, limits, width):
        return D.predict(model, params, inputs, beam_size=2, alpha=0.6, eos_id=EOS, bos_id=BOS,
                         max_decode_len=width, row_max_decode_len=limits)

    tokens, scores = predict(inputs, jnp.array([3, 8]), 8)
    for row, limit in enumerate((3, 8)):
        alone, alone_score = predict(inputs[row:row + 1], None, limit)
        np.testing.assert_array_equal(tokens[row, :limit], alone[0])
        np.testing.assert_allclose(scores[row], alone_score[0], rtol=1e-5)
        assert np.all(np.asarray(tokens)[row, limit:] == PAD)


def test_predict_samples_with_the_shared_library():
    """Sampling on the Transformer: top-k = 1 and a near-zero temperature are greedy; a hot
    temperature departs from it, the same key draws the same translation."""
    model, params, inputs, _ = setup_model(tiny(posemb="rope", num_layers=1), seed=5)
    kwargs = dict(max_decode_len=6, eos_id=EOS, bos_id=BOS, beam_size=1)
    greedy, greedy_lp = D.predict(model, params, inputs, **kwargs)
    for sampling in (Sampling(top_k=1), Sampling(temperature=1e-4)):
        tokens, lp = D.predict(model, params, inputs, sampling=sampling,
                               rng=jax.random.PRNGKey(0), **kwargs)
        np.testing.assert_array_equal(tokens, greedy)
        np.testing.assert_allclose(lp, greedy_lp, rtol=1e-5)
    hot = jax.jit(lambda key: D.predict(model, params, inputs, sampling=Sampling(temperature=4.0),
                                        rng=key, **kwargs)[0])
    np.testing.assert_array_equal(hot(jax.random.PRNGKey(1)), hot(jax.random.PRNGKey(1)))
    assert not np.array_equal(hot(jax.random.PRNGKey(1)), greedy)
    with pytest.raises(ValueError, match="use beam_size=1, not 4"):
        D.predict(model, params, inputs, **{**kwargs, "beam_size": 4}, sampling=Sampling(),
                  rng=jax.random.PRNGKey(0))
    for t2t_only in ({"force_eos": True}, {"early_stopping": True}):  # would be ignored
        with pytest.raises(ValueError, match="greedy decoding and sampling .* would ignore"):
            D.predict(model, params, inputs, **{**kwargs, "beam_size": 1}, search="t2t",
                      **t2t_only)
