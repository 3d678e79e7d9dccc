"""The causal-LM task (train/tasks/causal_lm.py): its metrics at several lengths against a NumPy
computation from the model's logits, the learned table refused when it is shorter than an eval
length, its model FLOPs against a count of the model's own matmuls, and the metric formulas."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest
from random_params import perturbed

from train import flops, lm_metrics
from train.config import ConfigError, apply_override, load_config_file
from train.tasks import get_task

SMOKE = "configs/lm/english.py:smoke"


def _config(**overrides):
    config = load_config_file(SMOKE)
    for key, value in overrides.items():
        apply_override(config, key, str(value))
    return config


def test_metrics_at_every_length_are_the_numpy_sums_of_the_same_targets(english_lm_env):
    from train.trainer import Trainer

    trainer = Trainer(_config(**{"task.eval_lengths": "(16, 32, 64)"}), "/unused")
    task = trainer.task
    params = perturbed(jax.device_get(trainer.init_state().params), scale=0.1)
    got = trainer.evaluate(params)
    rows = task.eval_rows()
    assert [r["tokens"].shape[1] for r in rows] == [16, 32, 64]
    assert len({float(r["weights"].sum()) for r in rows}) == 1  # the same targets at each length
    for length, r in zip((16, 32, 64), rows):
        logits = np.asarray(task.model.apply({"params": params}, r["tokens"],
                                             segment_ids=r["segment_ids"],
                                             positions=r["positions"]), np.float64)
        logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1,
                               keepdims=True)) - logits.max(-1, keepdims=True)
        nll = -np.take_along_axis(logp, r["targets"][..., None], -1)[..., 0]
        nats = (nll * r["weights"]).sum()
        count = r["weights"].sum()
        nbytes = (task.tokenizer.token_bytes[r["targets"]] * r["weights"]).sum()
        suffix = "" if length == 16 else f"_{length}"
        assert got[f"perplexity{suffix}"] == pytest.approx(math.exp(nats / count), rel=1e-4)
        assert got[f"bits_per_byte{suffix}"] == pytest.approx(nats / nbytes / math.log(2),
                                                              rel=1e-4)
    assert got["perplexity_16"] == got["perplexity"]  # the training length under both names
    assert "nats_per_byte" not in got


def test_learned_positions_must_cover_every_eval_length(english_lm_env):
    with pytest.raises(ConfigError, match=r"longest evaluated length 128 .* exceeds "
                                          r"config.model.max_length=64"):
        get_task(_config(**{"task.eval_lengths": "(32, 128)"}))
    get_task(_config(**{"task.eval_lengths": "(32, 128)", "model.posemb": "alibi"}))
    with pytest.raises(ConfigError, match="not a positive number of tokens"):
        get_task(_config(**{"task.eval_lengths": "(0,)"}))


def test_model_flops_count_the_models_matmuls():
    from models.decoder_lm import DecoderLM, DecoderLMConfig

    cfg = DecoderLMConfig(vocab_size=97, num_layers=3, d_model=24, d_ff=40, num_heads=4,
                          max_length=16)
    params = jax.eval_shape(lambda k: DecoderLM(cfg).init(k, np.ones((1, 16), np.int32)),
                            jax.random.PRNGKey(0))["params"]
    kernels = [np.prod(x.shape) for path, x in jax.tree_util.tree_leaves_with_path(params)
               if "kernel" in jax.tree_util.keystr(path)]
    matmul_weights = sum(kernels) + cfg.vocab_size * cfg.d_model  # + the tied output layer
    length = 16
    attention = cfg.num_layers * 2 * 2 * length * length * cfg.d_model  # QK^T and AV
    expected = 3 * (2 * matmul_weights * length + attention)
    assert flops.decoder_lm_train_flops_per_example(cfg, length) == pytest.approx(expected)


def test_perplexity_and_bits_per_byte():
    assert lm_metrics.perplexity(np.log(50.0)) == pytest.approx(50.0)
    assert lm_metrics.perplexity(1e6) == pytest.approx(math.exp(lm_metrics.MAX_NLL))
    # 3 bytes predicted with probability 1/8 in all: 3 bits, 1 bit per byte.
    assert lm_metrics.bits_per_byte(3 * math.log(2) / 3) == pytest.approx(1.0)
