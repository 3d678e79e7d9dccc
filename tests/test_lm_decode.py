"""Decoding the decoder-only LM (models/lm_decode.py): the cache with a left-padded prefill
reproduces recomputing each row's whole prefix, for every position encoding; greedy, beam and
sampled continuations of prompts of different lengths; stop tokens, per-row limits, jit."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import lm_decode as L
from models.beam_search import beam_search
from models.decoder_lm import POSEMB_KINDS, DecoderLM, with_layer_layout
from models.sampling import Sampling

from remat_checks import primitive_names
from tiny_lm import VOCAB, random_params, tiny, tokens

PAD = 0


def right_padded(rows):
    """[b, P] prompts padded with PAD on the right, and their lengths."""
    width = max(len(r) for r in rows)
    prompts = np.full((len(rows), width), PAD, np.int32)
    for i, row in enumerate(rows):
        prompts[i, :len(row)] = row
    return prompts, np.array([len(r) for r in rows], np.int32)


def full_log_probs(model, params, sequence):
    """float64 log-softmax of one row's logits, recomputed over its whole sequence (no cache)."""
    logits = model.apply({"params": params}, jnp.asarray(sequence, jnp.int32)[None])[0]
    return np.asarray(jax.nn.log_softmax(logits), np.float64)


def test_left_align():
    prompts, lengths = right_padded([[5, 6, 7], [8], [9, 10]])
    got = [np.asarray(x) for x in L.left_align(prompts, lengths, pad_id=PAD)]
    np.testing.assert_array_equal(got[0], [[5, 6, 7], [0, 0, 8], [0, 9, 10]])
    np.testing.assert_array_equal(got[1], [[0, 1, 2], [0, 0, 0], [0, 0, 1]])
    np.testing.assert_array_equal(got[2], [[1, 1, 1], [0, 0, 1], [0, 1, 1]])


@pytest.mark.parametrize("posemb", POSEMB_KINDS)
def test_cached_steps_equal_recomputing_each_prefix(posemb):
    """Prompts of lengths 5, 2 and 1 in one batch, prefilled in one call, then fed a random
    continuation one token at a time: each step's logits are those of the row's own prefix
    recomputed alone without a cache."""
    cfg = tiny(posemb=posemb, num_kv_heads=2 if posemb == "rope" else None)
    params, model = random_params(cfg, seed=1), DecoderLM(cfg)
    rng = np.random.default_rng(2)
    rows = [tokens(rng, 5), tokens(rng, 2), tokens(rng, 1)]
    prompts, lengths = right_padded(rows)
    steps = 4
    continuation = tokens(rng, 3, steps)
    aligned, positions, segment_ids = L.left_align(prompts, lengths, PAD)
    cache = L.init_cache(model, params, 3, prompts.shape[1] + steps)
    cache = L.prefill(model, params, cache, aligned[:, :-1], positions[:, :-1],
                      segment_ids[:, :-1])
    step = L.make_tokens_to_logits(model, params)
    fed = np.concatenate([np.asarray(aligned[:, -1:]), continuation], axis=1)
    got = []
    for s in range(steps + 1):
        logits, cache = step(jnp.asarray(fed[:, s:s + 1]), cache)
        got.append(np.asarray(logits))
    for row, prompt in enumerate(rows):
        sequence = np.concatenate([prompt, continuation[row]])
        logits = model.apply({"params": params}, jnp.asarray(sequence)[None])[0]
        want = np.asarray(logits)[len(prompt) - 1:]
        np.testing.assert_allclose(np.stack(got)[:, row], want, atol=5e-5, rtol=1e-5)


@pytest.mark.parametrize("posemb", ["learned", "alibi"])
def test_greedy_generate_is_the_argmax_of_the_recomputed_prefix(posemb):
    """The whole of generate, jitted with traced prompt lengths: every new token is the argmax
    of the logits recomputed over the row's own prompt and the tokens before it, and the score
    is their log-probability; the padding token is never generated."""
    cfg = tiny(posemb=posemb)
    params, model = random_params(cfg, seed=3), DecoderLM(cfg)
    rng = np.random.default_rng(4)
    rows = [tokens(rng, 6), tokens(rng, 3), tokens(rng, 1)]
    prompts, lengths = right_padded(rows)
    new = 7
    run = jax.jit(lambda p, x, n: L.generate(model, p, x, n, max_new_tokens=new, eos_id=[VOCAB]))
    generated, scores = (np.asarray(a) for a in run(params, prompts, lengths))
    assert generated.shape == (3, new) and np.all(generated != PAD)
    for row, prompt in enumerate(rows):
        logp = full_log_probs(model, params, np.concatenate([prompt, generated[row]]))
        logp[:, PAD] = -np.inf
        chosen = logp[len(prompt) - 1:-1]
        np.testing.assert_array_equal(generated[row], np.argmax(chosen, axis=-1))
        np.testing.assert_allclose(scores[row], chosen[np.arange(new), generated[row]].sum(),
                                   rtol=1e-4)


