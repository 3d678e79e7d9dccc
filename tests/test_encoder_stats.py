"""train/encoder_stats.py against direct NumPy computations and hand-worked values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from train import encoder_stats

RNG = np.random.default_rng(0)


def _valid(batch=3, length=6):
    valid = np.ones((batch, length), bool)
    valid[1, 4:] = False       # two padding tokens
    valid[2, 1:] = False       # a single real token: no pairs, log(1) = 0 keys of entropy
    return valid


def _softmax_rows(logits, valid):
    logits = np.where(valid[:, None, None, :], logits, -np.inf)
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_attention_entropy_matches_a_loop_over_real_queries():
    valid = _valid()
    probs = _softmax_rows(RNG.normal(size=(3, 2, 6, 6)) * 2, valid)
    got = encoder_stats.attention_entropy(probs, valid)
    for head in range(2):
        entropies, normalized = [], []
        for b in range(3):
            keys = valid[b].sum()
            for q in np.flatnonzero(valid[b]):
                p = probs[b, head, q][valid[b]]
                h = -sum(x * math.log(x) for x in p if x > 0)
                entropies.append(h)
                normalized.append(h / math.log(keys) if keys > 1 else 0.0)
        assert float(got["entropy"][head]) == pytest.approx(np.mean(entropies), rel=1e-5)
        assert float(got["normalized"][head]) == pytest.approx(np.mean(normalized), rel=1e-5)


def test_uniform_attention_has_normalized_entropy_one():
    valid = np.ones((1, 5), bool)
    probs = np.full((1, 3, 5, 5), 0.2)
    got = encoder_stats.attention_entropy(probs, valid)
    np.testing.assert_allclose(got["entropy"], [math.log(5)] * 3, rtol=1e-6)
    np.testing.assert_allclose(got["normalized"], [1.0] * 3, rtol=1e-6)


def test_pairwise_cosine_matches_a_double_loop():
    valid = _valid()
    states = RNG.normal(size=(3, 6, 4)) + 0.5
    means = []
    for b in range(3):
        rows = states[b][valid[b]]
        if len(rows) < 2:
            continue  # a sequence with one real token has no pairs
        cos = [rows[i] @ rows[j] / np.linalg.norm(rows[i]) / np.linalg.norm(rows[j])
               for i in range(len(rows)) for j in range(len(rows)) if i != j]
        means.append(np.mean(cos))
    assert float(encoder_stats.pairwise_cosine(states, valid)) == pytest.approx(
        np.mean(means), rel=1e-5)


def test_common_share_of_equal_and_of_opposite_vectors():
    valid = np.ones((1, 4), bool)
    same = np.tile(RNG.normal(size=(1, 1, 5)), (1, 4, 1))
    assert encoder_stats.common_share(same, valid) == pytest.approx(1.0)
    opposite = np.concatenate([same[:, :2], -same[:, :2]], axis=1)
    assert encoder_stats.common_share(opposite, valid) == pytest.approx(0.0, abs=1e-12)
    states = RNG.normal(size=(2, 4, 3))
    valid = np.array([[1, 1, 1, 0], [1, 1, 0, 0]], bool)
    rows = states[valid]
    expected = np.sum(rows.mean(0) ** 2) / np.mean(np.sum(rows ** 2, -1))
    assert encoder_stats.common_share(states, valid) == pytest.approx(expected)


def test_effective_rank_of_hand_worked_matrices():
    # Centred rows with singular values sqrt(18) and sqrt(2): p = (3/4, 1/4).
    rows = np.array([[3.0, 0.0], [-3.0, 0.0], [0.0, 1.0], [0.0, -1.0]])[None]
    valid = np.ones((1, 4), bool)
    expected = math.exp(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)))
    assert encoder_stats.effective_rank(rows, valid) == pytest.approx(expected)
    # A shared offset is centred away; one direction of variation is rank one.
    line = np.outer(np.arange(5.0), [1.0, 2.0, -1.0]) + 7.0
    assert encoder_stats.effective_rank(line[None], np.ones((1, 5), bool)) == pytest.approx(1.0)
    # Every token the same vector: nothing varies.
    assert encoder_stats.effective_rank(np.ones((1, 5, 3)), np.ones((1, 5), bool)) == 0.0
    # Padding is left out: a padded row far away would add a direction.
    padded = np.concatenate([line[None], [[[0.0, 0.0, 100.0]]]], axis=1)
    mask = np.array([[1, 1, 1, 1, 1, 0]], bool)
    assert encoder_stats.effective_rank(padded, mask) == pytest.approx(1.0)


def test_identity_readout_counts_the_input_token_as_nearest_embedding():
    embeddings = np.eye(6) * 2.0
    ids = np.array([[1, 2, 3, 4], [5, 0, 1, 2]])
    valid = np.array([[1, 1, 1, 1], [1, 1, 0, 0]], bool)
    states = embeddings[ids]
    assert float(encoder_stats.identity_readout(states, ids, embeddings, valid)) == 1.0
    states = states.copy()
    states[0, 0] = embeddings[4]         # position 0 now reads as token 4
    states[1, 2] = embeddings[4]         # padding: not counted
    assert float(encoder_stats.identity_readout(states, ids, embeddings, valid)) == \
        pytest.approx(5 / 6)


def test_noise_to_signal():
    clean = np.array([[[1.0, 0.0], [-1.0, 0.0], [9.0, 9.0]]])
    valid = np.array([[1, 1, 0]], bool)        # the third token is padding
    assert encoder_stats.noise_to_signal(clean, clean, valid) == 0.0
    noisy = clean + np.array([[[0.0, 2.0], [0.0, 0.0], [5.0, 5.0]]])
    # signal: mean |c - mean c|^2 = 1; noise: (4 + 0) / 2 = 2
    assert encoder_stats.noise_to_signal(clean, noisy, valid) == pytest.approx(2.0)
    same = np.ones((1, 3, 2))
    assert encoder_stats.noise_to_signal(same, same + 1, valid) == float("inf")


def test_gelu_activity():
    pre = np.array([[[-1.0, 2.0, -3.0], [-2.0, -1.0, 1.0], [5.0, 5.0, 5.0]]])
    valid = np.array([[1, 1, 0]], bool)
    got = encoder_stats.gelu_activity(pre, valid)
    assert got["negative_share"] == pytest.approx(4 / 6)
    assert got["dead_units"] == pytest.approx(1 / 3)    # unit 0 is negative on both tokens
    assert got["mean"] == pytest.approx(-4 / 6)


def test_group_norms():
    tree = {"a": {"x": np.array([3.0, 4.0]), "y": np.array([[0.0]])},
            "b": {"z": np.array([1.0, 1.0, 1.0, 1.0])}}
    got = encoder_stats.group_norms(tree, lambda path: path[0])
    assert got["a"] == {"norm": 5.0, "rms": pytest.approx(5 / math.sqrt(3)), "size": 3}
    assert got["b"] == {"norm": 2.0, "rms": 1.0, "size": 4}


def test_adam_update_is_optax_adams_step_per_unit_learning_rate():
    import optax

    params = {"w": np.zeros(4)}
    tx = optax.adam(1.0, b1=0.9, b2=0.999, eps=1e-6)
    state = tx.init(params)
    for step in range(3):
        grads = {"w": RNG.normal(size=4) * 10.0 ** -step}
        updates, state = tx.update(grads, state, params)
    adam = state[0]
    got = encoder_stats.adam_update(adam.mu["w"], adam.nu["w"], adam.count, b1=0.9, b2=0.999,
                                    eps=1e-6)
    np.testing.assert_allclose(got, -np.asarray(updates["w"]), rtol=1e-5)