def test_beam_search_scores_are_the_teacher_forced_scores_and_beam_one_is_greedy():
    cfg = tiny(posemb="rope")
    params, model = random_params(cfg, seed=5, scale=0.1), DecoderLM(cfg)
    rng = np.random.default_rng(6)
    rows = [tokens(rng, 4), tokens(rng, 2)]
    prompts, lengths = right_padded(rows)
    eos = 7
    generate = functools.partial(L.generate, model, params, prompts, lengths, max_new_tokens=6,
                                 eos_id=eos, alpha=0.6)
    greedy, _ = generate()
    # beam_search itself with one beam (not the greedy shortcut of generate).
    aligned, positions, segments = L.left_align(prompts, lengths, PAD)
    cache = L.prefill(model, params, L.init_cache(model, params, 2, prompts.shape[1] + 5),
                      aligned[:, :-1], positions[:, :-1], segments[:, :-1])
    tokens1, _ = beam_search(L.make_tokens_to_logits(model, params), cache, batch_size=2,
                             beam_size=1, max_length=6, bos_id=aligned[:, -1], eos_id=eos)
    np.testing.assert_array_equal(tokens1[:, 0], greedy)

    beams, scores = generate(beam_size=3)
    for row, prompt in enumerate(rows):
        seq = np.asarray(beams[row])
        ends = np.flatnonzero(seq == eos)
        n = ends[0] + 1 if ends.size else len(seq)
        assert np.all(seq[n:] == PAD)
        logp = full_log_probs(model, params, np.concatenate([prompt, seq[:n]]))
        logp[:, PAD] = -np.inf
        total = sum(logp[len(prompt) - 1 + t, seq[t]] for t in range(n))
        np.testing.assert_allclose(scores[row], total / ((5 + n) / 6) ** 0.6, rtol=1e-4)
    # Not a trivial case: beam search ends early with the stop token where greedy does not.
    assert np.all(np.asarray(beams)[:, -1] == PAD) and not np.any(np.asarray(greedy) == eos)


def test_sampling_limits_are_greedy_and_draws_follow_the_key():
    cfg = tiny(posemb="t5")
    params, model = random_params(cfg, seed=7), DecoderLM(cfg)
    rng = np.random.default_rng(8)
    prompts, lengths = right_padded([tokens(rng, 3), tokens(rng, 5)])
    generate = functools.partial(L.generate, model, params, prompts, lengths, max_new_tokens=5,
                                 eos_id=1)
    greedy, greedy_scores = generate()
    for sampling in (Sampling(temperature=1e-3), Sampling(top_k=1)):
        drawn, scores = generate(sampling=sampling, rng=jax.random.PRNGKey(0))
        np.testing.assert_array_equal(drawn, greedy, err_msg=str(sampling))
        np.testing.assert_allclose(scores, greedy_scores, rtol=1e-5)
    hot = jax.jit(lambda key: generate(sampling=Sampling(temperature=3.0), rng=key)[0])
    first = hot(jax.random.PRNGKey(0))
    np.testing.assert_array_equal(hot(jax.random.PRNGKey(0)), first)
    other = hot(jax.random.PRNGKey(1))
    assert not np.array_equal(first, other) and not np.array_equal(first, greedy)
    with pytest.raises(ValueError, match="use beam_size=1"):
        generate(sampling=Sampling(), beam_size=2)


def test_stop_tokens_and_row_limits():
    """Several stop tokens: each row ends at the first it emits (included), padding after.
    Per-row limits: a row stops at its limit with the tokens and score it has there."""
    cfg = tiny(posemb="alibi")
    params, model = random_params(cfg, seed=9), DecoderLM(cfg)
    rng = np.random.default_rng(10)
    rows = [tokens(rng, 4), tokens(rng, 2), tokens(rng, 3)]
    prompts, lengths = right_padded(rows)
    free = np.asarray(L.generate(model, params, prompts, lengths, max_new_tokens=8,
                                 eos_id=[VOCAB])[0])
    stops = [int(free[0, 2]), int(free[1, 0])]
    stopped = np.asarray(L.generate(model, params, prompts, lengths, max_new_tokens=8,
                                    eos_id=stops)[0])
    for row in range(3):
        hits = [t for t in range(8) if free[row, t] in stops]
        end = hits[0] + 1 if hits else 8
        np.testing.assert_array_equal(stopped[row, :end], free[row, :end])
        assert np.all(stopped[row, end:] == PAD)
    assert np.any(stopped == PAD)

    limits = np.array([3, 8, 1])
    limited, scores = L.generate(model, params, prompts, lengths, max_new_tokens=8,
                                 eos_id=[VOCAB], row_max_new_tokens=limits)
    limited = np.asarray(limited)
    for row, limit in enumerate(limits):
        np.testing.assert_array_equal(limited[row, :limit], free[row, :limit])
        assert np.all(limited[row, limit:] == PAD)
        logp = full_log_probs(model, params, np.concatenate([rows[row], free[row, :limit]]))
        start = len(rows[row]) - 1
        np.testing.assert_allclose(
            scores[row], sum(logp[start + t, free[row, t]] for t in range(limit)), rtol=1e-4)


def test_padding_may_be_generated_when_not_suppressed():
    """A vocabulary without a padding token (GPT-2's) passes suppress_pad=False: token 0 is then
    an ordinary word the search may choose."""
    cfg = tiny(posemb="none")
    params = random_params(cfg, seed=11)
    # The final norm's bias along token 0's embedding: token 0 gets the largest logit.
    params["norm"]["bias"] = 5.0 * params["embedding"]["embedding"][0]
    model = DecoderLM(cfg)
    prompts = tokens(np.random.default_rng(12), 3, 4)
    kept, _ = L.generate(model, params, prompts, max_new_tokens=6, eos_id=[VOCAB],
                         suppress_pad=False)
    assert np.any(np.asarray(kept) == 0)
    suppressed, _ = L.generate(model, params, prompts, max_new_tokens=6, eos_id=[VOCAB])
    assert not np.any(np.asarray(suppressed) == 0)


def test_scanned_model_decodes_like_the_loop_and_the_learned_table_is_a_limit():
    cfg = tiny(posemb="learned", max_length=10)
    params, model = random_params(cfg, seed=13), DecoderLM(cfg)
    prompts, lengths = right_padded([[3, 4, 5, 6], [7]])
    want = L.generate(model, params, prompts, lengths, max_new_tokens=7, eos_id=1)
    scanned = DecoderLM(dataclasses.replace(cfg, scan_layers=True))
    got = L.generate(scanned, with_layer_layout(params, scan=True), prompts, lengths,
                     max_new_tokens=7, eos_id=1)
    np.testing.assert_array_equal(got[0], want[0])
    # 4 prompt tokens + 8 new ones need 11 cached positions; the table has 10.
    with pytest.raises(ValueError, match="11 positions exceed max_length=10"):
        L.generate(model, params, prompts, lengths, max_new_tokens=8, eos_id=1)
    with pytest.raises(ValueError, match=r"prompt_lengths \[0, 1\] must lie in \[1, 4\]"):
        L.generate(model, params, prompts, np.array([0, 1]), max_new_tokens=2, eos_id=1)


@pytest.mark.parametrize("how", [dict(), dict(sampling=Sampling(top_k=5, top_p=0.9)),
                                 dict(beam_size=2)], ids=["greedy", "sampling", "beam"])
def test_generate_traces_to_one_program_with_one_token_loop(how):
    """The prefill outside, every token inside one while loop whose body runs the model (all
    its matmuls); no host callback anywhere: nothing leaves the device until the end."""
    cfg = tiny(posemb="rope")
    params, model = random_params(cfg), DecoderLM(cfg)
    prompts, lengths = right_padded([[3, 4, 5], [6]])
    rng = jax.random.PRNGKey(0) if "sampling" in how else None
    jaxpr = jax.make_jaxpr(lambda p, x, n: L.generate(
        model, p, x, n, max_new_tokens=5, eos_id=1, rng=rng, **how))(params, prompts, lengths)
    loops = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "while"]
    assert len(loops) == 1
    body = loops[0].params["body_jaxpr"]
    # Per block: query, key, value, out, wi, wo and the two attention einsums; plus the logits.
    assert len([e for e in body.jaxpr.eqns if e.primitive.name == "dot_general"]) == \
        8 * cfg.num_layers + 1
    assert not {n for n in primitive_names(jaxpr) if "callback" in n}
